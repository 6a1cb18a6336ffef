"""Small normalizing flows written in PyTorch for the flow tests: an affine-coupling flow over two
observables (with its inverse, for sample.onnx), a rational-quadratic spline flow over one
(its bin search a comparison sum: torch.searchsorted does not export to ONNX), a logit-normal
flow supported on its box (normalization "unit"), and an affine flow with a context (its mean
moves with a parameter). Weights are random but seeded: the tests need fixed densities, not
trained ones."""

import math

import torch

LOG_2PI = math.log(2 * math.pi)


def std_normal_log_prob(z):
    return -0.5 * (z * z).sum(-1) - 0.5 * z.shape[-1] * LOG_2PI


class Conditioner(torch.nn.Module):
    """(log-scale, shift) of one coordinate from the other: a tanh MLP, the scale bounded."""

    def __init__(self, hidden=8):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(1, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2))

    def forward(self, x):
        out = self.net(x)
        return 0.8 * torch.tanh(out[:, 0:1]), out[:, 1:2]


class Coupling2D(torch.nn.Module):
    """x (in the box) → standardised u → two affine couplings (x₂ given x₁, then x₁ given x₂) → z."""

    def __init__(self, centre, scale, seed=1):
        super().__init__()
        torch.manual_seed(seed)
        self.register_buffer("centre", torch.tensor(centre))
        self.register_buffer("scale", torch.tensor(scale))
        self.first = Conditioner()
        self.second = Conditioner()

    def to_base(self, x):
        u = (x - self.centre) / self.scale
        logdet = -torch.log(self.scale).sum() * torch.ones_like(u[:, 0])
        s, t = self.first(u[:, 0:1])
        u2 = (u[:, 1:2] - t) * torch.exp(-s)
        logdet = logdet - s[:, 0]
        s, t = self.second(u2)
        u1 = (u[:, 0:1] - t) * torch.exp(-s)
        logdet = logdet - s[:, 0]
        return torch.cat([u1, u2], dim=1), logdet

    def forward(self, x):
        z, logdet = self.to_base(x)
        return std_normal_log_prob(z) + logdet


class Coupling2DSample(torch.nn.Module):
    """The inverse of `Coupling2D`: standard-normal z → x."""

    def __init__(self, flow):
        super().__init__()
        self.flow = flow

    def forward(self, z):
        s, t = self.flow.second(z[:, 1:2])
        u1 = z[:, 0:1] * torch.exp(s) + t
        s, t = self.flow.first(u1)
        u2 = z[:, 1:2] * torch.exp(s) + t
        return torch.cat([u1, u2], dim=1) * self.flow.scale + self.flow.centre


class Spline1D(torch.nn.Module):
    """x → u = (x − centre)/scale → a monotone rational-quadratic spline on [−B, B] (identity
    outside) → z ~ N(0, 1). Durkan et al. (2019), eqs. 4 and 5."""

    def __init__(self, centre, scale, bins=8, bound=3.0, seed=2):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.centre, self.scale, self.bound = centre, scale, bound
        widths = torch.softmax(torch.randn(bins, generator=g), 0) * 2 * bound
        heights = torch.softmax(torch.randn(bins, generator=g), 0) * 2 * bound
        derivs = torch.nn.functional.softplus(torch.randn(bins - 1, generator=g)) + 0.1
        xk = torch.cat([torch.tensor([-bound]), -bound + torch.cumsum(widths, 0)])
        yk = torch.cat([torch.tensor([-bound]), -bound + torch.cumsum(heights, 0)])
        xk[-1], yk[-1] = bound, bound
        self.register_buffer("xk", xk)
        self.register_buffer("yk", yk)
        self.register_buffer("dk", torch.cat([torch.ones(1), derivs, torch.ones(1)]))
        self.bins = bins

    def forward(self, x):
        u = ((x[:, 0] - self.centre) / self.scale)
        inside = (u > -self.bound) & (u < self.bound)
        uc = torch.clamp(u, -self.bound, self.bound)
        # The bin: how many interior knots lie at or below u (a comparison sum), one-hot.
        idx = (uc[:, None] >= self.xk[None, 1:-1]).to(u.dtype).sum(1)
        onehot = (idx[:, None] == torch.arange(self.bins, dtype=u.dtype)[None, :]).to(u.dtype)
        pick = lambda v: (onehot * v[None, :]).sum(1)  # noqa: E731
        x0, x1 = pick(self.xk[:-1]), pick(self.xk[1:])
        y0, y1 = pick(self.yk[:-1]), pick(self.yk[1:])
        d0, d1 = pick(self.dk[:-1]), pick(self.dk[1:])
        w, h = x1 - x0, y1 - y0
        s = h / w
        xi = (uc - x0) / w
        mix = xi * (1 - xi)
        denom = s + (d1 + d0 - 2 * s) * mix
        z_in = y0 + h * (s * xi * xi + d0 * mix) / denom
        dz_in = s * s * (d1 * xi * xi + 2 * s * mix + d0 * (1 - xi) ** 2) / (denom * denom)
        z = torch.where(inside, z_in, u)
        logdet = torch.where(inside, torch.log(dz_in), torch.zeros_like(u)) - math.log(self.scale)
        return -0.5 * z * z - 0.5 * LOG_2PI + logdet


class LogitNormal1D(torch.nn.Module):
    """A flow onto its box [lo, hi]: z = logit((x − lo)/(hi − lo)) ~ N(m, s). Integrates to one."""

    def __init__(self, lo, hi, m=0.3, s=0.9):
        super().__init__()
        self.lo, self.hi, self.m, self.s = lo, hi, m, s

    def forward(self, x):
        p = (x[:, 0] - self.lo) / (self.hi - self.lo)
        z = torch.log(p) - torch.log1p(-p)
        logdet = -torch.log(p) - torch.log1p(-p) - math.log(self.hi - self.lo)
        return -0.5 * ((z - self.m) / self.s) ** 2 - 0.5 * LOG_2PI - math.log(self.s) + logdet


class Affine1D(torch.nn.Module):
    """x = mean + width·z; with a context c, mean = mean0 + c (a shift parameter)."""

    def __init__(self, mean, width, conditional=False):
        super().__init__()
        self.mean, self.width, self.conditional = mean, width, conditional

    def forward(self, x, context=None):
        mean = self.mean + (context[:, 0] if self.conditional else 0.0)
        z = (x[:, 0] - mean) / self.width
        return -0.5 * z * z - 0.5 * LOG_2PI - math.log(self.width)


class Affine1DSample(torch.nn.Module):
    def __init__(self, flow):
        super().__init__()
        self.flow = flow

    def forward(self, z, context=None):
        mean = self.flow.mean + (context[:, 0:1] if self.flow.conditional else 0.0)
        return mean + self.flow.width * z
