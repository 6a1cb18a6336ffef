//! Bounded quasi-Newton minimization: L-BFGS-B as an ask/tell state machine, and a driver for
//! the common case of an objective that can be called directly.

mod lbfgsb;

pub use lbfgsb::{Lbfgsb, LbfgsbOptions, Termination};

/// Minimize `objective` (value and gradient into the slice) from `x0` in the box.
pub fn minimize(
    mut objective: impl FnMut(&[f64], &mut [f64]) -> f64,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    options: LbfgsbOptions,
) -> Lbfgsb {
    let mut state = Lbfgsb::new(x0, lower, upper, options);
    let mut g = vec![0.0; x0.len()];
    while let Some(x) = state.ask() {
        let x = x.to_vec();
        let f = objective(&x, &mut g);
        state.tell(f, &g);
    }
    state
}
