//! Structure-aware fuzzing that CI runs (bounded): the seed workspaces of `fuzz/seeds` (written by
//! scripts/make_examples.py) with random nodes replaced, removed or duplicated, and random JSON
//! patches applied, through parsing, validation, the model builder, one NLL + gradient, a short fit
//! and the serialisers. Nothing may panic; errors are fine. The byte-level cargo-fuzz target is
//! `fuzz/fuzz_targets/workspace.rs` (docs/testing.md).

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_core::InterpCodes;
use ns_inference::differentiable::{DifferentiableSession, StatisticData};
use ns_inference::{FitConfig, Fitter, TestStatistic};
use ns_translate::FromWorkspace;
use ns_translate::pyjson::{DumpOptions, digest, dumps};
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
use proptest::prelude::*;
use serde_json::{Value, json};

fn seeds() -> Vec<Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files.iter().map(|p| ns_tests::read_json(p)).collect()
}

/// Values that break assumptions: extremes, wrong types, empty containers.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(-1.0)),
        Just(json!(1e308)),
        Just(json!(-1e-320)),
        Just(json!(4294967296u64)),
        Just(json!(18446744073709551615u64)),
        Just(json!(0.5907363891601562)),
        Just(json!(null)),
        Just(json!(true)),
        Just(json!("")),
        Just(json!("x[0]")),
        Just(json!([])),
        Just(json!([[]])),
        Just(json!({})),
        Just(json!({"hi": 0, "lo": -1})),
        Just(json!({"hi_data": [], "lo_data": [1e300]})),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| json!(x)),
        "[a-z\\[\\]0-9]{0,6}".prop_map(|s| json!(s)),
    ]
}

/// Every JSON pointer of a document.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                pointers(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    Replace(usize, Value),
    Remove(usize),
    Duplicate(usize),
}

fn mutate(doc: &mut Value, mutation: &Mutation) {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let pick = |i: usize| all[i % all.len()].clone();
    match mutation {
        Mutation::Replace(i, v) => {
            if let Some(node) = doc.pointer_mut(&pick(*i)) {
                *node = v.clone();
            }
        }
        Mutation::Remove(i) | Mutation::Duplicate(i) => {
            let path = pick(*i);
            let Some((parent, key)) = path.rsplit_once('/') else {
                return;
            };
            let duplicate = matches!(mutation, Mutation::Duplicate(_));
            match doc.pointer_mut(parent) {
                Some(Value::Array(items)) => {
                    if let Ok(k) = key.parse::<usize>()
                        && k < items.len()
                    {
                        if duplicate {
                            let copy = items[k].clone();
                            items.push(copy);
                        } else {
                            items.remove(k);
                        }
                    }
                }
                Some(Value::Object(map)) if !duplicate => {
                    map.remove(key);
                }
                _ => {}
            }
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), hostile_value()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        any::<usize>().prop_map(Mutation::Remove),
        any::<usize>().prop_map(Mutation::Duplicate),
    ]
}

/// Everything a verb does with a workspace, short of long inference.
fn exercise(doc: Value) {
    let _ = dumps(&doc, DumpOptions::PYHF_CLI);
    let _ = digest(&doc);
    let Ok(ws) = Workspace::from_value(doc) else {
        return;
    };
    let _ = ws.sorted();
    let _ = ns_translate::ops::inspect(&ws);
    let _ = ws.orphaned_observations();
    for codes in [InterpCodes::default(), InterpCodes::legacy()] {
        let options = ModelOptions {
            measurement: None,
            codes,
            clip_negative_yields: false,
        };
        let Ok(model) = HistFactoryModel::from_workspace(&ws, &options) else {
            continue;
        };
        let Ok(full) = ws.data(&model, true) else {
            continue;
        };
        let Ok(data) = PreparedData::from_full(&model.compiled, &full) else {
            continue;
        };
        let eval = CpuEvaluator::new(&model.compiled);
        let mut grad = vec![0.0; model.n_params()];
        let _ = eval.nll_with_gradient(
            &model.suggested_init(),
            &data,
            &mut Scratch::new(&model.compiled),
            Some(&mut grad),
        );
        let mut config = FitConfig::suggested(&model);
        config.optimizer.max_iterations = 20;
        let _ = Fitter::new(&model).fit(&data, &config);
        exercise_differentiable(&model, &data, &config);
    }
}

/// The differentiable session on every sample of the model in turn, at its own yields and at
/// doubled ones.
fn exercise_differentiable(model: &HistFactoryModel, data: &PreparedData, config: &FitConfig) {
    for (b, sample) in model.block_samples.iter().enumerate() {
        let bin = model.compiled.samples[b].bin_start as usize;
        let Some(channel) = model.channels.iter().find(|c| c.bin_start == bin) else {
            continue;
        };
        let Ok(session) =
            DifferentiableSession::new(model, &[(channel.name.clone(), sample.clone())])
        else {
            continue;
        };
        let nominal = session.nominal_signal();
        let doubled: Vec<f64> = nominal.iter().map(|v| 2.0 * v).collect();
        for signal in [&nominal, &doubled] {
            let _ = session.nll(signal, &model.suggested_init(), data);
            let _ = session.profiled(
                signal,
                TestStatistic::Q0,
                0.0,
                StatisticData::Fixed(data),
                config,
            );
        }
    }
}

proptest! {
    // 1400 fresh cases a run (seeds differ between runs, so runs add up): each case fits and
    // differentiates its model, about 30 ms a case in the debug build, and this test is the
    // longest of the Rust suite (the tail of its 2-core run); the fuzz targets (fuzz/) search
    // the same space for as long as they are given.
    #![proptest_config(ProptestConfig { cases: 1400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_workspaces_never_panic(seed in any::<usize>(), mutations in proptest::collection::vec(mutation(), 1..4)) {
        let all = seeds();
        let mut doc = all[seed % all.len()].clone();
        for m in &mutations {
            mutate(&mut doc, m);
        }
        exercise(doc);
    }

    #[test]
    fn random_patches_never_panic(
        seed in any::<usize>(),
        target in any::<usize>(),
        op in prop_oneof![Just("add"), Just("remove"), Just("replace"), Just("move"), Just("copy"), Just("test")],
        value in hostile_value(),
    ) {
        let all = seeds();
        let mut doc = all[seed % all.len()].clone();
        let mut paths = Vec::new();
        pointers(&doc, String::new(), &mut paths);
        let path = paths[target % paths.len()].clone();
        let from = paths[(target / 7) % paths.len()].clone();
        let patch = json!([{"op": op, "path": path, "from": from, "value": value}]);
        if ns_translate::patch::apply_patch(&mut doc, &patch, "patch").is_ok() {
            exercise(doc);
        }
    }
}
