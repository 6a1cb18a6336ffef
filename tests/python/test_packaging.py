"""What the installed package says about itself: one version for the package, the extension and
the CLI; the commit, backends and embedded CUDA architectures of the build; the metadata pip
shows. scripts/test.sh installs the wheel scripts/build_wheel.sh makes (the release build)."""

import json
import os
import subprocess
import tomllib
from importlib import metadata

import nextstat
from conftest import BIN, ROOT


def test_one_version_everywhere():
    info = nextstat.build_info()
    cli = json.loads(subprocess.run([str(BIN), "version", "--json"], check=True, capture_output=True, text=True).stdout)
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    bindings = tomllib.loads((ROOT / "bindings" / "ns-py" / "Cargo.toml").read_text())["package"]["version"]
    assert nextstat.__version__ == info["version"] == cli["version"] == workspace == bindings


def test_build_info_describes_the_build():
    info = nextstat.build_info()
    assert set(info) == {"version", "git_commit", "rustc", "target", "profile", "features", "cuda_archs", "cpu_simd"}
    assert info["features"] == ["cuda", "wgpu"]
    assert info["profile"] == "release"
    assert info["target"].startswith(("x86_64-", "aarch64-"))
    assert info["cpu_simd"] in ("baseline", "avx2", "avx512")
    commit = info["git_commit"]
    assert commit == "unknown" or (len(commit) == 12 and int(commit, 16) >= 0), commit
    if os.environ.get("NEXTSTAT_BUILT_FROM"):
        # scripts/test.sh: the wheel was built from this commit.
        assert commit == os.environ["NEXTSTAT_BUILT_FROM"]
    if os.environ.get("NEXTSTAT_PREBUILT_KERNELS"):
        # scripts/test.sh builds as a release does: the kernels compiled ahead of time, embedded.
        assert info["cuda_archs"] == [80, 90, 100, 120]


def test_metadata_pip_shows():
    meta = metadata.metadata("nextstat")
    assert meta["Name"] == "nextstat"
    assert meta["Requires-Python"] == ">=3.9"
    assert "Apache-2.0" in (meta.get("License-Expression") or meta.get("License") or "")
    assert "pip install nextstat" in meta["Description"]
    extras = set(meta.get_all("Provides-Extra"))
    assert {"torch", "plot", "dask", "flows", "all"} <= extras
    assert any(r.startswith("torch") and "extra == 'torch'" in r.replace('"', "'") for r in meta.get_all("Requires-Dist"))
    assert any(u.startswith("Changelog") for u in meta.get_all("Project-URL"))
