//! Interpolation codes of HistFactory, exactly as pyhf 0.7.6 implements them, with derivatives.
//!
//! Normsys codes return a multiplicative factor, histosys codes an additive delta to the nominal
//! yield. At a kink (α = 0 for code0/code1) the derivative takes the α ≤ 0 branch, as the value
//! does in pyhf (`α > 0` selects the up variation). Code2 is discontinuous at ±1 in pyhf
//! (below −1 it is `(b − 2a)·α`, not `(b − 2a)(α + 1)`); it is reproduced as is.

use std::fmt;

/// Interpolation code for `normsys` modifiers (multiplicative).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormsysCode {
    /// Piecewise exponential: `hi^α` for α > 0, `lo^(−α)` otherwise.
    Code1,
    /// Exponential outside |α| ≥ 1, a sixth-order polynomial inside (pyhf's default).
    Code4,
    /// CMS Combine's `AsymPow` (its lnN): exp(α·L(α)), with L = ln hi for α ≥ ½, −ln lo for
    /// α ≤ −½, and inside A + B·s(2α) (A, B the half difference and half sum of ln hi and
    /// ln lo, s the odd quintic (3x⁵ − 10x³ + 15x)/8). A symmetric κ (lo = 1/κ) is κ^α.
    AsymPow,
}

/// The odd quintic of Combine's smooth interpolations, and its first two derivatives.
fn smooth_step(x: f64) -> (f64, f64, f64) {
    let x2 = x * x;
    (
        x * (x2 * (3.0 * x2 - 10.0) + 15.0) / 8.0,
        15.0 * (x2 - 1.0) * (x2 - 1.0) / 8.0,
        7.5 * x * (x2 - 1.0),
    )
}

/// Interpolation code for `histosys` modifiers (additive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistosysCode {
    /// Piecewise linear.
    Code0,
    /// Quadratic inside |α| ≤ 1, linear outside (discontinuous at ±1, as in pyhf).
    Code2,
    /// Linear outside |α| > 1, a sixth-order polynomial inside (pyhf's default).
    Code4p,
}

/// The interpolation codes of a model: one per modifier type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InterpCodes {
    pub normsys: NormsysCode,
    pub histosys: HistosysCode,
}

impl Default for InterpCodes {
    /// pyhf's `Workspace.model()` default: normsys code4, histosys code4p.
    fn default() -> Self {
        InterpCodes {
            normsys: NormsysCode::Code4,
            histosys: HistosysCode::Code4p,
        }
    }
}

impl InterpCodes {
    /// The classic ROOT HistFactory pair: normsys code1, histosys code0.
    pub fn legacy() -> Self {
        InterpCodes {
            normsys: NormsysCode::Code1,
            histosys: HistosysCode::Code0,
        }
    }
}

