//! Published ATLAS likelihoods (../shared/likelihoods) against pyhf 0.7.6's stored numbers: the
//! background-only digest, twice_nll at pyhf's init and at pyhf's own best-fit points, a fit that
//! converges at or below pyhf's best minimum, and asymptotic CLs at μ = 1. The tests fail, not skip,
//! without the data. Live comparisons with pyhf (CLs from our fits, upper limits) are in
//! tests/python/test_corpus.py.

use ns_compute::PreparedData;
use ns_inference::{FitConfig, Fitter, TestStatistic, hypotest_asymptotic};
use ns_tests::{floats, published_likelihoods, read_json};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace, pyjson};
use serde_json::Value;

struct Published {
    name: String,
    reference: Value,
    model: HistFactoryModel,
    data: PreparedData,
}

fn corpus() -> Vec<Published> {
    published_likelihoods()
        .into_iter()
        .map(|(name, dir)| {
            let ws = Workspace::from_path(&dir.join("workspace.json"))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            Published {
                reference: read_json(&dir.join("reference.json")),
                name,
                model,
                data,
            }
        })
        .collect()
}

fn close(a: f64, b: f64, rtol: f64) -> bool {
    (a - b).abs() <= rtol * b.abs().max(1.0)
}

#[test]
fn the_corpus_holds_the_nine_published_likelihoods() {
    assert!(published_likelihoods().len() >= 9);
}

#[test]
fn background_only_digests_match_pyhf() {
    for (name, dir) in published_likelihoods() {
        let reference = read_json(&dir.join("reference.json"));
        let bkgonly = read_json(&dir.join("bkgonly.json"));
        assert_eq!(
            pyjson::digest(&bkgonly),
            reference["digest_bkgonly"]["value"].as_str().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn the_published_patch_applied_gives_the_reference_workspace() {
    for (name, dir) in published_likelihoods() {
        let mut doc = read_json(&dir.join("bkgonly.json"));
        let patch: json_patch::Patch =
            serde_json::from_value(read_json(&dir.join("patch.json"))).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            pyjson::digest(&doc),
            pyjson::digest(&read_json(&dir.join("workspace.json"))),
            "{name}"
        );
    }
}

#[test]
fn twice_nll_matches_pyhf_at_init_and_at_pyhf_best_fits() {
    let rtol = ns_tests::tolerance("nll_rtol_vs_pyhf");
    for case in corpus() {
        let fitter = Fitter::new(&case.model);
        let r = &case.reference;
        assert_eq!(
            case.model.par_names,
            r["par_names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect::<Vec<_>>(),
            "{}",
            case.name
        );
        let mut points = vec![(
            "init",
            case.model.suggested_init(),
            r["at_init"]["twice_nll"].as_f64().unwrap(),
        )];
        for key in ["fit_scipy", "fit_minuit"] {
            points.push((
                key,
                floats(&r[key]["bestfit"]),
                r[key]["twice_nll"].as_f64().unwrap(),
            ));
        }
        for (at, pars, expected) in points {
            let ours = fitter.twice_nll(&pars, &case.data).unwrap();
            assert!(
                close(ours, expected, rtol),
                "{} at {at}: {ours} vs pyhf {expected}",
                case.name
            );
        }
    }
}

#[test]
fn fits_converge_at_or_below_pyhf_best_minimum() {
    for case in corpus() {
        let fitter = Fitter::new(&case.model);
        let fit = fitter
            .fit(&case.data, &FitConfig::suggested(&case.model))
            .unwrap();
        let r = &case.reference;
        let best = ["fit_scipy", "fit_minuit"]
            .iter()
            .map(|k| r[k]["twice_nll"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min);
        assert!(
            fit.converged,
            "{}: {:?}, projected gradient {}",
            case.name, fit.termination, fit.projected_gradient
        );
        assert!(
            fit.twice_nll <= best + ns_tests::tolerance("fit_nll_slack_vs_pyhf"),
            "{}: {} vs pyhf {best}",
            case.name,
            fit.twice_nll
        );
    }
}

/// Where pyhf's stored (default scipy) hypotest stopped its fits early, compared live instead in
/// tests/python/test_corpus.py: tt̄ ℓ+jets (its free fit stops 0.36 above the minimum, so its
/// CLs_obs = 0.5 is an artefact; our fits are fed to pyhf's formulas) and 2ℓ0j (an Asimov fit stops
/// short: CLs_exp[+1σ] moves by 1.0e-5; pyhf with tight minuit agrees with us to 2e-9).
const PYHF_FIT_STOPPED_EARLY: &[&str] = &["atlas_ttbar_ljets_xsec", "atlas_2L0J_simplified"];

#[test]
fn asymptotic_cls_matches_pyhf() {
    for case in corpus() {
        let fitter = Fitter::new(&case.model);
        let config = FitConfig::suggested(&case.model);
        let ours =
            hypotest_asymptotic(&fitter, 1.0, &case.data, &config, TestStatistic::QTilde).unwrap();
        assert!(
            ours.free_fit.converged && ours.fixed_fit.converged,
            "{}",
            case.name
        );
        if PYHF_FIT_STOPPED_EARLY.contains(&case.name.as_str()) {
            continue;
        }
        let r = &case.reference["hypotest_mu1"];
        let expected = floats(&r["CLs_exp"]);
        for (band, (a, b)) in ours.cls.cls_exp.iter().zip(&expected).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5,
                "{} CLs_exp[{band}]: {a} vs pyhf {b}",
                case.name
            );
        }
        let obs = r["CLs_obs"].as_f64().unwrap();
        assert!(
            (ours.cls.cls_obs - obs).abs() <= 1e-5,
            "{} CLs_obs: {} vs pyhf {obs}",
            case.name,
            ours.cls.cls_obs
        );
    }
}
