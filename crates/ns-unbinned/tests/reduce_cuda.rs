//! The mixture-NLL reduction on CUDA against the CPU reference: host-uploaded, device-resident
//! and f32-pointer log-probabilities, batched datasets, up to 10⁷ events, pointers that are not
//! device memory. They need a CUDA GPU: ignored here (reported as such), run on the GPU machine
//! with `--include-ignored`.

use cudarc::driver::{CudaContext, DevicePtr};
use ns_unbinned::flow::runtime::Precision;
use ns_unbinned::reduce::cuda::{DeviceLogProbs, MixtureReducer, Weights};
use ns_unbinned::reduce::{GaussConstraint, MixtureLayout, MixtureNll, mixture_nll};

/// Log-probabilities of `p` processes at `n` events, of plausible size (−12 to −0.5), and
/// weights around one: deterministic.
fn inputs(p: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let logp = (0..p * n).map(|_| -0.5 - 11.5 * next()).collect();
    let weights = (0..n).map(|_| 0.5 + next()).collect();
    (logp, weights)
}

fn reducer() -> MixtureReducer {
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    assert!(
        ns_compute::cuda::has_cuda(),
        "no CUDA device on this machine"
    );
    MixtureReducer::new(0).expect("a CUDA GPU")
}

fn close(a: &[MixtureNll], b: &[MixtureNll], rel: f64, what: &str) {
    assert_eq!(a.len(), b.len());
    for (t, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x.nll - y.nll).abs() <= rel * y.nll.abs().max(1.0),
            "{what}, dataset {t}: NLL {} against {}",
            x.nll,
            y.nll
        );
        for (i, (g, h)) in x.grad.iter().zip(&y.grad).enumerate() {
            assert!(
                (g - h).abs() <= rel * h.abs().max(1.0),
                "{what}, dataset {t}: gradient {i} {g} against {h}"
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine (bench/gpu_run.sh)"]
fn host_device_and_f32_paths_agree_with_the_cpu() {
    let r = reducer();
    let (p, n) = (3, 1_000_003);
    let (logp, weights) = inputs(p, n);
    let layout = MixtureLayout::single(
        p,
        n,
        vec![GaussConstraint {
            mean: 0.0,
            sigma: 1.0,
        }],
    );
    let (yields, values) = ([2.0e5, 7.0e5, 1.0e5], [0.3]);
    let cpu = mixture_nll(&layout, &logp, Some(&weights), &yields, &values).unwrap();
    let host = r
        .reduce_host(&layout, &logp, Weights::Host(&weights), &yields, &values)
        .unwrap();
    close(&host, &cpu, 1e-10, "host-uploaded f64 against the CPU");
    let resident = r.upload(&logp).unwrap();
    let device = r
        .reduce(
            &layout,
            DeviceLogProbs::Slice(&resident),
            Weights::Host(&weights),
            &yields,
            &values,
        )
        .unwrap();
    close(
        &device,
        &host,
        1e-12,
        "device-resident f64 against host-uploaded",
    );
    // A pointer from elsewhere (as a PyTorch tensor's): f64, then f32.
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let theirs = stream.clone_htod(&logp).unwrap();
    let (address, _sync) = theirs.device_ptr(&stream);
    let pointer = r
        .reduce(
            &layout,
            DeviceLogProbs::Pointer {
                address,
                precision: Precision::F64,
            },
            Weights::Host(&weights),
            &yields,
            &values,
        )
        .unwrap();
    close(&pointer, &host, 1e-12, "f64 pointer against host-uploaded");
    let single: Vec<f32> = logp.iter().map(|&v| v as f32).collect();
    let theirs32 = stream.clone_htod(&single).unwrap();
    let (address, _sync32) = theirs32.device_ptr(&stream);
    let f32_result = r
        .reduce(
            &layout,
            DeviceLogProbs::Pointer {
                address,
                precision: Precision::F32,
            },
            Weights::Host(&weights),
            &yields,
            &values,
        )
        .unwrap();
    close(&f32_result, &host, 1e-5, "f32 pointer against f64");
    // The f32 path sums the f32 values exactly as the CPU sums them widened to f64.
    let widened: Vec<f64> = single.iter().map(|&v| f64::from(v)).collect();
    let cpu32 = mixture_nll(&layout, &widened, Some(&weights), &yields, &values).unwrap();
    close(
        &f32_result,
        &cpu32,
        1e-10,
        "f32 pointer against the CPU on the same values",
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine (bench/gpu_run.sh)"]
fn batched_toys_give_each_dataset_its_own_result() {
    let r = reducer();
    let p = 2;
    let sizes = [0usize, 1, 255, 4096, 100_000, 7, 2_000_001];
    let mut offsets = vec![0];
    for s in sizes {
        offsets.push(offsets.last().unwrap() + s);
    }
    let n = *offsets.last().unwrap();
    let (logp, _) = inputs(p, n);
    let t = sizes.len();
    let yields: Vec<f64> = (0..t * p).map(|i| 10.0 + 97.0 * i as f64).collect();
    let layout = MixtureLayout {
        processes: p,
        offsets: offsets.clone(),
        constraints: Vec::new(),
    };
    let batch = r
        .reduce_host(&layout, &logp, Weights::None, &yields, &[])
        .unwrap();
    close(
        &batch,
        &mixture_nll(&layout, &logp, None, &yields, &[]).unwrap(),
        1e-10,
        "batch against the CPU",
    );
    // Each dataset alone gives the same bits as in the batch.
    for d in 0..t {
        let (lo, hi) = (offsets[d], offsets[d + 1]);
        let own: Vec<f64> = (0..p)
            .flat_map(|q| logp[q * n + lo..q * n + hi].to_vec())
            .collect();
        let alone = r
            .reduce_host(
                &MixtureLayout::single(p, hi - lo, Vec::new()),
                &own,
                Weights::None,
                &yields[d * p..(d + 1) * p],
                &[],
            )
            .unwrap();
        assert_eq!(alone[0], batch[d], "dataset {d} alone and in the batch");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine (bench/gpu_run.sh)"]
fn ten_million_events_reduce_deterministically() {
    let r = reducer();
    let (p, n) = (2, 10_000_000);
    let (logp, weights) = inputs(p, n);
    let layout = MixtureLayout::single(p, n, Vec::new());
    let yields = [4.0e6, 6.0e6];
    let on = r.upload(&logp).unwrap();
    let run = || {
        r.reduce(
            &layout,
            DeviceLogProbs::Slice(&on),
            Weights::Host(&weights),
            &yields,
            &[],
        )
        .unwrap()
    };
    let first = run();
    assert_eq!(first, run(), "the same inputs give the same bits");
    close(
        &first,
        &mixture_nll(&layout, &logp, Some(&weights), &yields, &[]).unwrap(),
        1e-10,
        "10⁷ events against the CPU",
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine (bench/gpu_run.sh)"]
fn pointers_that_are_not_the_log_probabilities_are_errors() {
    let r = reducer();
    let layout = MixtureLayout::single(2, 1000, Vec::new());
    let host = vec![0.0f64; 2000];
    let err = r
        .reduce(
            &layout,
            DeviceLogProbs::Pointer {
                address: host.as_ptr() as u64,
                precision: Precision::F64,
            },
            Weights::None,
            &[1.0, 1.0],
            &[],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not device memory"), "{err}");
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let short = stream.clone_htod(&vec![0.0f32; 1500]).unwrap();
    let (address, _sync) = short.device_ptr(&stream);
    let err = r
        .reduce(
            &layout,
            DeviceLogProbs::Pointer {
                address,
                precision: Precision::F32,
            },
            Weights::None,
            &[1.0, 1.0],
            &[],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("past the end of their allocation"), "{err}");
}
