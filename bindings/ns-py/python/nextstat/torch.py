"""The HistFactory likelihood as PyTorch autograd functions of signal yields.

A network produces the yields of one or more samples (named ``(channel, sample)``); they replace
those samples' nominal yields, and these functions return the NLL or a profiled test statistic
(every nuisance parameter fitted) with its exact gradient with respect to the yields:

    model = nextstat.Workspace(spec).model()
    z = nextstat.torch.z0(model, signal, samples=[("SR", "signal")], asimov=True)
    (-z).backward()

``signal`` holds the named samples' bins concatenated in the order given, with any leading batch
dimensions; float32 or float64, on any device. The engine computes in float64. The NLL of a CUDA
tensor is evaluated by the CUDA engine on the tensor's memory in place (no host round trip; the
gradients are written into torch-allocated CUDA tensors); other tensors go to the CPU engine.
Profiled statistics copy the signal to the host (and the gradient back); one histogram's fits run
on the CPU engine (faster there than a chain of kernel launches), a batch of a CUDA tensor's
histograms runs all its fits in one batch on the GPU. Their gradients come from the envelope
theorem (``docs/differentiable.md``); where a statistic is clipped to 0 its gradient is 0.
"""

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from . import InvalidInputError, Model, _core

__all__ = ["nll", "q0", "qmu", "z0", "SignificanceLoss", "SoftHistogram"]

Samples = Sequence[Tuple[str, str]]


def _session(model: Model, samples: Samples, device: str = "cpu") -> Any:
    """One engine session per (model, samples, device): its fits warm-start from the previous
    call, and on a GPU the model stays uploaded."""
    if not isinstance(model, Model):
        raise TypeError(f"model must be a nextstat.Model (Workspace(...).model()), not {type(model).__name__}")
    cache: Dict[Any, Any] = model.__dict__.setdefault("_differentiable", {})
    # A training step asks for the same session each call: the lookup comes before the
    # validation (a cached key was a valid list of pairs): 9 µs of the ~95 µs that a CPU step
    # on tHq adds to the engine and to torch itself.
    try:
        session = cache.get((tuple(map(tuple, samples)), device))
    except TypeError:
        session = None
    if session is not None:
        return session
    if isinstance(samples, (str, bytes)) or not all(isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(n, str) for n in p) for p in samples):
        raise InvalidInputError(f"samples must be a list of (channel, sample) name pairs, e.g. [('SR', 'signal')], not {samples!r}")
    key = (tuple((c, s) for c, s in samples), device)
    if key not in cache:
        cache[key] = _core.DifferentiableSession(model._model, list(key[0]), device)
    return cache[key]


def _engine_device(signal: torch.Tensor) -> str:
    """The engine that evaluates the NLL of `signal`: CUDA for a tensor on the first GPU."""
    if signal.device.type != "cuda":
        return "cpu"
    if signal.device.index not in (None, 0):
        raise InvalidInputError(f"the CUDA engine runs on cuda:0; the signal is on {signal.device} (move it, or set CUDA_VISIBLE_DEVICES)")
    return "cuda"


def _tensor(signal: Any) -> torch.Tensor:
    if not isinstance(signal, torch.Tensor):
        raise TypeError(f"signal must be a torch.Tensor, not {type(signal).__name__}")
    if not signal.is_floating_point():
        raise InvalidInputError(f"signal must be a floating-point tensor (yields are real numbers), not {signal.dtype}")
    return signal


def _rows(signal: torch.Tensor, n: int) -> np.ndarray:
    if signal.shape[-1:] != (n,):
        raise InvalidInputError(f"signal has shape {tuple(signal.shape)}; its last dimension must be the {n} bins of the named samples")
    return signal.detach().to("cpu", torch.float64).reshape(-1, n).numpy()


def _like(values: np.ndarray, signal: torch.Tensor, shape) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values)).to(device=signal.device, dtype=signal.dtype).reshape(shape)


def _data(model: Model, data) -> list:
    if data is None:
        return model.observed  # floats already: no copy per training step
    return np.asarray(data, dtype=np.float64).ravel().tolist()


def _in_place(t: torch.Tensor):
    return (t.data_ptr(), t.numel())


