//! Inputs that would take memory or time out of proportion are refused with a clear error, or
//! kept in proportion: functions that double at every level, toys of enormous expected counts,
//! Asimov data of many observables, deeply nested expressions.

use ns_compute::{Device, Likelihood};
use ns_unbinned::hs3::{ReadOptions, read};
use serde_json::json;

fn one_gaussian(
    extra_functions: serde_json::Value,
    yield_ref: &str,
    axes: usize,
) -> serde_json::Value {
    let names: Vec<String> = (0..axes).map(|i| format!("x{i}")).collect();
    let mut distributions: Vec<serde_json::Value> = names
        .iter()
        .map(|n| json!({"name": format!("g_{n}"), "type": "gaussian_dist", "x": n, "mean": 0.0, "sigma": 1.0}))
        .collect();
    distributions.push(json!({"name": "prod", "type": "product_dist", "factors": names.iter().map(|n| format!("g_{n}")).collect::<Vec<_>>()}));
    distributions.push(json!({"name": "model", "type": "mixture_dist", "summands": ["prod"], "coefficients": [yield_ref], "extended": true}));
    json!({
        "distributions": distributions,
        "functions": extra_functions,
        "data": [{"name": "d", "type": "unbinned", "axes": names.iter().map(|n| json!({"name": n, "min": -3, "max": 3})).collect::<Vec<_>>(), "entries": [vec![0.0; axes]]}],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["d"]}],
        "parameter_points": [{"name": "default_values", "parameters": [{"name": "n", "value": 10, "min": 0, "max": 1e15}]}]
    })
}

/// `doc` read on a thread with a small stack (256 kB): a reader that recursed on the input's
/// depth or length would overflow it and abort the test binary.
fn read_on_small_stack(doc: serde_json::Value) -> ns_core::Result<ns_unbinned::UnbinnedModel> {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || read(&doc, &ReadOptions::default()))
        .unwrap()
        .join()
        .expect("the reader does not overflow its stack")
}

fn nll_at_init(m: &ns_unbinned::UnbinnedModel) -> f64 {
    let cpu = m.open(Device::Cpu).unwrap();
    let data = m.observed().unwrap();
    let init = m.suggested_init();
    let mut nll = [0.0];
    let mut grad = vec![0.0; init.len()];
    cpu.nll_grad_batch(
        &init,
        ns_compute::Datasets::Host(std::slice::from_ref(&data)),
        &[0],
        &mut nll,
        &mut grad,
        &std::sync::atomic::AtomicBool::new(false),
    )
    .unwrap();
    nll[0]
}

#[test]
fn functions_shared_at_every_level_are_built_once() {
    // f_k = f_{k-1} + f_{k-1}: 2^39 paths to n, forty entries on the tape.
    let mut functions = vec![json!({"name": "f0", "type": "generic_function", "expression": "n"})];
    for k in 1..40 {
        functions.push(json!({"name": format!("f{k}"), "type": "generic_function", "expression": format!("f{0}+f{0}", k - 1)}));
    }
    let shared = read_on_small_stack(one_gaussian(json!(functions), "f39", 1)).unwrap();
    let plain = read(&one_gaussian(json!([]), "n", 1), &ReadOptions::default()).unwrap();
    // n·2^39 against n: the yields differ by exactly that factor, so the NLLs differ.
    assert!(nll_at_init(&shared).is_finite());
    assert_ne!(nll_at_init(&shared), nll_at_init(&plain));
    // The same doubling as `sum` and `product` nodes.
    let mut functions = vec![json!({"name": "f0", "type": "sum", "summands": ["n"]})];
    for k in 1..30 {
        let kind = if k % 2 == 0 { "sum" } else { "product" };
        let key = if kind == "sum" { "summands" } else { "factors" };
        functions.push(json!({"name": format!("f{k}"), "type": kind, key: [format!("f{}", k - 1), format!("f{}", k - 1)]}));
    }
    read_on_small_stack(one_gaussian(json!(functions), "f29", 1)).unwrap();
}

