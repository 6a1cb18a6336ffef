//! CMS Combine datacards against Combine v10.6.0's numbers (`../shared/combine/reference.json`):
//! every card parses; every card whose terms are built gives Combine's canonical NLL
//! (`nll_total`) at each of its reference points to 1e-9 relative and each bin's expected yield
//! to 1e-10.

use ns_compute::{CpuEvaluator, Scratch};
use serde_json::Value;

/// Toy fits on template cards end at a minimum: where a morphed template's bin sits at its
/// floor under many shape systematics (Combine's tutorials), fits that stall on that kink
/// follow the smoothed likelihood to it (`ns_inference::fit::kink`). Before, 4 of 200
/// signal-plus-background toy fits of ci_largeYields and 33 of 1000 of ci_shapeInterp failed.
#[test]
fn toy_fits_on_template_cards_converge() {
    let reference = reference();
    for (id, n_toys) in [("ci_largeYields", 200), ("ci_shapeInterp", 100)] {
        let model = ns_tests::combine_card_model(&reference["cards"][id]);
        let data = ns_compute::Likelihood::observed(&model).unwrap();
        let config = ns_inference::FitConfig::suggested(&model);
        let fitter = ns_inference::Fitter::new(&model);
        let result = ns_inference::hypotest_toys(
            &fitter,
            1.0,
            &data,
            &config,
            ns_inference::TestStatistic::QTilde,
            n_toys,
            3,
            &|_| {},
        )
        .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(
            (result.signal.n_failed, result.background.n_failed),
            (0, 0),
            "{id}: {:?} {:?}",
            result.signal.failures,
            result.background.failures
        );
    }
}

/// Toys of an asymmetric `param` (own_counting_extras' `kfac param 1.2 -0.1/+0.2`): its global
/// observable follows RooFit's draw of the RooBifurGauss mean, above θ with probability
/// σ_lo/(σ_lo + σ_hi) = 1/3 (there the pull uses σ_lo) and at mean offset (σ_lo² − σ_hi²)/(σ_lo +
/// σ_hi)·√(2/π); toy fits of the card converge.
#[test]
fn toys_of_an_asymmetric_param_draw_its_bifurcated_observable() {
    let reference = reference();
    let card = &reference["cards"]["own_counting_extras"];
    let model = ns_tests::combine_card_model(card);
    let data = ns_compute::Likelihood::observed(&model).unwrap();
    let compiled = &model.compiled;
    let kfac = model.parameter_index("kfac").unwrap() as u32;
    let constraint = compiled.gaussian.iter().find(|c| c.param == kfac).unwrap();
    assert_eq!(compiled.low_side_widths.len(), 1);
    let mut point = model.suggested_init();
    point[kfac as usize] = 1.25;
    let rates = ns_compute::ToyEnsembleRates::at(compiled, &point, 0).unwrap();
    let n = 20_000;
    let offsets: Vec<f64> = (0..n)
        .map(|i| rates.sample(compiled, 9, i).unwrap().aux[constraint.aux_index as usize] - 1.25)
        .collect();
    let above = offsets.iter().filter(|&&d| d > 0.0).count() as f64 / n as f64;
    assert!(
        (above - 1.0 / 3.0).abs() < 5.0 * (2.0 / 9.0 / n as f64).sqrt(),
        "{above} above θ"
    );
    let mean = offsets.iter().sum::<f64>() / n as f64;
    let want = (0.01 - 0.04) / 0.3 * (2.0 / std::f64::consts::PI).sqrt();
    assert!(
        (mean - want).abs() < 5.0 * 0.2 / (n as f64).sqrt(),
        "{mean} vs {want}"
    );
    let result = ns_inference::hypotest_toys(
        &ns_inference::Fitter::new(&model),
        1.0,
        &data,
        &ns_inference::FitConfig::suggested(&model),
        ns_inference::TestStatistic::QTilde,
        200,
        3,
        &|_| {},
    )
    .unwrap();
    assert_eq!((result.signal.n_failed, result.background.n_failed), (0, 0));
}