class _NLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, signal, pars, session, data):
        n, batch = session.n_signal, signal.shape[:-1]
        shared = pars.dim() == 1
        if not shared and pars.shape[:-1] != batch:
            raise InvalidInputError(f"pars has shape {tuple(pars.shape)}: give one row ({pars.shape[-1]},) for all signals, or one per signal {(*batch, pars.shape[-1])}")
        if signal.shape[-1:] != (n,):
            raise InvalidInputError(f"signal has shape {tuple(signal.shape)}; its last dimension must be the {n} bins of the named samples")
        ctx.shared, ctx.pars_device, ctx.pars_dtype = shared, pars.device, pars.dtype
        if session.device == "cuda":
            # In place on the GPU: float64 copies only where the dtype or layout differ.
            s = signal.detach().to(torch.float64).contiguous().reshape(-1, n)
            p = pars.detach().to(device=signal.device, dtype=torch.float64).contiguous().reshape(-1, pars.shape[-1])
            d_signal, d_pars = torch.empty_like(s), torch.empty((s.shape[0], p.shape[-1]), dtype=torch.float64, device=s.device)
            value = torch.empty(s.shape[0], dtype=torch.float64, device=s.device)
            stream = torch.cuda.current_stream(s.device)
            if stream.cuda_stream != 0:
                # The engine queues its work on the legacy default stream, which orders itself
                # only after blocking streams: wait for the work that produced the inputs, and
                # make this stream wait for the engine's.
                stream.synchronize()
            session.nll_in_place(_in_place(s), _in_place(p), data, _in_place(value), _in_place(d_signal), _in_place(d_pars))
            if stream.cuda_stream != 0:
                torch.cuda.default_stream(s.device).synchronize()
            ctx.save_for_backward(d_signal.to(signal.dtype).reshape(signal.shape), d_pars.to(signal.dtype).reshape(*batch, pars.shape[-1]))
            return value.to(signal.dtype).reshape(batch)
        p = pars.detach().to("cpu", torch.float64).reshape(-1, pars.shape[-1]).numpy()
        value, d_signal, d_pars = session.nll(_rows(signal, n), p, data)
        # Both gradients live on the signal's device, where the incoming gradient is.
        ctx.save_for_backward(_like(d_signal, signal, signal.shape), _like(d_pars, signal, (*batch, pars.shape[-1])))
        return _like(value, signal, batch)

    @staticmethod
    def backward(ctx, grad):
        d_signal, d_pars = ctx.saved_tensors
        g = grad.unsqueeze(-1)
        grad_pars = None
        if ctx.needs_input_grad[1]:
            grad_pars = g * d_pars
            if ctx.shared:
                grad_pars = grad_pars.reshape(-1, d_pars.shape[-1]).sum(0)
            grad_pars = grad_pars.to(device=ctx.pars_device, dtype=ctx.pars_dtype)
        return g * d_signal, grad_pars, None, None


def nll(model: Model, signal: torch.Tensor, samples: Samples, pars: Optional[torch.Tensor] = None, data=None) -> torch.Tensor:
    """NLL (−log L, pyhf's ``-logpdf``) with ``signal`` as the named samples' yields, at ``pars``
    (the suggested init when None; a tensor that may require grad, shared or one row per signal)
    on ``data`` (full data, main then aux; the workspace's observations when None)."""
    signal = _tensor(signal)
    session = _session(model, samples, _engine_device(signal))
    if pars is None:
        inits: Dict[Any, torch.Tensor] = model.__dict__.setdefault("_suggested_init", {})
        key = (signal.dtype, signal.device)
        if key not in inits:
            inits[key] = torch.tensor(model.config.suggested_init(), dtype=signal.dtype, device=signal.device)
        pars = inits[key]
    return _NLL.apply(signal, pars, session, _data(model, data))


class _Profiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, signal, session, stat, mu, data, asimov_pars, sqrt):
        q, dq = session.profiled(_rows(signal, session.n_signal), stat, float(mu), data, asimov_pars)
        if sqrt:
            # Z = √q, dZ = dq / (2Z); 0 where q is 0 (a clipped statistic has no gradient).
            z = np.sqrt(np.maximum(q, 0.0))
            dq = np.where(z[:, None] > 0, dq / (2 * np.where(z > 0, z, 1.0))[:, None], 0.0)
            q = z
        ctx.save_for_backward(_like(dq, signal, signal.shape))
        return _like(q, signal, signal.shape[:-1])

    @staticmethod
    def backward(ctx, grad):
        (dq,) = ctx.saved_tensors
        return grad.unsqueeze(-1) * dq, None, None, None, None, None, None


def _asimov_pars(model: Model, mu: float) -> list:
    pars = list(model.config.suggested_init())
    pars[model.config.poi_index] = float(mu)
    return pars


