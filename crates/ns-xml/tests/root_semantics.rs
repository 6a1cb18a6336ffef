//! HistFactory XML read with ROOT's semantics (the default): what ROOT's hist2workspace reads
//! and pyhf does not (a channel's HistoPath inherited, TH2 histograms, the channels'
//! StatErrorConfig, ShapeSys constraint types, a measurement's ConstraintTerms, Lumi in single
//! precision), and what it refuses by name.

use std::path::{Path, PathBuf};

use ns_core::FileAccess;
use ns_core::layout::{NormsysTransform, PoissonRange};
use ns_translate::model::root::{
    ConstraintTerm, ConstraintType, ROOT_SEMANTICS_KEY, RootSemantics,
};
use ns_translate::{FromWorkspace, HistFactoryModel, ModelOptions, Workspace};
use ns_xml::{ReadOptions, Semantics, read};
use serde_json::Value;

fn shared() -> PathBuf {
    std::env::var_os("NEXTSTAT_HISTFACTORY_XML").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/histfactory-xml"),
        PathBuf::from,
    )
}

fn read_in(set: &Path, top: &str, semantics: Semantics) -> ns_core::Result<Value> {
    read(
        &set.join(top),
        &ReadOptions {
            semantics,
            base_dir: Some(set),
            access: FileAccess::Local { base: Some(set) },
            sent: None,
        },
    )
}

fn semantics_of(workspace: &Value) -> RootSemantics {
    serde_json::from_value(workspace[ROOT_SEMANTICS_KEY].clone()).unwrap()
}

