//! Binned HS3 files written by ROOT 6.40 (`../shared/hs3-binned`, README there) against RooFit's
//! numbers on the workspace each file's reference names (`oracle_for_this_file`): the NLL differs
//! from RooFit's by one constant at the default point and at RooFit's best fit; the fit reaches
//! RooFit's minimum with its parameters; the profile scan of the POI gives RooFit's absolute
//! profiled NLLs.

use std::path::PathBuf;

use ns_compute::Likelihood;
use ns_inference::{FitConfig, Fitter};
use ns_source::{Files, ModelRef};
use serde_json::Value;

fn hs3_dir() -> PathBuf {
    std::env::var_os("NEXTSTAT_HS3_BINNED")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/hs3-binned")
        })
}

/// The parameter vector of `point` (HS3 names, mapped by `names`), the rest at `base`.
fn point_of(
    model: &dyn Likelihood,
    names: &std::collections::BTreeMap<String, String>,
    base: &[f64],
    point: &serde_json::Map<String, Value>,
) -> Vec<f64> {
    let mut p = base.to_vec();
    for (theirs, value) in point {
        let value = value.as_f64().or_else(|| value[0].as_f64()).unwrap();
        let Some(ours) = names.get(theirs) else {
            // ROOT's constants (nominal values of global observables) are not parameters here.
            continue;
        };
        let i = model
            .parameter_index(ours)
            .unwrap_or_else(|e| panic!("{theirs} → {ours}: {e}"));
        p[i] = value;
    }
    p
}

