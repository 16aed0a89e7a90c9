"""THE speed model: how fast a layout runs, as ``memory`` says how much it needs.

``predict(profile, layout, cluster, settings)`` gives a layout's decode and prompt speed for one
sequence, as a sum of named terms (``SpeedPrediction``), from what the profile knows of the model
(``SpeedShape``, read from the GGUF header), the devices' facts (the GPU table, the cluster file's
figures, stated defaults) and the fitted constants (``calibration``). Every engine goes through it:
the planner, the fleet and the estimate report; the solver's speed objective uses the same costs
in their linear form (``decode.decode_costs``, ``decode.decode_terms``). See docs/speed.md.
"""

from layerfit.speed.decode import DecodeCosts, DeviceCosts, decode_costs, decode_ms, decode_terms
from layerfit.speed.predict import layout_costs, predict
from layerfit.speed.settings import SpeedSettings, settings_for
from layerfit.speed.work import speed_shape

__all__ = [
    "DecodeCosts",
    "DeviceCosts",
    "SpeedSettings",
    "decode_costs",
    "decode_ms",
    "decode_terms",
    "layout_costs",
    "predict",
    "settings_for",
    "speed_shape",
]