/// External signal yields (the differentiable layer) are not differentiated through a floored
/// template or through autoMCStats: refused by name, on every device.
#[test]
fn external_yields_on_templates_or_template_statistics_are_refused() {
    let reference = reference();
    let morphed = ns_tests::combine_card_model(&reference["cards"]["cat23001_template"]);
    // The same templates without shape systematics, under autoMCStats.
    let dir = ns_tests::combine_dir().join("data/tutorials/CAT23001");
    let card = "imax 1\njmax 1\nkmax *\n\
                shapes * * template-analysis-datacard-input.root $PROCESS $PROCESS_$SYSTEMATIC\n\
                bin ch1\nobservation 85\nbin ch1 ch1\nprocess signal background\n\
                process 0 1\nrate 24 100\nlumi lnN 1.1 1.0\n* autoMCStats 10\n";
    let parsed = ns_datacard::parse(card, "mcstats.txt").unwrap();
    let files = ns_datacard::ShapeFiles::new(
        ns_core::FileAccess::Local {
            base: Some(dir.as_path()),
        },
        None,
    );
    let statistics = ns_datacard::model(&parsed, &files).unwrap();
    assert!(
        statistics.compiled.floored_blocks.is_empty() && !statistics.compiled.bin_stats.is_empty()
    );
    for (model, why) in [
        (&morphed, "morphed template is floored"),
        (&statistics, "template statistics"),
    ] {
        let named = [("ch1".to_string(), "background".to_string())];
        let message = match ns_compute::ExternalSignal::new(model, &named) {
            Ok(_) => panic!("external yields on a {why} were accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            message.contains("cannot take external yields") && message.contains(why),
            "{message}"
        );
    }
}

/// A card whose observation disagrees with its data histogram is refused, as Combine refuses
/// it; -1 takes the histogram's integral.
#[test]
fn an_observation_that_is_not_the_data_histograms_is_refused() {
    let dir = ns_tests::combine_dir().join("data/tutorials/CAT23001");
    let text = std::fs::read_to_string(dir.join("datacard-2-template-analysis.txt")).unwrap();
    let files = ns_datacard::ShapeFiles::new(
        ns_core::FileAccess::Local {
            base: Some(dir.as_path()),
        },
        None,
    );
    let build = |observation: &str| {
        let card = text.replace("observation 85", &format!("observation {observation}"));
        ns_datacard::model(&ns_datacard::parse(&card, "card.txt").unwrap(), &files)
    };
    for wrong in ["850", "1e300", "0"] {
        let message = build(wrong)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("Mismatch in normalizations"),
            "{wrong}: {message}"
        );
    }
    let from_histogram = build("-1").unwrap();
    assert_eq!(
        from_histogram.observations,
        build("85").unwrap().observations
    );
}

fn reference() -> Value {
    let text = std::fs::read_to_string(ns_tests::combine_dir().join("reference.json"))
        .expect("../shared/combine/reference.json (the Combine reference corpus)");
    serde_json::from_str(&text).unwrap()
}

/// The cards whose every term is built and whose numbers are Combine's (the test fails if one
/// of them is refused).
const BUILT: [&str; 18] = [
    "ci_htt_multiple_regions",
    "nuisance_edit",
    "own_counting_extras",
    "ci_shapeNInterp",
    "ci_shapeInterp",
    "ci_largeYields",
    "own_shape_mcstats10",
    "own_shape_question_mcstats10_incsig",
    "cat23001_template",
    "rate_params_combined",
    "cat23001_abcd",
    "groups_counting",
    "counting_simple",
    "counting_realistic",
    "counting_multichannel",
    "cat23001_counting",
    "asymm_lnN",
    "statroutines_counting",
];

/// What nextstat's NLL has and Combine's canonical one leaves out: each Gaussian constraint's
/// ln(σ√(2π)), with (σ_low + σ)/2 for a two-sided one.
fn gaussian_normalisation(model: &ns_core::model::HistFactoryModel) -> f64 {
    let m = &model.compiled;
    let half_ln_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
    let mut constant: f64 = m.gaussian.iter().map(|c| c.sigma.ln() + half_ln_2pi).sum();
    for w in &m.low_side_widths {
        let sigma = m.gaussian[w.constraint as usize].sigma;
        constant += (0.5 * (w.sigma_low + sigma)).ln() - sigma.ln();
    }
    constant
}

