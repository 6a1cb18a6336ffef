//! HistFactory XML through the model registry — `nextstat VERB combination.xml` — gives pyhf
//! 0.7.6's numbers under pyhf's semantics on every set of `../shared/histfactory-xml` that pyhf
//! reads: the parameters, twice_nll at the suggested init, and fits at pyhf's minimum or lower.

use std::path::PathBuf;

use ns_inference::{FitConfig, Fitter};
use ns_source::{Files, ModelRef, PyhfRef, Source};
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
    for group in ["pyhf-validation", "pyhf-docs", "."] {
        for entry in std::fs::read_dir(shared().join(group)).unwrap() {
            let set = entry.unwrap().path();
            let Ok(text) = std::fs::read_to_string(set.join("reference.json")) else {
                continue;
            };
            let reference: Value = serde_json::from_str(&text).unwrap();
            for top in reference["tops"].as_array().unwrap() {
                if top.get("pyhf_readxml_error").is_some() {
                    continue;
                }
                let path = set.join(top["top"].as_str().unwrap());
                for m in top["measurements"].as_array().unwrap() {
                    let pyhf = &m["pyhf_code4_code4p"];
                    if pyhf.is_null() || pyhf.get("twice_nll_init").is_none() {
                        continue;
                    }
                    let name = m["name"].as_str().unwrap();
                    let at = format!("{} {name}", path.display());
                    // As the CLI names it: a path, its format found from its head.
                    let reference_of = ModelRef::ByContent(PyhfRef {
                        workspace: Source::Path(path.clone()),
                        measurement: Some(name.into()),
                        ..PyhfRef::file("")
                    });
                    let loaded = reference_of
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
            }
        }
    }
    assert!(
        measurements >= 18,
        "only {measurements} measurements compared"
    );
}
