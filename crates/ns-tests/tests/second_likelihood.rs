//! A second kind of likelihood, to prove the likelihood interface: a Gaussian measurement
//! x ~ N(μ + θ, σ) of a signal μ shifted by a nuisance θ, constrained by an auxiliary
//! measurement a ~ N(θ, 1). Everything inference answers for it is known in closed form:
//! μ̂ = x − a, θ̂ = a, σ_μ = √(σ² + 1), σ_θ = 1, the profile Δ(2 ln L) = ((μ − μ̂)/s)² with
//! s = √(σ² + 1), and so the asymptotic CLs of q̃_μ and the upper limits; the asymptotic formulas
//! are exact for it, so toys must agree with them within their statistical error.

use std::sync::atomic::{AtomicBool, Ordering};

use ns_compute::backend::SampledToys;
use ns_compute::rng::ToyStream;
use ns_compute::{
    Backend, Batching, Datasets, Device, Likelihood, PreparedData, Resident, SignalBatch,
};
use ns_core::{Error, Result};
use ns_inference::stats::{normal_cdf, normal_quantile};
use ns_inference::{
    FitConfig, Fitter, TestStatistic, hypotest_asymptotic, hypotest_toys, profile_scan, ranking,
    upper_limit_root,
};

/// The measurement's resolution σ.
const SIGMA: f64 = 0.5;

/// The observed x and a: μ̂ = 1.3, θ̂ = 0.4.
const X_OBS: f64 = 1.7;
const A_OBS: f64 = 0.4;

/// s = √(σ² + 1): the width of μ̂.
fn s() -> f64 {
    (SIGMA * SIGMA + 1.0).sqrt()
}

struct GaussianMeasurement {
    names: Vec<String>,
}

impl GaussianMeasurement {
    fn new() -> Self {
        GaussianMeasurement {
            names: vec!["mu".into(), "theta".into()],
        }
    }

    fn data(x: f64, a: f64) -> PreparedData {
        let ln_sqrt_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
        PreparedData {
            main: vec![x],
            aux: vec![a],
            constant: SIGMA.ln() + 2.0 * ln_sqrt_2pi,
        }
    }
}

/// Its CPU backend: the deviance form (x − μ − θ)²/2σ² + (a − θ)²/2 and its gradient.
struct GaussianBackend;

impl Backend for GaussianBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn description(&self) -> String {
        "CPU (Gaussian measurement)".into()
    }

    fn batching(&self) -> Batching {
        Batching::Parallel
    }

    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
        Ok(Resident::new(datasets.len(), datasets.to_vec()))
    }

    fn nll_grad_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<()> {
        let host: &[PreparedData] = match datasets {
            Datasets::Host(h) => h,
            Datasets::Resident(r) => r.storage::<Vec<PreparedData>>()?,
        };
        ns_compute::backend::check_batch(points, which, nll, grad, 2, host.len())?;
        for (row, &d) in which.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let (mu, theta) = (points[2 * row], points[2 * row + 1]);
            let (x, a) = (host[d as usize].main[0], host[d as usize].aux[0]);
            let r = (x - mu - theta) / SIGMA;
            nll[row] = 0.5 * r * r + 0.5 * (a - theta) * (a - theta);
            grad[2 * row] = -r / SIGMA;
            grad[2 * row + 1] = -r / SIGMA - (a - theta);
        }
        Ok(())
    }

    fn attach_signal(&self, _: &ns_compute::ExternalSignal) -> Result<Resident> {
        Err(Error::InvalidInput("no external signals".into()))
    }

    fn nll_grad_signal(&self, _: &Resident, _: SignalBatch) -> Result<()> {
        Err(Error::InvalidInput("no external signals".into()))
    }
}

impl Likelihood for GaussianMeasurement {
    fn parameter_names(&self) -> &[String] {
        &self.names
    }

    fn origin(&self) -> String {
        "the Gaussian test measurement".into()
    }

    fn suggested_init(&self) -> Vec<f64> {
        vec![1.0, 0.0]
    }

    fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        vec![(0.0, 10.0), (-5.0, 5.0)]
    }

    fn suggested_fixed(&self) -> Vec<bool> {
        vec![false, false]
    }

    fn poi(&self) -> Result<usize> {
        Ok(0)
    }

    fn constraint(&self, index: usize) -> Option<(f64, f64)> {
        (index == 1).then_some((A_OBS, 1.0))
    }

    fn observed(&self) -> Result<PreparedData> {
        Ok(Self::data(X_OBS, A_OBS))
    }

    fn dataset(&self, values: &[f64]) -> Result<PreparedData> {
        match *values {
            [x] => Ok(Self::data(x, A_OBS)),
            [x, a] => Ok(Self::data(x, a)),
            _ => Err(Error::InvalidInput("give x, or x and a".into())),
        }
    }

    fn asimov(&self, params: &[f64]) -> Result<PreparedData> {
        let (main, aux) = self.expected(params)?;
        Ok(Self::data(main[0], aux[0]))
    }

    fn expected(&self, params: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        Ok((vec![params[0] + params[1]], vec![params[1]]))
    }

    fn sample_toys(
        &self,
        _backend: &dyn Backend,
        ensembles: &[(&[f64], u32)],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        let mut host = Vec::new();
        for &(params, stream) in ensembles {
            for i in 0..n_toys as u32 {
                let mut rng = ToyStream::new(seed, stream, first + i);
                let x = params[0] + params[1] + SIGMA * rng.normal();
                let a = params[1] + rng.normal();
                host.push(Self::data(x, a));
            }
        }
        Ok(SampledToys {
            host,
            resident: None,
        })
    }

    fn dataset_size(&self) -> usize {
        2
    }

    fn open(&self, device: Device) -> Result<Box<dyn Backend + '_>> {
        match device {
            Device::Cpu => Ok(Box::new(GaussianBackend)),
            other => Err(Error::Device(format!(
                "the Gaussian test measurement runs on the CPU only, not on {}",
                other.name()
            ))),
        }
    }
}

/// CLs of q̃_μ in closed form at μ with μ̂ ≥ 0 (so √q ≤ √q_A): (observed, median expected).
fn cls_formula(mu: f64, muhat: f64) -> (f64, f64) {
    let sqrt_q = ((mu - muhat).max(0.0)) / s();
    let sqrt_qa = mu / s();
    let obs = normal_cdf(-sqrt_q) / normal_cdf(sqrt_qa - sqrt_q);
    let median = normal_cdf(-sqrt_qa) / 0.5;
    (obs, median)
}

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: {got} against the formula's {want} (tolerance {tol})"
    );
}

#[test]
fn fit_and_uncertainties_are_the_closed_form() {
    let model = GaussianMeasurement::new();
    let fitter = Fitter::new(&model);
    let data = model.observed().unwrap();
    let config = FitConfig {
        uncertainties: true,
        ..FitConfig::suggested(&model)
    };
    let fit = fitter.fit(&data, &config).unwrap();
    assert!(fit.converged, "{fit:?}");
    close("μ̂", fit.parameters[0], X_OBS - A_OBS, 1e-6);
    close("θ̂", fit.parameters[1], A_OBS, 1e-6);
    let sigma = fit.uncertainties.as_ref().expect("uncertainties");
    close("σ_μ", sigma[0], s(), 1e-5);
    close("σ_θ", sigma[1], 1.0, 1e-5);
    close("twice_nll", fit.twice_nll, 2.0 * data.constant, 1e-9);
}

#[test]
fn profile_scan_is_the_parabola() {
    let model = GaussianMeasurement::new();
    let fitter = Fitter::new(&model);
    let data = model.observed().unwrap();
    let values = [0.0, 0.5, 1.3, 2.0, 3.5];
    let scan = profile_scan(
        &fitter,
        0,
        &values,
        &data,
        &FitConfig::suggested(&model),
        &|_| {},
    )
    .unwrap();
    for (mu, d) in values.iter().zip(&scan.delta_twice_nll) {
        close(
            &format!("Δ twice_nll at μ = {mu}"),
            *d,
            ((mu - 1.3) / s()).powi(2),
            1e-7,
        );
    }
}