#[test]
fn every_card_parses_and_counting_cards_give_combines_nll() {
    let reference = reference();
    let cards = reference["cards"].as_object().unwrap();
    assert!(cards.len() >= 18, "{} cards", cards.len());
    let (mut compared, mut refused) = (Vec::new(), Vec::new());
    for (id, card) in cards {
        let path = ns_tests::combine_dir().join(card["card"].as_str().unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = ns_datacard::parse(&text, &path.display().to_string())
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        let model = match ns_datacard::model(&parsed, &ns_tests::combine_shape_files(card, &path)) {
            Ok(model) => model,
            Err(e) => {
                assert!(!BUILT.contains(&id.as_str()), "{id}: {e}");
                refused.push(format!("{id}: {e}"));
                continue;
            }
        };
        // Cards that build but are not yet Combine's to the digit are held to 1e-8.
        let (nll_tolerance, yield_tolerance) = if BUILT.contains(&id.as_str()) {
            (1e-9, 1e-10)
        } else {
            (1e-8, 1e-7)
        };
        let eval = CpuEvaluator::new(&model.compiled);
        let mut scratch = Scratch::new(&model.compiled);
        let data = ns_compute::Likelihood::observed(&model).unwrap();
        let fitter = ns_inference::Fitter::new(&model);
        let constant = gaussian_normalisation(&model);
        for point in card["nll_points"].as_array().unwrap() {
            let at = format!("{id} at {}", point["point"]);
            let mut params: Vec<f64> = model.parameter_sets.iter().map(|s| s.inits[0]).collect();
            for (name, value) in point["parameters"].as_object().unwrap() {
                let i = model
                    .par_names
                    .iter()
                    .position(|n| n == name)
                    .unwrap_or_else(|| panic!("{at}: Combine's {name} is not a parameter"));
                // RooFit holds a value beyond a parameter's range at the range's edge.
                let (lo, hi) = model.parameter_sets[i].bounds[0];
                params[i] = value.as_f64().unwrap().clamp(lo, hi);
            }
            let nll = fitter.twice_nll(&params, &data).unwrap() / 2.0 - constant;
            let want = point["nll_total"].as_f64().unwrap();
            assert!(
                (nll - want).abs() <= nll_tolerance * want.abs().max(1.0),
                "{at}: NLL {nll} vs Combine's {want}"
            );
            let (expected, _) = eval.expected_data(&params, &mut scratch).unwrap();
            // The reference keys a counting card's yields by channel only where it has one
            // ("None"); several counting channels share that key, so their yields are checked
            // through the NLL alone.
            let yields = &point["expected_per_bin"];
            for channel in &model.channels {
                let theirs = match (yields.get(&channel.name), model.channels.len()) {
                    (Some(v), _) => v,
                    (None, 1) => &yields["None"],
                    (None, _) => continue,
                };
                // A channel narrower than the card's widest template is padded, in Combine and
                // here, with bins that observe nothing.
                assert_eq!(
                    theirs.as_array().unwrap().len(),
                    channel.n_bins,
                    "{at}: {}",
                    channel.name
                );
                // In a bin only floors fill (≤ 1e-9 of the channel's total), Combine's pdf also
                // holds the floor of its morphed templates, which its likelihood never reads (its
                // extended term is the channel's total); here that bin holds the rest.
                let floor_only = yields
                    .get(format!("{}__total", channel.name))
                    .and_then(Value::as_f64)
                    .map(|total| 1e-9 * total);
                for i in 0..channel.n_bins {
                    let (ours, theirs) =
                        (expected[channel.bin_start + i], theirs[i].as_f64().unwrap());
                    let floor = floor_only.filter(|&f| theirs <= f * (1.0 + 1e-6));
                    let agrees = match floor {
                        Some(f) => (-yield_tolerance..=f).contains(&(theirs - ours)),
                        None => (ours - theirs).abs() <= yield_tolerance * theirs.abs().max(1.0),
                    };
                    assert!(
                        agrees,
                        "{at}: {} bin {i} expects {ours} vs Combine's {theirs}",
                        channel.name
                    );
                }
            }
        }
        compared.push(id.clone());
    }
    assert!(
        BUILT.iter().all(|id| compared.iter().any(|c| c == id)),
        "compared {compared:?}; refused {refused:#?}"
    );
}

/// Combine's AsymptoticLimits stops its search within 0.5% or 5e-4 of a limit, whichever is
/// larger (its defaults `--rRelAcc 0.005`, `--rAbsAcc 0.0005`).
const COMBINE_LIMIT_ACCURACY: f64 = 0.005;
const COMBINE_LIMIT_ABS_ACCURACY: f64 = 0.0005;

/// Fits, profile scans, intervals, limits and significances of the counting cards against
/// Combine's, to the accuracy Combine's own defaults give them (its minimiser tolerance 0.1,
/// AsymptoticLimits' 0.5%): nextstat's fits end at Combine's minimum or lower; its profile
/// 2ΔNLL equals Combine's scan (re-evaluated at the parameters Combine tracked) to 1e-3;
/// the 68% interval of r is where that scan crosses 1, which Combine's `--algo singles` misses
/// by up to 3e-3 (groups_counting: its own scan crosses at 1.4566, singles says 1.4537).
#[test]
fn counting_cards_give_combines_answers() {
    let reference = reference();
    for id in BUILT {
        let card = &reference["cards"][id];
        let model = ns_tests::combine_card_model(card);
        let fitter = ns_inference::Fitter::new(&model);
        let data = ns_compute::Likelihood::observed(&model).unwrap();
        let config = ns_inference::FitConfig::suggested(&model);
        let poi = model.poi().unwrap();
        let fit = fitter.fit(&data, &config).unwrap();
        let constant = gaussian_normalisation(&model);
        let ours = fit.twice_nll / 2.0 - constant;
        let point = |name: &str| {
            card["nll_points"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["point"] == name)
                .unwrap()["nll_total"]
                .as_f64()
                .unwrap()
        };
        let theirs = point("bestfit");
        eprintln!(
            "DBG {id} fit {} conv {} {:?} it {} recheck {} pg {}",
            ours,
            fit.converged,
            fit.termination,
            fit.iterations,
            fitter.twice_nll(&fit.parameters, &data).unwrap() / 2.0 - constant,
            fit.projected_gradient
        );
        assert!(
            ours <= theirs + 1e-9 * theirs.abs().max(1.0),
            "{id}: minimum {ours} vs Combine's {theirs}"
        );
        // The profile likelihood along Combine's scan.
        for row in card["scan"]["points"].as_array().unwrap() {
            let r = row["r"].as_f64().unwrap();
            let want = row["two_delta_nll_vs_global_bestfit"].as_f64().unwrap();
            let conditional = fitter.fit(&data, &config.with_fixed(poi, r)).unwrap();
            let got = conditional.twice_nll - fit.twice_nll;
            // Never above Combine's profile; below it by what Combine's scan fits leave (their
            // minimum is no lower than ours, checked above): 1.05e-3 on ci_largeYields.
            assert!(
                got - want <= 1e-3 && got - want >= -5e-3,
                "{id}: 2ΔNLL({r}) = {got} vs Combine's {want}"
            );
        }
        // The 68% interval of r against the crossings of Combine's scan (where it has them).
        let interval =
            ns_inference::intervals::profile_interval(&fitter, poi, &data, &config, 1.0).unwrap();
        let rows: Vec<(f64, f64)> = card["scan"]["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["r"].as_f64().unwrap(),
                    p["two_delta_nll_vs_global_bestfit"].as_f64().unwrap(),
                )
            })
            .collect();
        let singles = &card["multidimfit_singles"];
        let width = singles["r_hi68"].as_f64().unwrap() - singles["r_lo68"].as_f64().unwrap();
        for (end, side) in [(interval.lower, -1.0), (interval.upper, 1.0)] {
            let Some(crossing) = scan_crossing(&rows, fit.parameters[poi], side) else {
                continue;
            };
            let end = end.unwrap_or(f64::NAN);
            assert!(
                (end - crossing).abs() <= 1e-3 * width,
                "{id}: 68% interval end {end} vs {crossing} where Combine's scan crosses 1"
            );
        }
        let limits = ns_inference::limits::upper_limit_root(
            &fitter,
            &data,
            &config,
            0.05,
            1e-6,
            &mut |_| {},
        )
        .unwrap();
        let asymptotic = &card["asymptotic_limits"];
        for (ours, key) in [(limits.obs, "obs"), (limits.exp[2], "exp50")] {
            let want = asymptotic[key].as_f64().unwrap();
            if want > 20.0 {
                // Beyond the POI's range, where Combine widens it and nextstat says so.
                assert!(ours.is_nan(), "{id}: {key} {ours}");
                continue;
            }
            assert!(
                (ours - want).abs()
                    <= (COMBINE_LIMIT_ACCURACY * want).max(COMBINE_LIMIT_ABS_ACCURACY),
                "{id}: {key} limit {ours} vs Combine's {want}"
            );
        }
        let z = ns_inference::hypotest::significance(&fitter, &data, &config).unwrap();
        let want = card["significance"]["observed"].as_f64().unwrap();
        assert!(
            (z.z_obs - want).abs() <= 1e-3,
            "{id}: Z {} vs Combine's {want}",
            z.z_obs
        );
    }
}

