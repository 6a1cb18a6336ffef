"""Drop-in for ``pyhf.contrib.viz.brazil``: the observed CLs against the POI over the expected
band (the "Brazil band"), with the CLs+b and CLb components on request. The same functions,
arguments, artists and :class:`BrazilBandCollection` as pyhf's, drawn with matplotlib from
``nextstat.infer.hypotest`` results (or any arrays of that shape)."""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Sequence

import numpy as np

__all__ = ["BrazilBandCollection", "plot_brazil_band", "plot_cls_components", "plot_results"]

BrazilBandCollection = namedtuple(
    "BrazilBandCollection",
    ("cls_obs", "cls_exp", "one_sigma_band", "two_sigma_band", "test_size", "clsb", "clb", "axes"),
)
BrazilBandCollection.__doc__ = (
    "The artists :func:`plot_results` drew: the observed CLs line, the five expected lines, the "
    "±1σ and ±2σ bands, the test-size line, the CLs+b and CLb lines (``None`` unless drawn) and "
    "the axes."
)


def _curve(values: Any, n: int, what: str) -> np.ndarray:
    """``values`` as a flat float array of one value per POI."""
    array = np.asarray(values, dtype=float).reshape(-1)
    if array.size != n:
        raise ValueError(f"{what} has {array.size} values for {n} POI values")
    return array


def plot_brazil_band(test_pois: Sequence[float], cls_obs: Any, cls_exp: Any, test_size: float, ax: Any, **kwargs: Any):
    """The observed CLs (solid), the five expected CLs (dotted, the median dashed) with the ±1σ
    (green) and ±2σ (yellow) bands between them, and the test size α as a line. ``color`` sets
    the lines' colour, ``test_size_color`` and ``test_size_linestyle`` the α line's. Returns the
    artists ``(cls_obs, [cls_exp × 5], one_sigma_band, two_sigma_band, test_size)``."""
    pois = np.asarray(test_pois, dtype=float).reshape(-1)
    observed = _curve(cls_obs, pois.size, "cls_obs")
    if len(cls_exp) != 5:
        raise ValueError(f"cls_exp needs the five expected CLs curves (−2σ … +2σ), not {len(cls_exp)}")
    expected = [_curve(curve, pois.size, f"cls_exp[{k}]") for k, curve in enumerate(cls_exp)]
    color = kwargs.pop("color", "black")
    (observed_line,) = ax.plot(pois, observed, color=color, label=r"$\mathrm{CL}_{s}$")
    expected_lines = []
    for k, curve in enumerate(expected):
        median = k == 2
        (line,) = ax.plot(
            pois, curve, color=color, linestyle="dashed" if median else "dotted",
            label=r"$\mathrm{CL}_{s,\mathrm{exp}}$" if median else None,
        )
        expected_lines.append(line)
    two_sigma = ax.fill_between(pois, expected[0], expected[4], facecolor="yellow",
                                label=r"$\pm2\sigma$ $\mathrm{CL}_{s,\mathrm{exp}}$")
    one_sigma = ax.fill_between(pois, expected[1], expected[3], facecolor="green",
                                label=r"$\pm1\sigma$ $\mathrm{CL}_{s,\mathrm{exp}}$")
    (size_line,) = ax.plot(
        pois, np.full(pois.size, float(test_size)), color=kwargs.pop("test_size_color", "red"),
        linestyle=kwargs.pop("test_size_linestyle", "solid"), label=rf"$\alpha={test_size}$",
    )
    return observed_line, expected_lines, one_sigma, two_sigma, size_line


