"""Figures: every kind from the example analysis and from a published ATLAS likelihood, through
the CLI (`nextstat plot`, `nextstat report`) and Python (`nextstat.plot`). The checks are on what
is drawn — the numbers come from the result JSON (golden values computed here from the results),
the files are valid images of the reported size, the drawn elements are as many as the entries —
and malformed or partial results are errors that write nothing."""

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, ROOT, run_cli

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nextstat  # noqa: E402
import nextstat.plot  # noqa: E402

LIKELIHOODS = ROOT.parent / "shared" / "likelihoods"
EXAMPLE = ROOT / "examples" / "analysis.json"
PUBLISHED = LIKELIHOODS / "atlas_1Lbb_simplified" / "workspace.json"
GRID = LIKELIHOODS / "patchsets" / "atlas_1Lbb_simplified"


def _results(folder: Path, workspace: Path, grid, toys: int):
    """Every verb's JSON that a figure draws from, written to `folder`."""
    folder.mkdir()
    out = {}

    def verb(name, *args):
        path = folder / f"{name}.json"
        run_cli(*args, "-o", path)
        out[name] = path

    verb("fit", "fit", workspace, "--covariance", "--yields")
    verb("ranking", "ranking", workspace)
    verb("scan", "scan", workspace, "--range", "0", "2", "21")
    verb("cls", "upper-limit", workspace, "--scan", "0", "3", "16")
    verb("toys", "hypotest-toys", workspace, "--mu", "1", "--n-toys", str(toys), "--seed", "3", "--teststats")
    verb("asymptotic", "hypotest", workspace, "--mu", "1")
    bkg, patchset, *extra = grid
    verb("grid", "upper-limit", bkg, "--patchset", patchset, "--all", *extra)
    return out


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    grid = (ROOT / "examples" / "bkgonly.json", ROOT / "examples" / "patchset.json")
    return _results(tmp_path_factory.mktemp("plots") / "example", EXAMPLE, grid, toys=300)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    assert PUBLISHED.exists(), f"{PUBLISHED} is missing: the published likelihoods live in ../shared"
    # The published patchset carries the digest of the full likelihood, not of the simplified
    # background beside it (../shared/likelihoods/patchsets/README.md).
    grid = (GRID / "bkgonly.json", GRID / "patchset.json", "--skip-verify")
    return _results(tmp_path_factory.mktemp("plots") / "published", PUBLISHED, grid, toys=100)


def load(path):
    return json.loads(Path(path).read_text())


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def plot(kind, result, out, *options):
    """`nextstat plot` → the figure JSON it prints, checked against the image it wrote."""
    report = json.loads(run_cli("plot", kind, result, "-o", out, *options)[1])
    assert report["kind"] == kind
    if str(out).endswith(".png"):
        assert png_size(out) == (report["width"], report["height"])
    return report["figure"]


def grid_options(results):
    """The published grid has two labels: the Brazil band is drawn against m1 at one m2."""
    labels = load(results["grid"])["labels"]
    if len(labels) == 1:
        return []
    m2 = sorted({p["values"][1] for p in load(results["grid"])["points"]}, key=lambda v: v)[0]
    return ["--x", labels[0], "--select", f"{labels[1]}={m2}"]


