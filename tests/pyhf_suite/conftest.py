"""pyhf's own test suite (v0.7.6) against nextstat: this conftest takes the place of pyhf's. It
only makes `import pyhf` (and every `pyhf.X`) load nextstat through `nextstat.install_as_pyhf()`
— no module stands in for one nextstat lacks — and gives pyhf's fixtures for the numpy backend
only (the other backends are out of nextstat's scope). Run by scripts/pyhf_suite.sh on a copy of
pyhf's tests; pyhf's tests are not part of this repository."""

import shutil
from pathlib import Path

import pytest

import nextstat

nextstat.install_as_pyhf()


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
