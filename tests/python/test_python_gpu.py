"""`device="cuda"` through the Python package: skipped, saying so, where no GPU exists; run on the
GPU machine (bench/gpu_run.sh installs the wheel there and runs this file)."""

import numpy as np
import pytest

import nextstat
from conftest import workspace_file

pytestmark = pytest.mark.skipif(not nextstat.has_cuda(), reason="no CUDA device on this machine")


def model(name="nextstat_tttt_prod"):
    return nextstat.Workspace(workspace_file(name)).model()


def test_fit_on_cuda_matches_cpu():
    m = model()
    cpu, gpu = nextstat.fit(m), nextstat.fit(m, device="cuda")
    assert gpu.converged
    assert abs(gpu.twice_nll - cpu.twice_nll) < 1e-8
    assert np.all(np.abs(gpu.bestfit - cpu.bestfit) <= 1e-5 * np.maximum(cpu.uncertainties, 1e-12) + 1e-12)


def test_toys_on_cuda_equal_cpu_toys_and_cls():
    m = model("nextstat_complex_workspace")
    cpu = nextstat.hypotest_toys(1.0, m, n_toys=300, seed=4)
    gpu = nextstat.hypotest_qtilde_toys_gpu(1.0, m, n_toys=300, seed=4)
    assert gpu.n_failed == cpu.n_failed
    assert gpu.cls_obs == cpu.cls_obs
    assert gpu.cls_exp == pytest.approx(cpu.cls_exp, abs=1e-12)


def test_batch_toy_fits_and_fits_from_data():
    m = model()
    toys = nextstat.fit_toys_batch_gpu(m, m.config.suggested_init(), n_toys=64, seed=2)
    assert len(toys) == 64 and toys.data.shape == (64, len(m.observed)) and toys.converged.all()
    refit = nextstat.fit_toys_from_data_gpu(m, toys.data[:8])
    assert [round(f.twice_nll, 6) for f in refit] == [round(t, 6) for t in toys.twice_nll[:8]]
    cpu = [nextstat.fit(m, row).twice_nll for row in toys.data[:8]]
    assert np.allclose([f.twice_nll for f in refit], cpu, atol=1e-8)


def test_ranking_and_scan_on_cuda_match_cpu():
    m = model("nextstat_complex_workspace")
    cpu, gpu = nextstat.ranking(m), nextstat.ranking(m, device="cuda")
    assert gpu.names == cpu.names
    scan_cpu = nextstat.profile_scan(m, np.linspace(0, 2, 5))
    scan_gpu = nextstat.profile_scan(m, np.linspace(0, 2, 5), device="cuda")
    assert np.allclose(scan_gpu.delta_twice_nll, scan_cpu.delta_twice_nll, atol=1e-6)
