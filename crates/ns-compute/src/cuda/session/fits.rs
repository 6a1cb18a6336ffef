//! The device-resident optimizer: many whole fits per launch, one thread block per fit.

use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use ns_core::optim::LbfgsbOptions;
use ns_core::{Error, Result};

use super::{CudaSession, DeviceDatasets, DeviceSignal, driver};
use crate::backend::{DeviceFitOutput, DeviceFitProblem, check_dataset_indices};
use crate::cuda::abi::{
    BLOCK_THREADS, DEVICE_MAX_MEMORY, FitArgs, FitLaunch, SignalView, lbfgsb_workspace_doubles,
};

/// External yields of device fits: the signal's layout and one row of yields per fit.
type Signal<'a> = Option<(&'a DeviceSignal, &'a [f64])>;

impl CudaSession {
    /// Run many fits to completion on the device, one thread block per fit, the optimizer and
    /// the evaluations on the GPU (no host round trip per iteration). Large batches are split.
    /// With `signal`, fit f evaluates the model with signal row f as its external yields.
    pub fn fit_lbfgsb(
        &mut self,
        problem: &DeviceFitProblem,
        datasets: &DeviceDatasets,
        options: LbfgsbOptions,
        signal: Signal,
        stop: &AtomicBool,
    ) -> Result<DeviceFitOutput> {
        self.check_fit_problem(problem, datasets, options)?;
        if let Some((on_device, values)) = signal
            && values.len() != problem.dataset.len() * on_device.n_signal
        {
            return Err(Error::InvalidInput(format!(
                "{} signal values for {} fits of {} yields",
                values.len(),
                problem.dataset.len(),
                on_device.n_signal
            )));
        }
        let (n_fits, np) = (problem.dataset.len(), self.n_params);
        let mut out = DeviceFitOutput::zeros(n_fits, np);
        // Per fit the problem takes 6 rows of n_params values; keep a launch within max_batch's memory.
        let chunk = (self.max_batch / 3).max(1);
        let workspace_len = self.fit_grid as usize * lbfgsb_workspace_doubles(np, options.memory);
        let workspace = self
            .stream
            .alloc_zeros::<f64>(workspace_len)
            .map_err(|e| driver("optimizer workspace allocation", e))?;
        let mut start = 0;
        while start < n_fits {
            if stop.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let end = (start + chunk).min(n_fits);
            self.launch_fits(
                problem,
                datasets,
                options,
                signal,
                start..end,
                &workspace,
                &mut out,
            )?;
            start = end;
        }
        Ok(out)
    }

    fn check_fit_problem(
        &self,
        problem: &DeviceFitProblem,
        datasets: &DeviceDatasets,
        options: LbfgsbOptions,
    ) -> Result<()> {
        if options.memory == 0 || options.memory > DEVICE_MAX_MEMORY {
            return Err(Error::InvalidInput(format!(
                "the device optimizer keeps 1 to {DEVICE_MAX_MEMORY} correction pairs, not {}",
                options.memory
            )));
        }
        problem.check_rows(self.n_params)?;
        check_dataset_indices(problem.dataset, datasets.count)?;
        Ok(())
    }

