//! The CUDA backend of unbinned models: events uploaded once per dataset and kept on the
//! device; each evaluation sends the parameter-dependent state of every node (arguments,
//! log-normalisations, coefficients: computed on the host, as for the CPU) and runs
//! `kernels/events.cu` over the events of every row of the batch at once; the kernel returns
//! per-block sums that the host adds in block order (deterministic), and the same `finish` as
//! the CPU turns them into the NLL and its gradient.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use ns_compute::{
    Backend, Batching, Datasets, Device, ExternalSignal, PreparedData, Resident, SignalBatch,
};
use ns_core::{Error, Result};

use crate::UnbinnedModel;
use crate::events::views;
use crate::model::{Channel, NodeKind, NodeState, Sums};
use crate::shapes::{Shape, Tails};

const SOURCE: &str = include_str!("../kernels/events.cu");
const BLOCK: u32 = 128;
/// The kernel's NS_EVENTS_PER_THREAD: a row takes ⌈n / (BLOCK·this)⌉ blocks, at most the grid.
const EVENTS_PER_THREAD: usize = 8;
const MAX_NODES: usize = 24;

fn driver(what: &str, e: DriverError) -> Error {
    Error::Device(format!("CUDA {what} failed: {e}"))
}

/// Where each node's state and sums lie in a row, and the histograms' contents.
struct Layout {
    n_sums: usize,
    state_len: usize,
    state_at: Vec<usize>,
    sum_at: Vec<usize>,
    /// Histogram leaves: (h_lo, h_hi, nbins, offset in `hist`).
    hist_at: Vec<Option<(f64, f64, usize, usize)>>,
    hist: Vec<f64>,
}

/// A channel's kernel, compiled for its tree, with its layout.
struct ChannelLayout {
    kernel: CudaFunction,
    hist: CudaSlice<f64>,
    n_sums: usize,
    state_len: usize,
    state_at: Vec<usize>,
    sum_at: Vec<usize>,
    hist_at: Vec<Option<(f64, f64, usize, usize)>>,
}

/// The kernel's codes, defined here only: [`kernel_constants`] passes each to
/// `kernels/events.cu` as `-DNS_<NAME>=<value>`, so the kernel holds no number of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    // Node kinds.
    Leaf,
    Product,
    Mixture,
    // Leaf shapes.
    Gaussian,
    Exponential,
    CbOneSided,
    CbTwoSided,
    Argus,
    Chebychev,
    Polynomial,
    Histogram,
    /// A leaf whose column holds its normalised log-density (a flow without context, evaluated
    /// once per dataset).
    LogDensityColumn,
}

impl Code {
    const ALL: [Code; 12] = [
        Code::Leaf,
        Code::Product,
        Code::Mixture,
        Code::Gaussian,
        Code::Exponential,
        Code::CbOneSided,
        Code::CbTwoSided,
        Code::Argus,
        Code::Chebychev,
        Code::Polynomial,
        Code::Histogram,
        Code::LogDensityColumn,
    ];

    /// Its macro name (`NS_` + this) and value; node kinds and shapes are numbered apart.
    fn define(self) -> (&'static str, i64) {
        match self {
            Code::Leaf => ("LEAF", 0),
            Code::Product => ("PRODUCT", 1),
            Code::Mixture => ("MIXTURE", 2),
            Code::Gaussian => ("GAUSSIAN", 0),
            Code::Exponential => ("EXPONENTIAL", 1),
            Code::CbOneSided => ("CB_ONE_SIDED", 2),
            Code::CbTwoSided => ("CB_TWO_SIDED", 3),
            Code::Argus => ("ARGUS", 4),
            Code::Chebychev => ("CHEBYCHEV", 5),
            Code::Polynomial => ("POLYNOMIAL", 6),
            Code::Histogram => ("HISTOGRAM", 7),
            Code::LogDensityColumn => ("LOG_DENSITY_COLUMN", 8),
        }
    }

