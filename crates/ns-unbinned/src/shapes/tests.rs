use super::*;

/// A named shape with its arguments and range.
type Case = (&'static str, Shape, Vec<f64>, (f64, f64));

/// Each shape with arguments and a range, exercising its branches.
fn cases() -> Vec<Case> {
    let two = Tails::DoubleSided {
        left: true,
        right: true,
    };
    vec![
        ("gaussian", Shape::Gaussian, vec![4.0, 1.3], (0.0, 10.0)),
        (
            "gaussian far tail",
            Shape::Gaussian,
            vec![-3.0, 0.5],
            (0.0, 10.0),
        ),
        ("exponential", Shape::Exponential, vec![0.3], (1.0, 10.0)),
        (
            "exponential rising",
            Shape::Exponential,
            vec![-0.2],
            (0.0, 10.0),
        ),
        (
            "exponential flat",
            Shape::Exponential,
            vec![1e-10],
            (0.0, 10.0),
        ),
        (
            "crystal ball one-sided",
            Shape::CrystalBall(Tails::OneSided),
            vec![5.0, 1.0, 1.5, 3.0],
            (0.0, 10.0),
        ),
        (
            "crystal ball right tail",
            Shape::CrystalBall(Tails::OneSided),
            vec![5.0, 1.0, -1.2, 2.5],
            (0.0, 10.0),
        ),
        (
            "crystal ball n = 1",
            Shape::CrystalBall(Tails::OneSided),
            vec![5.0, 1.0, 1.5, 1.0],
            (0.0, 10.0),
        ),
        (
            "crystal ball two-sided",
            Shape::CrystalBall(two),
            vec![5.0, 0.8, 1.3, 1.5, 3.0, 2.0, 4.0],
            (0.0, 10.0),
        ),
        (
            "crystal ball left only",
            Shape::CrystalBall(Tails::DoubleSided {
                left: true,
                right: false,
            }),
            vec![5.0, 0.8, 0.8, 1.5, 3.0, 0.0, 0.0],
            (0.0, 10.0),
        ),
        (
            "crystal ball peak outside",
            Shape::CrystalBall(two),
            vec![12.0, 0.8, 1.3, 1.5, 3.0, 2.0, 4.0],
            (0.0, 10.0),
        ),
        ("argus", Shape::Argus, vec![5.29, -20.0, 0.5], (5.2, 5.3)),
        (
            "argus power 1.3",
            Shape::Argus,
            vec![5.29, -35.0, 1.3],
            (5.0, 5.28),
        ),
        (
            "chebychev",
            Shape::Chebychev(3),
            vec![0.1, -0.2, 0.05],
            (0.0, 10.0),
        ),
        (
            "polynomial",
            Shape::Polynomial(3),
            vec![1.0, 0.1, 0.01],
            (0.0, 10.0),
        ),
        (
            "histogram",
            Shape::Histogram(Histogram {
                lo: -5.0,
                hi: 5.0,
                contents: (1..=10).map(f64::from).collect(),
            }),
            vec![],
            (-5.0, 5.0),
        ),
    ]
}

/// ∫ g by composite Gauss–Legendre (5 points on each of `n` panels).
fn quadrature(f: impl Fn(f64) -> f64, lo: f64, hi: f64, n: usize) -> f64 {
    let nodes = [
        0.0,
        0.538469310105683,
        -0.538469310105683,
        0.906179845938664,
        -0.906179845938664,
    ];
    let weights = [
        0.568888888888889,
        0.478628670499366,
        0.478628670499366,
        0.236926885056189,
        0.236926885056189,
    ];
    let h = (hi - lo) / n as f64;
    (0..n)
        .map(|i| {
            let mid = lo + (i as f64 + 0.5) * h;
            nodes
                .iter()
                .zip(weights)
                .map(|(x, w)| w * f(mid + 0.5 * h * x))
                .sum::<f64>()
                * 0.5
                * h
        })
        .sum()
}

#[test]
fn integrals_are_the_quadrature_of_the_density() {
    for (name, shape, a, range) in cases() {
        let want = quadrature(
            |x| shape.log_density::<f64>(x, &a, range).exp(),
            range.0,
            range.1,
            20_000,
        );
        let got = shape.log_integral::<f64>(&a, range.0, range.1, range).exp();
        assert!(
            (got - want).abs() <= 1e-9 * want,
            "{name}: {got} against quadrature {want}"
        );
        // A sub-range too.
        let (l, h) = (
            range.0 + 0.3 * (range.1 - range.0),
            range.0 + 0.8 * (range.1 - range.0),
        );
        let want = quadrature(
            |x| shape.log_density::<f64>(x, &a, range).exp(),
            l,
            h,
            20_000,
        );
        let got = shape.log_integral::<f64>(&a, l, h, range).exp();
        assert!(
            (got - want).abs() <= 1e-9 * want,
            "{name} on [{l}, {h}]: {got} against {want}"
        );
    }
}

#[test]
fn gradients_are_the_finite_differences() {
    for (name, shape, a, range) in cases() {
        let mut grad = vec![0.0; MAX_ARGS];
        shape.log_norm_grad(&a, range, &mut grad);
        let xs: Vec<f64> = (0..7)
            .map(|i| range.0 + (i as f64 + 0.37) / 7.0 * (range.1 - range.0))
            .collect();
        let (mut log, mut dlog) = (vec![0.0; xs.len()], vec![0.0; xs.len() * a.len()]);
        shape.log_density_grad(&xs, &a, range, &mut log, &mut dlog);
        for j in 0..a.len() {
            if a[j] == 0.0 {
                continue; // an unused tail's argument
            }
            let h = 1e-6 * a[j].abs().max(1e-2);
            let at = |d: f64| {
                let mut b = a.clone();
                b[j] += d;
                b
            };
            let (up, down) = (at(h), at(-h));
            let numeric = (shape.log_integral::<f64>(&up, range.0, range.1, range)
                - shape.log_integral::<f64>(&down, range.0, range.1, range))
                / (2.0 * h);
            assert!(
                (grad[j] - numeric).abs() <= 1e-6 * numeric.abs().max(1.0),
                "{name}: ∂ln I/∂a{j} = {} against {numeric}",
                grad[j]
            );
            for (e, &x) in xs.iter().enumerate() {
                let numeric = (shape.log_density::<f64>(x, &up, range)
                    - shape.log_density::<f64>(x, &down, range))
                    / (2.0 * h);
                if numeric.is_finite() {
                    let got = dlog[j * xs.len() + e];
                    assert!(
                        (got - numeric).abs() <= 1e-6 * numeric.abs().max(1.0),
                        "{name} at x = {x}: ∂ln g/∂a{j} = {got} against {numeric}"
                    );
                    assert_eq!(log[e], shape.log_density::<f64>(x, &a, range));
                }
            }
        }
    }
}

#[test]
fn samples_follow_the_cdf() {
    for (name, shape, a, range) in cases() {
        let sampler = shape.sampler(&a, range).unwrap();
        let mut rng = ToyStream::new(7, 0, 0);
        let n = 20_000;
        let mut xs: Vec<f64> = (0..n).map(|_| sampler.draw(&mut rng).unwrap()).collect();
        xs.sort_by(f64::total_cmp);
        assert!(
            xs[0] >= range.0 && xs[n - 1] <= range.1,
            "{name}: a sample outside the range"
        );
        // Kolmogorov–Smirnov distance against the analytic CDF; 1.95/√n is the 0.1 % level.
        let total = shape.log_integral::<f64>(&a, range.0, range.1, range).exp();
        let d = xs
            .iter()
            .enumerate()
            .step_by(97)
            .map(|(i, &x)| {
                let cdf = if x > range.0 {
                    shape.log_integral::<f64>(&a, range.0, x, range).exp() / total
                } else {
                    0.0
                };
                (cdf - (i as f64 + 0.5) / n as f64).abs()
            })
            .fold(0.0, f64::max);
        assert!(d < 1.95 / (n as f64).sqrt(), "{name}: KS distance {d}");
    }
}

#[test]
fn shapes_that_cannot_be_sampled_are_errors() {
    // A Gaussian far outside its range, a needle of a Crystal Ball, a density with no mass.
    let far = Shape::Gaussian
        .sampler(&[50.0, 0.1], (0.0, 10.0))
        .err()
        .unwrap();
    assert!(far.contains("integral"), "{far}");
    let needle = Shape::CrystalBall(Tails::OneSided)
        .sampler(&[5.0, 1e-7, 1.5, 3.0], (0.0, 10.0))
        .err()
        .unwrap();
    assert!(needle.contains("too peaked"), "{needle}");
    let empty = Shape::Argus
        .sampler(&[5.0, -20.0, 0.5], (6.0, 7.0))
        .err()
        .unwrap();
    assert!(empty.contains("integral"), "{empty}");
}

#[test]
fn steep_exponentials_stay_finite() {
    // e^{200x} on [0, 10] (c = −200): its integral is e^2000/200, beyond f64, but not its log.
    for (c, want) in [
        (-200.0, 2000.0 - 200f64.ln()),
        (200.0, -(200f64.ln())),
        (-1e4, 1e5 - 1e4f64.ln()),
    ] {
        let shape = Shape::Exponential;
        let got = shape.log_integral::<f64>(&[c], 0.0, 10.0, (0.0, 10.0));
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "c = {c}: {got} against {want}"
        );
        let mut grad = [0.0; MAX_ARGS];
        let norm = shape.log_norm_grad(&[c], (0.0, 10.0), &mut grad);
        // d ln Z/dc = −(mean of x − lo): −(10 − 1/200) for the rising one.
        let mean = if c < 0.0 { 10.0 + 1.0 / c } else { 1.0 / c };
        assert!(
            norm.is_finite() && (grad[0] + mean).abs() < 1e-9,
            "c = {c}: {norm}, {grad:?}"
        );
        let args = [c];
        let sampler = shape.sampler(&args, (0.0, 10.0)).unwrap();
        let mut rng = ToyStream::new(3, 0, 0);
        let draws: Vec<f64> = (0..2000).map(|_| sampler.draw(&mut rng).unwrap()).collect();
        let average = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!(draws.iter().all(|x| (0.0..=10.0).contains(x)), "c = {c}");
        // The mean of the draws within 5σ (σ = 1/|c|/√n) of the distribution's.
        assert!(
            (average - mean).abs() < 5.0 / c.abs() / (2000f64).sqrt(),
            "c = {c}: {average} against {mean}"
        );
    }
}

