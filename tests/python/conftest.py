"""Shared helpers of the live pyhf parity tests: where things are, running the CLI, tolerances."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("NEXTSTAT_PYHF_REF", ROOT.parent / "shared" / "pyhf-ref"))
WORKSPACES = SHARED / "workspaces"
REFS = SHARED / "ref"
BIN = Path(os.environ.get("NEXTSTAT_BIN", ROOT / "target" / "debug" / "nextstat"))
TOL = json.loads((ROOT / "tests" / "tolerances.json").read_text())

# Every stored reference names one workspace; the patchset is tested separately.
REFERENCE_NAMES = sorted(p.stem for p in REFS.glob("*.json"))


def workspace_file(name):
    ref = json.loads((REFS / f"{name}.json").read_text())
    return SHARED / ref["workspace"]


def run_cli(*args, expect_ok=True):
    """Run the nextstat binary; return (returncode, stdout, stderr)."""
    proc = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)
    if expect_ok and proc.returncode != 0:
        raise AssertionError(f"nextstat {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.returncode, proc.stdout, proc.stderr


def cli_json(*args):
    return json.loads(run_cli(*args)[1])


@pytest.fixture(scope="session", autouse=True)
def _binary_exists():
    if not BIN.exists():
        pytest.exit(f"nextstat binary not found at {BIN}: run `cargo build --bin nextstat` (scripts/test.sh does)", 2)
