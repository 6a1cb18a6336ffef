//! Fit a workspace and print the optimizer's report: `debug_fit WS.json [MU]`.
use ns_compute::PreparedData;
use ns_inference::optimizer::LbfgsbOptions;
use ns_inference::{FitConfig, Fitter};
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ws = Workspace::from_path(std::path::Path::new(&args[1])).unwrap();
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
    let fitter = Fitter::new(&model);
    let cfg = FitConfig {
        optimizer: LbfgsbOptions {
            pg_tol: 1e-9,
            memory: 30,
            ..Default::default()
        },
        ..FitConfig::suggested(&model)
    };
    let mu: Option<f64> = args.get(2).map(|s| s.parse().unwrap());
    let r = match mu {
        Some(m) => fitter.fixed_poi_fit(m, &data, &cfg).unwrap(),
        None => fitter.fit(&data, &cfg).unwrap(),
    };
    println!(
        "{:?} it={} ev={} pg={:e} f={}",
        r.termination, r.iterations, r.evaluations, r.projected_gradient, r.twice_nll
    );
    let mut g = vec![0.0; model.n_params()];
    fitter
        .twice_nll_and_gradient(
            &r.parameters,
            &data,
            &mut ns_compute::Scratch::new(&model.compiled),
            &mut g,
        )
        .unwrap();
    let mut worst: Vec<(f64, &String, f64)> = g
        .iter()
        .zip(&model.par_names)
        .zip(&r.parameters)
        .filter(|((_, n), _)| !n.starts_with("mu") || mu.is_none())
        .map(|((g, n), x)| (g.abs(), n, *x))
        .collect();
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("largest |g|: {:?}", &worst[..5.min(worst.len())]);
}
