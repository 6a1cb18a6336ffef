"""Figures from nextstat's results on matplotlib: the same kinds, and the same numbers, as
``nextstat plot`` (the content of each figure comes from the engine, ``nextstat._core.plot_figure``;
only the drawing is matplotlib's). Every function returns the ``matplotlib.figure.Figure``, to
restyle or save::

    import nextstat, nextstat.plot
    model = nextstat.Workspace("examples/analysis.json").model()
    fig = nextstat.plot.ranking(nextstat.ranking(model))
    fig.savefig("ranking.pdf")

A result is a nextstat result object, its ``to_dict()``, the path of a JSON file a CLI verb wrote,
or that JSON as text. ``nextstat.plot.save(kind, result, "file.svg")`` writes the CLI's own
rendering instead (no matplotlib needed).
"""

import json
import math
import os
from typing import Any, Dict, Optional, Sequence, Tuple

from . import _core

# Okabe–Ito: distinguishable with every common colour-vision deficiency (as the CLI's figures).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442"]
UP, DOWN, LEVEL = "#0072B2", "#E69F00", "#D55E00"
BAND_1SIGMA, BAND_2SIGMA = "#009E73", "#F0E442"

__all__ = ["figure_data", "limit", "ranking", "pulls", "correlation", "scan", "contour", "yields", "toys", "save"]


def _report(result: Any) -> Dict[str, Any]:
    if hasattr(result, "to_dict"):
        return result.to_dict()
    if isinstance(result, dict):
        return result
    if isinstance(result, (str, os.PathLike)):
        text = str(result)
        origin = "the result text"
        if not text.lstrip().startswith("{"):
            origin = text
            with open(text) as f:
                text = f.read()
        try:
            return json.loads(text)
        except ValueError as e:
            raise ValueError(f"{origin} is not JSON: {e}") from None
    raise TypeError(f"a result is a nextstat result, a dict, a JSON file's path or JSON text, not {type(result).__name__}")


