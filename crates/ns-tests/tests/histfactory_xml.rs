//! HistFactory XML through the model registry — `nextstat VERB combination.xml` — gives pyhf
//! 0.7.6's numbers under pyhf's semantics on every set of `../shared/histfactory-xml` that pyhf
//! reads (the parameters, twice_nll at the suggested init, fits at pyhf's minimum or lower), and
//! RooFit 6.40's under ROOT's (the default): the NLL at RooFit's init and best points up to one
//! constant, fits at RooFit's minimum or lower, q(μ), Hesse errors.

use std::path::PathBuf;

use ns_inference::{FitConfig, Fitter};
use ns_source::{Files, ModelRef, PyhfRef, Source};
use ns_xml::Semantics;
use serde_json::Value;

/// `../shared/histfactory-xml` beside the repository (override with `NEXTSTAT_HISTFACTORY_XML`).
fn shared() -> PathBuf {
    std::env::var_os("NEXTSTAT_HISTFACTORY_XML").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/histfactory-xml"),
        PathBuf::from,
    )
}

#[test]
fn every_set_pyhf_reads_gives_pyhfs_numbers() {
    let mut measurements = 0;
    for (path, top, m) in reference_measurements() {
        if top.get("pyhf_readxml_error").is_some() {
            continue;
        }
        let pyhf = &m["pyhf_code4_code4p"];
        if pyhf.is_null() || pyhf.get("twice_nll_init").is_none() {
            continue;
        }
        let name = m["name"].as_str().unwrap();
        let at = format!("{} {name}", path.display());
        let loaded = xml_model(&path, name, Semantics::Pyhf)
            .load_model(&Files)
            .unwrap_or_else(|e| panic!("{at}: {e}"));
        let model = loaded.likelihood();
        let names: Vec<&str> = pyhf["par_names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(model.parameter_names(), names, "{at}");
        let fitter = Fitter::new(model);
        let data = model.observed().unwrap();
        let init = model.suggested_init();
        let expected = pyhf["twice_nll_init"].as_f64().unwrap();
        let ours = fitter.twice_nll(&init, &data).unwrap();
        assert!(
            (ours - expected).abs() <= 1e-9 * expected.abs().max(1.0),
            "{at}: {ours} vs {expected}"
        );
        let fit = fitter.fit(&data, &FitConfig::suggested(model)).unwrap();
        let minuit = pyhf["fit_minuit"]["twice_nll"].as_f64().unwrap();
        assert!(fit.converged, "{at}");
        assert!(
            fit.twice_nll <= minuit + 1e-6,
            "{at}: {} vs pyhf's {minuit}",
            fit.twice_nll
        );
        measurements += 1;
    }
    assert!(
        measurements >= 18,
        "only {measurements} measurements compared"
    );
}

/// Every measurement of every top of `../shared/histfactory-xml` that has reference numbers:
/// the top XML's path, the top's entry of `reference.json` and the measurement's.
fn reference_measurements() -> Vec<(PathBuf, Value, Value)> {
    let mut found = Vec::new();
    for group in ["pyhf-validation", "pyhf-docs", "."] {
        for entry in std::fs::read_dir(shared().join(group)).unwrap() {
            let set = entry.unwrap().path();
            let Ok(text) = std::fs::read_to_string(set.join("reference.json")) else {
                continue;
            };
            let reference: Value = serde_json::from_str(&text).unwrap();
            for top in reference["tops"].as_array().unwrap() {
                let path = set.join(top["top"].as_str().unwrap());
                for m in top["measurements"].as_array().unwrap() {
                    found.push((path.clone(), top.clone(), m.clone()));
                }
            }
        }
    }
    found
}

/// The model of measurement `name` of the combination XML `path` as the CLI names it (a path,
/// its format found from its head) with `semantics`.
fn xml_model(path: &std::path::Path, name: &str, semantics: Semantics) -> ModelRef {
    ModelRef::ByContent(PyhfRef {
        workspace: Source::Path(path.to_path_buf()),
        measurement: Some(name.into()),
        ..PyhfRef::file("")
    })
    .with_xml_semantics(semantics, &Files)
    .unwrap()
}

/// The x bins of the 2-D histograms of the shared sets (example_ShapeSys2D).
const TWO_D_X_BINS: usize = 2;

/// nextstat's name of a RooFit parameter (`alpha_x` → `x`, `gamma_stat_c_bin_2` →
/// `staterror_c[2]`, `gamma_x_bin_0` → `x[0]`, `Lumi` → `lumi`).
fn our_name(roofit: &str) -> String {
    if roofit == "Lumi" {
        return "lumi".into();
    }
    if let Some(rest) = roofit.strip_prefix("gamma_")
        && let Some((set, bin)) = rest.rsplit_once("_bin_")
    {
        // A 2-D histogram's bin x_y: our bins run over x fastest.
        let bin = match bin.split_once('_') {
            Some((x, y)) => {
                let (x, y): (usize, usize) = (x.parse().unwrap(), y.parse().unwrap());
                (y * TWO_D_X_BINS + x).to_string()
            }
            None => bin.to_string(),
        };
        return match set.strip_prefix("stat_") {
            Some(channel) => format!("staterror_{channel}[{bin}]"),
            None => format!("{set}[{bin}]"),
        };
    }
    for prefix in ["alpha_", "beta_"] {
        if let Some(name) = roofit.strip_prefix(prefix) {
            return name.into();
        }
    }
    roofit.into()
}

/// The error Minuit reports for a parameter bounded to `(low, high)` with value `x` and Hessian
/// error `error`: Minuit fits the angle θ of `x = low + (high − low)(sin θ + 1)/2` and reports
/// half the spread of `x(θ ± σ_θ)` (Minuit2's `Int2extError`), which is smaller than the
/// Hessian's error as the sine bends; nextstat reports the Hessian's.
fn minuit_error(x: f64, error: f64, (low, high): (f64, f64)) -> f64 {
    let half = (high - low) / 2.0;
    let external = |theta: f64| low + half * (theta.sin() + 1.0);
    let theta = ((x - low) / half - 1.0).clamp(-1.0, 1.0).asin();
    let sigma = error / (half * theta.cos()).abs();
    let up = if sigma > 1.0 {
        high - low
    } else {
        external(theta + sigma) - x
    };
    let down = external(theta - sigma) - x;
    0.5 * (up.abs() + down.abs())
}

/// The parameter vector with RooFit's values (by name) over `base`.
fn point_of(
    names: &[String],
    base: &[f64],
    roofit: &serde_json::Map<String, Value>,
) -> Result<Vec<f64>, String> {
    let mut point = base.to_vec();
    for (name, value) in roofit {
        let value = value.as_f64().or_else(|| value[0].as_f64()).unwrap();
        let ours = our_name(name);
        let i = names
            .iter()
            .position(|n| *n == ours)
            .ok_or_else(|| format!("RooFit's {name} ({ours}) is not a parameter: {names:?}"))?;
        point[i] = value;
    }
    Ok(point)
}

#[test]
fn every_set_gives_roofits_numbers_under_root_semantics() {
    let mut compared = 0;
    let (mut refused, mut failures) = (Vec::new(), Vec::new());
    for (path, _, m) in reference_measurements() {
        let roofit = &m["roofit_root_defaults"];
        if roofit.get("nll_init").is_none() {
            continue;
        }
        let name = m["name"].as_str().unwrap();
        let at = format!("{} {name}", path.display());
        let loaded = match xml_model(&path, name, Semantics::Root).load_model(&Files) {
            Ok(loaded) => loaded,
            Err(e) => {
                refused.push(format!("{at}: {e}"));
                continue;
            }
        };
        failures.extend(compare_with_roofit(loaded.likelihood(), roofit, &at));
        compared += 1;
    }
    assert!(failures.is_empty(), "{failures:#?}\nrefused: {refused:#?}");
    // Every RooFit-built measurement.
    assert!(
        refused.is_empty() && compared >= 22,
        "only {compared} measurements compared; refused: {refused:#?}"
    );
}

/// How far RooFit's own numbers may be off where it normalises a Gamma ConstraintTerm (a
/// `beta_` parameter) numerically: its default integrator (RooIntegrator1D, ε = 1e-7) misses the
/// exact integral by 2.5e-6 at GammaExample's minimum. (tests/python/test_histfactory_xml.py
/// compares with RooFit integrating precisely, to 1e-9.)
const ROOFIT_GAMMA_INTEGRAL_ERROR: f64 = 1e-5;

/// One measurement against RooFit: the NLL at RooFit's init and best points differs by one
/// constant; our fit ends at RooFit's minimum or lower; q(μ) agrees, and so do Hesse errors where
/// no parameter of RooFit's fit is at a bound (there Minuit's bounded-parameter transform makes
/// the errors a convention: allmodifiers' Uniform-constrained α ends at 5).
fn compare_with_roofit(
    model: &dyn ns_compute::Likelihood,
    roofit: &Value,
    at: &str,
) -> Vec<String> {
    let mut failures = Vec::new();
    macro_rules! check {
        ($ok:expr, $($message:tt)+) => {
            if !$ok {
                failures.push(format!($($message)+));
            }
        };
    }
    let names = model.parameter_names();
    let fitter = Fitter::new(model);
    let data = model.observed().unwrap();
    let points = point_of(
        names,
        &model.suggested_init(),
        roofit["init"].as_object().unwrap(),
    )
    .and_then(|init| {
        let best = point_of(names, &init, roofit["bestfit"].as_object().unwrap())?;
        Ok((init, best))
    });
    let (init, best) = match points {
        Ok(points) => points,
        Err(e) => return vec![format!("{at}: {e}")],
    };
    let nll = |p: &[f64]| fitter.twice_nll(p, &data).unwrap() / 2.0;
    let offset_init = roofit["nll_init"].as_f64().unwrap() - nll(&init);
    let offset_best = roofit["nll_best"].as_f64().unwrap() - nll(&best);
    let scale = roofit["nll_init"].as_f64().unwrap().abs().max(1.0);
    let integrates = roofit["bestfit"]
        .as_object()
        .unwrap()
        .keys()
        .any(|k| k.starts_with("beta_"));
    let (nll_tolerance, q_tolerance) = if integrates {
        (ROOFIT_GAMMA_INTEGRAL_ERROR, ROOFIT_GAMMA_INTEGRAL_ERROR)
    } else {
        (1e-9 * scale, 1e-6)
    };
    check!(
        (offset_init - offset_best).abs() <= nll_tolerance,
        "{at}: RooFit's NLL minus ours is {offset_init} at the init point, {offset_best} at the best"
    );
    // RooFit's constant parameters are fixed here too.
    let fixed = model.suggested_fixed();
    for constant in roofit["constant_parameters"].as_array().unwrap() {
        let ours = our_name(constant.as_str().unwrap());
        if let Some(i) = names.iter().position(|n| *n == ours) {
            check!(fixed[i], "{at}: RooFit's constant {constant} is free here");
        }
    }
    let config = FitConfig {
        uncertainties: true,
        ..FitConfig::suggested(model)
    };
    let fit = fitter.fit(&data, &config).unwrap();
    check!(fit.converged, "{at}");
    let ours_best = fit.twice_nll / 2.0 + offset_init;
    let roofit_best = roofit["nll_best"].as_f64().unwrap();
    check!(
        ours_best <= roofit_best + nll_tolerance.max(1e-7),
        "{at}: minimum {ours_best} vs RooFit's {roofit_best}"
    );
    let errors = fit.uncertainties.as_ref().unwrap();
    let bounds = model.suggested_bounds();
    let bestfit = roofit["bestfit"].as_object().unwrap();
    let index = |name: &str| names.iter().position(|n| *n == our_name(name)).unwrap();
    let at_bound = bestfit.iter().any(|(name, value)| {
        let ((low, high), x) = (bounds[index(name)], value[0].as_f64().unwrap());
        (x - low).min(high - x) <= 1e-6 * (high - low)
    });
    for (name, value) in bestfit {
        let i = index(name);
        let (theirs, error) = (value[0].as_f64().unwrap(), value[1].as_f64().unwrap());
        check!(
            (fit.parameters[i] - theirs).abs() <= 2e-3 * error.max(1e-3),
            "{at}: {name} = {} vs RooFit's {theirs} ± {error}",
            fit.parameters[i]
        );
        if at_bound {
            continue;
        }
        let minuit = minuit_error(fit.parameters[i], errors[i], bounds[i]);
        check!(
            (minuit - error).abs() <= 1e-3 * error,
            "{at}: {name}'s Hesse error {} ({minuit} as Minuit reports it) vs RooFit's {error}",
            errors[i]
        );
    }
    let poi = model.poi_index().unwrap();
    for (mu, q) in roofit["q_mu"].as_object().unwrap() {
        let Some(q) = q.as_f64() else { continue };
        let mu: f64 = mu.parse().unwrap();
        let fixed_fit = fitter.fit(&data, &config.with_fixed(poi, mu)).unwrap();
        let ours = fixed_fit.twice_nll - fit.twice_nll;
        check!(
            (ours - q).abs() <= q_tolerance * q.abs().max(1.0),
            "{at}: q({mu}) = {ours} vs RooFit's {q}"
        );
    }
    failures
}

/// ROOT's semantics on the f32 devices: clipped yields are evaluated (binderexample; the
/// kernels' values are backend_parity's `clipped_yields_match_cpu`), constraints normalised over
/// their global observable's range (allmodifiers' γs) are refused by name, and pyhf's semantics
/// never are.
#[test]
fn f32_devices_refuse_only_range_normalised_constraints() {
    for (file, name, root_refused) in [
        ("pyhf-docs/binderexample/meas.xml", "meas", false),
        ("allmodifiers/config/combination.xml", "allmod", true),
    ] {
        for semantics in [Semantics::Root, Semantics::Pyhf] {
            let loaded = xml_model(&shared().join(file), name, semantics)
                .load_model(&Files)
                .unwrap();
            let ns_source::LoadedModel::Binned { model, .. } = loaded else {
                panic!("a binned model")
            };
            let compiled = &model.compiled;
            assert_eq!(compiled.clip_sample_yields, semantics == Semantics::Root);
            let check = ns_compute::layout::check_f32_device_terms(compiled);
            let refused = root_refused && semantics == Semantics::Root;
            assert_eq!(check.is_err(), refused, "{file} {semantics:?}: {check:?}");
            if let Err(e) = check {
                assert!(
                    e.to_string()
                        .contains("normalised over their global observable's range"),
                    "{e}"
                );
            }
        }
    }
}

/// The coupled-histosys validation model has two minima; RooFit and pyhf stop in the higher one
/// from the default start (μ̂ = 0.636). The fit verb's fit finds the lower one (μ̂ = 0.427, at
/// RooFit's and pyhf's global minimum) and says that there are two, from XML under either
/// semantics and from the pyhf JSON of it.
#[test]
fn the_fit_finds_the_lower_of_two_minima_and_says_so() {
    let set = shared().join("pyhf-validation/multichan_coupledhistosys_histfactory");
    let top = set.join("config/example.xml");
    let json = ModelRef::ByContent(PyhfRef::file(set.join("pyhf_json/config__example.json")));
    for (what, reference) in [
        (
            "XML, ROOT's semantics",
            xml_model(&top, "GaussExample", Semantics::Root),
        ),
        (
            "XML, pyhf's semantics",
            xml_model(&top, "GaussExample", Semantics::Pyhf),
        ),
        ("pyhf JSON", json),
    ] {
        let loaded = reference.load_model(&Files).unwrap();
        let model = loaded.likelihood();
        let fitter = Fitter::new(model);
        let data = model.observed().unwrap();
        let config = FitConfig::suggested(model);
        let single = fitter.fit(&data, &config).unwrap();
        let global = fitter.fit_global(&data, &config).unwrap();
        let poi = global.parameters[model.poi_index().unwrap()];
        assert!((poi - 0.42706).abs() < 1e-4, "{what}: μ̂ = {poi}");
        assert!(global.twice_nll < single.twice_nll - 1.0, "{what}");
        let warning = global.warning.as_deref().unwrap_or("");
        assert!(warning.contains("several minima"), "{what}: {warning}");
        if what == "pyhf JSON" {
            // pyhf's global minimum (its scipy fit from a POI start of 0).
            assert!(
                (global.twice_nll - 26.563838).abs() < 1e-5,
                "{}",
                global.twice_nll
            );
        }
    }
    // A likelihood with one minimum (histosys parameters pulled to both sides): the same fit,
    // no warning.
    let loaded = xml_model(
        &shared().join("pyhf-docs/binderexample/meas.xml"),
        "meas",
        Semantics::Root,
    )
    .load_model(&Files)
    .unwrap();
    let model = loaded.likelihood();
    let fitter = Fitter::new(model);
    let data = model.observed().unwrap();
    let config = FitConfig::suggested(model);
    let (single, global) = (
        fitter.fit(&data, &config).unwrap(),
        fitter.fit_global(&data, &config).unwrap(),
    );
    assert_eq!(single.parameters, global.parameters);
    assert!(global.warning.is_none(), "{:?}", global.warning);
}