impl NormsysCode {
    /// Parse the pyhf spelling (`code1`, `code4`); an error names the codes pyhf accepts for
    /// normsys.
    pub fn from_name(name: &str) -> crate::Result<Self> {
        match name.trim() {
            "code1" => Ok(NormsysCode::Code1),
            "code4" => Ok(NormsysCode::Code4),
            _ => Err(crate::Error::InvalidInput(format!(
                "normsys interpolation '{name}' is not one pyhf accepts (code1, code4)"
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            NormsysCode::Code1 => "code1",
            NormsysCode::Code4 => "code4",
            NormsysCode::AsymPow => "asympow",
        }
    }
}

impl HistosysCode {
    /// Parse the pyhf spelling (`code0`, `code2`, `code4p`); an error names the codes pyhf accepts
    /// for histosys.
    pub fn from_name(name: &str) -> crate::Result<Self> {
        match name.trim() {
            "code0" => Ok(HistosysCode::Code0),
            "code2" => Ok(HistosysCode::Code2),
            "code4p" => Ok(HistosysCode::Code4p),
            _ => Err(crate::Error::InvalidInput(format!(
                "histosys interpolation '{name}' is not one pyhf accepts (code0, code2, code4p)"
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            HistosysCode::Code0 => "code0",
            HistosysCode::Code2 => "code2",
            HistosysCode::Code4p => "code4p",
        }
    }
}

impl fmt::Display for InterpCodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "normsys={},histosys={}",
            self.normsys.name(),
            self.histosys.name()
        )
    }
}

/// Precomputed constants of one normsys term (a `hi`/`lo` pair of factors).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormsysTerm {
    pub ln_hi: f64,
    pub ln_lo: f64,
    /// Code4 polynomial coefficients a₁..a₆ (zero for code1).
    pub poly: [f64; 6],
}

/// pyhf's code4 inverse matrix at α₀ = 1 (`pyhf/interpolators/code4.py`).
const CODE4_A_INVERSE: [[f64; 6]; 6] = [
    [
        15.0 / 16.0,
        -15.0 / 16.0,
        -7.0 / 16.0,
        -7.0 / 16.0,
        1.0 / 16.0,
        -1.0 / 16.0,
    ],
    [
        3.0 / 2.0,
        3.0 / 2.0,
        -9.0 / 16.0,
        9.0 / 16.0,
        1.0 / 16.0,
        1.0 / 16.0,
    ],
    [
        -5.0 / 8.0,
        5.0 / 8.0,
        5.0 / 8.0,
        5.0 / 8.0,
        -1.0 / 8.0,
        1.0 / 8.0,
    ],
    [
        -3.0 / 2.0,
        -3.0 / 2.0,
        7.0 / 8.0,
        -7.0 / 8.0,
        -1.0 / 8.0,
        -1.0 / 8.0,
    ],
    [
        3.0 / 16.0,
        -3.0 / 16.0,
        -3.0 / 16.0,
        -3.0 / 16.0,
        1.0 / 16.0,
        -1.0 / 16.0,
    ],
    [
        1.0 / 2.0,
        1.0 / 2.0,
        -5.0 / 16.0,
        5.0 / 16.0,
        1.0 / 16.0,
        1.0 / 16.0,
    ],
];

impl NormsysTerm {
    /// Precompute a normsys term from its `hi` and `lo` factors (relative to a nominal of 1).
    pub fn new(code: NormsysCode, hi: f64, lo: f64) -> Self {
        let (ln_hi, ln_lo) = (hi.ln(), lo.ln());
        let mut poly = [0.0; 6];
        if code == NormsysCode::Code4 {
            let b = [
                hi - 1.0,
                lo - 1.0,
                ln_hi * hi,
                -ln_lo * lo,
                ln_hi * ln_hi * hi,
                ln_lo * ln_lo * lo,
            ];
            for (coef, row) in poly.iter_mut().zip(CODE4_A_INVERSE.iter()) {
                *coef = row.iter().zip(b.iter()).map(|(a, b)| a * b).sum();
            }
        }
        NormsysTerm { ln_hi, ln_lo, poly }
    }

    /// The factor and its derivative with respect to α.
    #[inline]
    pub fn factor_and_derivative(&self, code: NormsysCode, alpha: f64) -> (f64, f64) {
        let exp_branch = |alpha: f64| {
            if alpha >= 0.0 {
                let f = (alpha * self.ln_hi).exp();
                (f, f * self.ln_hi)
            } else {
                let f = (-alpha * self.ln_lo).exp();
                (f, -f * self.ln_lo)
            }
        };
        match code {
            NormsysCode::Code1 => exp_branch(alpha),
            NormsysCode::AsymPow if alpha.abs() >= 0.5 => exp_branch(alpha),
            NormsysCode::AsymPow => {
                let (log, log_slope, _) = self.asympow_log(alpha);
                let f = log.exp();
                (f, f * log_slope)
            }
            NormsysCode::Code4 => {
                if alpha >= 1.0 || alpha <= -1.0 {
                    exp_branch(alpha)
                } else {
                    let p = &self.poly;
                    let value = 1.0
                        + alpha
                            * (p[0]
                                + alpha
                                    * (p[1]
                                        + alpha
                                            * (p[2]
                                                + alpha * (p[3] + alpha * (p[4] + alpha * p[5])))));
                    let slope = p[0]
                        + alpha
                            * (2.0 * p[1]
                                + alpha
                                    * (3.0 * p[2]
                                        + alpha
                                            * (4.0 * p[3]
                                                + alpha * (5.0 * p[4] + alpha * 6.0 * p[5]))));
                    (value, slope)
                }
            }
        }
    }
}

impl NormsysTerm {
    /// ln f of [`NormsysCode::AsymPow`] inside |α| < ½ and its first two derivatives in α.
    pub fn asympow_log(&self, alpha: f64) -> (f64, f64, f64) {
        let (a, b) = (
            0.5 * (self.ln_hi - self.ln_lo),
            0.5 * (self.ln_hi + self.ln_lo),
        );
        let (s, ds, dds) = smooth_step(2.0 * alpha);
        let log_kappa = a + b * s;
        (
            alpha * log_kappa,
            log_kappa + 2.0 * alpha * b * ds,
            4.0 * b * ds + 4.0 * alpha * b * dds,
        )
    }
}

/// Every histosys code is linear in the per-bin differences `up = hi − nominal` and
/// `down = nominal − lo`: `Δ = w_up·up + w_down·down` and `dΔ/dα = s_up·up + s_down·down`.
/// The four weights depend on α only, so they are computed once per modifier, not per bin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistosysWeights {
    pub w_up: f64,
    pub w_down: f64,
    pub s_up: f64,
    pub s_down: f64,
}

impl HistosysWeights {
    /// Code 0 here, like normsys code 1, has a kink at α = 0 (the branches meet there with
    /// different slopes); its derivative at 0 is the right-hand one (the α ≥ 0 branch) — what
    /// pyhf's default numpy backend gives its optimizer through SciPy's forward differences. From
    /// the usual start at α = 0 a fit then descends on pyhf's side: the pyhf validation model
    /// `2bin_2channel_coupledhistosys` with the legacy codes has a minimum on each side, and
    /// pyhf's (CLs 0.0797) is the deeper one, 1.0 lower in twice_nll.
    #[inline]
    pub fn new(code: HistosysCode, alpha: f64) -> Self {
        let w = |w_up, w_down, s_up, s_down| HistosysWeights {
            w_up,
            w_down,
            s_up,
            s_down,
        };
        match code {
            HistosysCode::Code0 => {
                if alpha >= 0.0 {
                    w(alpha, 0.0, 1.0, 0.0)
                } else {
                    w(0.0, alpha, 0.0, 1.0)
                }
            }
            // a = (up − down)/2, b = (up + down)/2.
            HistosysCode::Code2 => {
                if alpha > 1.0 {
                    w(1.5 * (alpha - 1.0), -0.5 * (alpha - 1.0), 1.5, -0.5)
                } else if alpha >= -1.0 {
                    let (q, l) = (0.5 * alpha * alpha, 0.5 * alpha);
                    w(q + l, l - q, alpha + 0.5, 0.5 - alpha)
                } else {
                    w(-0.5 * alpha, 1.5 * alpha, -0.5, 1.5)
                }
            }
            // S = (up + down)/2, A = (up − down)/16; Δ = α²(3α⁴ − 10α² + 15)·A + α·S inside ±1.
            HistosysCode::Code4p => {
                if alpha > 1.0 {
                    w(alpha, 0.0, 1.0, 0.0)
                } else if alpha < -1.0 {
                    w(0.0, alpha, 0.0, 1.0)
                } else {
                    let a2 = alpha * alpha;
                    let poly = a2 * (a2 * (3.0 * a2 - 10.0) + 15.0) * 0.0625;
                    let dpoly = alpha * (a2 * (18.0 * a2 - 40.0) + 30.0) * 0.0625;
                    w(
                        poly + 0.5 * alpha,
                        0.5 * alpha - poly,
                        dpoly + 0.5,
                        0.5 - dpoly,
                    )
                }
            }
        }
    }