#[test]
fn every_file_gives_roofits_numbers() {
    let dir = hs3_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".hs3.json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 9,
        "{} files in {}",
        files.len(),
        dir.display()
    );
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".hs3.json", "");
        let reference: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.reference.json"))).unwrap(),
        )
        .unwrap();
        let roofit = &reference[reference["oracle_for_this_file"].as_str().unwrap()];
        let document: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let names = ns_hs3::binned::read(&document, None)
            .unwrap()
            .unwrap()
            .names;
        let loaded = ModelRef::file(path).load_model(&Files).unwrap();
        let model = loaded.likelihood();
        let fitter = Fitter::new(model);
        let data = model.observed().unwrap();
        let init = model.suggested_init();
        let default = point_of(
            model,
            &names,
            &init,
            roofit["default_point"].as_object().unwrap(),
        );
        let best = point_of(model, &names, &init, roofit["bestfit"].as_object().unwrap());
        let nll = |p: &[f64]| fitter.twice_nll(p, &data).unwrap() / 2.0;
        let offset = roofit["nll_default"].as_f64().unwrap() - nll(&default);
        let offset_best = roofit["nll_best"].as_f64().unwrap() - nll(&best);
        let scale = roofit["nll_default"].as_f64().unwrap().abs().max(1.0);
        if (offset - offset_best).abs() > 1e-9 * scale {
            failures.push(format!(
                "{name}: RooFit's NLL minus ours is {offset} at the default point, {offset_best} at the best fit"
            ));
            continue;
        }
        let config = FitConfig::suggested(model);
        let fit = fitter.fit_global(&data, &config).unwrap();
        let ours_best = fit.twice_nll / 2.0 + offset;
        let theirs_best = roofit["nll_best"].as_f64().unwrap();
        if !(fit.converged && ours_best <= theirs_best + 1e-7) {
            failures.push(format!(
                "{name}: minimum {ours_best} ({:?}) vs RooFit's {theirs_best}",
                fit.termination
            ));
        }
        // RooFit's POI where both fits end in one minimum (the coupled-histosys model has two;
        // RooFit's fit from the default point ends in the higher).
        let (poi_hat, poi_err) = (
            roofit["poi_hat"].as_f64().unwrap(),
            roofit["poi_err"].as_f64().unwrap(),
        );
        let poi = model.poi().unwrap();
        if ours_best > theirs_best - 1e-6 && (fit.parameters[poi] - poi_hat).abs() > 2e-3 * poi_err
        {
            failures.push(format!(
                "{name}: POI {} vs RooFit's {poi_hat} ± {poi_err}",
                fit.parameters[poi]
            ));
        }
        // The scan: fixed-POI fits from the default point, absolute profiled NLLs.
        for row in roofit["scan_twice_dnll"].as_array().unwrap() {
            let (mu, q) = (row[0].as_f64().unwrap(), row[1].as_f64().unwrap());
            let at = fitter.fit(&data, &config.with_fixed(poi, mu)).unwrap();
            let ours = at.twice_nll / 2.0 + offset;
            let theirs = theirs_best + q / 2.0;
            // RooFit's scan starts each fit from the default point and may stop higher.
            if !(ours <= theirs + 1e-6 * q.abs().max(1.0)) || (theirs - ours) > 1e-3 {
                failures.push(format!(
                    "{name}: profiled NLL at μ = {mu}: {ours} vs RooFit's {theirs}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A change to one modifier.
type Edit = fn(&mut Value);

/// What the reader does not take is refused by name: another interpolation code, a shapesys with
/// some widths zero (ROOT leaves those γ free and unconstrained), a modifier type it does not know.
#[test]
fn what_is_not_read_is_refused_by_name() {
    let text = std::fs::read_to_string(hs3_dir().join("nextstat_complex.hs3.json")).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let cases: [(&str, Edit); 3] = [
        ("interpolation code 2", |m| m["interpolation"] = 2.into()),
        ("modifier type 'lumisys'", |m| m["type"] = "lumisys".into()),
        (
            "every width must be positive, or zero for a constant γ",
            |m| {
                m["data"]["vals"] = serde_json::json!([0.1, 0.0]);
                m["constraint_type"] = "Poisson".into();
            },
        ),
    ];
    for ((expected, edit), kind) in cases.into_iter().zip(["normsys", "normsys", "shapesys"]) {
        let mut doc = document.clone();
        edit(first_modifier(&mut doc, kind));
        let error = match ns_hs3::binned::read(&doc, None) {
            Err(e) => e.to_string(),
            Ok(_) => String::from("read"),
        };
        assert!(error.contains(expected), "{expected}: {error}");
        assert!(
            error.contains("modifier '"),
            "the error names the modifier: {error}"
        );
    }
}

/// A careless file — a likelihood naming a missing distribution, bin counts that disagree, a
/// modifier whose data has the wrong shape, a per-bin modifier with too few parameters — gets
/// an error naming the entry, never a model.
#[test]
fn careless_files_get_errors_naming_the_entry() {
    let text = std::fs::read_to_string(hs3_dir().join("nextstat_complex.hs3.json")).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let cases: [(&str, Edit); 6] = [
        (
            "names the distribution 'model_XX', which is not in 'distributions'",
            |d| {
                let likelihood = d["likelihoods"].as_array_mut().unwrap().iter_mut();
                for l in likelihood {
                    l["distributions"][0] = "model_XX".into();
                }
            },
        ),
        ("data.contents has 3 entries for 2 bins", |d| {
            let dist = histfactory(d, "model_SR");
            dist["samples"][0]["data"]["contents"]
                .as_array_mut()
                .unwrap()
                .push(3.0.into());
        }),
        ("contents has 1 entries for 2 bins", |d| {
            for data in d["data"].as_array_mut().unwrap() {
                data["contents"].as_array_mut().unwrap().pop();
            }
        }),
        ("data.hi.contents has 1 entries for 2 bins", |d| {
            first_modifier(d, "histosys")["data"]["hi"]["contents"] = serde_json::json!([1.0]);
        }),
        ("1 parameters for 2 bins", |d| {
            first_modifier(d, "staterror")["parameters"] =
                serde_json::json!(["gamma_stat_SR_bin_0"]);
        }),
        ("data.hi must be a number", |d| {
            first_modifier(d, "normsys")["data"]["hi"] = "x".into();
        }),
    ];
    for (expected, edit) in cases {
        let mut doc = document.clone();
        edit(&mut doc);
        let error = match ns_hs3::binned::read(&doc, None) {
            Err(e) => e.to_string(),
            Ok(_) => String::from("read"),
        };
        assert!(error.contains(expected), "{expected}: {error}");
    }
}

/// The `histfactory_dist` named `name`.
fn histfactory<'a>(doc: &'a mut Value, name: &str) -> &'a mut Value {
    doc["distributions"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|d| d["name"] == name)
        .unwrap()
}

/// The first modifier of type `kind` in a binned document.
fn first_modifier<'a>(doc: &'a mut Value, kind: &str) -> &'a mut Value {
    doc["distributions"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .filter(|d| d["type"] == "histfactory_dist")
        .flat_map(|d| d["samples"].as_array_mut().unwrap().iter_mut())
        .flat_map(|s| s["modifiers"].as_array_mut().unwrap().iter_mut())
        .find(|m| m["type"] == kind)
        .unwrap()
}

/// The older dialect (ROOT 6.32, ATLAS's published files): `"constraint": "Gauss"` on each
/// normsys and histosys instead of a constraint distribution and no interpolation code,
/// `"constraint": "Poisson"` on a staterror without its parameters' names. The same model as
/// ROOT 6.40's spelling.
#[test]
fn the_older_dialect_reads_as_the_same_model() {
    let path = hs3_dir().join("nextstat_complex.hs3.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut older: Value = serde_json::from_str(&text).unwrap();
    for dist in older["distributions"].as_array_mut().unwrap() {
        if dist["type"] != "histfactory_dist" {
            continue;
        }
        for sample in dist["samples"].as_array_mut().unwrap() {
            for m in sample["modifiers"].as_array_mut().unwrap() {
                let m = m.as_object_mut().unwrap();
                match m["type"].as_str().unwrap() {
                    "normsys" | "histosys" => {
                        // ROOT 6.32 writes no interpolation code: ROOT 6.40 reads code 4, which
                        // it evaluates as code 5.
                        m.remove("interpolation");
                        m.remove("constraint_name");
                        m.insert("constraint".into(), "Gauss".into());
                    }
                    "staterror" => {
                        m.remove("parameters");
                        m.remove("constraint_type");
                        m.insert("constraint".into(), "Poisson".into());
                    }
                    _ => {}
                }
            }
        }
    }
    let newer = ModelRef::file(&path).load_model(&Files).unwrap();
    let older_ref: ModelRef = serde_json::from_value(serde_json::json!({
        "format": "hs3", "document": older
    }))
    .unwrap();
    let older = older_ref.load_model(&Files).unwrap();
    let (a, b) = (newer.likelihood(), older.likelihood());
    assert_eq!(a.parameter_names(), b.parameter_names());
    let data = a.observed().unwrap();
    let (fa, fb) = (Fitter::new(a), Fitter::new(b));
    let mut p = a.suggested_init();
    for step in 0..5 {
        for (i, v) in p.iter_mut().enumerate() {
            *v += 0.01 * ((i + step) % 3) as f64;
        }
        assert_eq!(
            fa.twice_nll(&p, &data).unwrap(),
            fb.twice_nll(&p, &data).unwrap()
        );
    }
}

/// A file without ROOT's nominal snapshot — no parameter point gives the γ's global observables
/// (`nom_gamma_…`), as ROOT writes a RooSimultaneous built by hand — reads as RooFit reads it:
/// each observable at its constraint's nominal (τ = 1/σ² for a Poisson, 1 for a Gaussian), the
/// same likelihood as the file with the snapshot.
#[test]
fn gamma_global_observables_default_to_their_nominals_as_roofit_reads_them() {
    for name in [
        "nextstat_simple",
        "nextstat_complex",
        "nextstat_complex_gaussstat",
        "nextstat_shape",
    ] {
        let text = std::fs::read_to_string(hs3_dir().join(format!("{name}.hs3.json"))).unwrap();
        let document: Value = serde_json::from_str(&text).unwrap();
        let mut without = document.clone();
        let mut removed = 0;
        for point in without["parameter_points"].as_array_mut().unwrap() {
            let parameters = point["parameters"].as_array_mut().unwrap();
            let before = parameters.len();
            parameters.retain(|p| !p["name"].as_str().unwrap().starts_with("nom_gamma_"));
            removed += before - parameters.len();
        }
        assert!(removed > 0, "{name} has γ global observables");
        let twice_nll = |doc: Value| {
            let loaded = ModelRef::ByContent(ns_source::PyhfRef {
                workspace: ns_source::Source::Inline(doc),
                ..ns_source::PyhfRef::file("")
            })
            .load_model(&Files)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let model = loaded.likelihood();
            let data = model.observed().unwrap();
            let fitter = Fitter::new(model);
            let init = model.suggested_init();
            (fitter.twice_nll(&init, &data).unwrap(), data.aux)
        };
        let (with_snapshot, aux) = twice_nll(document);
        let (without_snapshot, aux_default) = twice_nll(without);
        assert_eq!(aux.len(), aux_default.len());
        for (a, b) in aux.iter().zip(&aux_default) {
            assert!(
                (a - b).abs() <= 1e-13 * a.abs().max(1.0),
                "{name}: global observables {aux:?} vs {aux_default:?}"
            );
        }
        assert!(
            (with_snapshot - without_snapshot).abs() <= 1e-12 * with_snapshot.abs(),
            "{name}: {with_snapshot} vs {without_snapshot}"
        );
    }
}
