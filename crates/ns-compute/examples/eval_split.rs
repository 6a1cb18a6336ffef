use ns_compute::{CpuEvaluator, PreparedData, Scratch};
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap();
    let n: usize = 20000;
    let ws = Workspace::from_path(std::path::Path::new(&path))?;
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())?;
    let data = PreparedData::from_full(&model.compiled, &ws.data(&model, true)?)?;
    let eval = CpuEvaluator::new(&model.compiled);
    let mut scratch = Scratch::new(&model.compiled);
    let params = model.suggested_init();
    let mut grad = vec![0.0; model.n_params()];
    for simd in ns_compute::cpu::simd::available() {
        for g in [false, true] {
            let mut best = f64::MAX;
            for _ in 0..7 {
            let start = std::time::Instant::now();
            for _ in 0..n/4 {
                eval.nll_minus_constant_on(*simd, &params, &data, &mut scratch, if g { Some(&mut grad) } else { None })?;
            }
            best = best.min(start.elapsed().as_secs_f64() / (n/4) as f64 * 1e6);
            }
            println!("{:?} grad={g} {:.2} µs", simd, best);
        }
    }
    Ok(())
}