    /// d²w_up/dα² and d²w_down/dα² at `alpha` (0 on the linear pieces; at the kinks of code 0
    /// and the steps of code 2, the side [`new`](Self::new) takes).
    #[inline]
    pub fn curvature(code: HistosysCode, alpha: f64) -> (f64, f64) {
        match code {
            HistosysCode::Code0 => (0.0, 0.0),
            HistosysCode::Code2 if (-1.0..=1.0).contains(&alpha) => (1.0, -1.0),
            HistosysCode::Code4p if alpha.abs() <= 1.0 => {
                let a2 = alpha * alpha;
                let c = (a2 * (90.0 * a2 - 120.0) + 30.0) * 0.0625;
                (c, -c)
            }
            HistosysCode::Code2 | HistosysCode::Code4p => (0.0, 0.0),
        }
    }

    /// The delta and its derivative for one bin.
    #[inline]
    pub fn apply(&self, up: f64, down: f64) -> (f64, f64) {
        (
            self.w_up * up + self.w_down * down,
            self.s_up * up + self.s_down * down,
        )
    }
}

/// The additive histosys delta and its derivative with respect to α for one bin.
#[inline]
pub fn histosys_delta_and_derivative(
    code: HistosysCode,
    alpha: f64,
    up: f64,
    down: f64,
) -> (f64, f64) {
    HistosysWeights::new(code, alpha).apply(up, down)
}