/// Where the scan's 2ΔNLL crosses 1 on `side` (−1: below r̂, +1: above), by the parabola
/// through the three scan points around it; `None` where the scan does not cross there.
fn scan_crossing(rows: &[(f64, f64)], r_hat: f64, side: f64) -> Option<f64> {
    let i = (1..rows.len()).find(|&i| {
        let (a, b) = (rows[i - 1], rows[i]);
        (a.1 - 1.0) * (b.1 - 1.0) <= 0.0 && side * (a.0 + b.0 - 2.0 * r_hat) > 0.0
    })?;
    let k = if i + 1 < rows.len() {
        i - 1
    } else {
        i.checked_sub(2)?
    };
    let [(x0, y0), (x1, y1), (x2, y2)] = [rows[k], rows[k + 1], rows[k + 2]];
    // Newton's divided differences, then the root of p(x) − 1 in [rows[i−1], rows[i]].
    let d1 = (y1 - y0) / (x1 - x0);
    let d2 = ((y2 - y1) / (x2 - x1) - d1) / (x2 - x0);
    let p = |x: f64| y0 + d1 * (x - x0) + d2 * (x - x0) * (x - x1) - 1.0;
    let (mut a, mut b) = (rows[i - 1].0, rows[i].0);
    for _ in 0..100 {
        let m = 0.5 * (a + b);
        if p(a) * p(m) <= 0.0 { b = m } else { a = m }
    }
    Some(0.5 * (a + b))
}