#[test]
fn asymptotic_cls_and_upper_limit_are_the_formulas() {
    let model = GaussianMeasurement::new();
    let fitter = Fitter::new(&model);
    let data = model.observed().unwrap();
    let config = FitConfig::suggested(&model);
    let muhat = X_OBS - A_OBS;
    for mu in [1.5, 2.5, 4.0] {
        let h = hypotest_asymptotic(&fitter, mu, &data, &config, TestStatistic::QTilde).unwrap();
        let (obs, median) = cls_formula(mu, muhat);
        close(&format!("CLs at μ = {mu}"), h.cls.cls_obs, obs, 1e-7);
        close(
            &format!("median expected CLs at μ = {mu}"),
            h.cls.cls_exp[2],
            median,
            1e-7,
        );
    }
    let limit = upper_limit_root(&fitter, &data, &config, 0.05, 1e-9, &mut |_| {}).unwrap();
    // Observed: CLs(μ) = 0.05 by bisection of the formula; expected median: Φ(−μ/s) = 0.025.
    let (mut lo, mut hi) = (muhat, 10.0);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if cls_formula(mid, muhat).0 > 0.05 {
            lo = mid
        } else {
            hi = mid
        }
    }
    close("observed upper limit", limit.obs, 0.5 * (lo + hi), 1e-5);
    close(
        "median expected upper limit",
        limit.exp[2],
        -normal_quantile(0.025) * s(),
        1e-5,
    );
}

#[test]
fn toys_agree_with_the_exact_asymptotics() {
    let model = GaussianMeasurement::new();
    let fitter = Fitter::new(&model);
    let data = model.observed().unwrap();
    let config = FitConfig::suggested(&model);
    let (mu, n_toys) = (2.5, 4000);
    let run = || {
        hypotest_toys(
            &fitter,
            mu,
            &data,
            &config,
            TestStatistic::QTilde,
            n_toys,
            7,
            &|_| {},
        )
        .unwrap()
    };
    let toys = run();
    assert_eq!(toys.signal.n_failed + toys.background.n_failed, 0);
    let h = hypotest_asymptotic(&fitter, mu, &data, &config, TestStatistic::QTilde).unwrap();
    // Binomial errors of the tail fractions, 4σ.
    let err = |p: f64| 4.0 * (p * (1.0 - p) / n_toys as f64).sqrt();
    close(
        "toy CLsb",
        toys.cls.clsb_obs,
        h.cls.clsb_obs,
        err(h.cls.clsb_obs),
    );
    close(
        "toy CLb",
        toys.cls.clb_obs,
        h.cls.clb_obs,
        err(h.cls.clb_obs),
    );
    // The same seed gives the same toys: the result is reproducible.
    assert_eq!(run().cls, toys.cls);
}

#[test]
fn ranking_uses_the_constraint_of_the_nuisance() {
    let model = GaussianMeasurement::new();
    let fitter = Fitter::new(&model);
    let data = model.observed().unwrap();
    let r = ranking(&fitter, &data, &FitConfig::suggested(&model), &|_| {}).unwrap();
    assert_eq!(r.entries.len(), 1);
    let theta = &r.entries[0];
    assert_eq!(theta.name, "theta");
    // Pull (θ̂ − a)/1 = 0 and constraint σ_θ/1 = 1; fixing θ at θ̂ ± σ_θ moves μ̂ by ∓1.
    close("pull", theta.pull.unwrap(), 0.0, 1e-6);
    close("constraint", theta.constraint.unwrap(), 1.0, 1e-5);
    close("impact +", theta.impact_postfit_up, -1.0, 1e-5);
    close("impact −", theta.impact_postfit_down, 1.0, 1e-5);
}

#[test]
fn what_the_likelihood_cannot_do_is_an_error() {
    let model = GaussianMeasurement::new();
    let data = model.observed().unwrap();
    let fitter = Fitter::new(&model);
    let e = ns_inference::goodness_of_fit(&fitter, &data, &FitConfig::suggested(&model))
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no saturated model"), "{e}");
    let e = Fitter::on_device(&model, Device::Vulkan, ns_compute::Workload::Sequential)
        .err()
        .expect("no Vulkan backend")
        .to_string();
    assert!(e.contains("CPU only"), "{e}");
}
