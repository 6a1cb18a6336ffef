"""What a user would otherwise write for the unbinned Gauss + exponential NLL on a GPU:
jax.jit(jax.value_and_grad(nll)) and torch autograd, in f64, on the same events as
`unbinned_bench` (normalised over [0, 10]). Median time per NLL + gradient call, events
resident on the device.

    python bench/unbinned_jax.py [EVENTS ...]
"""

import sys
import time

import numpy as np


def events(n):
    rng = np.random.default_rng(1)
    x = np.where(np.arange(n) % 10 == 0, np.clip(rng.normal(5, 1, n), 0, 10),
                 -np.log(1 - rng.uniform(size=n) * (1 - np.exp(-3.0))) / 0.3)
    return x


def timed(f, repeats=20):
    f()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def jax_time(x_np, theta):
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import erf

    jax.config.update("jax_enable_x64", True)
    x = jax.device_put(jnp.asarray(x_np))

    def nll(p):
        mean, sigma, c, nsig, nbkg = p
        s2 = sigma * jnp.sqrt(2.0)
        ig = sigma * jnp.sqrt(jnp.pi / 2) * (erf((10 - mean) / s2) - erf((0 - mean) / s2))
        ie = -jnp.expm1(-c * 10.0) / c
        dens = nsig * jnp.exp(-0.5 * ((x - mean) / sigma) ** 2) / ig + nbkg * jnp.exp(-c * x) / ie
        return nsig + nbkg - jnp.sum(jnp.log(dens))

    f = jax.jit(jax.value_and_grad(nll))
    p = jnp.asarray(theta)
    return timed(lambda: jax.block_until_ready(f(p)))


def torch_time(x_np, theta):
    import torch

    x = torch.as_tensor(x_np, device="cuda", dtype=torch.float64)

    def run():
        p = torch.tensor(theta, device="cuda", dtype=torch.float64, requires_grad=True)
        mean, sigma, c, nsig, nbkg = p
        s2 = sigma * 2 ** 0.5
        ig = sigma * (torch.pi / 2) ** 0.5 * (torch.erf((10 - mean) / s2) - torch.erf((0 - mean) / s2))
        ie = -torch.expm1(-c * 10.0) / c
        dens = nsig * torch.exp(-0.5 * ((x - mean) / sigma) ** 2) / ig + nbkg * torch.exp(-c * x) / ie
        v = nsig + nbkg - torch.log(dens).sum()
        v.backward()
        torch.cuda.synchronize()

    return timed(run)


def main(sizes):
    print("| events | jax.jit(value_and_grad) f64 | torch autograd f64 |")
    print("|---|---|---|")
    for n in sizes:
        x = events(n)
        theta = [4.8, 1.1, 0.25, 0.12 * n, 0.85 * n]
        j = jax_time(x, theta)
        try:
            t = f"{torch_time(x, theta) * 1e3:.3f} ms"
        except Exception as e:  # torch without CUDA
            t = f"n/a ({type(e).__name__})"
        print(f"| {n:.0e} | {j * 1e3:.3f} ms | {t} |")


if __name__ == "__main__":
    main([int(float(a)) for a in sys.argv[1:]] or [100_000, 1_000_000, 10_000_000])
