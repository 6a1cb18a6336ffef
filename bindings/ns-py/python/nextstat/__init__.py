"""nextstat: likelihood inference in Rust — pyhf JSON workspaces (binned HistFactory models) and
HS3 models (``nextstat.unbinned``).

Load a workspace, build a model, and run fits, CLs, limits, scans, rankings and toys — on the CPU
or, with ``device="cuda"``, on an NVIDIA GPU. ``nextstat.infer`` mirrors ``pyhf.infer``, so an
existing pyhf script changes one import.

>>> import nextstat
>>> ws = nextstat.Workspace("examples/analysis.json")
>>> model = ws.model()
>>> result = nextstat.fit(model)
>>> result.converged
True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Tuple

from importlib import metadata as _metadata


def _find_onnxruntime() -> None:
    """Flow PDFs run on the ONNX Runtime library of the ``onnxruntime`` package of this
    interpreter (found without importing it); ``ORT_DYLIB_PATH`` takes precedence. Read by the
    engine once, when ``_core`` is imported."""
    import importlib.util

    if os.environ.get("ORT_DYLIB_PATH"):
        return
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return
    for folder in spec.submodule_search_locations:
        libs = sorted((Path(folder) / "capi").glob("libonnxruntime.so.*")) + sorted(
            (Path(folder) / "capi").glob("libonnxruntime*.dylib")
        )
        if libs:
            os.environ["ORT_DYLIB_PATH"] = str(libs[-1])
            return


_find_onnxruntime()

from . import _core
from ._core import ComputationError, InvalidInputError, NextStatError
from ._results import (
    AsymptoticHypotestResult,
    FitResult,
    GofResult,
    GridScanResult,
    PosteriorResult,
    ProfileScanResult,
    RankingResult,
    SignificanceResult,
    ToyFits,
    ToyHypotestResult,
    UpperLimitResult,
)

try:
    __version__ = _metadata.version("nextstat")
except _metadata.PackageNotFoundError:  # imported from a source tree
    __version__ = "0+unknown"

__all__ = [
    "NextStatError", "InvalidInputError", "ComputationError", "Workspace", "Model", "PatchSet", "Patch", "fit", "fixed_poi_fit", "hypotest",
    "hypotest_toys", "upper_limit", "significance", "profile_scan", "profile_scan_grid", "ranking", "gof", "posterior",
    "fit_toys_batch_gpu", "fit_toys_from_data_gpu", "hypotest_qtilde_toys_gpu", "has_cuda",
    "build_info", "has_metal", "devices", "infer", "run_call", "exceptions", "optimize", "pdf", "probability", "utils", "tensor", "set_backend", "get_backend",
    "readxml", "Datacard", "load_hs3", "JointModel", "install_as_pyhf",
]


from ._validate import Spec
from ._workspace import Patch, PatchSet, Workspace
from ._model import Model
from ._datacard import Datacard
from ._hs3 import JointModel, load_hs3
from ._verbs import (
    build_info, devices, fit, fit_toys_batch_gpu, fit_toys_from_data_gpu, fixed_poi_fit, gof,
    has_cuda, has_metal, hypotest, hypotest_qtilde_toys_gpu, hypotest_toys, posterior, profile_scan, profile_scan_grid, ranking,
    run_call, significance, upper_limit,
)

# pyhf's backend interface, for scripts that name the numpy backend (`import nextstat as pyhf`).
from . import exceptions, optimize, simplemodels, tensor, utils  # noqa: E402

_backend = tensor.numpy_backend()


_optimizer: Any = optimize.scipy_optimizer()  # pyhf's default


def _optimizer_of(custom_optimizer: Any) -> Any:
    """pyhf's ``custom_optimizer``: a name (``"scipy"``, ``"minuit"``) or an optimizer object."""
    if isinstance(custom_optimizer, bytes):
        custom_optimizer = custom_optimizer.decode()
    if isinstance(custom_optimizer, str):
        made = {"scipy": optimize.scipy_optimizer, "minuit": optimize.minuit_optimizer}.get(custom_optimizer.lower())
        if made is None:
            raise exceptions.InvalidOptimizer(
                f"The optimizer provided is not supported: {custom_optimizer}. Select from one of the "
                "supported optimizers: scipy, minuit"
            )
        return made()
    return custom_optimizer


def set_backend(backend: Any, custom_optimizer: Any = None, precision: Optional[str] = None, default: bool = False) -> None:
    """pyhf's ``set_backend`` for the numpy backend (by name or object), with the optimizer
    object ``custom_optimizer`` (a name, ``"scipy"`` or ``"minuit"``, or an object;
    ``scipy_optimizer()`` when not given, as pyhf) that ``pyhf.optimizer`` then reads: fits run
    on nextstat's own minimiser whichever it is (``nextstat.optimize``). Other backends raise
    ``exceptions.InvalidBackend`` naming the alternative."""
    global _backend, _optimizer
    name = backend.decode() if isinstance(backend, bytes) else getattr(backend, "name", backend)
    if not isinstance(name, str) or name.lower() != "numpy":
        raise exceptions.InvalidBackend(
            f"the {name!r} backend: nextstat computes in its own engine and offers the numpy tensor backend only; "
            "for GPUs pass device='cuda' (or 'vulkan', 'metal'), for autograd use nextstat.torch"
        )
    if isinstance(backend, tensor.numpy_backend) and precision is None:
        _backend = backend
    else:
        _backend = tensor.numpy_backend(precision=precision or "64b")
    _optimizer = optimize.scipy_optimizer() if custom_optimizer is None else _optimizer_of(custom_optimizer)


def get_backend(default: bool = False) -> Tuple[Any, Any]:
    """``(tensorlib, optimizer)``: the numpy backend and the optimizer object set (nextstat's
    own minimiser runs whichever it is: ``nextstat.optimize``)."""
    return (_backend, _optimizer)


def __getattr__(name: str) -> Any:
    # pyhf.tensorlib / pyhf.optimizer / pyhf.default_backend follow set_backend.
    if name == "tensorlib":
        return _backend
    if name == "optimizer":
        return _optimizer
    if name == "default_backend":
        return tensor.numpy_backend()
    raise AttributeError(f"module 'nextstat' has no attribute {name!r}")


from . import infer  # noqa: E402  (needs the names above)
from . import compat, events, patchset, pdf, probability, schema, workspace, writexml  # noqa: E402
from ._alias import install_as_pyhf  # noqa: E402
from . import unbinned  # noqa: E402
from . import readxml  # noqa: E402

