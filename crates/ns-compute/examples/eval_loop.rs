//! Evaluate NLL + gradient of a workspace N times (for profilers: callgrind, perf).
//! `cargo run --release -p ns-compute --example eval_loop -- WORKSPACE.json [N]`

use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: eval_loop WORKSPACE.json [N]")?;
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let ws = Workspace::from_path(std::path::Path::new(&path))?;
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())?;
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true)?)?;
    let eval = CpuEvaluator::new(&model.compiled);
    let mut scratch = Scratch::new(&model.compiled);
    let params = model.suggested_init();
    let mut grad = vec![0.0; model.n_params()];
    let start = std::time::Instant::now();
    let mut total = 0.0;
    for _ in 0..n {
        total += eval.nll_with_gradient(&params, &data, &mut scratch, Some(&mut grad))?;
    }
    let per_call = start.elapsed().as_secs_f64() / n as f64;
    println!(
        "{} evaluations, {:.2} µs each (checksum {total:.6})",
        n,
        per_call * 1e6
    );
    Ok(())
}