    fn value(self) -> i64 {
        self.define().1
    }
}

/// The -D options of the kernel's codes and launch shape, the same for every model.
fn kernel_constants() -> Vec<String> {
    let mut defines: Vec<String> = Code::ALL
        .iter()
        .map(|code| {
            let (name, value) = code.define();
            format!("-DNS_{name}={value}")
        })
        .collect();
    defines.push(format!("-DNS_BLOCK={BLOCK}"));
    defines.push(format!("-DNS_EVENTS_PER_THREAD={EVENTS_PER_THREAD}"));
    defines
}

/// A leaf shape's kernel code and flags.
fn shape_code(shape: &Shape) -> (Code, i64) {
    match shape {
        Shape::Gaussian => (Code::Gaussian, 0),
        Shape::Exponential => (Code::Exponential, 0),
        Shape::CrystalBall(Tails::OneSided) => (Code::CbOneSided, 0),
        Shape::CrystalBall(Tails::DoubleSided { left, right }) => (
            Code::CbTwoSided,
            i64::from(*left) | (i64::from(*right) << 1),
        ),
        Shape::Argus => (Code::Argus, 0),
        Shape::Chebychev(n) => (Code::Chebychev, *n as i64),
        Shape::Polynomial(n) => (Code::Polynomial, *n as i64),
        Shape::Histogram(_) => (Code::Histogram, 0),
    }
}

fn upload<T: cudarc::driver::DeviceRepr + Copy + Default>(
    stream: &Arc<CudaStream>,
    v: &[T],
) -> Result<CudaSlice<T>> {
    let v: &[T] = if v.is_empty() { &[T::default()] } else { v };
    stream.clone_htod(v).map_err(|e| driver("upload", e))
}

impl ChannelLayout {
    /// The -D options that compile the event kernel for `c`'s tree, with the layout.
    fn defines(c: &Channel) -> Result<(Vec<String>, Layout)> {
        if c.root + 1 != c.nodes.len() || c.nodes.len() > MAX_NODES {
            return Err(Error::Device(format!(
                "channel '{}' has {} distribution nodes; the CUDA kernel takes at most {MAX_NODES}",
                c.name,
                c.nodes.len()
            )));
        }
        let mut cols: [Vec<i64>; 9] = Default::default();
        let (mut children, mut hist) = (Vec::new(), Vec::new());
        let (mut state_at, mut sum_at, mut hist_at) = (Vec::new(), Vec::new(), Vec::new());
        let (mut state_len, mut n_sums, mut max_args) = (0usize, 0usize, 1usize);
        for node in &c.nodes {
            state_at.push(state_len);
            sum_at.push(n_sums);
            let first_child = children.len() as i64;
            let (kind, shape, flags, column, n_args, n_children, h) = match &node.kind {
                NodeKind::Leaf {
                    shape,
                    column,
                    args,
                } => {
                    let (code, flags) = shape_code(shape);
                    let h = match shape {
                        Shape::Histogram(h) => {
                            let at = hist.len();
                            hist.extend_from_slice(&h.contents);
                            Some((h.lo, h.hi, h.contents.len(), at))
                        }
                        _ => None,
                    };
                    state_len += args.len() + 7;
                    n_sums += args.len() + 1;
                    max_args = max_args.max(args.len());
                    (
                        Code::Leaf,
                        code,
                        flags,
                        *column as i64,
                        args.len() as i64,
                        0,
                        h,
                    )
                }
                NodeKind::Product(ch) => {
                    children.extend(ch.iter().map(|&x| x as i64));
                    (
                        Code::Product,
                        Code::Gaussian,
                        0,
                        0,
                        0,
                        ch.len() as i64,
                        None,
                    )
                }
                NodeKind::Flow { leaf, .. } => {
                    let Some(column) = leaf.derived_column else {
                        return Err(Error::Device(format!(
                            "channel '{}': flow '{}' has context parameters; flows with context are evaluated on the CPU (device cpu), flows without on CUDA too",
                            c.name, node.name
                        )));
                    };
                    state_len += 7;
                    n_sums += 1;
                    (
                        Code::Leaf,
                        Code::LogDensityColumn,
                        0,
                        column as i64,
                        0,
                        0,
                        None,
                    )
                }
                NodeKind::Mixture { children: ch, .. } => {
                    children.extend(ch.iter().map(|&x| x as i64));
                    state_len += ch.len();
                    n_sums += ch.len();
                    (
                        Code::Mixture,
                        Code::Gaussian,
                        0,
                        0,
                        ch.len() as i64,
                        ch.len() as i64,
                        None,
                    )
                }
            };
            hist_at.push(h);
            let row = [
                kind.value(),
                shape.value(),
                flags,
                column,
                n_args,
                first_child,
                n_children,
                *state_at.last().unwrap() as i64,
                *sum_at.last().unwrap() as i64,
            ];
            for (col, v) in cols.iter_mut().zip(row) {
                col.push(v);
            }
        }
        if children.is_empty() {
            children.push(0);
        }
        let list = |v: &[i64]| {
            format!(
                "{{{}}}",
                v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
            )
        };
        let names = [
            "NS_KIND",
            "NS_SHAPE",
            "NS_FLAGS",
            "NS_COLUMN",
            "NS_NARGS",
            "NS_FIRST_CHILD",
            "NS_NCHILD",
            "NS_STATE_AT",
            "NS_SUM_AT",
        ];
        let mut defines = kernel_constants();
        defines.extend([
            format!("-DNS_NODES={}", c.nodes.len()),
            format!("-DNS_ARGS={max_args}"),
            format!("-DNS_SUMS={n_sums}"),
            format!("-DNS_CHILDREN={}", list(&children)),
        ]);
        defines.extend(
            names
                .iter()
                .zip(&cols)
                .map(|(n, v)| format!("-D{n}={}", list(v))),
        );
        Ok((
            defines,
            Layout {
                n_sums,
                state_len,
                state_at,
                sum_at,
                hist_at,
                hist,
            },
        ))
    }

    fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, c: &Channel) -> Result<Self> {
        let (defines, l) = Self::defines(c)?;
        let (module, _) = ns_compute::cuda::load_program(ctx, SOURCE, &defines)?;
        let kernel = module
            .load_function("event_sums")
            .map_err(|e| driver("kernel lookup of event_sums", e))?;
        Ok(ChannelLayout {
            kernel,
            hist: upload(stream, &l.hist)?,
            n_sums: l.n_sums,
            state_len: l.state_len,
            state_at: l.state_at,
            sum_at: l.sum_at,
            hist_at: l.hist_at,
        })
    }

    /// One row's state: per leaf its arguments, ln I, the range and the histogram's placement;
    /// per mixture its coefficients.
    fn write_state(&self, c: &Channel, states: &[NodeState], out: &mut Vec<f64>) {
        let start = out.len();
        out.resize(start + self.state_len, 0.0);
        for (i, (node, st)) in c.nodes.iter().zip(states).enumerate() {
            let at = start + self.state_at[i];
            match &node.kind {
                NodeKind::Leaf { column, .. } => {
                    let k = st.values.len();
                    out[at..at + k].copy_from_slice(&st.values);
                    let axis = &c.axes[*column];
                    out[at + k] = st.log_norm;
                    out[at + k + 1] = axis.lo;
                    out[at + k + 2] = axis.hi;
                    if let Some((lo, hi, nbins, offset)) = self.hist_at[i] {
                        out[at + k + 3..at + k + 7].copy_from_slice(&[
                            lo,
                            hi,
                            nbins as f64,
                            offset as f64,
                        ]);
                    }
                }
                NodeKind::Mixture { .. } => {
                    out[at..at + st.values.len()].copy_from_slice(&st.values)
                }
                // Its column is normalised: ln I = 0, no arguments, no range.
                NodeKind::Flow { .. } | NodeKind::Product(_) => {}
            }
        }
    }

    fn unflatten(&self, c: &Channel, states: &[NodeState], flat: &[f64]) -> Sums {
        let mut sums = c.empty_sums(states);
        for (i, s) in sums.iter_mut().enumerate() {
            let (at, len) = (self.sum_at[i], s.len());
            s.copy_from_slice(&flat[at..at + len]);
        }
        sums
    }
}

