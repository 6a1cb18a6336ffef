//! L-BFGS-B on classic bounded problems.

use ns_inference::optimizer::{LbfgsbOptions, Termination, minimize};

fn tight() -> LbfgsbOptions {
    LbfgsbOptions {
        pg_tol: 1e-9,
        ..Default::default()
    }
}

fn rosenbrock(x: &[f64], g: &mut [f64]) -> f64 {
    let n = x.len();
    let mut f = 0.0;
    g.fill(0.0);
    for i in 0..n - 1 {
        let a = x[i + 1] - x[i] * x[i];
        let b = 1.0 - x[i];
        f += 100.0 * a * a + b * b;
        g[i] += -400.0 * x[i] * a - 2.0 * b;
        g[i + 1] += 200.0 * a;
    }
    f
}

#[test]
fn rosenbrock_unconstrained_minimum_inside_the_box() {
    let n = 10;
    let r = minimize(
        rosenbrock,
        &vec![-1.2; n],
        &vec![-5.0; n],
        &vec![5.0; n],
        tight(),
    );
    assert_eq!(
        r.termination(),
        Some(Termination::Converged),
        "{:?}",
        r.termination()
    );
    for &x in r.x() {
        assert!((x - 1.0).abs() < 1e-6, "{:?}", r.x());
    }
}

#[test]
fn rosenbrock_with_active_upper_bounds() {
    // With x ≤ 0.5 the minimum of the 2-d Rosenbrock has x₀ = 0.5 on the bound and x₁ = 0.25.
    let r = minimize(
        rosenbrock,
        &[-1.2, 1.0],
        &[-2.0, -2.0],
        &[0.5, 2.0],
        tight(),
    );
    assert_eq!(r.termination(), Some(Termination::Converged));
    assert_eq!(r.x()[0], 0.5);
    assert!((r.x()[1] - 0.25).abs() < 1e-8, "{:?}", r.x());
}

#[test]
fn quadratic_whose_minimum_sits_on_a_bound() {
    // f = Σ (x_i − c_i)² with c outside the box: the solution is the projection of c.
    let c = [3.0, -2.0, 0.5, 10.0];
    let (lo, hi) = ([0.0; 4], [1.0; 4]);
    let r = minimize(
        |x, g| {
            let mut f = 0.0;
            for i in 0..4 {
                f += (x[i] - c[i]).powi(2);
                g[i] = 2.0 * (x[i] - c[i]);
            }
            f
        },
        &[0.5; 4],
        &lo,
        &hi,
        tight(),
    );
    assert_eq!(r.termination(), Some(Termination::Converged));
    assert_eq!(r.x(), &[1.0, 0.0, 0.5, 1.0]);
}

#[test]
fn non_finite_regions_are_avoided_not_fatal() {
    // log barrier: undefined for x ≤ 0; minimum at x = 1.
    let r = minimize(
        |x, g| {
            if x[0] <= 0.0 {
                g[0] = f64::NAN;
                return f64::NAN;
            }
            g[0] = 1.0 - 1.0 / x[0];
            x[0] - x[0].ln()
        },
        &[5.0],
        &[-10.0],
        &[10.0],
        tight(),
    );
    assert_eq!(r.termination(), Some(Termination::Converged));
    assert!((r.x()[0] - 1.0).abs() < 1e-8);
}

#[test]
fn ask_tell_gives_the_same_result_as_the_driver() {
    use ns_inference::optimizer::Lbfgsb;
    let mut state = Lbfgsb::new(&[-1.2, 1.0], &[-5.0, -5.0], &[5.0, 5.0], tight());
    let mut g = vec![0.0; 2];
    while let Some(x) = state.ask() {
        let x = x.to_vec();
        let f = rosenbrock(&x, &mut g);
        state.tell(f, &g);
    }
    let driver = minimize(
        rosenbrock,
        &[-1.2, 1.0],
        &[-5.0, -5.0],
        &[5.0, 5.0],
        tight(),
    );
    assert_eq!(state.x(), driver.x());
    assert_eq!(state.evaluations(), driver.evaluations());
}
