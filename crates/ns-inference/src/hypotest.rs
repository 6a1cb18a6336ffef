//! Profile-likelihood test statistics and asymptotic CLs with pyhf's conventions
//! (`pyhf.infer.test_statistics`, `pyhf.infer.calculators.AsymptoticCalculator`).

use ns_compute::PreparedData;
use ns_core::{Error, Result};

use crate::checks;
use crate::fit::{FitConfig, FitResult, Fitter};
use crate::stats::normal_cdf;

/// pyhf's test statistics (`pyhf.infer.utils.get_test_stat`). q̃μ is qμ computed with the POI
/// bounded below at 0 (the bound comes from the fit configuration, as in pyhf); it differs from
/// qμ in the asymptotic formula.
///
/// As JSON, its name: `"q0"`, `"q"` or `"qtilde"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum TestStatistic {
    Q0,
    Q,
    QTilde,
}

impl schemars::JsonSchema for TestStatistic {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TestStatistic".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "pyhf's test statistic: q0 (discovery), q or qtilde (upper limits)",
            "enum": ["q0", "q", "qtilde"]
        })
    }
}

impl TryFrom<String> for TestStatistic {
    type Error = Error;
    fn try_from(name: String) -> Result<Self> {
        TestStatistic::from_name(&name)
    }
}

impl From<TestStatistic> for &'static str {
    fn from(t: TestStatistic) -> Self {
        t.name()
    }
}

impl TestStatistic {
    pub fn name(self) -> &'static str {
        match self {
            TestStatistic::Q0 => "q0",
            TestStatistic::Q => "q",
            TestStatistic::QTilde => "qtilde",
        }
    }

    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "q0" => Ok(TestStatistic::Q0),
            "q" => Ok(TestStatistic::Q),
            "qtilde" => Ok(TestStatistic::QTilde),
            "t" | "ttilde" | "tmu" | "tmu_tilde" => Err(Error::InvalidInput(format!(
                "test statistic '{name}': the two-sided tμ has no CLs calculator here (pyhf's \
                 hypotest refuses it too, with InvalidTestStatistic); use qtilde (the default), q \
                 or q0"
            ))),
            other => Err(Error::InvalidInput(format!(
                "unknown test statistic '{other}' (q0, q, qtilde)"
            ))),
        }
    }
}

/// A test statistic with the two fits behind it.
#[derive(Clone, Debug)]
pub struct TestStatValue {
    pub value: f64,
    /// The fit with the POI fixed at μ (μ̂̂).
    pub fixed_fit: FitResult,
    /// The unconditional fit (μ̂).
    pub free_fit: FitResult,
}

/// Compute a test statistic at `mu` (`mu` is ignored for q0, which tests μ = 0).
pub fn test_statistic(
    fitter: &Fitter,
    stat: TestStatistic,
    mu: f64,
    data: &PreparedData,
    config: &FitConfig,
) -> Result<TestStatValue> {
    let poi = checks::free_poi(fitter, config)?;
    let mu = if stat == TestStatistic::Q0 { 0.0 } else { mu };
    checks::value_in_bounds(fitter, config, poi, mu, "mu")?;
    let free_fit = fitter.fit(data, config)?;
    checks::started(fitter, &free_fit, data)?;
    let fixed_fit = fitter.fixed_poi_fit(mu, data, config)?;
    checks::started(fitter, &fixed_fit, data)?;
    let value = statistic_from_fits(stat, mu, poi, &fixed_fit, &free_fit);
    Ok(TestStatValue {
        value,
        fixed_fit,
        free_fit,
    })
}

/// A test statistic from its two fits: the fit with the POI fixed at `mu` and the free fit.
pub fn statistic_from_fits(
    stat: TestStatistic,
    mu: f64,
    poi: usize,
    fixed_fit: &FitResult,
    free_fit: &FitResult,
) -> f64 {
    let tmu = (fixed_fit.twice_nll - free_fit.twice_nll).max(0.0);
    let muhat = free_fit.parameters[poi];
    match stat {
        TestStatistic::Q | TestStatistic::QTilde => {
            if muhat > mu {
                0.0
            } else {
                tmu
            }
        }
        TestStatistic::Q0 => {
            if muhat < 0.0 {
                0.0
            } else {
                tmu
            }
        }
    }
}

/// Asimov data (main and aux) at the conditional MLE for `asimov_mu`, with the fit behind it.
pub fn asimov_data(
    fitter: &Fitter,
    asimov_mu: f64,
    data: &PreparedData,
    config: &FitConfig,
) -> Result<(PreparedData, FitResult)> {
    let fit = fitter.fixed_poi_fit(asimov_mu, data, config)?;
    checks::started(fitter, &fit, data)?;
    Ok((expected_data(fitter, &fit)?, fit))
}

/// The data (main and aux) the model expects at a fit's parameters.
pub(crate) fn expected_data(fitter: &Fitter, fit: &FitResult) -> Result<PreparedData> {
    fitter.model().asimov(&fit.parameters)
}

/// CLs with its tail probabilities, observed and expected. The expected values are for
/// n_σ = 2, 1, 0, −1, −2 of the background-only test statistic (pyhf's order: ascending CLs, the
/// "−2σ" band first).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClsValues {
    pub cls_obs: f64,
    pub clsb_obs: f64,
    pub clb_obs: f64,
    pub cls_exp: [f64; 5],
    pub clsb_exp: [f64; 5],
    pub clb_exp: [f64; 5],
}