def _json(value: Any) -> str:
    """JSON as the engine reads it: a non-finite number is written as the engine writes one
    ("NaN", "inf", "-inf"), so the figure names the entry instead of a bare parse error."""
    def finite(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return "NaN" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v
    return json.dumps(finite(value), allow_nan=False)


def _options(options: Dict[str, Any]) -> str:
    """The options given, as the engine reads them (an asymptotic result as its report)."""
    options = {k: v for k, v in options.items() if v is not None}
    if "asymptotic" in options:
        options["asymptotic"] = _report(options["asymptotic"])
    return _json(options)


def figure_data(kind: str, result: Any, **options) -> Dict[str, Any]:
    """What a figure of ``kind`` shows (the numbers drawn), as ``nextstat plot`` prints it."""
    return json.loads(_core.plot_figure(kind, _json(_report(result)), _options(options)))


def save(kind: str, result: Any, path: str, **options) -> Tuple[int, int]:
    """Draw with nextstat's own renderer (the CLI's) to ``path`` (.svg, .png, .pdf); its size in pixels."""
    return tuple(_core.plot_file(kind, _json(_report(result)), _options(options), os.fspath(path)))


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - exercised where matplotlib is absent
        raise ImportError("nextstat.plot draws with matplotlib: pip install matplotlib "
                          "(or nextstat.plot.save(...) for the CLI's renderer)") from e
    return plt


def _band_legend(ax, loc):
    ax.legend(loc=loc, frameon=True, fontsize=11)


def limit(result: Any, *, x: Optional[str] = None, select: Optional[Dict[str, float]] = None,
          theory: Optional[Sequence[float]] = None):
    """The Brazil band over a patchset grid (``upper-limit --patchset PS --all``), or CLs against
    μ for one point (an ``upper_limit`` with a scan)."""
    plt = _pyplot()
    data = figure_data("limit", result, x=x, select=None if select is None else [[k, float(v)] for k, v in select.items()],
                       theory=None if theory is None else [float(t) for t in theory])
    fig, ax = plt.subplots(figsize=(12, 6.75))
    if data["kind"] == "limit":
        xs, exp = data["x"], data["expected"]
        ax.fill_between(xs, exp[0], exp[4], color=BAND_2SIGMA, label="expected ± 2σ")
        ax.fill_between(xs, exp[1], exp[3], color=BAND_1SIGMA, label="expected ± 1σ")
        ax.plot(xs, exp[2], "k--", lw=2, label="expected (median)")
        ax.plot(xs, data["observed"], "k-o", lw=2.5, label="observed")
        ax.axhline(1.0, color=LEVEL, ls="--", lw=1.5, label="μ = 1")
        if data.get("theory"):
            ax.plot(xs, data["theory"], color=LEVEL, lw=2, label="theory")
        ax.set_xlabel(data["x_label"])
        ax.set_ylabel("upper limit on μ")
        ax.set_title(f"{100 * data['cl']:.0f} % CL upper limits")
        lo = min(min(exp[0]), min(data["observed"]))
        hi = max(max(exp[4]), max(data["observed"]))
        if lo > 0 and hi / lo > 20:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, hi * 1.15)
    else:
        mu, exp = data["mu"], data["expected"]
        ax.fill_between(mu, exp[0], exp[4], color=BAND_2SIGMA, label="expected ± 2σ")
        ax.fill_between(mu, exp[1], exp[3], color=BAND_1SIGMA, label="expected ± 1σ")
        ax.plot(mu, exp[2], "k--", lw=2, label="expected (median)")
        ax.plot(mu, data["observed"], "k-", lw=2.5, label="observed")
        ax.axhline(data["level"], color=LEVEL, lw=1.5, label=f"CLs = {data['level']}")
        for limit_value in (data["observed_limit"], data["expected_limit"]):
            if limit_value is None:  # beyond the scan
                continue
            ax.plot([limit_value], [data["level"]], "ko")
            ax.axvline(limit_value, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("μ")
        ax.set_ylabel("CLs")
        ax.set_title("CLs against μ")
    _band_legend(ax, "upper left" if data["kind"] == "limit" else "lower left")
    fig.tight_layout()
    return fig


def ranking(result: Any, *, top: int = 20):
    """Impacts on the POI (pre-fit outlined, post-fit filled) with pulls and constraints on a
    second axis, the largest first."""
    plt = _pyplot()
    data = figure_data("ranking", result, top=top)
    entries = data["entries"]
    n = len(entries)
    fig, ax = plt.subplots(figsize=(12, max(4.0, 1.6 + 0.32 * n)))
    y = list(range(n))[::-1]
    for key_post, key_pre, color, label in (("postfit_up", "prefit_up", UP, "post-fit +1σ"),
                                            ("postfit_down", "prefit_down", DOWN, "post-fit −1σ")):
        pre = [e[key_pre] if e[key_pre] is not None else 0.0 for e in entries]
        ax.barh(y, pre, height=0.8, fill=False, edgecolor=color, lw=1.5, label=label.replace("post", "pre"))
        ax.barh(y, [e[key_post] for e in entries], height=0.6, color=color, alpha=0.75, label=label)
    ax.set_yticks(y, [e["name"] for e in entries])
    ax.set_xlabel(f"Δ{data['poi']}")
    reach = max(max(abs(v) for e in entries for v in (e["postfit_up"], e["postfit_down"], e["prefit_up"] or 0, e["prefit_down"] or 0)), 1e-12) * 1.15
    ax.set_xlim(-reach, reach)
    pulls = ax.twiny()
    shown = [(yy, e) for yy, e in zip(y, entries) if e["pull"] is not None]
    pulls.errorbar([e["pull"] for _, e in shown], [yy for yy, _ in shown],
                   xerr=[e["constraint"] for _, e in shown], fmt="ko", label="pull ± constraint")
    pulls.set_xlim(-2, 2)
    pulls.set_xlabel("pull (θ̂ − θ₀)/Δθ")
    handles = ax.get_legend_handles_labels()
    extra = pulls.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="lower right", fontsize=10)
    ax.set_title(f"Impact on {data['poi']} (top {n} of {data['ranked']})", pad=40)
    fig.tight_layout()
    return fig


