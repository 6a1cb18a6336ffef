"""``pyhf.simplemodels``: one-channel models of a signal over a background with one kind of
uncertainty, as pyhf builds them (the same channel, sample and modifier names)."""

from typing import Any, Sequence

__all__ = ["correlated_background", "uncorrelated_background"]


def _model(channel: str, signal: Sequence[float], bkg: Sequence[float], modifier: dict, batch_size: Any, validate: bool):
    from . import Model

    spec = {"channels": [{"name": channel, "samples": [
        {"name": "signal", "data": list(signal), "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
        {"name": "background", "data": list(bkg), "modifiers": [modifier]},
    ]}]}
    return Model(spec, batch_size=batch_size, validate=validate)


def uncorrelated_background(signal, bkg, bkg_uncertainty, batch_size=None, validate=True):
    """Signal with a free strength ``mu`` over a background with a per-bin uncorrelated
    absolute uncertainty (shapesys ``uncorr_bkguncrt``), in channel ``singlechannel``."""
    modifier = {"name": "uncorr_bkguncrt", "type": "shapesys", "data": list(bkg_uncertainty)}
    return _model("singlechannel", signal, bkg, modifier, batch_size, validate)


def correlated_background(signal, bkg, bkg_up, bkg_down, batch_size=None, validate=True):
    """Signal with a free strength ``mu`` over a background with one correlated shape
    uncertainty (histosys ``correlated_bkg_uncertainty``), in channel ``single_channel``."""
    modifier = {"name": "correlated_bkg_uncertainty", "type": "histosys", "data": {"hi_data": list(bkg_up), "lo_data": list(bkg_down)}}
    return _model("single_channel", signal, bkg, modifier, batch_size, validate)
