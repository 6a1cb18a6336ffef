//! Where a process's CUDA start-up goes: opens a CUDA session for a workspace, twice, and prints
//! each opening's phases (`ns_compute::cuda::StartupPhases`) and the time since the process
//! began its `main`. Run it as a fresh process to see the first session's costs:
//! `cargo run --release -p ns-compute --example cuda_startup -- WORKSPACE.json`

use std::time::Instant;

use ns_compute::backend::Objective;
use ns_compute::cuda::CudaSession;
use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: cuda_startup WORKSPACE.json")?;
    let ws = Workspace::from_path(std::path::Path::new(&path))?;
    let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())?;
    let loaded = start.elapsed();
    println!("| session | driver | context | kernels | first launch | model | since main |");
    println!("|---|---|---|---|---|---|---|");
    let mut origin = None;
    for opening in ["first", "second"] {
        let session = CudaSession::new(&model.compiled, 0, Objective::Profiled)?;
        let p = &session.info().startup;
        let ms = |d: std::time::Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        println!(
            "| {opening} | {} | {} | {} | {} | {} | {} |",
            ms(p.driver),
            ms(p.context),
            ms(p.kernels),
            ms(p.first_launch),
            ms(p.model),
            ms(start.elapsed())
        );
        origin = Some(session.info().kernels);
    }
    println!(
        "\nworkspace read and model built in {:.1} ms; kernels: {:?}",
        loaded.as_secs_f64() * 1e3,
        origin.expect("two sessions opened")
    );
    Ok(())
}