/// A fit's objective is the NLL profiled over autoMCStats' per-bin parameters (Combine's
/// `runBarlowBeeston`): its gradient is the profile's, including in ci_shapeInterp's bin that
/// observes nothing and sits at Combine's 1e-9 floor, where θ* moves with the other parameters
/// without being a stationary point. Checked against central differences of the profiled NLL;
/// the per-bin parameters' own gradient is 0, and the profile is never above the plain
/// likelihood.
#[test]
fn the_profiled_objective_has_the_profiles_gradient() {
    let reference = reference();
    // ci_shapeNInterp's shapeN templates morph in the logarithm (the same bins and data).
    for id in ["ci_shapeInterp", "ci_shapeNInterp"] {
        profiled_gradient_matches_differences(&reference["cards"][id]);
    }
}

fn profiled_gradient_matches_differences(card: &Value) {
    let model = ns_tests::combine_card_model(card);
    let data = ns_compute::Likelihood::observed(&model).unwrap();
    let analytic = ns_compute::Likelihood::analytic_parameters(&model);
    assert!(analytic.len() > 10, "{} per-bin parameters", analytic.len());
    let plain = CpuEvaluator::new(&model.compiled);
    let profiled = CpuEvaluator::new(&model.compiled).profiled();
    let mut scratch = Scratch::new(&model.compiled);
    // Combine's best fit, where one bin is held at the floor.
    let point = &card["nll_points"].as_array().unwrap()[1];
    assert_eq!(point["point"], "bestfit");
    let mut x: Vec<f64> = model.parameter_sets.iter().map(|s| s.inits[0]).collect();
    for (name, value) in point["parameters"].as_object().unwrap() {
        let i = model.par_names.iter().position(|n| n == name).unwrap();
        x[i] = value.as_f64().unwrap();
    }
    let mut grad = vec![0.0; x.len()];
    let at_x = profiled
        .nll_with_gradient(&x, &data, &mut scratch, Some(&mut grad))
        .unwrap();
    assert!(at_x <= plain.nll(&x, &data, &mut scratch).unwrap() + 1e-12);
    for &k in &analytic {
        assert_eq!(grad[k], 0.0, "{}", model.par_names[k]);
    }
    for i in (0..x.len()).filter(|i| !analytic.contains(i)) {
        let h = 1e-6 * x[i].abs().max(1.0);
        let [down, _, up] = steps(&x, i, h).map(|p| profiled.nll(&p, &data, &mut scratch).unwrap());
        let fd = (up - down) / (2.0 * h);
        assert!(
            (fd - grad[i]).abs() <= 1e-5 * fd.abs().max(1.0),
            "{}: profiled gradient {} vs differences {fd}",
            model.par_names[i],
            grad[i]
        );
    }
}

