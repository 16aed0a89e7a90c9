"""GGUF headers over HTTP: plan a model before downloading it.

* ``locations``: the remote forms (``https://``, ``hf://ORG/REPO[@REVISION]/FILE.gguf``,
  ``ms://...``), the URL each is fetched from, and which host ``HF_TOKEN`` may go to;
* ``fetch``: one range request, its redirects, retries and checks (urllib3);
* ``source``: the file's header as a growing prefix (a ``layerfit.io.sources.ByteSource``);
* ``cache``: header bytes kept on disk by URL, revision and ETag;
* ``listing``: a hub repository's files, for GPUStack's file-name patterns and projectors.

Only ``layerfit.estimators`` decodes GGUF bytes; this package only fetches them.
"""

from layerfit.remote.locations import RemoteFile, hub_location, parse_location
from layerfit.remote.source import RemoteSource, open_remote

__all__ = ["RemoteFile", "RemoteSource", "hub_location", "open_remote", "parse_location"]
