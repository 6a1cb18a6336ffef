//! Toy datasets sampled on the device: the CPU's generator and samplers, bit for bit.

use cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use ns_core::{CompiledModel, Result};

use super::{CudaSession, DeviceDatasets, TOY_BLOCK, driver, upload};
use crate::cuda::abi::ToyArgs;
use crate::toys::{AuxRanges, ToyEnsembleRates};

impl CudaSession {
    /// Generate toys `first_toy .. first_toy + n_toys` of each ensemble on the device, all in
    /// one launch; the result holds ensemble after ensemble. Bit-identical to
    /// `rng::ToyStream` on the CPU.
    pub fn sample_toys(
        &self,
        model: &CompiledModel,
        ensembles: &[ToyEnsembleRates],
        seed: u64,
        first_toy: u32,
        n_toys: usize,
    ) -> Result<DeviceDatasets> {
        let (mut rate, mut mean, mut prate, mut streams) = (vec![], vec![], vec![], vec![]);
        let mut pshape = vec![];
        for e in ensembles {
            e.check(model)?;
            rate.extend_from_slice(&e.main);
            mean.extend_from_slice(&e.gauss_mean);
            prate.extend_from_slice(&e.pois_rate);
            for shape in &e.pois_shape {
                pshape.extend_from_slice(&[shape.log_rate, shape.log_max, shape.mode]);
            }
            streams.push(e.stream);
        }
        let ranges = AuxRanges::of(model);
        let gauss_range: Vec<f64> = ranges.gauss.iter().flat_map(|&(l, h)| [l, h]).collect();
        let total = n_toys * ensembles.len();
        let s = &self.stream;
        let up = |v: &[f64]| upload(s, v);
        let up32 = |v: &[u32]| upload(s, v);
        let err = |e| driver("toy upload", e);
        let rate = up(&rate).map_err(err)?;
        let mean = up(&mean).map_err(err)?;
        let sigma = up(&model.gaussian.iter().map(|c| c.sigma).collect::<Vec<_>>()).map_err(err)?;
        let sigma_low = up(&crate::toys::low_side_widths(model)).map_err(err)?;
        let gauss_aux = up32(
            &model
                .gaussian
                .iter()
                .map(|c| c.aux_index)
                .collect::<Vec<_>>(),
        )
        .map_err(err)?;
        let prate = up(&prate).map_err(err)?;
        let pshape = up(&pshape).map_err(err)?;
        let pois_high = up(&ranges.pois_high).map_err(err)?;
        let gauss_range = up(&gauss_range).map_err(err)?;
        let pois_aux = up32(
            &model
                .poisson
                .iter()
                .map(|c| c.aux_index)
                .collect::<Vec<_>>(),
        )
        .map_err(err)?;
        let streams = up32(&streams).map_err(err)?;
        let alloc = |e| driver("toy allocation", e);
        let main = s
            .alloc_zeros::<f64>(total * self.n_main + 1)
            .map_err(alloc)?;
        let aux = s
            .alloc_zeros::<f64>(total * self.n_aux + 1)
            .map_err(alloc)?;
        let args = ToyArgs {
            main_rate: rate.device_ptr(s).0,
            gauss_mean: mean.device_ptr(s).0,
            gauss_sigma: sigma.device_ptr(s).0,
            gauss_sigma_low: sigma_low.device_ptr(s).0,
            gauss_aux: gauss_aux.device_ptr(s).0,
            pois_rate: prate.device_ptr(s).0,
            pois_shape: pshape.device_ptr(s).0,
            pois_high: pois_high.device_ptr(s).0,
            gauss_range: gauss_range.device_ptr(s).0,
            pois_aux: pois_aux.device_ptr(s).0,
            streams: streams.device_ptr(s).0,
            main_out: main.device_ptr(s).0,
            aux_out: aux.device_ptr(s).0,
            seed,
            n_main: self.n_main as i32,
            n_gauss: model.gaussian.len() as i32,
            n_pois: model.poisson.len() as i32,
            n_aux: self.n_aux as i32,
            first_toy,
            n_toys: n_toys as i32,
            n_ensembles: ensembles.len() as i32,
        };
        let cfg = LaunchConfig {
            grid_dim: ((total as u32).div_ceil(TOY_BLOCK).max(1), 1, 1),
            block_dim: (TOY_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = s.launch_builder(&self.kernels.sample_toys);
        launch.arg(&args);
        // SAFETY: `args` is the kernel's one parameter (its layout checked against the generated
        // header); its pointers are the buffers uploaded and allocated above, sized for the
        // launch's toys, which live until the kernel is synchronised below.
        unsafe { launch.launch(cfg) }.map_err(|e| driver("toy kernel launch", e))?;
        s.synchronize().map_err(|e| driver("toy kernel", e))?;
        Ok(DeviceDatasets {
            main,
            aux,
            count: total,
        })
    }
}