def pulls(result: Any, *, filter: Optional[str] = None):
    """Pulls and constraints of the constrained parameters of a fit, grouped by modifier type."""
    plt = _pyplot()
    data = figure_data("pulls", result, filter=filter)
    rows = []
    for g in data["groups"]:
        rows.append((f"[{g['kind']}]", None))
        rows.extend((e["name"], e) for e in g["entries"])
    n = len(rows)
    fig, ax = plt.subplots(figsize=(10, max(4.0, 1.6 + 0.24 * n)))
    y = list(range(n))[::-1]
    ax.axvspan(-2, 2, color=BAND_2SIGMA, alpha=0.5)
    ax.axvspan(-1, 1, color=BAND_1SIGMA, alpha=0.5)
    points = [(yy, e) for yy, (_, e) in zip(y, rows) if e is not None]
    ax.errorbar([e["pull"] for _, e in points], [yy for yy, _ in points], xerr=[e["constraint"] for _, e in points], fmt="ko")
    ax.set_yticks(y, [name for name, _ in rows])
    ax.set_xlabel("(θ̂ − θ₀)/Δθ")
    ax.set_title("Pulls of the constrained parameters")
    fig.tight_layout()
    return fig


def correlation(result: Any, *, threshold: float = 0.2, top: int = 40):
    """The correlation matrix of a fit, pruned to parameters with some |ρ| ≥ ``threshold``."""
    plt = _pyplot()
    data = figure_data("correlation", result, threshold=threshold, top=top)
    names, matrix = data["names"], data["matrix"]
    n = len(names)
    side = max(6.0, 2.5 + 0.3 * n)
    fig, ax = plt.subplots(figsize=(side + 1.5, side))
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_xticks(range(n), names, rotation=90)
    ax.set_yticks(range(n), names)
    if n <= 25:
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{matrix[i][j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if abs(matrix[i][j]) > 0.6 else "black")
    fig.colorbar(image, ax=ax, label="ρ")
    ax.set_title(f"Correlations (|ρ| ≥ {data['threshold']} with another parameter: {n} of {data['total']})")
    fig.tight_layout()
    return fig


def scan(result: Any):
    """Δ(2 ln L) of a profile scan with its 1σ and 2σ crossings."""
    plt = _pyplot()
    data = figure_data("scan", result)
    fig, ax = plt.subplots(figsize=(12, 6.75))
    ax.plot(data["values"], data["delta"], "k-o", lw=2, label="profile likelihood")
    for c in data["crossings"]:
        ax.axhline(c["level"], color=LEVEL, lw=1)
        ends = [v for v in (c["low"], c["high"]) if v is not None]
        for v in ends:
            ax.plot([v, v], [0, c["level"]], color=LEVEL, lw=1)
        text = ", ".join("—" if v is None else f"{v:.4f}" for v in (c["low"], c["high"]))
        ax.plot([], [], color=LEVEL, label=f"{c['level'] ** 0.5:.0f}σ: [{text}]")
    ax.set_xlabel(data["parameter"])
    ax.set_ylabel("Δ(2 ln L) = −2 Δ ln L")
    ax.set_ylim(0, max(max(data["delta"]), 4.5) * 1.08)
    ax.set_title(f"Profile likelihood of {data['parameter']}")
    ax.legend(loc="upper center")
    fig.tight_layout()
    return fig


def contour(result: Any):
    """The contours of a two-parameter grid scan (``nextstat.profile_scan_grid``, ``nextstat scan
    --parameters a,b --grid …``) at each of its confidence levels, with the grid's lowest point."""
    plt = _pyplot()
    data = figure_data("contour", result)
    fig, ax = plt.subplots(figsize=(12, 6.75))
    for k, level in enumerate(data["levels"]):
        color = PALETTE[k % len(PALETTE)]
        for j, line in enumerate(level["lines"]):
            xs, ys = zip(*line) if line else ((), ())
            label = f"{100 * level['cl']:.2f}% CL (Δ(2 ln L) = {level['delta_twice_nll']:.2f})" if j == 0 else None
            ax.plot(xs, ys, color=color, lw=2.5, label=label)
    ax.plot([data["best"][0]], [data["best"][1]], "kx", ms=10, mew=2.5, label="lowest grid point")
    ax.set_xlim(*data["x_range"])
    ax.set_ylim(*data["y_range"])
    ax.set_xlabel(data["x_label"])
    ax.set_ylabel(data["y_label"])
    ax.set_title(f"Profile likelihood of {data['x_label']} and {data['y_label']}")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def yields(result: Any, *, prefit: bool = False):
    """Stacked yields per channel with the data, the uncertainty of the total, and the data over
    the prediction (a fit with ``yields=True``)."""
    plt = _pyplot()
    data = figure_data("yields", result, prefit=prefit)
    channels = data["channels"]
    names = []
    for c in channels:
        for name, _ in c["samples"]:
            if name not in names:
                names.append(name)
    fig, axes = plt.subplots(2, len(channels), figsize=(max(9.0, 5.2 * len(channels)), 7.6),
                             gridspec_kw={"height_ratios": [7, 3]}, squeeze=False, sharex="col")
    for k, c in enumerate(channels):
        top, bottom = axes[0][k], axes[1][k]
        bins = len(c["total"])
        edges = list(range(bins + 1))
        below = [0.0] * bins
        for name, values in c["samples"]:
            top.bar(range(bins), values, width=1.0, align="edge", bottom=below, color=PALETTE[names.index(name) % len(PALETTE)], label=name)
            below = [b + v for b, v in zip(below, values)]
        low = [t - s for t, s in zip(c["total"], c["stdev"])]
        top.bar(range(bins), [2 * s for s in c["stdev"]], width=1.0, align="edge", bottom=low, color="0.25", alpha=0.35, label="uncertainty")
        centres = [b + 0.5 for b in range(bins)]
        if c["observed"] is not None:
            top.errorbar(centres, c["observed"], yerr=[o ** 0.5 for o in c["observed"]], fmt="ko", label="data")
            ratio = [o / t if t > 0 else float("nan") for o, t in zip(c["observed"], c["total"])]
            bottom.errorbar(centres, ratio, yerr=[o ** 0.5 / t if t > 0 else 0 for o, t in zip(c["observed"], c["total"])], fmt="ko")
        rel = [s / t if t > 0 else 0.0 for s, t in zip(c["stdev"], c["total"])]
        bottom.bar(range(bins), [2 * r for r in rel], width=1.0, align="edge", bottom=[1 - r for r in rel], color="0.25", alpha=0.35)
        bottom.axhline(1.0, color="k", lw=1)
        bottom.set_ylim(0.5, 1.5)
        bottom.set_xlim(edges[0], edges[-1])
        bottom.set_xlabel("bin")
        bottom.set_ylabel("data / pred.")
        top.set_ylabel("events")
        top.set_title(c["channel"])
        top.legend(fontsize=9)
    fig.suptitle(f"{'Pre' if data['stage'] == 'prefit' else 'Post'}-fit yields")
    fig.tight_layout()
    return fig


def toys(result: Any, *, asymptotic: Any = None):
    """The test-statistic distributions of a toy CLs (``hypotest_toys(..., teststats=True)``) with
    the observed value, and the asymptotic densities when an asymptotic ``hypotest`` at the same μ
    is given."""
    plt = _pyplot()
    data = figure_data("toys", result, asymptotic=asymptotic)
    fig, ax = plt.subplots(figsize=(12, 6.75))
    null, alt = (("background only (μ = 0)", "signal (μ = 1)") if data["test_stat"] == "q0"
                 else ("signal + background", "background only"))
    edges = data["edges"]
    for values, color, name in ((data["signal_plus_background"], UP, null), (data["background_only"], DOWN, alt)):
        ax.stairs(values, edges, color=color, lw=2, fill=False, label=f"toys, {name}")
        ax.stairs(values, edges, color=color, alpha=0.2, fill=True)
    if data["asymptotic"] is not None:
        a = data["asymptotic"]
        ax.plot(a["q"], a["signal_plus_background"], color=UP, lw=2.5, label=f"asymptotic, {null}")
        ax.plot(a["q"], a["background_only"], color=DOWN, lw=2.5, label=f"asymptotic, {alt}")
    ax.axvline(data["observed"], color="k", lw=2.5, label=f"observed = {data['observed']:.3f}")
    positive = [v for v in data["signal_plus_background"] + data["background_only"] if v > 0]
    if positive:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) * 0.3, max(positive) * 3)
    ax.set_xlim(0, edges[-1])
    ax.set_xlabel(data["test_stat"])
    ax.set_ylabel("density")
    ax.set_title(f"Toy distributions at μ = {data['mu']} ({data['n_toys'][0]} + {data['n_toys'][1]} toys)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig
