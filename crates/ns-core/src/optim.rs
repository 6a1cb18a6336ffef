//! What the host optimizer (`ns-inference`'s L-BFGS-B) and the device optimizer (the CUDA
//! `fit_lbfgsb` kernel) share: the options, the line-search constants and the termination
//! reasons with their integer codes. The kernels' `#define`s are generated from these
//! (`ns_compute::cuda::abi`), so the two cannot drift.

/// Options of the L-BFGS-B optimizer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LbfgsbOptions {
    /// Number of correction pairs kept (m).
    pub memory: usize,
    /// Converged when ‖P(x − g) − x‖∞ ≤ `pg_tol` (projected gradient of the objective).
    pub pg_tol: f64,
    pub max_iterations: usize,
    pub max_evaluations: usize,
}

/// The convergence tolerance of every fit unless a call sets one: the projected gradient of
/// twice_nll (pyhf's scipy default is of the same order). Written here only.
pub const DEFAULT_PG_TOL: f64 = 1e-6;

impl Default for LbfgsbOptions {
    fn default() -> Self {
        LbfgsbOptions {
            memory: 10,
            pg_tol: DEFAULT_PG_TOL,
            max_iterations: 2000,
            max_evaluations: 20000,
        }
    }
}

/// Sufficient-decrease constant c₁ of the strong Wolfe conditions.
pub const WOLFE_C1: f64 = 1e-4;
/// Curvature constant c₂ of the strong Wolfe conditions.
pub const WOLFE_C2: f64 = 0.9;
/// δ of Hager & Zhang's approximate Wolfe condition.
pub const HZ_DELTA: f64 = 0.1;
/// Most evaluations one line search may take.
pub const MAX_LINE_SEARCH_EVALUATIONS: usize = 30;

/// Iterations in a row that do not lower the best f seen beyond the objective's declared noise
/// after which a run stops (its arithmetic resolves no further progress; the caller judges the
/// end point). Measured against the best f, not the previous one: accepted steps may raise f
/// within the noise, and a noisy f would otherwise keep restarting the count.
pub const FLAT_ITERATIONS: usize = 3;

/// Hager & Zhang's ε as a multiple of the objective's declared rounding noise: CG_DESCENT's
/// default allows f to rise by a few orders of magnitude more than a single rounding.
pub const SLOPE_WINDOW_PER_NOISE: f64 = 100.0;

/// Why the optimizer stopped. The discriminants are the codes the device optimizer writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Termination {
    /// The projected gradient is below tolerance.
    Converged = 0,
    MaxIterations = 1,
    MaxEvaluations = 2,
    /// No step along a descent direction decreases the objective (even with the memory reset):
    /// the objective is flat to working precision, or not smooth here.
    LineSearchFailed = 3,
    /// The objective or gradient is not finite at the starting point.
    NonFiniteStart = 4,
    /// The optimizer could not go further, and the projected gradient is below tolerance in the
    /// curvature-scaled parameters: parameters whose curvature is huge (a shapesys with τ ~ 10¹²,
    /// counts of 10⁹) rest at the rounding floor of their gradient, far from where a step could
    /// lower the objective (set by the host after the optimizer stops; never a device code).
    ConvergedScaled = 5,
    /// The optimizer could not go further at a kink of the likelihood (a sample's yield clipped
    /// at zero as ROOT clips it, a yield raised to a floor, a piecewise interpolation), where no
    /// gradient vanishes: gradients sampled around the end
    /// point have a convex combination below tolerance (Clarke stationarity), so no direction
    /// lowers the objective (set by the host; never a device code).
    ConvergedKink = 6,
    /// The optimizer could not go further, and fits of the same data from independent starts
    /// stopped at the same twice_nll (within [`REPEATED_END_ATOL`]): the minimum of a likelihood
    /// whose kinks or nearly flat directions stop every descent short of the gradient test (toy
    /// fits of published likelihoods; set by the host, never a device code).
    ConvergedRepeated = 7,
    /// The optimizer could not go further against a wall of the likelihood along single
    /// parameters (a sample's normsys product crossing zero at 10¹³ events per unit, where ROOT
    /// clips it): with those parameters held, the others passed the gradient test, and a step
    /// of 10⁻⁹ either way along each held one lowers nothing (set by the host, never a device
    /// code).
    ConvergedPinned = 8,
}

