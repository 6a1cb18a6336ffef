//! Where an f32 evaluation's time goes on a Vulkan/Metal adapter: the driver's round trip (an
//! empty submission, a 4 KB readback) against the backend's whole batched NLL + gradient call on
//! a small and a large model. Prints one JSON object (medians, microseconds).
//!
//! `cargo run --release -p ns-compute --features wgpu --example wgpu_latency -- WS_DIR`

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use ns_compute::backend::open;
use ns_compute::{Datasets, Device, PreparedData};
use ns_translate::{FromWorkspace, HistFactoryModel, Workspace};

fn median_us(mut f: impl FnMut(), runs: usize) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

fn driver_round_trips() -> serde_json::Value {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN | wgpu::Backends::METAL,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
    let empty = median_us(
        || {
            queue.submit([device.create_command_encoder(&Default::default()).finish()]);
            device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        },
        200,
    );
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let source = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4096,
        usage,
        mapped_at_creation: false,
    });
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4096,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let readback = median_us(
        || {
            queue.write_buffer(&source, 0, &[1u8; 4096]);
            let mut e = device.create_command_encoder(&Default::default());
            e.copy_buffer_to_buffer(&source, 0, &staging, 0, Some(4096));
            queue.submit([e.finish()]);
            staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
            device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
            drop(staging.slice(..).get_mapped_range().unwrap());
            staging.unmap();
        },
        200,
    );
    serde_json::json!({"adapter": adapter.get_info().name, "empty_submit_us": empty, "readback_4kb_us": readback})
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: wgpu_latency WORKSPACE_DIR");
    let mut out = serde_json::json!({ "driver": driver_round_trips() });
    for (file, rows) in [
        ("nextstat_complex_workspace.json", [1usize, 1000, 4000]),
        ("nextstat_tHu.json", [1, 1000, 4000]),
    ] {
        let ws = Workspace::from_path(&std::path::Path::new(&dir).join(file)).unwrap();
        let model = HistFactoryModel::from_workspace(&ws, &Default::default()).unwrap();
        let data =
            PreparedData::from_full(&model.compiled, &ws.data(&model, true).unwrap()).unwrap();
        let backend = open(Device::Vulkan, &model.compiled).unwrap();
        let resident = backend.upload(std::slice::from_ref(&data)).unwrap();
        let n = model.n_params();
        let mut per = serde_json::Map::new();
        let upload = median_us(
            || drop(backend.upload(std::slice::from_ref(&data)).unwrap()),
            30,
        );
        per.insert("upload_one_dataset_us".into(), upload.into());
        for r in rows {
            let points: Vec<f64> = (0..r).flat_map(|_| model.suggested_init()).collect();
            let (mut nll, mut grad) = (vec![0.0; r], vec![0.0; r * n]);
            let t = median_us(
                || {
                    backend
                        .nll_grad_batch(
                            &points,
                            Datasets::Resident(&resident),
                            &vec![0; r],
                            &mut nll,
                            &mut grad,
                            &AtomicBool::new(false),
                        )
                        .unwrap()
                },
                30,
            );
            per.insert(format!("rows_{r}_us"), t.into());
        }
        out[file] = per.into();
    }
    println!("{out}");
}