#[test]
fn shapes_are_continuous_to_their_parameters_limits() {
    // ln density at a few points and ln integral, for arguments `a`.
    let profile = |shape: &Shape, a: &[f64], range: (f64, f64)| -> Vec<f64> {
        let mut v: Vec<f64> = [0.05, 0.3, 0.5, 0.7, 0.95]
            .iter()
            .map(|f| shape.log_density::<f64>(range.0 + f * (range.1 - range.0), a, range))
            .collect();
        v.push(shape.log_integral::<f64>(a, range.0, range.1, range));
        v
    };
    let close = |name: &str, limit: &[f64], near: &[f64], tolerance: f64| {
        for (k, (x, y)) in limit.iter().zip(near).enumerate() {
            assert!(
                x.is_finite() && y.is_finite() && (x - y).abs() <= tolerance * x.abs().max(1.0),
                "{name}, value {k}: {y} against the limit's {x}"
            );
        }
    };
    let range = (0.0, 10.0);
    // Crystal Ball α → 0 (a flat tail in the limit; α = 1e-18 once gave a cancelled NLL).
    for tails in [Tails::OneSided] {
        let cb = Shape::CrystalBall(tails);
        let limit = profile(&cb, &[5.0, 1.0, 0.0, 3.0], range);
        for alpha in [1e-18, 1e-14, 1e-10, 1e-7] {
            let near = profile(&cb, &[5.0, 1.0, alpha, 3.0], range);
            close(
                &format!("crystal ball α = {alpha:e}"),
                &limit,
                &near,
                100.0 * alpha,
            );
        }
        // n through 1 and towards 0 and large.
        let at_one = profile(&cb, &[5.0, 1.0, 1.5, 1.0], range);
        for n in [1.0 - 1e-9, 1.0 + 1e-9] {
            let near = profile(&cb, &[5.0, 1.0, 1.5, n], range);
            close(&format!("crystal ball n = {n}"), &at_one, &near, 1e-7);
        }
    }
    let two = Shape::CrystalBall(Tails::DoubleSided {
        left: true,
        right: true,
    });
    let limit = profile(&two, &[5.0, 1.0, 0.8, 0.0, 2.0, 0.0, 4.0], range);
    for alpha in [1e-18, 1e-12] {
        let near = profile(&two, &[5.0, 1.0, 0.8, alpha, 2.0, alpha, 4.0], range);
        close(
            &format!("double-sided α = {alpha:e}"),
            &limit,
            &near,
            100.0 * alpha.max(1e-15),
        );
    }
    // Exponential c → 0 from both sides (the flat density).
    let flat = profile(&Shape::Exponential, &[0.0], range);
    for c in [1e-15, -1e-15, 1e-9, -1e-9] {
        let near = profile(&Shape::Exponential, &[c], range);
        close(&format!("exponential c = {c:e}"), &flat, &near, 1e-7);
    }
}