    /// One launch of the fit kernel over fits `fits` of the problem; results into `out`.
    #[allow(clippy::too_many_arguments)]
    fn launch_fits(
        &mut self,
        problem: &DeviceFitProblem,
        datasets: &DeviceDatasets,
        options: LbfgsbOptions,
        signal: Signal,
        fits: std::ops::Range<usize>,
        workspace: &CudaSlice<f64>,
        out: &mut DeviceFitOutput,
    ) -> Result<()> {
        let (start, end, np) = (fits.start, fits.end, self.n_params);
        let rows = start * np..end * np;
        let s = self.stream.clone();
        let up = |e| driver("fit upload", e);
        let init = s.clone_htod(&problem.init[rows.clone()]).map_err(up)?;
        let free_index = s
            .clone_htod(&problem.free_index[rows.clone()])
            .map_err(up)?;
        let n_free = s.clone_htod(&problem.n_free[start..end]).map_err(up)?;
        let lower = s.clone_htod(&problem.lower[rows.clone()]).map_err(up)?;
        let upper = s.clone_htod(&problem.upper[rows.clone()]).map_err(up)?;
        let scale = s.clone_htod(&problem.scale[rows.clone()]).map_err(up)?;
        let dataset = s.clone_htod(&problem.dataset[start..end]).map_err(up)?;
        // The chunk's signal rows (kept alive until the results are read back).
        let signal_rows = match signal {
            Some((on_device, values)) => {
                let n = on_device.n_signal;
                let rows = s.clone_htod(&values[start * n..end * n]).map_err(up)?;
                let mut view = on_device.view;
                view.values = rows.device_ptr(&s).0;
                Some((view, rows))
            }
            None => None,
        };
        let view = signal_rows
            .as_ref()
            .map_or(SignalView::default(), |(v, _)| *v);
        let alloc = |e| driver("fit output allocation", e);
        let count = end - start;
        let x = s.alloc_zeros::<f64>(count * np).map_err(alloc)?;
        let g = s.alloc_zeros::<f64>(count * np).map_err(alloc)?;
        let f = s.alloc_zeros::<f64>(count).map_err(alloc)?;
        let iterations = s.alloc_zeros::<i32>(count).map_err(alloc)?;
        let evaluations = s.alloc_zeros::<i32>(count).map_err(alloc)?;
        let termination = s.alloc_zeros::<i32>(count).map_err(alloc)?;
        let ptr64 = |b: &CudaSlice<f64>| b.device_ptr(&s).0;
        let ptr32 = |b: &CudaSlice<u32>| b.device_ptr(&s).0;
        let ptri = |b: &CudaSlice<i32>| b.device_ptr(&s).0;
        let args = FitArgs {
            init: ptr64(&init),
            free_index: ptr32(&free_index),
            n_free: ptri(&n_free),
            lower: ptr64(&lower),
            upper: ptr64(&upper),
            scale: ptr64(&scale),
            fit_dataset: ptr32(&dataset),
            main_data: ptr64(&datasets.main),
            aux_data: ptr64(&datasets.aux),
            x_out: ptr64(&x),
            g_out: ptr64(&g),
            f_out: ptr64(&f),
            iterations_out: ptri(&iterations),
            evaluations_out: ptri(&evaluations),
            termination_out: ptri(&termination),
            workspace: ptr64(workspace),
            pg_tol: options.pg_tol,
            n_fits: count as i32,
            memory: options.memory as i32,
            max_iterations: options.max_iterations.min(i32::MAX as usize) as i32,
            max_evaluations: options.max_evaluations.min(i32::MAX as usize) as i32,
        };
        let cfg = LaunchConfig {
            grid_dim: (self.fit_grid.min(count as u32).max(1), 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let launch_args = FitLaunch {
            model: self.view,
            signal: view,
            fits: args,
            scratch: self.scratch.device_ptr(&s).0,
        };
        let mut launch = s.launch_builder(&self.kernels.fit_lbfgsb);
        launch.arg(&launch_args);
        // SAFETY: `launch_args` is the kernel's one parameter (its layout checked against the
        // generated header); its pointers are this session's buffers, sized for the launch's
        // fits above, which outlive the launch (the results are read back below on the same
        // stream); the grid and block are within the limits queried from the device.
        unsafe { launch.launch(cfg) }.map_err(|e| driver("fit kernel launch", e))?;
        let down = |e| driver("fit kernel", e);
        s.memcpy_dtoh(&x, &mut out.x[rows.clone()]).map_err(down)?;
        s.memcpy_dtoh(&g, &mut out.g[rows]).map_err(down)?;
        s.memcpy_dtoh(&f, &mut out.f[start..end]).map_err(down)?;
        s.memcpy_dtoh(&iterations, &mut out.iterations[start..end])
            .map_err(down)?;
        s.memcpy_dtoh(&evaluations, &mut out.evaluations[start..end])
            .map_err(down)?;
        s.memcpy_dtoh(&termination, &mut out.termination[start..end])
            .map_err(down)?;
        Ok(())
    }
}