@pytest.mark.parametrize("which", ["example", "published"])
def test_every_kind_draws_the_numbers_of_its_result(which, request, tmp_path):
    results = request.getfixturevalue(which)
    fit = load(results["fit"])
    names = fit["parameter_names"]

    # Pulls: (θ̂ − θ₀)/σ₀ and σ̂/σ₀ of every constrained parameter, grouped by kind.
    figure = plot("pulls", results["fit"], tmp_path / "pulls.png")
    drawn = {e["name"]: e for g in figure["groups"] for e in g["entries"]}
    constrained = [i for i, c in enumerate(fit["prefit_center"]) if c is not None]
    assert set(drawn) == {names[i] for i in constrained}
    for i in constrained:
        width = fit["prefit_width"][i]
        assert drawn[names[i]]["pull"] == pytest.approx((fit["bestfit"][i] - fit["prefit_center"][i]) / width, rel=1e-12, abs=1e-12)
        assert drawn[names[i]]["constraint"] == pytest.approx(fit["uncertainties"][i] / width, rel=1e-12)
    for group in figure["groups"]:
        assert {fit["parameter_kinds"][names.index(e["name"])] for e in group["entries"]} == {group["kind"]}

    # Correlation: the fit's matrix restricted to the kept parameters.
    figure = plot("correlation", results["fit"], tmp_path / "correlation.png", "--threshold", "0.1")
    index = [names.index(n) for n in figure["names"]]
    assert figure["matrix"] == [[fit["correlation"][i][j] for j in index] for i in index]
    assert all(max(abs(fit["correlation"][i][j]) for j in range(len(names)) if j != i) >= 0.1 for i in index)

    # Ranking: the top entries in the ranking's order with its impacts, one bar per shift.
    ranking = load(results["ranking"])
    figure = plot("ranking", results["ranking"], tmp_path / "ranking.svg", "--top", "8")
    top = ranking["entries"][:8]
    assert [e["name"] for e in figure["entries"]] == [e["name"] for e in top]
    assert [e["postfit_up"] for e in figure["entries"]] == [e["impact_postfit_up"] for e in top]
    svg = (tmp_path / "ranking.svg").read_text()
    assert svg.count('opacity="0.75" fill="#0072B2"') == len(top) + 1  # + the legend's
    assert svg.count('opacity="0.75" fill="#E69F00"') == len(top) + 1

    # Scan: the points, and the 1σ crossing interpolated linearly as the test computes it.
    scan = load(results["scan"])
    figure = plot("scan", results["scan"], tmp_path / "scan.png")
    assert figure["values"] == scan["values"] and figure["delta"] == scan["delta_twice_nll"]
    values, delta = scan["values"], scan["delta_twice_nll"]
    k = min(range(len(delta)), key=delta.__getitem__)
    while k + 1 < len(delta) and delta[k + 1] < 1.0:
        k += 1
    if k + 1 < len(delta):
        expected = values[k] + (1.0 - delta[k]) / (delta[k + 1] - delta[k]) * (values[k + 1] - values[k])
        assert figure["crossings"][0]["high"] == pytest.approx(expected, rel=1e-12)
    else:
        assert figure["crossings"][0]["high"] is None

    # Yields: post- and pre-fit totals per channel, with the data.
    channels = load(results["fit"])["yields"]["channels"]
    for stage, extra in (("postfit", []), ("prefit", ["--prefit"])):
        figure = plot("yields", results["fit"], tmp_path / f"yields_{stage}.png", *extra)
        assert figure["stage"] == stage
        assert [c["total"] for c in figure["channels"]] == [c[f"{stage}_total"] for c in channels]
        assert [c["observed"] for c in figure["channels"]] == [c["observed"] for c in channels]

    # CLs against μ, and the Brazil band over the grid (sorted along x).
    cls = load(results["cls"])
    figure = plot("limit", results["cls"], tmp_path / "cls.png")
    assert figure["kind"] == "cls" and figure["observed_limit"] == cls["obs"]
    assert figure["observed"] == [p["CLs_obs"] for p in cls["points"]]
    grid = load(results["grid"])
    figure = plot("limit", results["grid"], tmp_path / "brazil.png", *grid_options(results))
    by_patch = {p["patch"]: p for p in grid["points"]}
    assert figure["observed"] == [by_patch[p]["obs"] for p in figure["patches"]]
    assert figure["x"] == sorted(figure["x"]) and len(figure["x"]) >= 5

    # Toys: densities of each ensemble with the observed value and the asymptotic curves.
    toys = load(results["toys"])
    figure = plot("toys", results["toys"], tmp_path / "toys.png", "--asymptotic", results["asymptotic"])
    assert figure["observed"] == toys["teststat_obs"]
    assert figure["n_toys"] == [len(toys["teststats"]["signal_plus_background"]), len(toys["teststats"]["background_only"])]
    width = figure["edges"][1] - figure["edges"][0]
    assert sum(figure["signal_plus_background"]) * width == pytest.approx(1.0, rel=1e-12)
    assert figure["asymptotic"]["sqrt_q_asimov"] == load(results["asymptotic"])["sqrt_q_asimov"]


def test_pdf_and_svg_outputs(example, tmp_path):
    plot("ranking", example["ranking"], tmp_path / "r.pdf")
    assert (tmp_path / "r.pdf").read_bytes().startswith(b"%PDF-")
    plot("pulls", example["fit"], tmp_path / "p.svg")
    assert (tmp_path / "p.svg").read_text().lstrip().startswith("<svg")


