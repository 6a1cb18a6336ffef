"""`--shard I/N` and `nextstat merge` from the command line: the parts of toys, scans, rankings,
CLs-scan limits, posteriors (chains) and a published patchset grid merge into the file one process writes, byte for
byte; the errors of careless array jobs name the part; and the docs' Slurm/HTCondor recipe runs."""

import json
import subprocess

import pytest

from conftest import BIN, ROOT, run_cli

EXAMPLE = ROOT / "examples" / "analysis.json"
GRID = ROOT.parent / "shared" / "likelihoods" / "patchsets" / "atlas_1Lbb_simplified"

JOBS = {
    "toys": ["hypotest-toys", EXAMPLE, "--n-toys", "200", "--seed", "3", "--teststats"],
    "scan": ["scan", EXAMPLE, "--range", "0", "2", "21"],
    "ranking": ["ranking", EXAMPLE],
    "limit": ["upper-limit", EXAMPLE, "--scan", "0", "3", "13"],
    "toy limit": ["upper-limit", EXAMPLE, "--scan", "0.5", "2.5", "5", "--toys", "100", "--seed", "2"],
    "grid scan": ["scan", EXAMPLE, "--parameters", "mu_sig,k_ttbar", "--grid", "0", "2", "5", "0.9", "1.1", "3"],
    "posterior": ["posterior", EXAMPLE, "--chains", "7", "--warmup", "150", "--draws", "150", "--seed", "4", "--keep-draws"],
    "hypotest grid": ["hypotest", GRID / "bkgonly.json", "--patchset", GRID / "patchset.json", "--all", "--skip-verify"],
}


def _split(tmp_path, args, count):
    parts = []
    for i in range(count):
        part = tmp_path / f"part{i}of{count}.json"
        run_cli(*args, "--shard", f"{i}/{count}", "-o", part)
        parts.append(part)
    return parts


@pytest.mark.parametrize("job", sorted(JOBS))
def test_parts_merge_to_the_single_process_file(tmp_path, job):
    args = JOBS[job]
    whole = tmp_path / "whole.json"
    run_cli(*args, "-o", whole)
    for count in (1, 3, 7):
        parts = _split(tmp_path, args, count)
        merged = tmp_path / f"merged{count}.json"
        run_cli("merge", *reversed(parts), "-o", merged)
        assert merged.read_bytes() == whole.read_bytes(), f"{job} in {count} shards"


def test_a_published_limit_grid_in_shards(tmp_path):
    assert GRID.exists(), f"{GRID} is missing: the published patchsets live in ../shared"
    args = ["upper-limit", GRID / "bkgonly.json", "--patchset", GRID / "patchset.json", "--all", "--skip-verify"]
    whole = tmp_path / "whole.json"
    run_cli(*args, "-o", whole)
    parts = _split(tmp_path, args, 4)
    code, out, err = run_cli("merge", *parts)
    assert out.strip() == whole.read_text().strip()
    table = json.loads(out)
    assert len(table["points"]) == 125 and table["errors"] == []
    # The default still refuses the patchset made for another background file, in every shard.
    code, _, err = run_cli(*args[:-1], "--shard", "0/4", expect_ok=False)
    assert code == 2 and "--skip-verify" in err


def test_careless_array_jobs_get_errors_naming_the_part(tmp_path):
    args = JOBS["toys"]
    p0, p1, p2 = _split(tmp_path, args, 3)
    code, _, err = run_cli("merge", p0, p2, expect_ok=False)
    assert code == 2 and "missing: 1/3" in err
    code, _, err = run_cli("merge", p0, p1, p1, p2, expect_ok=False)
    assert code == 2 and "both shard 1/3" in err
    other = tmp_path / "other.json"
    run_cli(*args[:-3], "--seed", "4", "--teststats", "--shard", "2/3", "-o", other)
    code, _, err = run_cli("merge", p0, p1, other, expect_ok=False)
    assert code == 2 and f"{other} is not a part of the job" in err
    scan_part = tmp_path / "scan.json"
    run_cli(*JOBS["scan"], "--shard", "0/3", "-o", scan_part)
    code, _, err = run_cli("merge", scan_part, p1, p2, expect_ok=False)
    assert code == 2 and "another verb" in err
    whole = tmp_path / "whole.json"
    run_cli(*args, "-o", whole)
    code, _, err = run_cli("merge", whole, expect_ok=False)
    assert code == 2 and "not a part of a sharded job" in err
    truncated = tmp_path / "truncated.json"
    truncated.write_text(p1.read_text()[:200])
    code, _, err = run_cli("merge", p0, truncated, p2, expect_ok=False)
    assert code == 2 and str(truncated) in err
    for bad in ("3/3", "1/0", "x", "-1/3"):
        code, _, err = run_cli(*args, "--shard", bad, expect_ok=False)
        assert code == 2 and "I/N" in err, bad
    code, _, err = run_cli("scan", EXAMPLE, "--range", "0", "1", "3", "--shard", "2/5", expect_ok=False)
    assert code == 2 and "use at most 3 shards" in err
    code, _, err = run_cli(*args, "--shard", "0/2", "--format", "text", expect_ok=False)
    assert code == 2 and "--format text" in err
    code, _, err = run_cli("fit", EXAMPLE, "--shard", "0/2", expect_ok=False)
    assert code == 2
    code, _, err = run_cli(*args, "--shard", "0/2", "--gpu", "vulkan", expect_ok=False)
    assert code == 2


def test_the_docs_array_job_recipe_runs(tmp_path):
    """docs/scale-out.md's array-job script, run with a loop standing in for the scheduler."""
    text = (ROOT / "docs" / "scale-out.md").read_text()
    script = text.split("```bash\n# local stand-in")[1].split("```")[0]
    binary = BIN.resolve()
    result = subprocess.run(["bash", "-c", "# local stand-in" + script], cwd=tmp_path, capture_output=True, text=True,
                            env={"PATH": f"{binary.parent}:/usr/bin:/bin", "NEXTSTAT_EXAMPLE": str(EXAMPLE)})
    assert result.returncode == 0, result.stderr
    merged = json.loads((tmp_path / "toys.json").read_text())
    assert merged["n_toys"] == 1000 and 0 < merged["CLs_obs"] < 1
