//! Device selection on any machine: names, clear errors, `auto` never choosing a GPU for work
//! that the CPU does faster, and a CUDA request failing cleanly where no GPU exists.

use ns_compute::cuda::has_cuda;
use ns_compute::{CudaGpus, Likelihood};
use ns_core::Error;
use ns_inference::{Device, Fitter, Workload};
use ns_tests::{model_and_data, workspace_path};
use ns_translate::Workspace;

#[test]
fn device_names_parse_and_unknown_or_missing_backends_say_why() {
    assert_eq!(Device::from_name("cpu").unwrap(), Device::Cpu);
    assert_eq!(
        Device::from_name("cuda").unwrap(),
        Device::Cuda(CudaGpus::FIRST)
    );
    assert_eq!(Device::from_name("auto").unwrap(), Device::Auto);
    assert_eq!(Device::from_name("vulkan").unwrap(), Device::Vulkan);
    assert_eq!(Device::from_name("metal").unwrap(), Device::Metal);
    // No Metal adapter off a Mac: opening it is a device error that names it.
    if !cfg!(target_os = "macos") {
        let ws = Workspace::from_path(&workspace_path("nextstat_simple_workspace.json")).unwrap();
        let (model, _) = model_and_data(&ws, Default::default());
        match ns_compute::backend::open(Device::Metal, &model.compiled) {
            Err(Error::Device(msg)) => assert!(msg.contains("metal"), "{msg}"),
            Err(other) => panic!("metal should be a device error, got {other}"),
            Ok(_) => panic!("a Metal backend opened off a Mac"),
        }
    }
    // Several GPUs: a set of ordinals or all of them; the name parses back.
    assert_eq!(
        Device::from_name("cuda:all").unwrap(),
        Device::Cuda(CudaGpus::All)
    );
    assert_eq!(
        Device::from_name("cuda:0,2").unwrap(),
        Device::Cuda(CudaGpus::Set(0b101))
    );
    for name in ["cuda", "cuda:1", "cuda:0,2", "cuda:all"] {
        match Device::from_name(name).unwrap() {
            Device::Cuda(gpus) => assert_eq!(gpus.name(), name),
            other => panic!("{name} parsed as {other:?}"),
        }
    }
    assert_eq!(CudaGpus::All.ordinals(2).unwrap(), [0, 1]);
    assert_eq!(CudaGpus::Set(0b110).ordinals(3).unwrap(), [1, 2]);
    for (bad, says) in [
        ("cuda:", "not a GPU number"),
        ("cuda:x", "'x' is not a GPU number"),
        ("cuda:-1", "not a GPU number"),
        ("cuda:0,0", "names GPU 0 twice"),
        ("cuda:64", "beyond the 64"),
    ] {
        match Device::from_name(bad) {
            Err(Error::InvalidInput(msg)) => assert!(msg.contains(says), "{bad}: {msg}"),
            other => panic!("{bad} should be refused, got {other:?}"),
        }
    }
    match CudaGpus::Set(0b100).ordinals(2) {
        Err(Error::Device(msg)) => assert!(msg.contains("GPU 2") && msg.contains("has 2"), "{msg}"),
        other => panic!("GPU 2 of 2 should be refused, got {other:?}"),
    }
    match Device::from_name("tpu") {
        Err(Error::InvalidInput(msg)) => {
            assert!(msg.contains("tpu") && msg.contains("cuda"), "{msg}")
        }
        other => panic!("unknown device should be an input error, got {other:?}"),
    }
}

#[test]
fn auto_keeps_sequential_and_small_batch_work_on_the_cpu() {
    let small = Workspace::from_path(&workspace_path("nextstat_complex_workspace.json")).unwrap();
    let (small, _) = model_and_data(&small, Default::default());
    let large = Workspace::from_path(&workspace_path("nextstat_tHu.json")).unwrap();
    let (large, _) = model_and_data(&large, Default::default());
    for model in [&small, &large] {
        assert_eq!(
            model.resolve(Device::Auto, Workload::Sequential),
            Device::Cpu
        );
        assert_eq!(
            model.resolve(Device::Auto, Workload::Batch { fits: 8 }),
            Device::Cpu
        );
        assert_eq!(
            model.resolve(Device::Cpu, Workload::Batch { fits: 1 << 20 }),
            Device::Cpu
        );
        assert_eq!(
            model.resolve(Device::Cuda(CudaGpus::FIRST), Workload::Sequential),
            Device::Cuda(CudaGpus::FIRST)
        );
    }
    // 4000 fits of an 8-parameter model: the CPU finishes before a CUDA session would open.
    assert_eq!(
        small.resolve(Device::Auto, Workload::Batch { fits: 4000 }),
        Device::Cpu
    );
    // 400,000 tHq fits pass the size gate on any host (3·10⁹ against 2.5·10⁵ per thread).
    let big = Workload::Batch { fits: 400_000 };
    let gpu_if_any = if has_cuda() {
        Device::Cuda(CudaGpus::FIRST)
    } else {
        Device::Cpu
    };
    assert_eq!(large.resolve(Device::Auto, big), gpu_if_any);
    // The fitter's `auto` weighs them by a timed fit: the GPU wins them wherever one exists
    // and the CPU has fewer threads than the GPU's throughput in CPU fits (40); sequential work
    // and small batches stay on the CPU unweighed.
    let expected = match rayon::current_num_threads() < 40 {
        true => gpu_if_any,
        false => Device::Cpu,
    };
    assert_eq!(Fitter::auto_device(&large, Device::Auto, big), expected);
    for work in [Workload::Sequential, Workload::Batch { fits: 8 }] {
        assert_eq!(Fitter::auto_device(&large, Device::Auto, work), Device::Cpu);
    }
    assert_eq!(
        Fitter::auto_device(&large, Device::Cpu, big),
        Device::Cpu,
        "a named device is kept"
    );
}

#[test]
fn a_cuda_fitter_without_a_gpu_is_a_clear_error_not_a_panic() {
    if has_cuda() {
        eprintln!(
            "SKIPPED a_cuda_fitter_without_a_gpu_is_a_clear_error_not_a_panic: this machine has a GPU"
        );
        return;
    }
    let ws = Workspace::from_path(&workspace_path("nextstat_simple_workspace.json")).unwrap();
    let (model, _) = model_and_data(&ws, Default::default());
    match Fitter::on_device(&model, Device::Cuda(CudaGpus::FIRST), Workload::Sequential) {
        Err(Error::Device(msg)) => assert!(msg.contains("CUDA"), "{msg}"),
        Err(e) => panic!("expected a device error, got {e}"),
        Ok(_) => panic!("a CUDA fitter opened without a GPU"),
    }
}