/// The asymptotic hypothesis test at one μ: observed and expected CLs with the tail probabilities.
#[derive(Clone, Debug)]
pub struct AsymptoticHypotest {
    pub mu: f64,
    pub test_statistic: TestStatistic,
    pub cls: ClsValues,
    pub sqrt_q: f64,
    pub sqrt_q_asimov: f64,
    /// The test statistic in √q space that the p-values are computed from.
    pub asymptotic_teststat: f64,
    pub free_fit: FitResult,
    pub fixed_fit: FitResult,
    pub asimov_fit: FitResult,
    pub free_fit_asimov: FitResult,
    pub fixed_fit_asimov: FitResult,
}

/// pyhf's `AsymptoticCalculator` with the normal base distribution.
pub fn hypotest_asymptotic(
    fitter: &Fitter,
    mu: f64,
    data: &PreparedData,
    config: &FitConfig,
    stat: TestStatistic,
) -> Result<AsymptoticHypotest> {
    let asimov_mu = if stat == TestStatistic::Q0 { 1.0 } else { 0.0 };
    // The Asimov data are generated at μ = 0 (μ = 1 for q0): a POI whose range excludes that
    // (a lumi or a γ chosen as POI) cannot be tested; say so before any fit.
    checks::asimov_poi_in_bounds(fitter, config, asimov_mu)?;
    let observed = test_statistic(fitter, stat, mu, data, config)?;
    let (asimov, asimov_fit) = asimov_data(fitter, asimov_mu, data, config)?;
    // An error here is about the Asimov data, not the observed ones: say so.
    let on_asimov = test_statistic(fitter, stat, mu, &asimov, config).map_err(|e| match e {
        Error::InvalidModel(m) => Error::InvalidModel(format!(
            "on the Asimov data (the expected data at POI = {asimov_mu}): {m}"
        )),
        other => other,
    })?;
    Ok(asymptotic_from_fits(
        stat, mu, observed, asimov_fit, on_asimov,
    ))
}

/// The asymptotic test at `mu` from its fits: the test statistic on the data, the fit behind the
/// Asimov data and the test statistic on them.
pub(crate) fn asymptotic_from_fits(
    stat: TestStatistic,
    mu: f64,
    observed: TestStatValue,
    asimov_fit: FitResult,
    on_asimov: TestStatValue,
) -> AsymptoticHypotest {
    let sqrt_q = observed.value.sqrt();
    let sqrt_qa = on_asimov.value.sqrt();
    let teststat = match stat {
        TestStatistic::Q | TestStatistic::Q0 => sqrt_q - sqrt_qa,
        TestStatistic::QTilde => {
            if sqrt_q <= sqrt_qa {
                sqrt_q - sqrt_qa
            } else {
                (sqrt_q * sqrt_q - sqrt_qa * sqrt_qa) / (2.0 * sqrt_qa)
            }
        }
    };
    // p-values of the s+b (shift −√q_A) and b-only (shift 0) distributions in √q space; CLs
    // as their ratio, defined where both vanish (`tail_ratio`).
    let pvalues = |t: f64| {
        let clsb = normal_cdf(-(t + sqrt_qa));
        let clb = normal_cdf(-t);
        (clsb, clb, crate::stats::tail_ratio(t, sqrt_qa))
    };
    let (clsb_obs, clb_obs, cls_obs) = pvalues(teststat);
    let mut cls_exp = [0.0; 5];
    let mut clsb_exp = [0.0; 5];
    let mut clb_exp = [0.0; 5];
    for (k, n_sigma) in [2.0, 1.0, 0.0, -1.0, -2.0].into_iter().enumerate() {
        let (sb, b, s) = pvalues(n_sigma);
        clsb_exp[k] = sb;
        clb_exp[k] = b;
        cls_exp[k] = s;
    }
    AsymptoticHypotest {
        mu,
        test_statistic: stat,
        cls: ClsValues {
            cls_obs,
            clsb_obs,
            clb_obs,
            cls_exp,
            clsb_exp,
            clb_exp,
        },
        sqrt_q,
        sqrt_q_asimov: sqrt_qa,
        asymptotic_teststat: teststat,
        free_fit: observed.free_fit,
        fixed_fit: observed.fixed_fit,
        asimov_fit,
        free_fit_asimov: on_asimov.free_fit,
        fixed_fit_asimov: on_asimov.fixed_fit,
    }
}

/// Discovery significance from the asymptotic q0 test.
#[derive(Clone, Debug)]
pub struct Significance {
    pub p0_obs: f64,
    pub z_obs: f64,
    /// Expected p0 and Z for n_σ = 2, 1, 0, −1, −2 (pyhf's order); index 2 is the median.
    pub p0_exp: [f64; 5],
    pub z_exp: [f64; 5],
    pub hypotest: AsymptoticHypotest,
}

pub fn significance(
    fitter: &Fitter,
    data: &PreparedData,
    config: &FitConfig,
) -> Result<Significance> {
    let h = hypotest_asymptotic(fitter, 0.0, data, config, TestStatistic::Q0)?;
    // Z of a p-value; below the smallest normal double (Z ≳ 37.5, where p underflows) Z is
    // read in √q space instead: p = Φ(−(t + √q_A)), so Z = t + √q_A.
    let z = |p: f64, t: f64| {
        if p >= f64::MIN_POSITIVE {
            -crate::stats::normal_quantile(p)
        } else {
            t + h.sqrt_q_asimov
        }
    };
    let z_exp = std::array::from_fn(|k| z(h.cls.clsb_exp[k], [2.0, 1.0, 0.0, -1.0, -2.0][k]));
    Ok(Significance {
        p0_obs: h.cls.clsb_obs,
        z_obs: z(h.cls.clsb_obs, h.asymptotic_teststat),
        p0_exp: h.cls.clsb_exp,
        z_exp,
        hypotest: h,
    })
}
