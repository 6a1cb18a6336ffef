//! Sharded work: toys, scans, rankings and CLs-scan limits split into 1, 2, 3 and 7 shards merge
//! to the JSON one process writes, byte for byte; a patchset grid's shards to the whole grid's
//! table; parts that are missing, repeated, of another job or tampered with are refused, naming
//! the part.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ns_api::call::Call;
use ns_api::grid::Grid;
use ns_api::request::Request;
use ns_api::shard::{Job, Shard, merge, run_part, units};
use ns_core::Error;
use ns_inference::fit::Fitter;
use ns_source::{LoadedModel, ModelRef};
use serde_json::Value;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/analysis.json")
}

fn read(path: &Path) -> ns_core::Result<Value> {
    ns_translate::load::read_json(path)
}

fn loaded(call: &Call) -> LoadedModel {
    call.model
        .as_ref()
        .unwrap()
        .load_model(&ns_source::Files)
        .unwrap()
}

/// The JSON text one process writes for `call`.
fn whole(call: &Call) -> String {
    let model = loaded(call);
    let outcome = call
        .run(
            model.likelihood(),
            Arc::new(AtomicBool::new(false)),
            &|_| {},
        )
        .unwrap();
    serde_json::to_string_pretty(&call.report(&outcome, model.likelihood(), false)).unwrap()
}

/// The part documents of `call` split into `count` shards, as (name, document).
fn parts(call: &Call, count: usize) -> Vec<(String, Value)> {
    let model = loaded(call);
    let likelihood = model.likelihood();
    let fitter = Fitter::new(likelihood);
    let digest = call.model.as_ref().unwrap().digest(&read).unwrap();
    let job = Job::of_call(
        call,
        digest,
        fitter.device(),
        count,
        units(call, likelihood).unwrap(),
    )
    .unwrap();
    (0..count)
        .map(|i| {
            let shard = Shard::new(i, count).unwrap();
            let part = run_part(call, &fitter, shard, &|_| {}).unwrap();
            // Through text, as parts travel between machines.
            let text = serde_json::to_string(&job.partial(shard, part)).unwrap();
            (
                format!("part{i}.json"),
                serde_json::from_str(&text).unwrap(),
            )
        })
        .collect()
}

fn merged(parts: &[(String, Value)]) -> String {
    serde_json::to_string_pretty(&merge(parts).unwrap()).unwrap()
}

fn call_of(request: Request) -> Call {
    Call::new(Some(ModelRef::file(example())), request)
}

fn requests() -> Vec<(&'static str, Request)> {
    vec![
        (
            "toys",
            Request::HypotestToys {
                mu: 1.0,
                test_stat: ns_inference::TestStatistic::QTilde,
                n_toys: 50,
                seed: 7,
                teststats: true,
            },
        ),
        (
            "scan",
            Request::ProfileScan {
                parameter: None,
                values: ns_api::call::linspace(0.0, 2.0, 15.0).unwrap(),
                parameters: Vec::new(),
                grid: Vec::new(),
                cl: None,
                refine: 0,
            },
        ),
        ("ranking", Request::Ranking),
        // 7 × 5 points: shards of 7 split the grid's rows.
        (
            "grid scan",
            Request::ProfileScan {
                parameter: None,
                values: Vec::new(),
                parameters: vec!["mu_sig".into(), "k_ttbar".into()],
                grid: vec![
                    ns_api::call::linspace(0.0, 3.0, 7.0).unwrap(),
                    ns_api::call::linspace(0.5, 1.5, 5.0).unwrap(),
                ],
                cl: None,
                refine: 0,
            },
        ),
        (
            "CLs-scan limit",
            Request::UpperLimit {
                level: 0.05,
                scan: Some(ns_api::call::linspace(0.0, 3.0, 16.0).unwrap()),
                n_toys: None,
                seed: 0,
            },
        ),
        // 4 μ × 30 toys: shards of 7 split μ values' toys between parts.
        (
            "toy-based limit",
            Request::UpperLimit {
                level: 0.05,
                scan: Some(ns_api::call::linspace(0.5, 2.0, 4.0).unwrap()),
                n_toys: Some(30),
                seed: 5,
            },
        ),
    ]
}

