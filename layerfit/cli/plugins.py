"""The CLI uses no pydantic plugin, and does not pay for looking for them.

Without ``PYDANTIC_DISABLE_PLUGINS``, pydantic scans every installed package's entry points when it
builds its first model. With it set to ``__all__`` (or ``1``, ``true``) it scans nothing, but its
plugin loader still imports ``importlib.metadata`` (and with it ``email``, ``zipfile``...): about
a tenth of what ``layerfit estimate`` costs. So while every plugin is disabled, an import of that
loader gets a stand-in that loads none, as pydantic's own would; with any other value pydantic's
own loader runs. A user's own value of the variable is kept.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader  # not at run time: importlib.abc loads importlib.resources

PLUGIN_LOADER = "pydantic.plugin._loader"
ALL_PLUGINS_OFF = ("__all__", "1", "true")
"""The values of ``PYDANTIC_DISABLE_PLUGINS`` with which pydantic loads no plugin at all."""


class NoPluginLoader(types.ModuleType):
    """pydantic's plugin loader while every plugin is disabled: no plugins. Any other name (but a
    dunder, which the import system asks for) comes from pydantic's own loader, loaded then."""

    @staticmethod
    def get_plugins() -> tuple[()]:
        return ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_pydantic_s_loader(self.__name__), name)


def _pydantic_s_loader(name: str) -> types.ModuleType:
    """pydantic's own plugin loader, found past the stand-in's finder, in place of the stand-in."""
    package = sys.modules[name.rpartition(".")[0]]
    spec = importlib.machinery.PathFinder.find_spec(name, package.__path__)
    if spec is None or spec.loader is None:
        raise ImportError(f"pydantic's {name} is not where its package is", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _StandInFinder:
    """A meta path finder that serves ``NoPluginLoader`` for pydantic's plugin loader while every
    plugin is disabled (checked at the import), and nothing else."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != PLUGIN_LOADER or os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in ALL_PLUGINS_OFF:
            return None
        return importlib.machinery.ModuleSpec(name, cast("Loader", _StandInFinder))

    @staticmethod
    def create_module(spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return NoPluginLoader(spec.name)

    @staticmethod
    def exec_module(module: types.ModuleType) -> None:
        """Nothing to run: the stand-in is complete as created."""


def without_plugin_scan() -> None:
    """Disable pydantic's plugins unless the user said otherwise, and put the stand-in's finder first."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if _StandInFinder not in sys.meta_path:
        sys.meta_path.insert(0, _StandInFinder)