/// Datasets on the device: per channel, every dataset's columns (and weights) one after the
/// other, with their offsets, counts and weighting; the host copies for the global observables.
/// One channel's events of every dataset: columns, offsets, counts, weighting.
struct ChannelEventsOnDevice {
    /// Events of each dataset (host copy of `counts`).
    sizes: Vec<usize>,
    columns: CudaSlice<f64>,
    offsets: CudaSlice<i64>,
    counts: CudaSlice<i64>,
    weighted: CudaSlice<i32>,
}

struct DeviceEvents {
    channels: Vec<ChannelEventsOnDevice>,
    host: Vec<PreparedData>,
}

pub struct UnbinnedCuda<'m> {
    model: &'m UnbinnedModel,
    stream: Arc<CudaStream>,
    layouts: Vec<ChannelLayout>,
    grid: u32,
    name: String,
    ordinal: usize,
    /// The last datasets handed over from the host, kept on the device: a fit evaluates the
    /// same events many times (its Newton steps and Hessian through the host path), and
    /// comparing them costs far less than sending them again.
    last_host: std::sync::Mutex<Option<Arc<DeviceEvents>>>,
}

impl<'m> UnbinnedCuda<'m> {
    pub fn new(model: &'m UnbinnedModel, ordinal: usize) -> Result<Self> {
        if !ns_compute::cuda::has_cuda() {
            return Err(ns_compute::cuda::cuda_unavailable());
        }
        let ctx = ns_compute::cuda::shared_context(ordinal)
            .map_err(|e| driver(&format!("opening device {ordinal}"), e))?;
        let stream = ctx.default_stream();
        let sms = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| driver("attribute query", e))? as u32;
        let layouts = model
            .channels()
            .iter()
            .map(|c| ChannelLayout::new(&ctx, &stream, c))
            .collect::<Result<_>>()?;
        let name = ctx.name().map_err(|e| driver("name query", e))?;
        Ok(UnbinnedCuda {
            model,
            stream,
            layouts,
            grid: 4 * sms,
            name,
            ordinal,
            last_host: Default::default(),
        })
    }

    /// `datasets` on the device: the ones held already where they are the same.
    fn held(&self, datasets: &[PreparedData]) -> Result<Arc<DeviceEvents>> {
        let mut last = self.last_host.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = last.as_ref()
            && held.host == datasets
        {
            return Ok(held.clone());
        }
        let fresh = Arc::new(self.upload_events(datasets)?);
        *last = Some(fresh.clone());
        Ok(fresh)
    }

    fn upload_events(&self, datasets: &[PreparedData]) -> Result<DeviceEvents> {
        let dims: Vec<usize> = self
            .model
            .channels()
            .iter()
            .map(Channel::data_dims)
            .collect();
        let views: Vec<_> = datasets
            .iter()
            .map(|d| views(&d.main, &dims))
            .collect::<Result<_>>()?;
        let mut channels = Vec::new();
        for (ch, &d) in dims.iter().enumerate() {
            let (mut all, mut offsets, mut counts, mut weighted) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for v in &views {
                let view = v[ch];
                offsets.push(all.len() as i64);
                counts.push(view.len() as i64);
                weighted.push(i32::from(view.weights().is_some()));
                for i in 0..d {
                    all.extend_from_slice(view.column(i));
                }
                if let Some(w) = view.weights() {
                    all.extend_from_slice(w);
                }
            }
            channels.push(ChannelEventsOnDevice {
                sizes: counts.iter().map(|&c| c as usize).collect(),
                columns: upload(&self.stream, &all)?,
                offsets: upload(&self.stream, &offsets)?,
                counts: upload(&self.stream, &counts)?,
                weighted: upload(&self.stream, &weighted)?,
            });
        }
        Ok(DeviceEvents {
            channels,
            host: datasets.to_vec(),
        })
    }
}