#[test]
fn shards_merge_to_the_single_process_bytes() {
    for (what, request) in requests() {
        let call = call_of(request);
        let expected = whole(&call);
        for count in [1, 2, 3, 7] {
            let mut parts = parts(&call, count);
            // Parts come in any order.
            parts.reverse();
            assert_eq!(
                merged(&parts),
                expected,
                "{what} in {count} shards differs from one process"
            );
        }
    }
}

fn error_of(parts: &[(String, Value)]) -> String {
    match merge(parts) {
        Err(Error::InvalidInput(m)) => m,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn missing_repeated_foreign_and_tampered_parts_are_refused_by_name() {
    let toys = call_of(requests().remove(0).1);
    let parts3 = parts(&toys, 3);

    let missing = error_of(&parts3[..2]);
    assert!(missing.contains("missing: 2/3"), "{missing}");

    let mut repeated = parts3.clone();
    repeated.push(("again.json".into(), parts3[1].1.clone()));
    let message = error_of(&repeated);
    assert!(
        message.contains("part1.json and again.json are both shard 1/3")
            || message.contains("again.json and part1.json are both shard 1/3"),
        "{message}"
    );

    // Another seed: another job.
    let mut other = toys.clone();
    if let Request::HypotestToys { seed, .. } = &mut other.request {
        *seed = 8;
    }
    let mut foreign = parts3.clone();
    foreign[2] = ("foreign.json".into(), parts(&other, 3).remove(2).1);
    let message = error_of(&foreign);
    assert!(
        message.contains("foreign.json is not a part of the job") && message.contains("request"),
        "{message}"
    );

    // Another split of the same job.
    let mut mixed = parts(&toys, 2);
    mixed.push(("third.json".into(), parts3[2].1.clone()));
    let message = error_of(&mixed);
    assert!(
        message.contains("third.json") && message.contains("split"),
        "{message}"
    );

    // Another verb.
    let mut verbs = parts3.clone();
    verbs[0] = (
        "scan.json".into(),
        parts(&call_of(requests()[1].1.clone()), 3).remove(0).1,
    );
    let message = error_of(&verbs);
    assert!(message.contains("another verb"), "{message}");

    // A part edited after its shard wrote it: refused by name, whatever was changed.
    for (key, value) in [
        (
            "/result/background_only/teststats/0",
            serde_json::json!(0.0),
        ),
        (
            "/result/background_only/teststats/0",
            serde_json::json!(-5.0),
        ),
        (
            "/result/signal_plus_background/teststats/1",
            serde_json::json!("NaN"),
        ),
        ("/shared/teststat_obs", serde_json::json!(0.5)),
    ] {
        let mut edited = parts3.clone();
        *edited[1].1.pointer_mut(key).unwrap() = value;
        let message = error_of(&edited);
        assert!(
            message.contains("part1.json: its contents do not match its digest"),
            "{key}: {message}"
        );
    }
    // Values no computation gives, even with the digest made anew: refused, naming the place.
    for (key, value, says) in [
        (
            "/result/background_only/teststats/0",
            serde_json::json!(-5.0),
            "test statistic 0 is -5.0",
        ),
        (
            "/result/signal_plus_background/teststats/1",
            serde_json::json!("NaN"),
            "test statistic 1 is \"NaN\"",
        ),
        (
            "/result/background_only/n_failed",
            serde_json::json!(3),
            "failed toys for its",
        ),
    ] {
        let mut edited = parts3.clone();
        *edited[1].1.pointer_mut(key).unwrap() = value;
        ns_api::shard::seal(&mut edited[1].1);
        let message = error_of(&edited);
        assert!(
            message.contains("shard 1/3") && message.contains(says),
            "{key}: {message}"
        );
    }

    // Shared values that disagree: a part computed other baseline fits.
    let mut tampered = parts3.clone();
    tampered[1].1["shared"]["teststat_obs"] = serde_json::json!(0.5);
    ns_api::shard::seal(&mut tampered[1].1);
    let message = error_of(&tampered);
    assert!(
        message.contains("part1.json") && message.contains("different shared values"),
        "{message}"
    );

    // A part whose units do not match its shard.
    let mut shifted = parts3.clone();
    shifted[0].1["units"] = serde_json::json!([0, 10]);
    ns_api::shard::seal(&mut shifted[0].1);
    let message = error_of(&shifted);
    assert!(
        message.contains("part0.json") && message.contains("covers units"),
        "{message}"
    );

    // A split too large to be a split, in every part alike: refused before anything is sized by it.
    let mut huge = parts3.clone();
    for (_, doc) in &mut huge {
        doc["job"]["shards"] = serde_json::json!(1_000_000_000_000_000u64);
        ns_api::shard::seal(doc);
    }
    let message = error_of(&huge);
    assert!(message.contains("split is malformed"), "{message}");

    // Something that is no part.
    let message = error_of(&[("result.json".into(), serde_json::json!({"CLs_obs": 0.1}))]);
    assert!(message.contains("result.json: not a part"), "{message}");
    assert!(matches!(merge(&[]), Err(Error::InvalidInput(_))));
}

#[test]
fn shard_specs_and_empty_shards_are_refused() {
    for bad in ["3/3", "1/0", "-1/2", "a/b", "2", "1/2/3", ""] {
        assert!(Shard::parse(bad).is_err(), "{bad} parsed");
    }
    assert_eq!(
        Shard::parse(" 2 / 5 ").unwrap(),
        Shard { index: 2, count: 5 }
    );
    // 7 shards of a 5-value scan leave shards empty: each is refused, naming its shard.
    let call = call_of(Request::ProfileScan {
        parameter: None,
        values: vec![0.0, 0.5, 1.0, 1.5, 2.0],
        parameters: Vec::new(),
        grid: Vec::new(),
        cl: None,
        refine: 0,
    });
    let model = loaded(&call);
    let fitter = Fitter::new(model.likelihood());
    let empty = (0..7)
        .filter_map(|i| run_part(&call, &fitter, Shard::new(i, 7).unwrap(), &|_| {}).err())
        .map(|e| e.to_string())
        .collect::<Vec<_>>();
    assert_eq!(empty.len(), 2, "{empty:?}");
    assert!(empty[0].contains("use at most 5 shards"), "{}", empty[0]);
    // Requests that are one computation do not split.
    let fit = call_of(Request::Significance);
    let message = units(&fit, model.likelihood()).unwrap_err().to_string();
    assert!(message.contains("does not split into shards"), "{message}");
    // The shards together cover every unit once.
    for count in 1..20 {
        let mut next = 0;
        for i in 0..count {
            let share = Shard::new(i, count).unwrap().share(97);
            assert_eq!(share.start, next);
            next = share.end;
        }
        assert_eq!(next, 97);
    }
}

#[test]
fn a_published_patchset_grid_in_shards_is_the_whole_grid() {
    let dir = ns_tests::likelihoods_dir().join("patchsets/atlas_1Lbb_simplified");
    let background = ns_tests::read_json(&dir.join("bkgonly.json"));
    let patchset_value = ns_tests::read_json(&dir.join("patchset.json"));
    let patchset = ns_translate::patch::PatchSet::from_value(patchset_value.clone()).unwrap();
    let template = call_of(Request::UpperLimit {
        level: 0.05,
        scan: None,
        n_toys: None,
        seed: 0,
    });
    let template = Call {
        model: Some(ModelRef::file(dir.join("bkgonly.json"))),
        ..template
    };
    let grid = Grid {
        background: &background,
        patchset: &patchset,
        template: &template,
    };
    let digest = template.model.as_ref().unwrap().digest(&read).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let whole = grid.run(&read, &stop, &|_| {}).unwrap();
    assert_eq!(whole["points"].as_array().unwrap().len(), 125);
    for count in [2, 7] {
        let job = grid.job(digest.clone(), &patchset_value, count).unwrap();
        let parts: Vec<(String, Value)> = (0..count)
            .map(|i| {
                let shard = Shard::new(i, count).unwrap();
                let share = shard.share(patchset.patches.len());
                let part = grid.run_part(share, &read, &stop, &|_| {}).unwrap();
                (format!("grid{i}"), job.partial(shard, part))
            })
            .collect();
        assert_eq!(
            serde_json::to_string(&merge(&parts).unwrap()).unwrap(),
            serde_json::to_string(&whole).unwrap(),
            "the grid in {count} shards"
        );
    }
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// JSON values a careless edit or a corrupted transfer could leave in a part.
    fn junk() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            Just(Value::from(1_000_000_000_000_000u64)),
            any::<f64>().prop_map(|x| serde_json::json!(x)),
            "[a-z]{0,6}".prop_map(Value::from),
            Just(serde_json::json!([])),
            Just(serde_json::json!({})),
            Just(serde_json::json!([1.0, "NaN", [1, 2]])),
        ]
    }

    fn paths() -> Vec<Vec<&'static str>> {
        vec![
            vec!["format"],
            vec!["shard"],
            vec!["units"],
            vec!["job"],
            vec!["job", "units"],
            vec!["job", "shards"],
            vec!["shared"],
            vec!["result"],
            vec!["result", "points"],
            vec!["result", "values"],
            vec!["result", "entries"],
            vec!["result", "signal_plus_background"],
            vec!["result", "background_only", "teststats"],
            vec!["result", "background_only", "n_failed"],
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever a part holds, merging gives a result or an error, never a panic.
        #[test]
        fn corrupted_parts_never_panic(which in 0usize..4, path in 0usize..14, value in junk(), all in any::<bool>(), part in 0usize..2) {
            let call = call_of(requests()[which].1.clone());
            let mut parts = parts(&call, 2);
            // One part corrupted, or every part alike (then they still agree with each other).
            let corrupted: Vec<usize> = if all { vec![0, 1] } else { vec![part] };
            for k in corrupted {
                let mut at = &mut parts[k].1;
                let keys = &paths()[path];
                for key in &keys[..keys.len() - 1] {
                    at = &mut at[*key];
                }
                at[keys[keys.len() - 1]] = value.clone();
            }
            let _ = merge(&parts);
        }
    }
}