def test_nothing_is_drawn_from_a_partial_or_malformed_result(example, tmp_path):
    truncated = tmp_path / "truncated.json"
    truncated.write_text(example["fit"].read_text()[:200])
    nan = load(example["scan"])
    nan["delta_twice_nll"][3] = "NaN"
    (tmp_path / "nan.json").write_text(json.dumps(nan))
    cases = [
        (["pulls", truncated], "truncated.json"),
        (["pulls", example["ranking"]], "'parameter_names'"),
        (["yields", example["ranking"]], "fit --yields"),
        (["correlation", example["scan"]], "'parameter_names'"),
        (["toys", example["asymptotic"]], "--teststats"),
        (["scan", tmp_path / "nan.json"], "delta_twice_nll[3]"),
        (["heatmap", example["fit"]], "no plot kind 'heatmap'"),
        (["ranking", tmp_path / "missing.json"], "missing.json"),
    ]
    for args, message in cases:
        out = tmp_path / "out.png"
        code, _, err = run_cli("plot", *args, "-o", out, expect_ok=False)
        assert code == 2, (args, err)
        assert message in err, (args, err)
        assert not out.exists(), f"{args}: a figure was written from a bad result"
    code, _, err = run_cli("plot", "pulls", example["fit"], "-o", tmp_path / "figure.gif", expect_ok=False)
    assert code == 2 and ".svg, .png or .pdf" in err
    named_like_a_figure = tmp_path / "fit.svg"
    named_like_a_figure.write_text(example["fit"].read_text())
    code, _, err = run_cli("plot", "pulls", named_like_a_figure, "-o", named_like_a_figure, expect_ok=False)
    assert code == 2 and "an input of this command" in err
    assert named_like_a_figure.read_text() == example["fit"].read_text()


def _bars(ax):
    return [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]


def test_python_draws_every_kind_with_the_engines_numbers(example, published, tmp_path):
    fit = nextstat.fit(nextstat.Workspace(str(EXAMPLE)).model(), yields=True)
    assert fit.yields["channels"][0]["postfit_total"] == load(example["fit"])["yields"]["channels"][0]["postfit_total"]
    for results in (example, published):
        ranking = load(results["ranking"])
        fig = nextstat.plot.ranking(results["ranking"], top=6)
        n = min(6, len(ranking["entries"]))
        # Per entry and direction: an outlined pre-fit bar and a filled post-fit one.
        assert len(_bars(fig.axes[0])) == 4 * n
        # Top to bottom in the ranking's order.
        ticks = sorted(zip(fig.axes[0].get_yticks(), (t.get_text() for t in fig.axes[0].get_yticklabels())), reverse=True)
        assert [name for _, name in ticks] == [e["name"] for e in ranking["entries"][:n]]
        plt.close(fig)

        figures = {
            "pulls": nextstat.plot.pulls(results["fit"]),
            "correlation": nextstat.plot.correlation(results["fit"], threshold=0.1),
            "scan": nextstat.plot.scan(results["scan"]),
            "yields": nextstat.plot.yields(results["fit"]),
            "prefit": nextstat.plot.yields(results["fit"], prefit=True),
            "cls": nextstat.plot.limit(results["cls"]),
            "toys": nextstat.plot.toys(results["toys"], asymptotic=results["asymptotic"]),
        }
        for name, fig in figures.items():
            assert isinstance(fig, matplotlib.figure.Figure), name
            fig.savefig(tmp_path / f"{name}.png")
            assert png_size(tmp_path / f"{name}.png")[0] > 300
            plt.close(fig)
        # One stacked bar per sample and bin in each channel's upper panel.
        fig = nextstat.plot.yields(results["fit"])
        channels = load(results["fit"])["yields"]["channels"]
        for channel in channels:
            stacked = len(channel["samples"]) * len(channel["postfit_total"])
            band = len(channel["postfit_total"])
            top_axes = [ax for ax in fig.axes if ax.get_title() == channel["channel"]][0]
            assert len(_bars(top_axes)) == stacked + band
        plt.close(fig)

    # The Brazil band over a slice of the published grid, and the same numbers as the CLI.
    options = grid_options(published)
    select = {options[3].split("=")[0]: float(options[3].split("=")[1])}
    fig = nextstat.plot.limit(published["grid"], x=options[1], select=select)
    observed = fig.axes[0].get_lines()[1].get_ydata()
    cli = plot("limit", published["grid"], tmp_path / "brazil.png", *options)
    assert list(observed) == cli["observed"]
    plt.close(fig)
    assert nextstat.plot.figure_data("scan", published["scan"]) == plot("scan", published["scan"], tmp_path / "s.png")

    # nextstat.plot.save: the CLI's renderer from Python, from a result object.
    size = nextstat.plot.save("pulls", fit, tmp_path / "pulls.png")
    assert png_size(tmp_path / "pulls.png") == tuple(size)
    with pytest.raises(nextstat.NextStatError, match="parameter_names"):
        nextstat.plot.pulls(results["ranking"])
    with pytest.raises(nextstat.NextStatError, match="no plot kind"):
        nextstat.plot.figure_data("heatmap", fit)
    with pytest.raises(nextstat.NextStatError, match="unknown field"):
        nextstat.plot.figure_data("ranking", results["ranking"], colour="red")


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise AssertionError("no Chromium: scripts/test.sh installs Debian's chromium for the report's screenshot test")


