"""``python -m layerfit.cli``."""

import sys

from layerfit.cli import main

sys.exit(main())