/// What a front end adds to a part — the model's notes (a HistFactory XML model's semantics),
/// what `auto` chose and why — is sealed with it, so such parts merge, into the result with the
/// model's notes that one process gives. `auto` in a job of several shards chooses by size
/// alone; a job in one shard is weighed as one process weighs it.
#[test]
fn annotated_parts_of_auto_merge() {
    let mut call = call_of(requests().remove(0).1);
    let mut noted: Value = serde_json::from_str(&whole(&call)).unwrap();
    noted["semantics"] = "root".into();
    let expected = serde_json::to_string_pretty(&noted).unwrap();
    call.device = "auto".into();
    let model = loaded(&call);
    let digest = call.model.as_ref().unwrap().digest(&read).unwrap();
    let part = |index, count| {
        ns_api::shard::shard_part(
            &call,
            model.likelihood(),
            digest.clone(),
            Shard::new(index, count).unwrap(),
            None,
            &|_, _| {},
            &|doc| doc["semantics"] = "root".into(),
        )
        .unwrap()
    };
    let two: Vec<_> = (0..2)
        .map(|i| {
            let doc = part(i, 2);
            assert_eq!(doc["semantics"], "root");
            assert_eq!(doc["auto"]["device"], "cpu", "{}", doc["auto"]);
            let reason = doc["auto"]["reason"].as_str().unwrap();
            assert!(
                reason.contains("a job in 2 shards chooses by the batch's size alone")
                    && reason.contains("too few for a GPU"),
                "{reason}"
            );
            (format!("part{i}.json"), doc)
        })
        .collect();
    assert_eq!(merged(&two), expected);
    let one = part(0, 1);
    let reason = one["auto"]["reason"].as_str().unwrap();
    assert!(reason.contains("too few for a GPU"), "{reason}");
    assert_eq!(merged(&[("whole.json".into(), one)]), expected);
}