def test_report_writes_every_figure_and_a_page_a_browser_shows(tmp_path):
    folder = tmp_path / "report"
    code, out, err = run_cli("report", EXAMPLE, "-o", folder, "--figures", "png")
    summary = json.loads(out)
    for name in ("fit", "upper_limit", "cls_scan", "scan", "ranking"):
        assert (folder / f"{name}.json").exists(), name
    figures = sorted(Path(f).name for f in summary["figures"])
    assert figures == sorted(["pulls.png", "correlation.png", "yields_prefit.png", "yields_postfit.png",
                              "cls.png", "scan.png", "ranking.png"])
    for f in figures:
        png_size(folder / f)
    page = (folder / "index.html").read_text()
    limit = load(folder / "upper_limit.json")
    assert f"{limit['obs']:.4f}" in page
    assert all(f'src="{f}"' in page for f in figures)
    # The same numbers as the verbs run alone.
    alone = json.loads(run_cli("upper-limit", EXAMPLE)[1])
    assert alone["obs"] == limit["obs"] and alone["exp"] == limit["exp"]

    shot = tmp_path / "page.png"
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1300,2400", (folder / "index.html").as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert png_size(shot) == (1300, 2400)
    image = plt.imread(shot)
    # The page is drawn: the heading's dark text and the figures' colours, not a blank window.
    dark = (image[..., :3].max(axis=2) < 0.3).mean()
    coloured = (image[..., :3].max(axis=2) - image[..., :3].min(axis=2) > 0.3).mean()
    assert dark > 0.002 and coloured > 0.01, (dark, coloured)

    # An unbinned model's report has no yields (no samples) and says so nowhere falsely.
    code, out, err = run_cli("report", ROOT / "examples" / "unbinned" / "resonance.json", "-o", tmp_path / "unbinned")
    names = sorted(Path(f).name for f in json.loads(out)["figures"])
    assert "yields_postfit.svg" not in names and "ranking.svg" in names

    code, _, err = run_cli("report", EXAMPLE, expect_ok=False)
    assert code == 2 and "-o DIR" in err
    code, _, err = run_cli("report", EXAMPLE, "-o", EXAMPLE, expect_ok=False)
    assert code == 2 and "that is a file" in err


def test_the_commands_and_code_of_docs_plots_run(tmp_path):
    """docs/plots.md: every `nextstat` line of its bash blocks, then its Python block, in a folder
    where `examples/` is the repository's."""
    import os
    import re
    import shlex

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    text = (ROOT / "docs" / "plots.md").read_text()
    ran = 0
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.strip().splitlines():
            line = line.split("#")[0].strip()
            if not line.startswith("nextstat "):
                continue
            args = shlex.split(line)[1:]
            proc = subprocess.run([str(BIN), *args], cwd=tmp_path, capture_output=True, text=True)
            assert proc.returncode == 0, f"{line}: {proc.stderr}"
            ran += 1
    assert ran >= 14
    for figure in ("limit.svg", "cls.svg", "ranking.svg", "pulls.svg", "scan.svg", "yields_postfit.svg", "toys.svg"):
        assert (tmp_path / figure).read_text().lstrip().startswith("<svg"), figure
    assert (tmp_path / "report" / "index.html").exists()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, "docs/plots.md", "exec"), {})
    finally:
        os.chdir(cwd)
        plt.close("all")
    assert (tmp_path / "ranking.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "pulls.svg").exists()