/// The likelihood's analytic gradient against central differences on every card that is
/// built, at each of Combine's reference points: every term the cards hold (AsymPow, trG's
/// affine factor, formulas' powers, gmN, floored and logarithmic morphs, autoMCStats, two-sided
/// params).
#[test]
fn the_gradient_matches_differences_on_every_card() {
    let reference = reference();
    let mut checked = 0;
    for id in BUILT {
        let card = &reference["cards"][id];
        let model = ns_tests::combine_card_model(card);
        let data = ns_compute::Likelihood::observed(&model).unwrap();
        let mut scratch = Scratch::new(&model.compiled);
        // The likelihood, and the path fits follow off a kink: its floors smoothed (a smooth
        // function: the same test, and the likelihood's value where the width vanishes).
        let smooth = CpuEvaluator::has_smoothable_kinks(&model.compiled);
        let evaluators = [
            Some(CpuEvaluator::new(&model.compiled)),
            smooth.then(|| CpuEvaluator::new(&model.compiled).smoothed(1e-3)),
        ];
        // Not at "init": every θ = 0 there, where morphed bins with empty nominals meet
        // Combine's floor (kinks a step of 1e-7 cannot resolve).
        let points = card["nll_points"].as_array().unwrap();
        for (point, eval) in points
            .iter()
            .filter(|p| p["point"] != "init")
            .flat_map(|p| evaluators.iter().flatten().map(move |e| (p, e)))
        {
            let mut x: Vec<f64> = model.parameter_sets.iter().map(|s| s.inits[0]).collect();
            for (name, value) in point["parameters"].as_object().unwrap() {
                let i = model.par_names.iter().position(|n| n == name).unwrap();
                let (lo, hi) = model.parameter_sets[i].bounds[0];
                x[i] = value.as_f64().unwrap().clamp(lo, hi);
            }
            let mut grad = vec![0.0; x.len()];
            eval.nll_with_gradient(&x, &data, &mut scratch, Some(&mut grad))
                .unwrap();
            if smooth {
                let exact = CpuEvaluator::new(&model.compiled);
                let narrow = CpuEvaluator::new(&model.compiled).smoothed(1e-12);
                let (a, b) = (
                    exact.nll(&x, &data, &mut scratch).unwrap(),
                    narrow.nll(&x, &data, &mut scratch).unwrap(),
                );
                assert!((a - b).abs() <= 1e-9 * a.abs(), "{id}: smoothed {b} vs {a}");
            }
            for i in 0..x.len() {
                // Small steps: an asymmetric param's mean is a kink of its second derivative.
                let h = 1e-7 * x[i].abs().max(1.0);
                let [down, f0, up] =
                    steps(&x, i, h).map(|p| eval.nll(&p, &data, &mut scratch).unwrap());
                let fd = (up - down) / (2.0 * h);
                // At a kink (a morphed bin meeting Combine's floor at θ = 0) the gradient is
                // one side's: it must then match that one-sided difference.
                let (left, right) = ((f0 - down) / h, (up - f0) / h);
                let scale = fd.abs().max(1.0);
                let central = (fd - grad[i]).abs() <= 1e-5 * scale;
                let one_sided = (left - right).abs() > 1e-3 * scale
                    && (grad[i] - left).abs().min((grad[i] - right).abs()) <= 1e-4 * scale;
                assert!(
                    central || one_sided,
                    "{id} at {}: {}: gradient {} vs differences {fd} (left {left}, right {right})",
                    point["point"],
                    model.par_names[i],
                    grad[i]
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "only {checked} derivatives were checked");
}

/// `datacard2json`: a card whose every term pyhf expresses exactly becomes a pyhf workspace
/// whose likelihood under normsys code1 is Combine's at every reference point (read through
/// the pyhf reader, not the card's); every other card is refused, naming a term.
#[test]
fn cards_pyhf_expresses_become_workspaces_with_combines_likelihood() {
    let reference = reference();
    let codes = ns_core::InterpCodes {
        normsys: ns_core::interp::NormsysCode::Code1,
        histosys: ns_core::interp::HistosysCode::Code4p,
    };
    let (mut written, mut refused) = (Vec::new(), Vec::new());
    for (id, card) in reference["cards"].as_object().unwrap() {
        let path = ns_tests::combine_dir().join(card["card"].as_str().unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = ns_datacard::parse(&text, &path.display().to_string()).unwrap();
        let files = ns_tests::combine_shape_files(card, &path);
        let default = ns_datacard::SignalMaps::default();
        let value = match ns_datacard::pyhf_workspace(&parsed, &files, &default) {
            Ok(value) => value,
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("line ") || e.contains("autoMCStats"),
                    "{id}: {e}"
                );
                assert!(e.contains("has no exact pyhf form"), "{id}: {e}");
                refused.push(format!("{id}: {e}"));
                continue;
            }
        };
        let ws = ns_translate::Workspace::from_value(value).unwrap_or_else(|e| panic!("{id}: {e}"));
        let (model, data) = ns_tests::model_and_data(&ws, codes);
        let fitter = ns_inference::Fitter::new(&model);
        let half_ln_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
        let constant: f64 = model
            .compiled
            .gaussian
            .iter()
            .map(|c| c.sigma.ln() + half_ln_2pi)
            .sum();
        for point in card["nll_points"].as_array().unwrap() {
            let mut x: Vec<f64> = model.parameter_sets.iter().map(|s| s.inits[0]).collect();
            for (name, value) in point["parameters"].as_object().unwrap() {
                let mut value = value.as_f64().unwrap();
                // A gmN's θ is N·γ.
                if let Some(n) = parsed.systematics.iter().find_map(|s| match s.kind {
                    ns_datacard::Kind::GmN { n } if &s.name == name => Some(n as f64),
                    _ => None,
                }) {
                    value /= n;
                }
                let i = model
                    .par_names
                    .iter()
                    .position(|p| p == name || *p == format!("{name}[0]"))
                    .unwrap_or_else(|| panic!("{id}: Combine's {name} is not a parameter"));
                let set = model
                    .parameter_sets
                    .iter()
                    .find(|s| s.offset <= i && i < s.offset + s.n_parameters)
                    .unwrap();
                let (lo, hi) = set.bounds[i - set.offset];
                x[i] = value.clamp(lo, hi);
            }
            let nll = fitter.twice_nll(&x, &data).unwrap() / 2.0 - constant;
            let want = point["nll_total"].as_f64().unwrap();
            assert!(
                (nll - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{id} at {}: pyhf NLL {nll} vs Combine's {want}",
                point["point"]
            );
        }
        written.push(id.clone());
    }
    assert!(
        written.len() >= 4,
        "written {written:?}; refused {refused:?}"
    );
    println!("written {written:?}; refused {refused:#?}");
}

/// `x` moved by −h, 0 and +h in parameter `i`: the points of a central difference.
fn steps(x: &[f64], i: usize, h: f64) -> [Vec<f64>; 3] {
    [-h, 0.0, h].map(|d| {
        let mut p = x.to_vec();
        p[i] += d;
        p
    })
}