#[test]
fn long_expressions_and_sums_are_read_without_recursion() {
    // 20,000 terms in one expression, a sum of 40,000 summands: under the node limit, so read
    // and evaluated (in loops: a tree would recurse once per term).
    let expression = vec!["n"; 20_000].join(" + ");
    let long = json!([{"name": "y", "type": "generic_function", "expression": format!("({expression}) / 20000")}]);
    let m = read_on_small_stack(one_gaussian(long, "y", 1)).unwrap();
    let plain = read(&one_gaussian(json!([]), "n", 1), &ReadOptions::default()).unwrap();
    assert!((nll_at_init(&m) - nll_at_init(&plain)).abs() < 1e-9);
    let summands = json!([{"name": "y", "type": "sum", "summands": vec!["n"; 40_000]}]);
    let m = read_on_small_stack(one_gaussian(summands, "y", 1)).unwrap();
    assert!(nll_at_init(&m).is_finite());
}

#[test]
fn cycles_and_deep_chains_are_named() {
    let chain: Vec<_> = (0..10_000)
        .map(|k| json!({"name": format!("f{k}"), "type": "generic_function", "expression": format!("f{} * 1", k + 1)}))
        .chain([json!({"name": "f10000", "type": "generic_function", "expression": "n"})])
        .collect();
    let cases = [
        (
            json!([{"name": "a", "type": "generic_function", "expression": "a + 1"}]),
            "a",
            "function 'a' depends on itself: a → a",
        ),
        (
            json!([{"name": "a", "type": "sum", "summands": ["b"]}, {"name": "b", "type": "product", "factors": ["n", "a"]}]),
            "a",
            "function 'a' depends on itself: a → b → a",
        ),
        (
            json!(chain),
            "f0",
            "functions nest deeper than 64 levels (f0 → … → f64)",
        ),
    ];
    for (functions, top, says) in cases {
        let err = read_on_small_stack(one_gaussian(functions, top, 1))
            .err()
            .expect("refused");
        assert!(err.to_string().contains(says), "{err}");
    }
}

/// A model whose top distribution is `top`, with the extra distributions `extra`.
fn with_distributions(extra: Vec<serde_json::Value>, top: &str) -> serde_json::Value {
    let mut doc = one_gaussian(json!([]), "n", 1);
    let list = doc["distributions"].as_array_mut().unwrap();
    list.extend(extra);
    doc["likelihoods"][0]["distributions"] = json!([top]);
    doc
}

#[test]
fn distributions_that_contain_themselves_are_named() {
    let mix = |name: &str, summands: &[&str]| json!({"name": name, "type": "mixture_dist", "summands": summands, "coefficients": vec![1.0; summands.len() - 1]});
    let cases = [
        (
            vec![mix("a", &["a", "g_x0"])],
            "a",
            "distribution 'a' contains itself: a → a",
        ),
        (
            vec![mix("a", &["b", "g_x0"]), mix("b", &["a", "g_x0"])],
            "a",
            "distribution 'a' contains itself: a → b → a",
        ),
        (
            vec![
                json!({"name": "p", "type": "product_dist", "factors": ["q"]}),
                json!({"name": "q", "type": "product_dist", "factors": ["p", "g_x0"]}),
            ],
            "p",
            "distribution 'p' contains itself: p → q → p",
        ),
    ];
    for (extra, top, says) in cases {
        let err = read_on_small_stack(with_distributions(extra, top))
            .err()
            .expect("refused");
        assert!(err.to_string().contains(says), "{err}");
    }
    // A chain of mixtures deeper than the bound.
    let chain: Vec<_> = (0..5_000)
        .map(|k| mix(&format!("m{k}"), &[&format!("m{}", k + 1), "g_x0"]))
        .chain([mix("m5000", &["g_x0", "g_x0"])])
        .collect();
    let err = read_on_small_stack(with_distributions(chain, "m0"))
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("distributions nest deeper than 64 levels"),
        "{err}"
    );
}

