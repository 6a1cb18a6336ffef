//! What each figure shows, from small results written here: the numbers drawn are the JSON's
//! (golden values), malformed or partial results are errors naming the key, and each output
//! format is a valid file of the reported size with the expected number of drawn elements.

use ns_plot::spec::Figure;
use ns_plot::{Format, Options, encode, figure};
use serde_json::{Value, json};

fn draw(kind: &str, result: &Value) -> Figure {
    figure(kind, result, &Options::default()).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

fn refused(kind: &str, result: &Value, options: &Options) -> String {
    match figure(kind, result, options) {
        Ok(f) => panic!("{kind} drew {f:?} from a result it should refuse"),
        Err(e) => e.to_string(),
    }
}

fn fit_result() -> Value {
    json!({
        "parameter_names": ["mu", "lumi", "norm_bkg", "stat[0]", "stat[1]"],
        "parameter_kinds": ["free", "normsys", "normsys", "staterror", "staterror"],
        "prefit_center": [null, 1.0, 0.0, 1.0, 1.0],
        "prefit_width": [null, 0.02, 1.0, 0.1, 0.05],
        "bestfit": [1.2, 1.01, 0.5, 0.95, 1.0],
        "uncertainties": [0.3, 0.018, 0.8, 0.09, 0.05],
        "correlation": [
            [1.0, 0.05, -0.6, 0.1, 0.0],
            [0.05, 1.0, 0.02, 0.0, 0.0],
            [-0.6, 0.02, 1.0, 0.3, 0.0],
            [0.1, 0.0, 0.3, 1.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, 1.0]
        ],
        "twice_nll": 12.5,
        "converged": true
    })
}

#[test]
fn pulls_are_the_shift_over_the_prefit_width_grouped_by_kind() {
    let Figure::Pulls(p) = draw("pulls", &fit_result()) else {
        panic!("not pulls")
    };
    let kinds: Vec<&str> = p.groups.iter().map(|g| g.kind.as_str()).collect();
    assert_eq!(kinds, ["normsys", "staterror"], "the free POI has no pull");
    let lumi = &p.groups[0].entries[0];
    assert_eq!(lumi.name, "lumi");
    assert!(
        (lumi.pull - 0.5).abs() < 1e-12,
        "(1.01 − 1)/0.02 = 0.5, got {}",
        lumi.pull
    );
    assert!(
        (lumi.constraint - 0.9).abs() < 1e-12,
        "0.018/0.02 = 0.9, got {}",
        lumi.constraint
    );
    let stat0 = &p.groups[1].entries[0];
    assert!((stat0.pull + 0.5).abs() < 1e-12 && (stat0.constraint - 0.9).abs() < 1e-12);

    let only_stat = Options {
        filter: Some("stat".into()),
        ..Options::default()
    };
    let Figure::Pulls(p) = figure("pulls", &fit_result(), &only_stat).unwrap() else {
        panic!()
    };
    assert_eq!(p.groups.len(), 1);
    assert_eq!(p.groups[0].entries.len(), 2);
    let none = Options {
        filter: Some("nothing".into()),
        ..Options::default()
    };
    assert!(refused("pulls", &fit_result(), &none).contains("'nothing'"));
}

#[test]
fn correlation_keeps_the_parameters_that_correlate_beyond_the_threshold() {
    let Figure::Correlation(c) = draw("correlation", &fit_result()) else {
        panic!()
    };
    assert_eq!(
        c.names,
        ["mu", "norm_bkg", "stat[0]"],
        "|ρ| ≥ 0.2 with another parameter"
    );
    assert_eq!(c.total, 5);
    assert_eq!(c.matrix[0][1], -0.6);
    assert_eq!(c.matrix[1][2], 0.3);
    assert_eq!(c.matrix[2][2], 1.0);
    // The strongest first when the count is capped; the kept ones in the fit's order.
    let top2 = Options {
        top: Some(2),
        ..Options::default()
    };
    let Figure::Correlation(c) = figure("correlation", &fit_result(), &top2).unwrap() else {
        panic!()
    };
    assert_eq!(c.names, ["mu", "norm_bkg"]);
    let high = Options {
        threshold: Some(0.9),
        ..Options::default()
    };
    assert!(refused("correlation", &fit_result(), &high).contains("lower the threshold"));
    let mut no_matrix = fit_result();
    no_matrix.as_object_mut().unwrap().remove("correlation");
    assert!(refused("correlation", &no_matrix, &Options::default()).contains("fit --covariance"));
}

#[test]
fn scan_crossings_are_interpolated_between_the_points() {
    // Δ(2 ln L) = (x − 2)² on 0, 0.5, …, 4: crossings of 1 at 1 and 3 (on grid points), of 4 at
    // 0 and 4 (the ends).
    let values: Vec<f64> = (0..9).map(|k| k as f64 * 0.5).collect();
    let delta: Vec<f64> = values.iter().map(|x| (x - 2.0) * (x - 2.0)).collect();
    let result = json!({"parameter": "mu", "values": values, "delta_twice_nll": delta});
    let Figure::Scan(s) = draw("scan", &result) else {
        panic!()
    };
    assert_eq!(s.parameter, "mu");
    assert_eq!(
        (
            s.crossings[0].level,
            s.crossings[0].low,
            s.crossings[0].high
        ),
        (1.0, Some(1.0), Some(3.0))
    );
    assert_eq!(
        (
            s.crossings[1].level,
            s.crossings[1].low,
            s.crossings[1].high
        ),
        (4.0, Some(0.0), Some(4.0))
    );
    // A scan that runs downwards gives the same figure.
    let down: Vec<f64> = values.iter().rev().copied().collect();
    let down_delta: Vec<f64> = delta.iter().rev().copied().collect();
    let result = json!({"parameter": "mu", "values": down, "delta_twice_nll": down_delta});
    let Figure::Scan(r) = draw("scan", &result) else {
        panic!()
    };
    assert_eq!(r.values, values);
    assert_eq!(
        (r.crossings[0].low, r.crossings[0].high),
        (Some(1.0), Some(3.0))
    );
    // Between points: Δ = 0, 2 at x = 0, 1 crosses 1 at 0.5; a scan that never reaches 4 has no
    // 2σ crossing.
    let result = json!({"parameter": "theta", "values": [0.0, 1.0], "delta_twice_nll": [0.0, 2.0]});
    let Figure::Scan(s) = draw("scan", &result) else {
        panic!()
    };
    assert_eq!(s.crossings[0].high, Some(0.5));
    assert_eq!(s.crossings[0].low, None);
    assert_eq!(s.crossings[1].high, None);
}

fn ranking_result(n: usize) -> Value {
    let entries: Vec<Value> = (0..n)
        .map(|k| {
            let impact = 1.0 / (k + 1) as f64;
            json!({"name": format!("np_{k}"), "impact_postfit_up": impact, "impact_postfit_down": -impact,
                   "impact_prefit_up": 1.2 * impact, "impact_prefit_down": -1.2 * impact,
                   "pull": 0.1 * k as f64, "constraint": 0.9})
        })
        .collect();
    json!({"poi": "mu", "entries": entries})
}

#[test]
fn ranking_shows_the_top_entries_in_the_results_order() {
    let Figure::Ranking(r) = draw("ranking", &ranking_result(30)) else {
        panic!()
    };
    assert_eq!((r.entries.len(), r.ranked), (20, 30));
    assert_eq!(r.entries[3].name, "np_3");
    assert_eq!(r.entries[3].postfit_up, 0.25);
    assert_eq!(r.entries[3].prefit_down, Some(-0.3));
    let top5 = Options {
        top: Some(5),
        ..Options::default()
    };
    let Figure::Ranking(r) = figure("ranking", &ranking_result(30), &top5).unwrap() else {
        panic!()
    };
    assert_eq!(r.entries.len(), 5);

    let mut broken = ranking_result(3);
    broken["entries"][1]["impact_postfit_up"] = json!("NaN");
    let message = refused("ranking", &broken, &Options::default());
    assert!(
        message.contains("np_1") && message.contains("impact_postfit_up"),
        "{message}"
    );
    assert!(refused("ranking", &ranking_result(0), &Options::default()).contains("no entries"));
}

fn grid_result() -> Value {
    let point = |patch: &str, mass: f64, width: f64, obs: f64| {
        json!({"patch": patch, "values": [mass, width], "obs": obs,
               "exp": [obs * 0.5, obs * 0.7, obs, obs * 1.4, obs * 1.9]})
    };
    json!({"labels": ["mass", "width"], "level": 0.05, "points": [
        point("m300", 300.0, 10.0, 0.8), point("m100", 100.0, 10.0, 0.2),
        point("m200", 200.0, 10.0, 0.5), point("m200w", 200.0, 20.0, 0.6),
    ]})
}

#[test]
fn a_limit_grid_is_drawn_against_a_label_in_its_order() {
    let slice = Options {
        select: vec![("width".into(), 10.0)],
        ..Options::default()
    };
    let Figure::Limit(l) = figure("limit", &grid_result(), &slice).unwrap() else {
        panic!()
    };
    assert_eq!(l.x_label, "mass");
    assert_eq!(l.x, [100.0, 200.0, 300.0]);
    assert_eq!(l.patches, ["m100", "m200", "m300"]);
    assert_eq!(l.observed, [0.2, 0.5, 0.8]);
    assert_eq!(l.expected[4], [0.2 * 1.9, 0.5 * 1.9, 0.8 * 1.9]);
    assert!((l.cl - 0.95).abs() < 1e-15);
    // Two points at one mass without a slice: an error saying how to choose.
    let message = refused("limit", &grid_result(), &Options::default());
    assert!(
        message.contains("m200") && message.contains("select"),
        "{message}"
    );
    let wrong_theory = Options {
        theory: Some(vec![1.0]),
        ..slice.clone()
    };
    assert!(refused("limit", &grid_result(), &wrong_theory).contains("theory"));
    let wrong_label = Options {
        x: Some("charge".into()),
        ..slice.clone()
    };
    assert!(refused("limit", &grid_result(), &wrong_label).contains("charge"));

    // A limit outside the POI's bounds (null) and a failed patch are left out and named.
    let mut partial = grid_result();
    partial["points"][0]["obs"] = Value::Null;
    partial["errors"] = json!([{"patch": "m400", "error": "no limit"}]);
    let Figure::Limit(l) = figure("limit", &partial, &slice).unwrap() else {
        panic!()
    };
    assert_eq!(l.patches, ["m100", "m200"]);
    assert_eq!(l.skipped, ["m300", "m400"]);
    partial["points"][1]["exp"][2] = Value::Null;
    partial["points"][2]["obs"] = Value::Null;
    assert!(refused("limit", &partial, &slice).contains("left out: m300, m100, m200"));
}

#[test]
fn a_cls_scan_gives_the_curve_with_its_limits() {
    let points: Vec<Value> = (0..5)
        .map(|k| {
            let cls = 0.5f64.powi(k + 1);
            json!({"mu": k as f64, "CLs_obs": cls, "CLs_exp": [cls / 4.0, cls / 2.0, cls, cls * 2.0, cls * 4.0]})
        })
        .collect();
    let result =
        json!({"level": 0.05, "obs": 3.3, "exp": [1.0, 2.0, 3.0, 4.0, 5.0], "points": points});
    let Figure::Cls(c) = draw("limit", &result) else {
        panic!()
    };
    assert_eq!(c.mu, [0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(c.observed[2], 0.125);
    assert_eq!(c.expected[3][1], 0.5);
    assert_eq!(
        (c.level, c.observed_limit, c.expected_limit),
        (0.05, Some(3.3), Some(3.0))
    );
    // A limit beyond the scan is null in the result: the curve stands without its mark.
    let mut beyond = result.clone();
    beyond["obs"] = Value::Null;
    beyond["exp"][4] = Value::Null;
    let Figure::Cls(c) = draw("limit", &beyond) else {
        panic!()
    };
    assert_eq!((c.observed_limit, c.expected_limit), (None, Some(3.0)));
    let mut one_point = result.clone();
    one_point["points"] = json!([points[0]]);
    assert!(refused("limit", &one_point, &Options::default()).contains("fewer than two"));
}

fn toy_result() -> Value {
    let sb: Vec<f64> = (0..200).map(|k| (k % 20) as f64 * 0.1).collect();
    let b: Vec<f64> = (0..100).map(|k| 1.0 + (k % 10) as f64 * 0.3).collect();
    json!({"mu": 1.0, "test_stat": "qtilde", "teststat_obs": 1.5,
           "teststats": {"signal_plus_background": sb, "background_only": b}})
}

#[test]
fn toy_histograms_are_densities_with_the_asymptotic_curves() {
    let asymptotic = json!({"mu": 1.0, "test_stat": "qtilde", "sqrt_q_asimov": 1.3});
    let options = Options {
        asymptotic: Some(asymptotic),
        ..Options::default()
    };
    let Figure::Toys(t) = figure("toys", &toy_result(), &options).unwrap() else {
        panic!()
    };
    assert_eq!(t.n_toys, [200, 100]);
    assert_eq!(t.observed, 1.5);
    let width = t.edges[1] - t.edges[0];
    for density in [&t.signal_plus_background, &t.background_only] {
        let area: f64 = density.iter().sum::<f64>() * width;
        assert!(
            (area - 1.0).abs() < 1e-12,
            "a density integrates to 1, got {area}"
        );
    }
    // Below q_A the q̃ densities are the χ² forms; above, Gaussians of variance 4 q_A (CCGV eq. 65).
    let a = t.asymptotic.expect("asymptotic densities");
    let qa: f64 = 1.3 * 1.3;
    let (k, &q) = a.q.iter().enumerate().find(|(_, q)| **q > qa).unwrap();
    let gauss = |mean: f64| {
        (-(q - mean).powi(2) / (8.0 * qa)).exp() / (2.0 * (2.0 * std::f64::consts::PI * qa).sqrt())
    };
    assert!((a.signal_plus_background[k] - gauss(-qa)).abs() < 1e-15);
    assert!((a.background_only[k] - gauss(qa)).abs() < 1e-15);
    let chi1 = |q: f64| 0.5 / (2.0 * std::f64::consts::PI * q).sqrt() * (-0.5 * q).exp();
    assert!((a.signal_plus_background[0] - chi1(a.q[0])).abs() < 1e-15);

    let elsewhere = json!({"mu": 2.0, "test_stat": "qtilde", "sqrt_q_asimov": 1.3});
    let options = Options {
        asymptotic: Some(elsewhere),
        ..Options::default()
    };
    assert!(refused("toys", &toy_result(), &options).contains("μ = 2"));
    let mut without = toy_result();
    without.as_object_mut().unwrap().remove("teststats");
    assert!(refused("toys", &without, &Options::default()).contains("--teststats"));
}

fn yields_result() -> Value {
    json!({"yields": {"channels": [{
        "channel": "SR", "observed": [10.0, 5.0],
        "samples": [{"name": "bkg", "prefit": [8.0, 4.0], "postfit": [9.0, 4.5]},
                    {"name": "sig", "prefit": [1.0, 1.0], "postfit": [1.2, 0.8]}],
        "prefit_total": [9.0, 5.0], "prefit_stdev": [1.0, 0.5],
        "postfit_total": [10.2, 5.3], "postfit_stdev": [0.6, 0.3]
    }]}})
}

#[test]
fn yields_are_the_stage_asked_for() {
    let Figure::Yields(y) = draw("yields", &yields_result()) else {
        panic!()
    };
    assert_eq!(y.stage, "postfit");
    assert_eq!(
        y.channels[0].samples[1],
        ("sig".to_string(), vec![1.2, 0.8])
    );
    assert_eq!(y.channels[0].stdev, [0.6, 0.3]);
    let prefit = Options {
        prefit: true,
        ..Options::default()
    };
    let Figure::Yields(y) = figure("yields", &yields_result(), &prefit).unwrap() else {
        panic!()
    };
    assert_eq!(
        (y.stage, y.channels[0].total.clone()),
        ("prefit", vec![9.0, 5.0])
    );
    let mut ragged = yields_result();
    ragged["yields"]["channels"][0]["samples"][0]["postfit"] = json!([9.0]);
    assert!(refused("yields", &ragged, &Options::default()).contains("number of bins"));
}

#[test]
fn results_that_are_not_results_are_errors() {
    for (kind, result, expected) in [
        ("pulls", json!([1, 2]), "JSON object"),
        ("pulls", json!({}), "'parameter_names'"),
        ("heatmap", fit_result(), "no plot kind 'heatmap'"),
        (
            "scan",
            json!({"parameter": "mu", "values": [0, 1], "delta_twice_nll": [0, null]}),
            "not a finite number",
        ),
        (
            "scan",
            json!({"parameter": "mu", "values": [0, 1, 2], "delta_twice_nll": [0, 1]}),
            "two or more pairs",
        ),
        ("yields", json!({"yields": null}), "fit --yields"),
    ] {
        let message = refused(kind, &result, &Options::default());
        assert!(
            message.contains(expected),
            "{kind}: '{message}' does not say '{expected}'"
        );
    }
}

/// The count of `needle` in `haystack`.
fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn files_are_valid_images_of_their_size_with_one_bar_per_entry() {
    let figure = draw("ranking", &ranking_result(12));
    let (svg, (width, height)) = encode(&figure, Format::Svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains(&format!("width=\"{width}\""))
            && svg.contains(&format!("height=\"{height}\""))
    );
    // Per entry: a post-fit bar for each direction (filled, blue and orange), a pre-fit outline
    // for each, a pull marker; plus each series' legend entry.
    assert_eq!(
        count(&svg, "opacity=\"0.75\" fill=\"#0072B2\""),
        12 + 1,
        "{svg:.2000}"
    );
    assert_eq!(count(&svg, "opacity=\"0.75\" fill=\"#E69F00\""), 12 + 1);
    assert_eq!(count(&svg, "<circle"), 12 + 1);
    for name in ["np_0", "np_11"] {
        assert!(
            svg.contains(&format!(">\n{name}\n</text>")),
            "label {name} drawn"
        );
    }

    let (png, size) = encode(&figure, Format::Png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let ihdr = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!(
        (ihdr(16), ihdr(20)),
        size,
        "the PNG's header gives the reported size"
    );
    assert_eq!(size, (width, height));
    let (pdf, _) = encode(&figure, Format::Pdf).unwrap();
    assert!(pdf.starts_with(b"%PDF-") && pdf.windows(5).any(|w| w == b"%%EOF"));
}

#[test]
fn figures_that_list_parameters_grow_with_them() {
    let (_, (_, small)) = encode(&draw("ranking", &ranking_result(5)), Format::Svg).unwrap();
    let top = Options {
        top: Some(100),
        ..Options::default()
    };
    let big = figure("ranking", &ranking_result(100), &top).unwrap();
    let (_, (_, tall)) = encode(&big, Format::Svg).unwrap();
    assert!(
        tall >= small + 95 * 30,
        "100 rows in {tall} px against 5 in {small} px"
    );
}

/// Every numeric leaf of `v`, as JSON pointers.
fn numeric_leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Number(_) => out.push(at),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| numeric_leaves(x, format!("{at}/{i}"), out)),
        Value::Object(o) => o
            .iter()
            .for_each(|(k, x)| numeric_leaves(x, format!("{at}/{k}"), out)),
        _ => {}
    }
}

#[test]
fn every_kind_finishes_on_extreme_values() {
    // Each number of each kind's result set in turn to ±1e308, a subnormal or null: the figure
    // is drawn or refused, never a hang (a ranking impact of 1e308 once laid out its axis
    // forever) or a panic.
    let cls_scan = json!({"level": 0.05, "obs": 2.0, "exp": [1.0, 1.5, 2.0, 2.5, 3.0],
        "points": (0..5).map(|k| json!({"mu": k as f64, "CLs_obs": 0.5f64.powi(k + 1), "CLs_exp": [0.1, 0.2, 0.3, 0.4, 0.5]})).collect::<Vec<_>>()});
    let scan = json!({"parameter": "mu", "values": [0.0, 1.0, 2.0, 3.0], "delta_twice_nll": [1.0, 0.0, 1.0, 4.0]});
    let cases = [
        ("pulls", fit_result()),
        ("correlation", fit_result()),
        ("scan", scan),
        ("ranking", ranking_result(4)),
        ("limit", grid_result()),
        ("limit", cls_scan),
        ("toys", toy_result()),
        ("yields", yields_result()),
    ];
    let mut drawn = 0;
    for (kind, result) in cases {
        let mut leaves = Vec::new();
        numeric_leaves(&result, String::new(), &mut leaves);
        let step = leaves.len().div_ceil(16).max(1);
        for leaf in leaves.iter().step_by(step) {
            for extreme in [json!(1e308), json!(-1e308), json!(5e-324), Value::Null] {
                let mut r = result.clone();
                *r.pointer_mut(leaf).unwrap() = extreme.clone();
                if let Ok(f) = figure(kind, &r, &Options::default()) {
                    let drawn_ok = encode(&f, Format::Svg);
                    assert!(
                        drawn_ok.is_ok() || extreme.is_null(),
                        "{kind} {leaf} = {extreme}: {:?}",
                        drawn_ok.err()
                    );
                    drawn += 1;
                }
            }
        }
    }
    assert!(drawn > 0, "no extreme value was drawn");
}
