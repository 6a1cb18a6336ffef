"""``nextstat.install_as_pyhf()``: every later ``import pyhf`` (and ``pyhf.infer``,
``pyhf.contrib.viz.brazil``, …) loads nextstat's module of that name, so that libraries written
for pyhf — cabinetry among them — run on nextstat without a change of their source."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, Optional


class _PyhfAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder that answers ``pyhf`` and ``pyhf.X`` with ``nextstat`` and ``nextstat.X``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if name == "pyhf" or name.startswith("pyhf."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def __init__(self) -> None:
        self._specs: dict = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module("nextstat" + spec.name[len("pyhf"):])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        """The module is nextstat's, already executed. The import machinery has just given it the
        alias's spec: its own goes back, so that its relative imports and ``__spec__`` stay
        nextstat's."""
        module.__spec__ = self._specs.pop(module.__spec__.name, module.__spec__)


def install_as_pyhf() -> None:
    """Make ``import pyhf`` (and its submodules) load nextstat from now on in this interpreter.
    Call it before anything imports pyhf: a pyhf already imported is not replaced (an error says
    so). Calling it twice is harmless."""
    if any(isinstance(finder, _PyhfAlias) for finder in sys.meta_path):
        return
    loaded = [name for name in sys.modules if name == "pyhf" or name.startswith("pyhf.")]
    real = sys.modules.get("pyhf")
    if loaded and (real is None or not real.__name__.startswith("nextstat")):
        from .exceptions import Unsupported

        raise Unsupported(
            f"pyhf is already imported ({', '.join(sorted(loaded)[:3])}…): call nextstat.install_as_pyhf() before "
            "anything imports pyhf (or cabinetry), e.g. first thing in the script"
        )
    sys.meta_path.insert(0, _PyhfAlias())