def plot_cls_components(test_pois: Sequence[float], tail_probs: Any, ax: Any, **kwargs: Any):
    """The observed CLs+b (red) and CLb (blue) from ``tail_probs``, one ``[CLs+b, CLb]`` per POI
    (``hypotest(..., return_tail_probs=True)``'s second item). ``no_clsb``/``no_clb`` leave one
    out; ``clsb_color``, ``clb_color`` and ``linewidth`` style them. Returns the two lines (``None``
    for one left out)."""
    pois = np.asarray(test_pois, dtype=float).reshape(-1)
    probs = np.asarray(tail_probs, dtype=float)
    if probs.shape != (pois.size, 2):
        raise ValueError(f"tail_probs needs one [CLs+b, CLb] pair per POI value ({pois.size}), not shape {probs.shape}")
    linewidth = kwargs.pop("linewidth", 2)
    lines = []
    for column, skip, color_key, color, label in [
        (0, kwargs.pop("no_clsb", False), "clsb_color", "red", r"$\mathrm{CL}_{s+b}$"),
        (1, kwargs.pop("no_clb", False), "clb_color", "blue", r"$\mathrm{CL}_{b}$"),
    ]:
        color = kwargs.pop(color_key, color)
        if skip:
            lines.append(None)
            continue
        (line,) = ax.plot(pois, probs[:, column], color=color, linewidth=linewidth, label=label)
        lines.append(line)
    return tuple(lines)


def plot_results(test_pois: Sequence[float], tests: Any, test_size: float = 0.05, ax: Any = None, **kwargs: Any) -> BrazilBandCollection:
    """The Brazil band of a series of hypothesis tests, one per POI value. Each test is
    ``hypotest(..., return_expected_set=True)``'s ``(CLs_obs, CLs_exp_set)``, or with
    ``return_tail_probs=True`` ``(CLs_obs, [CLs+b, CLb], CLs_exp_set)``. ``components=True`` also
    draws CLs+b and CLb (it needs the tail probabilities), ``no_cls=True`` leaves the band out;
    other keywords go to :func:`plot_brazil_band` and :func:`plot_cls_components`. On the current
    axes when ``ax`` is not given."""
    if ax is None:
        import matplotlib.pyplot as plt

        ax = plt.gca()
    components = kwargs.pop("components", False)
    no_cls = kwargs.pop("no_cls", False)
    labels_given = {key: kwargs.pop(key) for key in ("xlabel", "ylabel") if key in kwargs}
    tests = list(tests)
    if not tests:
        raise ValueError("plot_results needs at least one hypothesis test")
    width = len(tests[0])
    if width not in (2, 3) or any(len(t) != width for t in tests):
        raise ValueError(
            "each test must be (CLs_obs, CLs_exp_set) or (CLs_obs, [CLs+b, CLb], CLs_exp_set), as "
            "hypotest returns them with return_expected_set=True (and return_tail_probs=True)"
        )
    if components and width != 3:
        raise ValueError(
            f"components=True draws CLs+b and CLb, so each test needs 3 items, (CLs_obs, [CLs+b, CLb], "
            f"CLs_exp_set) (hypotest with return_tail_probs=True), not {width}"
        )
    cls_obs = [np.asarray(t[0], dtype=float).reshape(-1)[0] for t in tests]
    exp_sets = np.asarray([np.asarray(t[-1], dtype=float).reshape(-1) for t in tests])
    if exp_sets.shape[1] != 5:
        raise ValueError(f"each expected set needs the five CLs values (−2σ … +2σ), not {exp_sets.shape[1]}")
    band = (None,) * 5
    if not no_cls:
        band = plot_brazil_band(test_pois, cls_obs, list(exp_sets.T), test_size, ax, **kwargs)
    clsb, clb = (None, None)
    if components:
        clsb, clb = plot_cls_components(test_pois, [np.asarray(t[1], dtype=float).reshape(-1) for t in tests], ax, **kwargs)
    ax.set_xlabel(labels_given.get("xlabel", r"$\mu$ (POI)"))
    ax.set_ylabel(labels_given.get("ylabel", r"$\mathrm{CL}_{s}$"))
    ax.set_ylim(0.1 * test_size if ax.get_yscale() == "log" else 0.0, 1.0)
    # The legend lists the observed curves first, then the expected median, the bands and α.
    handles, labels = ax.get_legend_handles_labels()
    last = [r"$\mathrm{CL}_{s,\mathrm{exp}}$", r"$\pm1\sigma$", r"$\pm2\sigma$", r"$\alpha="] if not no_cls else []
    order = sorted(range(len(labels)), key=lambda i: next((k for k, part in enumerate(last) if labels[i].startswith(part)), -1))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="best")
    return BrazilBandCollection(*band, clsb, clb, ax)
