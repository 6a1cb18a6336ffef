"""pyhf's own test suite (v0.7.6) against nextstat: this conftest takes the place of pyhf's,
makes `import pyhf` (and its submodules) load nextstat, and gives pyhf's fixtures for the numpy
backend only (the other backends are out of nextstat's scope). Run by scripts/pyhf_suite.sh on a
copy of pyhf's tests; pyhf's tests are not part of this repository."""

import shutil
import sys
import types
from pathlib import Path

import pytest

import nextstat
import nextstat.infer.intervals.upper_limits


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


class _OtherBackend:
    """pyhf's jax/pytorch/tensorflow backends: constructible (pyhf's tests build them while
    collecting), refused by `set_backend` with nextstat's InvalidBackend."""

    def __init__(self, name):
        self.name = name

    def __call__(self, **kwargs):
        return self


class _Optimizer:
    """pyhf's optimizer objects: accepted by set_backend; nextstat runs its own L-BFGS-B."""

    def __init__(self, name, **kwargs):
        self.name = name
        self.config = kwargs


def _unsupported(what):
    def refuse(*args, **kwargs):
        raise nextstat.exceptions.Unsupported(f"{what} is not part of nextstat")

    return refuse


def _converted_xml(configfile):
    """The workspace pyhf's own readxml made of a HistFactory XML input before the run
    (scripts/pyhf_suite.sh): XML import is pyhf's, not nextstat's."""
    import copy
    import json

    converted = Path(__file__).resolve().parents[1] / "readxml.json"
    workspaces = json.loads(converted.read_text()) if converted.exists() else {}
    if str(configfile) not in workspaces:
        raise nextstat.exceptions.Unsupported(f"HistFactory XML import (pyhf.readxml) of {configfile} is not part of nextstat")
    return copy.deepcopy(workspaces[str(configfile)])


tensor = _module(
    "pyhf.tensor",
    numpy_backend=nextstat.tensor.numpy_backend,
    jax_backend=lambda **kw: _OtherBackend("jax"),
    pytorch_backend=lambda **kw: _OtherBackend("pytorch"),
    tensorflow_backend=lambda **kw: _OtherBackend("tensorflow"),
)
optimize = _module(
    "pyhf.optimize",
    scipy_optimizer=lambda **kw: _Optimizer("scipy", **kw),
    minuit_optimizer=lambda **kw: _Optimizer("minuit", **kw),
)
ALIASES = {
    "pyhf": nextstat,
    "pyhf.infer": nextstat.infer,
    "pyhf.infer.mle": nextstat.infer.mle,
    "pyhf.infer.test_statistics": nextstat.infer.test_statistics,
    "pyhf.infer.calculators": nextstat.infer.calculators,
    "pyhf.infer.utils": nextstat.infer.utils,
    "pyhf.infer.intervals": nextstat.infer.intervals,
    "pyhf.infer.intervals.upper_limits": nextstat.infer.intervals.upper_limits,
    "pyhf.exceptions": nextstat.exceptions,
    "pyhf.utils": nextstat.utils,
    "pyhf.simplemodels": nextstat.simplemodels,
    "pyhf.tensor": tensor,
    "pyhf.optimize": optimize,
    "pyhf.patchset": _module("pyhf.patchset", Patch=nextstat.Patch, PatchSet=nextstat.PatchSet),
    "pyhf.workspace": _module("pyhf.workspace", Workspace=nextstat.Workspace),
    "pyhf.pdf": _module("pyhf.pdf", Model=nextstat.Model),
    "pyhf.readxml": _module("pyhf.readxml", parse=lambda configfile, *args, **kwargs: _converted_xml(configfile)),
    "pyhf.writexml": _module("pyhf.writexml", writexml=_unsupported("HistFactory XML export (pyhf.writexml)")),
    "pyhf.schema": _module("pyhf.schema", validate=_unsupported("pyhf.schema")),
    "pyhf.events": _module("pyhf.events"),
}
for name, module in ALIASES.items():
    sys.modules[name] = module
# `pyhf.tensor.jax_backend` is an attribute lookup on the package: the shim's modules replace
# nextstat's attributes of those names in this process.
for name in ("tensor", "optimize", "patchset", "workspace", "pdf", "readxml", "writexml", "schema", "events"):
    setattr(nextstat, name, sys.modules[f"pyhf.{name}"])


@pytest.fixture(scope="function", autouse=True)
def reset_backend():
    nextstat.set_backend("numpy")
    yield
    nextstat.set_backend("numpy")


@pytest.fixture(scope="function", params=[(nextstat.tensor.numpy_backend(), None)], ids=["numpy"])
def backend(request):
    """pyhf's backend fixture, numpy only, honouring its skip_/only_/fail_ markers."""
    skip = request.node.get_closest_marker("skip_numpy")
    fail = request.node.get_closest_marker("fail_numpy")
    others = [m.name for m in request.node.iter_markers() if m.name.startswith("only_") and m.name != "only_numpy"]
    if skip or (others and not request.node.get_closest_marker("only_numpy")):
        pytest.skip("not for the numpy backend")
    if fail:
        request.node.add_marker(pytest.mark.xfail(reason="pyhf expects this to fail on numpy"))
    nextstat.set_backend(*request.param)
    yield request.param


@pytest.fixture(scope="function", params=[0, 1, 2, 4], ids=["interpcode0", "interpcode1", "interpcode2", "interpcode4"])
def interpcode(request):
    yield request.param


@pytest.fixture(scope="function")
def datadir(tmp_path, request):
    """The folder named after the test module, copied to a temporary one."""
    folder = Path(request.module.__file__).with_suffix("")
    if folder.is_dir():
        shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    return tmp_path