#[test]
fn the_all_modifier_set_reads_as_root_reads_it() {
    let set = shared().join("allmodifiers");
    let workspace = read_in(&set, "config/combination.xml", Semantics::Root).unwrap();
    let root = semantics_of(&workspace);
    // SR declares Poisson with threshold 0.05; CR has no StatErrorConfig: ROOT's default, the same.
    for channel in ["staterror_SR", "staterror_CR"] {
        let config = root.staterror[channel];
        assert_eq!(config.constraint, ConstraintType::Poisson, "{channel}");
        assert_eq!(config.threshold, 0.05, "{channel}");
    }
    assert_eq!(
        root.shapesys["bkg2_shape"].constraint,
        ConstraintType::Poisson
    );
    assert_eq!(
        root.shapesys["dd_extrap"].constraint,
        ConstraintType::Gaussian
    );
    let terms = &root.constraint_terms["allmod"];
    assert_eq!(
        terms["bkg2_gamma"],
        ConstraintTerm::Gamma {
            relative_uncertainty: 0.5
        }
    );
    // std::stof: 0.2 in single precision.
    assert_eq!(
        terms["bkg1_norm"],
        ConstraintTerm::LogNormal {
            relative_uncertainty: f64::from(0.2f32)
        }
    );
    assert_eq!(terms["bkg2_uniform"], ConstraintTerm::Uniform);
    let lumi = &workspace["measurements"][0]["config"]["parameters"][0];
    assert_eq!(lumi["sigmas"][0].as_f64(), Some(f64::from(0.05f32)));
    assert_eq!(lumi["bounds"][0], serde_json::json!([0.0, 10.0]));
    // Every sample is scaled by Lumi, NormalizeByTheory="False" ones included (ROOT 6.40).
    for channel in workspace["channels"].as_array().unwrap() {
        for sample in channel["samples"].as_array().unwrap() {
            assert!(
                sample["modifiers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["type"] == "lumi"),
                "{}",
                sample["name"]
            );
        }
    }
    // The channel's HistoPath is inherited by its systematics' histograms: the same workspace
    // (but for the measurement's name), where pyhf's reading fails.
    let mut inherited = read_in(&set, "config/combination_inherit.xml", Semantics::Root).unwrap();
    inherited["measurements"][0]["name"] = "allmod".into();
    let constraint_terms = &mut inherited[ROOT_SEMANTICS_KEY]["constraint_terms"];
    let terms = constraint_terms["allmod_inherit"].take();
    *constraint_terms = serde_json::json!({"allmod": terms});
    assert_eq!(inherited, workspace);
    let pyhf = read_in(&set, "config/combination_inherit.xml", Semantics::Pyhf).unwrap_err();
    assert!(pyhf.to_string().contains("signal_jes_dn"), "{pyhf}");
}

#[test]
fn two_dimensional_histograms_read_as_one_row_of_bins() {
    let set = shared().join("pyhf-validation/xmlimport_input");
    let top = "config/examples/example_ShapeSys2D.xml";
    let workspace = read_in(&set, top, Semantics::Root).unwrap();
    let data = workspace["observations"][0]["data"].as_array().unwrap();
    assert_eq!(data.len(), 4);
    let pyhf = read_in(&set, top, Semantics::Pyhf).unwrap_err().to_string();
    assert!(
        pyhf.contains("(2-D): pyhf's semantics read 1-D histograms only"),
        "{pyhf}"
    );
}

#[test]
fn a_normfactor_that_names_a_function_is_its_expression() {
    let set = shared().join("pyhf-validation/xmlimport_input");
    let top = "config/examples/example_Expression.xml";
    // sqrt(SigXsecOverSM) twice on the signal: SigXsecOverSM itself, starting in the middle of
    // its Dependents range [0, 3] as RooFit's factory puts it; rootPOI is no parameter.
    let workspace = Workspace::from_value(read_in(&set, top, Semantics::Root).unwrap()).unwrap();
    let model = HistFactoryModel::from_workspace(&workspace, &ModelOptions::default()).unwrap();
    let poi = model.parameter_set("SigXsecOverSM").unwrap();
    assert_eq!(
        (poi.inits.clone(), poi.bounds.clone()),
        (vec![1.5], vec![(0.0, 3.0)])
    );
    assert!(model.parameter_set("rootPOI").is_none());
    // pyhf ignores the function (and then misses the POI).
    read_in(&set, top, Semantics::Pyhf).unwrap();
    // Variants: what multiplies out to a power other than 1, or is no product, is refused.
    let folder = std::env::temp_dir().join(format!("ns-xml-functions-{}", std::process::id()));
    std::fs::create_dir_all(folder.join("data")).unwrap();
    std::fs::copy(
        set.join("data/example.root"),
        folder.join("data/example.root"),
    )
    .unwrap();
    let channel =
        std::fs::read_to_string(set.join("config/examples/example_Expression_channel.xml"))
            .unwrap()
            .replace("./config/examples/", "");
    let combination = std::fs::read_to_string(set.join(top)).unwrap();
    std::fs::write(folder.join("example_Expression_channel.xml"), &channel).unwrap();
    for (expression, expected) in [
        ("SigXsecOverSM", Err("SigXsecOverSM^2")),
        ("2*SigXsecOverSM^0.5", Ok(4.0)),
        ("1+SigXsecOverSM", Err("an operator other than")),
        ("sqrt(other)", Err("'other' is not one of its Dependents")),
    ] {
        let text = combination
            .replace("./config/examples/", "")
            .replace("sqrt(SigXsecOverSM)", expression);
        std::fs::write(folder.join("top.xml"), text).unwrap();
        let read = read_in(&folder, "top.xml", Semantics::Root);
        match expected {
            Ok(constant) => {
                let workspace = Workspace::from_value(read.unwrap()).unwrap();
                let model =
                    HistFactoryModel::from_workspace(&workspace, &ModelOptions::default()).unwrap();
                let fixed = model
                    .parameter_set("channel1_signal_function_constant")
                    .unwrap();
                assert_eq!((fixed.inits[0], fixed.fixed[0]), (constant, true));
            }
            Err(message) => {
                let error = read.unwrap_err().to_string();
                assert!(error.contains(message), "{expression}: {error}");
            }
        }
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn constraint_terms_shape_the_model() {
    let set = shared().join("pyhf-validation/xmlimport_input");
    let mut workspace = read_in(&set, "config/example.xml", Semantics::Root).unwrap();
    let build = |workspace: &Value, measurement: &str| {
        let workspace = Workspace::from_value(workspace.clone()).unwrap();
        let options = ModelOptions {
            measurement: Some(measurement.into()),
            ..ModelOptions::default()
        };
        HistFactoryModel::from_workspace(&workspace, &options)
    };
    // Gamma makes syst2 ROOT's β: start 1 in [0, 10], read as (β − 1)/rel, Poisson-constrained
    // with its global observable at min(1/rel², 10) and normalised over [0, 10].
    let gamma = build(&workspace, "GammaExample").unwrap();
    let syst2 = gamma.parameter_set("syst2").unwrap();
    let rel = f64::from(0.3f32);
    let tau = 1.0 / (rel * rel);
    assert_eq!(
        (syst2.inits.clone(), syst2.bounds.clone()),
        (vec![1.0], vec![(0.0, 10.0)])
    );
    assert_eq!(
        (syst2.auxdata.clone(), syst2.factors.clone()),
        (vec![10.0], vec![tau])
    );
    assert_eq!(
        gamma.compiled.normsys_inputs[0].transform,
        NormsysTransform::Linear { scale: 1.0 / rel }
    );
    assert_eq!(
        gamma.compiled.poisson_ranges,
        vec![PoissonRange {
            param: syst2.offset as u32,
            tau,
            high: 10.0
        }]
    );
    // ROOT's β replaces only an OverallSys's α: a Gamma term on a HistoSys's name is refused.
    let mut on_histosys = workspace.clone();
    let sample = &mut on_histosys["channels"][0]["samples"][1];
    let nominal = sample["data"].clone();
    sample["modifiers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(
        {"name": "syst2", "type": "histosys", "data": {"hi_data": nominal, "lo_data": nominal}}));
    let error = build(&on_histosys, "GammaExample").unwrap_err().to_string();
    assert!(error.contains("also read by a HistoSys"), "{error}");
    // LogNormal reads the normsys through τ(κ^α − 1).
    let lognormal = build(&workspace, "LogNormExample").unwrap();
    let input = lognormal.compiled.normsys_inputs[0];
    let syst2 = lognormal.parameter_index("syst2").unwrap();
    assert_eq!(input.param as usize, syst2);
    // ROOT's tau_syst2 = 1/rel and kappa_syst2 = 1 + rel, rel = 0.3 in single precision.
    assert_eq!(
        input.transform,
        NormsysTransform::LogNormal {
            tau: 1.0 / rel,
            kappa: 1.0 + rel
        }
    );
    // A width that is no width is refused by name (not a NaN likelihood).
    let mut zero = workspace.clone();
    zero[ROOT_SEMANTICS_KEY]["constraint_terms"]["LogNormExample"]["syst2"] =
        serde_json::json!({"type": "lognormal", "relative_uncertainty": 0.0});
    let error = build(&zero, "LogNormExample").unwrap_err().to_string();
    assert!(
        error.contains("RelativeUncertainty=\"0\" must be a positive"),
        "{error}"
    );
    // ROOT's terms are keyed by name: renaming is refused rather than dropping them.
    let typed = Workspace::from_value(workspace.clone()).unwrap();
    let mut rename = ns_translate::ops::Rename::default();
    rename.modifiers.insert("syst2".into(), "other".into());
    let error = typed.rename(&rename).unwrap_err().to_string();
    assert!(
        error.contains("ROOT's semantics cannot be renamed"),
        "{error}"
    );
    // NoConstraint leaves the OverallSys out; Uniform is a Gaussian of width 100.
    workspace[ROOT_SEMANTICS_KEY]["constraint_terms"]["GaussExample"] = serde_json::json!({
        "syst2": {"type": "noconstraint"},
        "syst3": {"type": "uniform"},
    });
    let model = build(&workspace, "GaussExample").unwrap();
    assert!(
        !model.par_names.iter().any(|n| n == "syst2"),
        "{:?}",
        model.par_names
    );
    assert_eq!(model.parameter_set("syst3").unwrap().sigmas, vec![100.0]);
    assert!(model.compiled.clip_sample_yields);
}
