"""pyhf 0.7.6 (JAX backend) as a differentiable function of some samples' yields: the parity
oracle of nextstat.torch's NLL and its gradient, and the peer in bench/differentiable_bench.py.

pyhf builds its model from the workspace once (with NumPy), so a new signal normally means a new
model. Here the built model's nominal rates and its code4p histosys deltas (templates fixed, as in
nextstat: Δup = hi − s, Δdown = s − lo) are replaced by JAX values of `s` inside the function, so
that `jax.grad` (and `jax.jit`) go through `pyhf.Model.logpdf`. Staterror widths are computed at
build time in pyhf: samples with a staterror are refused as external samples here, unless
`fixed_staterror` (the widths then stay the workspace's: the same arithmetic, for timing only).
"""

import jax
import jax.numpy as jnp
import pyhf

jax.config.update("jax_enable_x64", True)


def signal_nll(model, samples, pars, data, fixed_staterror=False):
    """`f(s) = -model.logpdf(pars, data)` with `s` (the named (channel, sample) pairs' bins,
    concatenated in the order given) as those samples' yields. `model` must have been built with
    pyhf's JAX backend active."""
    main = model.main_model
    config = model.config
    rows, bins = [], []
    for channel, sample in samples:
        k = config.samples.index(sample)
        mods = [m for m in model.spec["channels"][[c["name"] for c in model.spec["channels"]].index(channel)]["samples"]
                if m["name"] == sample][0]["modifiers"]
        if any(m["type"] == "shapesys" or (m["type"] == "staterror" and not fixed_staterror) for m in mods):
            raise ValueError(f"{channel}/{sample} carries a staterror or shapesys: pyhf fixes its width when it builds the model")
        window = config.channel_slices[channel]
        rows += [k] * (window.stop - window.start)
        bins += list(range(window.start, window.stop))
    rows, bins = jnp.array(rows), jnp.array(bins)
    nominal = main.nominal_rates
    histosys = main.modifiers_appliers.get("histosys")
    if histosys is not None and histosys.param_viewer.index_selection:
        if histosys.interpcode != "code4p":
            raise ValueError(f"histosys interpolation {histosys.interpcode} is not patched here (code4p only)")
        histoset = jnp.asarray(histosys._histosys_histoset, dtype=jnp.float64)
    else:
        histosys = None
    pars, data = jnp.asarray(pars, dtype=jnp.float64), jnp.asarray(data, dtype=jnp.float64)

    def nll(s):
        main.nominal_rates = nominal.at[0, rows, 0, bins].set(s)
        if histosys is not None:
            hs = histoset.at[:, rows, 1, bins].set(s)
            it = histosys.interpolator
            it.deltas_up, it.deltas_dn = hs[:, :, 2] - hs[:, :, 1], hs[:, :, 1] - hs[:, :, 0]
            it.S, it.A = 0.5 * (it.deltas_up + it.deltas_dn), 0.0625 * (it.deltas_up - it.deltas_dn)
        try:
            return -model.logpdf(pars, data)[0]
        finally:
            main.nominal_rates = nominal

    return nll


def jax_model(spec):
    """pyhf's model and data of a workspace, built with the JAX backend active."""
    pyhf.set_backend("jax")
    ws = pyhf.Workspace(spec)
    model = ws.model()
    return model, ws.data(model)