/// ∫ exp(ln g) over [lo, hi] by composite Simpson on `n` intervals.
fn simpson(log_density: impl Fn(f64) -> f64, lo: f64, hi: f64, n: usize) -> f64 {
    let h = (hi - lo) / n as f64;
    let f = |x: f64| log_density(x).exp();
    let inner: f64 = (1..n)
        .map(|i| if i % 2 == 1 { 4.0 } else { 2.0 } * f(lo + i as f64 * h))
        .sum();
    (f(lo) + f(hi) + inner) * h / 3.0
}

#[test]
fn argus_is_normalised_for_every_slope_and_continuous_at_its_limits() {
    // The normalisation against quadrature, for slopes of both signs (a rising ARGUS, c > 0,
    // once summed an alternating series that cancelled) and powers below and above 1.
    for (m0, range) in [
        (5.29f64, (5.2, 5.3)),
        (10.0, (0.0, 10.0)),
        (8.0, (1.0, 10.0)),
    ] {
        for c in [-60.0f64, -5.0, -1e-9, 0.0, 1e-9, 1.0, 5.0, 30.0, 60.0] {
            for p in [0.5, 1.0, 2.7] {
                let a = [m0, c, p];
                // In w = √u (u = 1 − (x/m0)², x dx = −(m0²/2) du): the integrand
                // m0²·w^(2p+1)·e^(cw²) is smooth at the endpoint, where x·u^p is not.
                let top = f64::min(range.1, m0);
                let w = |x: f64| (1.0 - (x / m0) * (x / m0)).sqrt();
                let numeric = simpson(
                    |w| (m0 * m0).ln() + (2.0 * p + 1.0) * w.ln() + c * w * w,
                    w(top),
                    w(range.0),
                    200_000,
                );
                let ours = Shape::Argus
                    .log_integral::<f64>(&a, range.0, range.1, range)
                    .exp();
                assert!(
                    (ours - numeric).abs() <= 1e-8 * numeric,
                    "argus m0 = {m0}, c = {c}, p = {p} on {range:?}: ∫ = {ours} against {numeric}"
                );
            }
        }
    }
    // The endpoint m0 through the range's top, and the slope through 0: density and integral
    // move continuously.
    let range = (0.0, 10.0);
    let values = |a: &[f64]| -> Vec<f64> {
        let mut v: Vec<f64> = [0.5, 3.0, 7.0, 9.5]
            .iter()
            .map(|&x| Shape::Argus.log_density::<f64>(x, a, range))
            .collect();
        v.push(Shape::Argus.log_integral::<f64>(a, range.0, range.1, range));
        v
    };
    for (limit, nearby, what) in [
        (
            [10.0, -3.0, 0.5],
            [10.0 + 1e-9, -3.0, 0.5],
            "m0 above the range's top",
        ),
        (
            [10.0, -3.0, 0.5],
            [10.0 - 1e-9, -3.0, 0.5],
            "m0 below the range's top",
        ),
        ([10.0, 0.0, 0.5], [10.0, 1e-12, 0.5], "c above 0"),
        ([10.0, 0.0, 0.5], [10.0, -1e-12, 0.5], "c below 0"),
    ] {
        for (k, (x, y)) in values(&limit).iter().zip(values(&nearby)).enumerate() {
            assert!(
                x.is_finite() && (x - y).abs() <= 1e-7 * x.abs().max(1.0),
                "argus {what}, value {k}: {y} against {x}"
            );
        }
    }
}

#[test]
fn polynomials_are_continuous_where_they_touch_zero() {
    // 1 − x/10 on [0, 10] vanishes at the top: coefficients that approach it from inside give
    // densities and integrals that approach its own, and its density at the zero is −∞, not NaN.
    let range = (0.0, 10.0);
    let shape = Shape::Polynomial(2);
    let values = |a: &[f64]| -> Vec<f64> {
        let mut v: Vec<f64> = [0.0, 2.5, 9.0, 9.99]
            .iter()
            .map(|&x| shape.log_density::<f64>(x, a, range))
            .collect();
        v.push(shape.log_integral::<f64>(a, range.0, range.1, range));
        v
    };
    let limit = values(&[1.0, -0.1]);
    for eps in [1e-12, 1e-9] {
        let near = values(&[1.0, -0.1 + eps]);
        for (k, (x, y)) in limit.iter().zip(&near).enumerate() {
            assert!(
                x.is_finite() && (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                "polynomial slope −0.1 + {eps:e}, value {k}: {y} against {x}"
            );
        }
    }
    assert_eq!(
        shape.log_density::<f64>(10.0, &[1.0, -0.1], range),
        f64::NEG_INFINITY
    );
}