/// How close, in twice_nll, the ends of fits from independent starts must be for their common
/// end to be the minimum ([`Termination::ConvergedRepeated`]): a tenth of the smallest difference
/// of test statistics that results report.
pub const REPEATED_END_ATOL: f64 = 1e-7;

impl Termination {
    /// Every reason, in code order.
    pub const ALL: [Termination; 9] = [
        Termination::Converged,
        Termination::MaxIterations,
        Termination::MaxEvaluations,
        Termination::LineSearchFailed,
        Termination::NonFiniteStart,
        Termination::ConvergedScaled,
        Termination::ConvergedKink,
        Termination::ConvergedRepeated,
        Termination::ConvergedPinned,
    ];

    /// Whether the fit reached the minimum (to tolerance).
    pub fn is_converged(self) -> bool {
        matches!(
            self,
            Termination::Converged
                | Termination::ConvergedScaled
                | Termination::ConvergedKink
                | Termination::ConvergedRepeated
                | Termination::ConvergedPinned
        )
    }

    /// The integer code the device optimizer writes.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The reason of a device code; `None` for a code no reason has.
    pub fn from_code(code: i32) -> Option<Self> {
        Termination::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The reason of a code the device optimizer wrote: one of its own (0–4); anything else —
    /// `ConvergedScaled`, `ConvergedKink`, `ConvergedRepeated` and `ConvergedPinned` are the
    /// host's verdicts, never
    /// the kernel's — is `None`.
    pub fn from_device_code(code: i32) -> Option<Self> {
        Termination::from_code(code).filter(|t| t.code() <= Termination::NonFiniteStart.code())
    }

    /// The name of the code's `#define` in the kernels (`NS_` + this).
    pub fn constant_name(self) -> &'static str {
        match self {
            Termination::Converged => "CONVERGED",
            Termination::MaxIterations => "MAX_ITERATIONS",
            Termination::MaxEvaluations => "MAX_EVALUATIONS",
            Termination::LineSearchFailed => "LINE_SEARCH_FAILED",
            Termination::NonFiniteStart => "NON_FINITE_START",
            Termination::ConvergedScaled => "CONVERGED_SCALED",
            Termination::ConvergedKink => "CONVERGED_KINK",
            Termination::ConvergedRepeated => "CONVERGED_REPEATED",
            Termination::ConvergedPinned => "CONVERGED_PINNED",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Termination::Converged => "converged: projected gradient below tolerance",
            Termination::MaxIterations => "maximum number of iterations reached",
            Termination::MaxEvaluations => "maximum number of function evaluations reached",
            Termination::LineSearchFailed => "line search could not decrease the objective further",
            Termination::NonFiniteStart => {
                "objective or gradient is not finite at the starting point"
            }
            Termination::ConvergedScaled => {
                "converged: projected gradient below tolerance in curvature-scaled parameters \
                 (the optimizer stopped at its arithmetic's rounding floor: stiff parameters in \
                 f64, an f32 fit checked in f64)"
            }
            Termination::ConvergedKink => {
                "converged at a kink of the likelihood: a convex combination of the gradients \
                 around the end point is below tolerance (a yield clipped at zero or raised to a floor)"
            }
            Termination::ConvergedRepeated => {
                "converged: fits from independent starts stopped at the same twice_nll, where \
                 kinks or nearly flat directions of the likelihood stop the optimizer short of \
                 its gradient test"
            }
            Termination::ConvergedPinned => {
                "converged against a wall of the likelihood: parameters where a step of 1e-9 \
                 either way lowers nothing (a sample's yield clipped at zero that turns steeply \
                 the other way) held, the others pass the gradient test"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for t in Termination::ALL {
            assert_eq!(Termination::from_code(t.code()), Some(t));
        }
        assert_eq!(Termination::from_code(-1), None);
        assert_eq!(Termination::from_code(9), None);
        for host_only in 5..=8 {
            assert_eq!(Termination::from_device_code(host_only), None);
        }
        assert_eq!(
            Termination::from_device_code(0),
            Some(Termination::Converged)
        );
    }
}