impl Backend for UnbinnedCuda<'_> {
    fn device(&self) -> Device {
        Device::Cuda(ns_compute::CudaGpus::Set(1 << self.ordinal))
    }

    fn description(&self) -> String {
        format!("CUDA ({}, unbinned)", self.name)
    }

    fn batching(&self) -> Batching {
        Batching::Lockstep
    }

    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
        Ok(Resident::new(datasets.len(), self.held(datasets)?))
    }

    fn nll_grad_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<()> {
        let uploaded: Arc<DeviceEvents>;
        let events: &DeviceEvents = match datasets {
            Datasets::Host(h) => {
                uploaded = self.held(h)?;
                &uploaded
            }
            Datasets::Resident(r) => r.storage::<Arc<DeviceEvents>>()?,
        };
        let n = self.model.parameter_count();
        ns_compute::backend::check_batch(points, which, nll, grad, n, events.host.len())?;
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        let rows = which.len();
        grad.fill(0.0);
        nll.fill(0.0);
        let row_dataset: Vec<i32> = which.iter().map(|&d| d as i32).collect();
        let row_dataset = upload(&self.stream, &row_dataset)?;
        for ((channel, layout), on_device) in self
            .model
            .channels()
            .iter()
            .zip(&self.layouts)
            .zip(&events.channels)
        {
            let states: Vec<Vec<NodeState>> = (0..rows)
                .map(|r| channel.prepare(&points[r * n..(r + 1) * n], None))
                .collect::<Result<_>>()?;
            let mut flat_states = Vec::with_capacity(rows * layout.state_len);
            for st in &states {
                layout.write_state(channel, st, &mut flat_states);
            }
            let state_dev = upload(&self.stream, &flat_states)?;
            let width = layout.n_sums + 1;
            // As many blocks as the largest row takes (each row takes what its own size needs).
            let most = which
                .iter()
                .map(|&d| on_device.sizes[d as usize])
                .max()
                .unwrap_or(0);
            let grid = most
                .div_ceil(BLOCK as usize * EVENTS_PER_THREAD)
                .clamp(1, self.grid as usize);
            let mut partials = self
                .stream
                .alloc_zeros::<f64>(rows * grid * width)
                .map_err(|e| driver("allocation", e))?;
            let cfg = LaunchConfig {
                grid_dim: (grid as u32, rows as u32, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            let (state_len, dims) = (layout.state_len as i32, channel.data_dims() as i32);
            let mut launch = self.stream.launch_builder(&layout.kernel);
            launch
                .arg(&state_dev)
                .arg(&state_len)
                .arg(&layout.hist)
                .arg(&on_device.columns)
                .arg(&on_device.offsets)
                .arg(&on_device.counts)
                .arg(&on_device.weighted)
                .arg(&row_dataset)
                .arg(&dims)
                .arg(&mut partials);
            // SAFETY: the arguments match `event_sums`'s parameters in order and type; every
            // buffer was sized above for `rows` rows of this channel's layout and lives until the
            // results are copied back on the same stream.
            unsafe { launch.launch(cfg) }.map_err(|e| driver("event kernel launch", e))?;
            let host = self
                .stream
                .clone_dtoh(&partials)
                .map_err(|e| driver("event kernel", e))?;
            for r in 0..rows {
                let mut total = vec![0.0; width];
                for b in 0..grid {
                    let part = &host[(r * grid + b) * width..][..width];
                    for (t, p) in total.iter_mut().zip(part) {
                        *t += p;
                    }
                }
                let sums = layout.unflatten(channel, &states[r], &total);
                nll[r] += channel.finish(
                    &states[r],
                    total[layout.n_sums],
                    &sums,
                    &points[r * n..(r + 1) * n],
                    &mut grad[r * n..(r + 1) * n],
                );
            }
        }
        for (r, &d) in which.iter().enumerate() {
            let data = &events.host[d as usize];
            nll[r] += crate::model::constraints_nll_grad(
                self.model.constraints(),
                &data.aux,
                &points[r * n..(r + 1) * n],
                &mut grad[r * n..(r + 1) * n],
            );
        }
        Ok(())
    }

    fn attach_signal(&self, _: &ExternalSignal) -> Result<Resident> {
        Err(crate::cpu::no_signals())
    }

    fn nll_grad_signal(&self, _: &Resident, _: SignalBatch) -> Result<()> {
        Err(crate::cpu::no_signals())
    }
}

#[cfg(test)]
mod tests {
    /// NVRTC is a pip package (no GPU needed): `scripts/test.sh` runs this with `--ignored` and
    /// LD_LIBRARY_PATH at its lib folder, as it does ns-compute's kernel compile tests.
    #[test]
    #[ignore = "needs NVRTC (pip nvidia-cuda-nvrtc) on LD_LIBRARY_PATH"]
    fn the_event_kernel_compiles_for_every_prebuilt_architecture() {
        // Every node kind and shape in one tree.
        let doc = serde_json::json!({
            "distributions": [
                {"name": "g", "type": "gaussian_dist", "x": "x", "mean": "m", "sigma": 1.0},
                {"name": "e", "type": "exponential_dist", "x": "x", "c": "c"},
                {"name": "cb1", "type": "crystalball_dist", "m": "x", "m0": "m", "sigma": 1.0, "alpha": 1.0, "n": 2.0},
                {"name": "cb2", "type": "crystalball_dist", "m": "x", "m0": "m", "sigma_L": 1.0, "sigma_R": 1.0, "alpha_L": 1.0, "n_L": 2.0},
                {"name": "a", "type": "argus_dist", "mass": "x", "resonance": 11.0, "slope": "c", "power": 0.5},
                {"name": "ch", "type": "chebychev_dist", "x": "y", "coefficients": ["c"]},
                {"name": "p", "type": "polynomial_dist", "x": "y", "coefficients": [1.0, "c"]},
                {"name": "h", "type": "histogram_dist", "data": {"axes": [{"name": "y", "min": 0, "max": 1, "nbins": 2}], "contents": [1, 2]}},
                {"name": "fx", "type": "mixture_dist", "summands": ["g", "e", "cb1", "cb2", "a"], "coefficients": [0.2, 0.2, 0.2, 0.2]},
                {"name": "fy", "type": "mixture_dist", "summands": ["ch", "p", "h"], "coefficients": [0.3, 0.3]},
                {"name": "prod", "type": "product_dist", "factors": ["fx", "fy"]}
            ],
            "data": [{"name": "d", "type": "unbinned", "axes": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": 0, "max": 1}], "entries": []}],
            "likelihoods": [{"name": "L", "distributions": ["prod"], "data": ["d"]}],
            "parameter_points": [{"name": "default_values", "parameters": [{"name": "m", "value": 5, "min": 0, "max": 10}, {"name": "c", "value": 0.1, "min": -1, "max": 1}]}]
        });
        for model in [crate::hs3::read(&doc, &Default::default()).unwrap()] {
            for c in model.channels() {
                let (defines, ..) = super::ChannelLayout::defines(c).unwrap();
                for arch in ns_compute::cuda::PREBUILT_ARCHS {
                    let cubin = ns_compute::cuda::compile_for(super::SOURCE, &defines, arch)
                        .unwrap_or_else(|e| panic!("sm_{arch}: {e}"));
                    assert!(!cubin.is_empty());
                }
            }
        }
    }
}