def _profiled(model, signal, samples, stat, mu, data, asimov, sqrt):
    signal = _tensor(signal)
    # One row fits on the host; a batch of a CUDA tensor fits on the GPU's device optimizer.
    session = _session(model, samples, _engine_device(signal))
    if asimov:
        return _Profiled.apply(signal, session, stat, mu, None, _asimov_pars(model, 1.0 if stat == "q0" else 0.0), sqrt)
    return _Profiled.apply(signal, session, stat, mu, _data(model, data), None, sqrt)


def q0(model: Model, signal: torch.Tensor, samples: Samples, data=None, asimov: bool = False) -> torch.Tensor:
    """The discovery statistic q0 (pyhf's ``test_statistics.q0``), all nuisance parameters
    profiled, on the observed ``data`` — or, with ``asimov=True``, on the Asimov data of the model
    with this signal at the suggested parameters and μ = 1 (they move with the signal)."""
    return _profiled(model, signal, samples, "q0", 0.0, data, asimov, False)


def qmu(model: Model, signal: torch.Tensor, samples: Samples, mu: float = 1.0, data=None, tilde: bool = True, asimov: bool = False) -> torch.Tensor:
    """The upper-limit statistic q̃μ (``tilde=True``, pyhf's ``qmu_tilde``) or qμ at ``mu``;
    ``asimov=True`` uses the background-only Asimov data (μ = 0) of the model with this signal."""
    return _profiled(model, signal, samples, "qtilde" if tilde else "q", mu, data, asimov, False)


def z0(model: Model, signal: torch.Tensor, samples: Samples, data=None, asimov: bool = True) -> torch.Tensor:
    """The discovery significance Z0 = √q0: by default the expected one (Z_A, on the Asimov data
    at μ = 1 that move with the signal), with ``asimov=False`` on the observed ``data``."""
    return _profiled(model, signal, samples, "q0", 0.0, data, asimov, True)


class SignificanceLoss(torch.nn.Module):
    """−Z (the expected discovery significance by default) as a loss of signal yields."""

    def __init__(self, model: Model, samples: Samples, asimov: bool = True, data=None):
        super().__init__()
        self.model, self.samples, self.asimov, self.data = model, list(samples), asimov, data

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return -z0(self.model, signal, self.samples, data=self.data, asimov=self.asimov)


class SoftHistogram(torch.nn.Module):
    """Differentiable binning of per-event values (e.g. a network's output) into ``edges``:
    each event adds ``weight · (K((x − lo)/h) − K((x − hi)/h))`` to bin [lo, hi), with K the
    logistic function (``kernel="sigmoid"``) or the normal CDF (``kernel="kde"``) and h the
    ``bandwidth``. As h → 0 it is the ordinary histogram."""

    def __init__(self, edges: Sequence[float], bandwidth: float = 0.05, kernel: str = "sigmoid"):
        super().__init__()
        edges_t = torch.as_tensor(edges, dtype=torch.float64)
        if edges_t.ndim != 1 or len(edges_t) < 2 or not bool(torch.all(edges_t[1:] > edges_t[:-1])):
            raise InvalidInputError("edges must be at least two increasing numbers")
        if not bandwidth > 0:
            raise InvalidInputError(f"bandwidth must be positive, not {bandwidth}")
        if kernel not in ("sigmoid", "kde"):
            raise InvalidInputError(f"kernel must be 'sigmoid' or 'kde', not {kernel!r}")
        self.register_buffer("edges", edges_t)
        self.bandwidth, self.kernel = float(bandwidth), kernel

    def forward(self, values: torch.Tensor, weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        # Integer values (event counts, categories) are promoted to a float dtype: cast to their
        # dtype, the edges [0, .5, 1, …] would be truncated to integers.
        dtype = values.dtype if values.dtype.is_floating_point else torch.get_default_dtype()
        values = values.to(dtype)
        if weights is not None and not weights.dtype.is_floating_point:
            weights = weights.to(dtype)
        edges = self.edges.to(device=values.device, dtype=dtype)
        u = (values.unsqueeze(-1) - edges) / self.bandwidth
        cdf = torch.sigmoid(u) if self.kernel == "sigmoid" else 0.5 * (1 + torch.erf(u / 2**0.5))
        per_bin = cdf[..., :-1] - cdf[..., 1:]
        if weights is not None:
            per_bin = per_bin * weights.unsqueeze(-1)
        return per_bin.sum(-2)