#[test]
fn a_distribution_shared_at_every_level_is_built_once() {
    // d_k mixes d_{k-1} with itself, twenty levels: 2^20 paths to the Gaussian, one node per level.
    let mut extra = vec![
        json!({"name": "d0", "type": "mixture_dist", "summands": ["g_x0", "g_x0"], "coefficients": [0.5]}),
    ];
    for k in 1..=20 {
        extra.push(json!({"name": format!("d{k}"), "type": "mixture_dist", "summands": [format!("d{}", k - 1), format!("d{}", k - 1)], "coefficients": [0.5]}));
    }
    let shared = read_on_small_stack(with_distributions(extra, "d20")).unwrap();
    assert_eq!(
        shared.channels()[0].nodes.len(),
        22,
        "one node per distribution"
    );
    let plain = read(&with_distributions(vec![], "g_x0"), &ReadOptions::default()).unwrap();
    // Every level mixes one density with itself: the density is the Gaussian's.
    assert!((nll_at_init(&shared) - nll_at_init(&plain)).abs() < 1e-12);
}

#[test]
fn toys_of_enormous_counts_are_refused() {
    let m = read(&one_gaussian(json!([]), "n", 1), &ReadOptions::default()).unwrap();
    let cpu = m.open(Device::Cpu).unwrap();
    let err = m
        .sample_toys(cpu.as_ref(), &[(&[1e12][..], 0)], 1, 0, 1)
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("toys are drawn for counts"),
        "{err}"
    );
}

#[test]
fn asimov_data_of_many_observables_stay_in_proportion() {
    for axes in [1, 2, 3, 4, 6] {
        let m = read(&one_gaussian(json!([]), "n", axes), &ReadOptions::default()).unwrap();
        let asimov = m.asimov(&[10.0]).unwrap();
        let cells = (asimov.main.len() - 2) / (axes + 1);
        assert!(
            cells <= ns_unbinned::MAX_ASIMOV_CELLS,
            "{axes} observables: {cells} cells"
        );
        // The weights still add up to the expected count (a Gaussian of ±3σ, midpoints).
        let weights: f64 = asimov.main[2 + cells * axes..].iter().sum();
        assert!(
            (weights - 10.0 * 0.9973f64.powi(axes as i32)).abs() < 0.05 * axes as f64,
            "{axes}: {weights}"
        );
    }
}

/// Every distribution type the reader's table holds is read (aliases included), and an unknown
/// type's error lists exactly those types.
#[test]
fn an_unknown_distribution_type_lists_every_type_read() {
    let with_type = |t: &str| {
        let mut doc = one_gaussian(json!([]), "n", 1);
        doc["distributions"][0]["type"] = json!(t);
        doc
    };
    for alias in ["gaussian_dist", "normal_dist"] {
        assert!(
            read(&with_type(alias), &ReadOptions::default()).is_ok(),
            "{alias}"
        );
    }
    let Err(error) = read(&with_type("landau_dist"), &ReadOptions::default()) else {
        panic!("an unknown distribution type was read");
    };
    let message = error.to_string();
    let listed = message
        .split_once("which nextstat does not read (")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{message}"));
    let listed: Vec<&str> = listed.split(", ").collect();
    for expected in [
        "gaussian_dist",
        "normal_dist",
        "exponential_dist",
        "crystalball_dist",
        "crystalball_doublesided_dist",
        "argus_dist",
        "ARGUS_dist",
        "chebychev_dist",
        "polynomial_dist",
        "histogram_dist",
        "product_dist",
        "mixture_dist",
        "nextstat:flow_dist",
    ] {
        assert!(
            listed.contains(&expected),
            "{expected} missing from {message}"
        );
    }
    assert_eq!(listed.len(), 13, "{message}");
    assert!(message.contains("'g_x0'") && message.contains("'landau_dist'"));
}
