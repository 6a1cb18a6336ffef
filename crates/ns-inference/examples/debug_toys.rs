//! Fit toys of a workspace and report the ones whose fits do not converge: `debug_toys WS.json N`.
use ns_compute::PreparedData;
use ns_inference::toys::generate_toy;
use ns_inference::{FitConfig, Fitter};
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ws = Workspace::from_path(std::path::Path::new(&args[1])).unwrap();
    let n: u32 = args[2].parse().unwrap();
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default()).unwrap();
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
    let fitter = Fitter::new(&model);
    let memory: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(10);
    let config = FitConfig {
        optimizer: ns_inference::optimizer::LbfgsbOptions {
            memory,
            ..Default::default()
        },
        ..FitConfig::suggested(&model)
    };
    let pars = fitter
        .fixed_poi_fit(0.0, &data, &config)
        .unwrap()
        .parameters;
    for i in 0..n {
        let toy = generate_toy(&fitter, &pars, 1, 1, i).unwrap();
        let fit = fitter.fit(&toy, &config).unwrap();
        println!(
            "toy {i}: {:?} it={} ev={} pg={:.3e} f={}",
            fit.termination, fit.iterations, fit.evaluations, fit.projected_gradient, fit.twice_nll
        );
    }
}
