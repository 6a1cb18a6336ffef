"""Shared helpers of the live pyhf parity tests: where things are, running the CLI, tolerances."""

import json
import os
import subprocess
import sys
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


def pyhf_hypotest_given_fits(model, data, fitted_pars, mu, monkeypatch):
    """pyhf's asymptotic qtilde hypotest at `mu` with its fits replaced by ours (the `fitted_pars`
    of `nextstat hypotest`): pyhf's test statistics and CLs formulas on our fitted parameters."""
    import numpy as np
    import pyhf

    fitted = {k: np.asarray(v) for k, v in fitted_pars.items()}
    observed = np.asarray(data)

    def is_observed(d):
        return np.allclose(np.asarray(d), observed, rtol=0, atol=0)

    def fake_fit(d, pdf, *args, return_fitted_val=False, **kwargs):
        pars = fitted["free_fit_to_data"] if is_observed(d) else fitted["free_fit_to_asimov"]
        return (pars, -2 * pdf.logpdf(pars, d)[0]) if return_fitted_val else pars

    def fake_fixed_poi_fit(poi, d, pdf, *args, return_fitted_val=False, **kwargs):
        if poi == 0.0:
            pars = fitted["asimov_pars"]
        else:
            pars = fitted["fixed_poi_fit_to_data"] if is_observed(d) else fitted["fixed_poi_fit_to_asimov"]
        return (pars, -2 * pdf.logpdf(pars, d)[0]) if return_fitted_val else pars

    monkeypatch.setattr(pyhf.infer.test_statistics, "fit", fake_fit)
    monkeypatch.setattr(pyhf.infer.test_statistics, "fixed_poi_fit", fake_fixed_poi_fit)
    monkeypatch.setattr(pyhf.infer.calculators, "fixed_poi_fit", fake_fixed_poi_fit)
    return pyhf.infer.hypotest(mu, data, model, test_stat="qtilde", return_expected_set=True)


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


def pytest_collection_finish(session):
    """RooFit oracles imported in-process (test_unbinned_roofit) bring ROOT's crash handlers,
    which answer a fatal signal by running gdb on the worker again and again: a crash would hang
    the suite instead of failing one test. Give the signals back their default handling."""
    if "ROOT" in sys.modules:
        sys.modules["ROOT"].gSystem.ResetSignals()
