//! Parity with the numbers pyhf 0.7.6 stored in ../shared/pyhf-ref/ref: the model layout
//! (parameter order, names, init, bounds, fixed, auxdata) and twice_nll / expected data at init.

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_tests::{close, floats, reference, reference_names, tolerance, workspace_path};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};

fn load(name: &str) -> (serde_json::Value, Workspace, HistFactoryModel) {
    let r = reference(name);
    let file = r["workspace"]
        .as_str()
        .unwrap()
        .trim_start_matches("workspaces/")
        .to_string();
    let ws = Workspace::from_path(&workspace_path(&file)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (r, ws, model)
}

#[test]
fn model_layout_matches_pyhf() {
    for name in reference_names() {
        let (r, _, model) = load(&name);
        let m = &r["model"];
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            model.par_order(),
            strings(&m["par_order"]),
            "{name}: par_order"
        );
        assert_eq!(
            model.par_names,
            strings(&m["par_names"]),
            "{name}: par_names"
        );
        assert_eq!(
            model.suggested_init(),
            floats(&m["suggested_init"]),
            "{name}: suggested_init"
        );
        let bounds: Vec<(f64, f64)> = m["suggested_bounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b[0].as_f64().unwrap(), b[1].as_f64().unwrap()))
            .collect();
        assert_eq!(model.suggested_bounds(), bounds, "{name}: suggested_bounds");
        let fixed: Vec<bool> = m["suggested_fixed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        assert_eq!(model.suggested_fixed(), fixed, "{name}: suggested_fixed");
        assert_eq!(model.auxdata, floats(&m["auxdata"]), "{name}: auxdata");
        let channels: Vec<String> = model.channels.iter().map(|c| c.name.clone()).collect();
        assert_eq!(channels, strings(&m["channels"]), "{name}: channels");
        assert_eq!(model.samples, strings(&m["samples"]), "{name}: samples");
        // A reference built with `poi_name=None` says nothing about the measurement's POI.
        if let Some(poi) = m["poi_name"].as_str() {
            assert_eq!(
                model.poi().unwrap(),
                m["poi_index"].as_u64().unwrap() as usize,
                "{name}: {poi}"
            );
        }
    }
}

#[test]
fn twice_nll_and_expected_data_at_init_match_pyhf() {
    let rtol = tolerance("nll_rtol_vs_pyhf");
    for name in reference_names() {
        let (r, ws, model) = load(&name);
        let data =
            PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
        let eval = CpuEvaluator::new(&model.compiled);
        let mut scratch = Scratch::new(&model.compiled);
        let init = model.suggested_init();
        let nll = eval.nll(&init, &data, &mut scratch).unwrap();
        let expected = r["at_init"]["twice_nll"].as_f64().unwrap();
        assert!(
            close(2.0 * nll, expected, rtol),
            "{name}: twice_nll {} vs pyhf {expected}",
            2.0 * nll
        );
        let (main, _) = eval.expected_data(&init, &mut scratch).unwrap();
        let pyhf_main = floats(&r["at_init"]["expected_actualdata"]);
        let scale = pyhf_main.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        for (b, (ours, theirs)) in main.iter().zip(&pyhf_main).enumerate() {
            assert!(
                (ours - theirs).abs()
                    <= tolerance("expected_data_rtol_vs_pyhf") * scale.max(theirs.abs()),
                "{name}: bin {b}: {ours} vs {theirs}"
            );
        }
    }
}
