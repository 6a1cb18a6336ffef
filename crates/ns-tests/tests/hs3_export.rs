//! HS3 written by nextstat (`ns_hs3::binned::write`, `nextstat export-hs3`) and read back by
//! nextstat: every shared pyhf workspace and published likelihood, and every ROOT-written file
//! of `../shared/hs3-binned`, is the same likelihood under the same parameter names (NLL to
//! 1e-12 relative at random points; the file means ROOT's model, which clips each sample's
//! yield at zero, so a pyhf workspace is compared with its clipped model). RooFit's reading of
//! the same files is tests/python/test_hs3_export.py.

use ns_compute::Likelihood;
use ns_core::HistFactoryModel;
use ns_inference::Fitter;
use ns_source::{Files, LoadedModel, ModelRef};
use ns_tests::{TestRng, published_likelihoods, random_point, shared_workspaces};
use ns_translate::{FromWorkspace, ModelOptions, Workspace};

/// The model `document` (HS3) reads as.
fn read_back(document: &serde_json::Value) -> HistFactoryModel {
    let binned = ns_hs3::binned::read(document, None)
        .unwrap_or_else(|e| panic!("reading the written file: {e}"))
        .expect("a binned file");
    let workspace = Workspace::from_value(binned.workspace).unwrap();
    let options = ModelOptions {
        codes: binned.codes,
        ..ModelOptions::default()
    };
    HistFactoryModel::from_workspace(&workspace, &options).unwrap()
}

/// `original` and `copy` give one NLL at the start, at random points and at the minimum, their
/// parameters matched by name; a message where they do not.
fn same_likelihood(
    name: &str,
    original: &HistFactoryModel,
    copy: &HistFactoryModel,
) -> Result<(), String> {
    let mut names = original.par_names.clone();
    names.sort();
    let mut copied = copy.par_names.clone();
    copied.sort();
    if names != copied {
        let missing: Vec<_> = names
            .iter()
            .filter(|n| !copied.contains(n))
            .take(4)
            .collect();
        let extra: Vec<_> = copied
            .iter()
            .filter(|n| !names.contains(n))
            .take(4)
            .collect();
        return Err(format!(
            "{name}: parameters differ: missing {missing:?}, new {extra:?}"
        ));
    }
    let index: Vec<usize> = original
        .par_names
        .iter()
        .map(|n| copy.parameter_index(n).unwrap())
        .collect();
    let data = original.observed().map_err(|e| format!("{name}: {e}"))?;
    let copy_data = copy.observed().map_err(|e| format!("{name}: {e}"))?;
    let mut rng = TestRng::new(11);
    let mut points = vec![original.suggested_init()];
    points.extend((0..8).map(|_| random_point(original, &mut rng)));
    for point in &points {
        let mut moved = vec![0.0; point.len()];
        for (i, &j) in index.iter().enumerate() {
            moved[j] = point[i];
        }
        let (a, b) = (
            Fitter::new(original).twice_nll(point, &data),
            Fitter::new(copy).twice_nll(&moved, &copy_data),
        );
        let (a, b) = (a.map_err(|e| e.to_string())?, b.map_err(|e| e.to_string())?);
        if (a - b).abs() > 1e-12 * a.abs().max(1.0) {
            return Err(format!(
                "{name}: twice_nll {a} here, {b} read back ({:e})",
                b - a
            ));
        }
    }
    Ok(())
}

/// `model` (of `workspace`) written as HS3 and read back: the same likelihood, or why not.
fn round_trip(name: &str, workspace: &Workspace, model: &HistFactoryModel) -> Result<(), String> {
    let document = ns_hs3::binned::write(workspace, model).map_err(|e| format!("{name}: {e}"))?;
    same_likelihood(name, model, &read_back(&document))
}

#[test]
fn a_written_workspace_reads_back_as_the_same_likelihood() {
    let mut sources: Vec<(String, Workspace)> = shared_workspaces();
    for (name, dir) in published_likelihoods() {
        let path = dir.join("workspace.json");
        if path.is_file() {
            sources.push((name, Workspace::from_path(&path).unwrap()));
        }
    }
    assert!(sources.len() >= 25, "{} sources", sources.len());
    let options = ModelOptions {
        clip_negative_yields: true,
        ..ModelOptions::default()
    };
    let mut failures = Vec::new();
    let code1 = ModelOptions {
        codes: ns_core::InterpCodes {
            normsys: ns_core::NormsysCode::Code1,
            ..ns_core::InterpCodes::default()
        },
        ..options.clone()
    };
    let variants = sources.iter().flat_map(|(name, ws)| {
        [
            (name.clone(), ws, &options),
            (format!("{name} (normsys code1)"), ws, &code1),
        ]
    });
    for (name, workspace, options) in variants {
        let model = HistFactoryModel::from_workspace(workspace, options).unwrap();
        failures.extend(round_trip(&name, workspace, &model).err());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ROOT's own files (`../shared/hs3-binned`) go through nextstat and back to the same model.
#[test]
fn roots_files_survive_a_round_trip() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/hs3-binned");
    let mut failures = Vec::new();
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".hs3.json") {
            continue;
        }
        count += 1;
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let LoadedModel::Binned {
            workspace: Some(workspace),
            model,
            ..
        } = ModelRef::file(&path).load_model(&Files).unwrap()
        else {
            panic!("{name}: a binned model");
        };
        failures.extend(round_trip(&name, &workspace, &model).err());
    }
    assert!(count >= 9, "{count} files in {}", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// CMS Combine datacards are written as HS3 where pyhf expresses their likelihood exactly
/// (`datacard2json`'s cards: symmetric lnN as normsys code1, gmN, ranged rateParams): the file
/// reads back as that likelihood; every other card is refused with the term that has no such
/// form named, and nothing is written.
#[test]
fn datacards_are_written_where_pyhf_expresses_them() {
    let reference = ns_tests::read_json(&ns_tests::combine_dir().join("reference.json"));
    let cards = reference["cards"].as_object().unwrap();
    let (mut written, mut refused, mut failures) = (0, 0, Vec::new());
    for (name, card) in cards {
        let path = ns_tests::combine_dir().join(card["card"].as_str().unwrap());
        // The card with its text2workspace mass, as the Combine tests read it.
        let command = card["commands"]["text2workspace"].as_str().unwrap_or("");
        let mass = command.split_whitespace().skip_while(|w| *w != "-m").nth(1);
        let source: ModelRef = serde_json::from_value(serde_json::json!({
            "format": "datacard",
            "card": path,
            "mass": mass,
        }))
        .unwrap();
        match source.to_hs3(&Files) {
            Ok(document) => {
                written += 1;
                let workspace =
                    Workspace::from_value(source.datacard_as_pyhf(&Files).unwrap()).unwrap();
                let options = ModelOptions {
                    codes: ns_core::InterpCodes {
                        normsys: ns_core::NormsysCode::Code1,
                        ..ns_core::InterpCodes::default()
                    },
                    clip_negative_yields: true,
                    ..ModelOptions::default()
                };
                let model = HistFactoryModel::from_workspace(&workspace, &options).unwrap();
                failures.extend(same_likelihood(name, &model, &read_back(&document)).err());
            }
            Err(e) => {
                refused += 1;
                let message = e.to_string();
                if !message.contains("pyhf") {
                    failures.push(format!("{name}: refused without naming why: {message}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        (written, refused),
        (6, 12),
        "written and refused of the 18 shared cards"
    );
}
