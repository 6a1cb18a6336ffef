//! Evaluations with external signal yields ([`crate::signal`]) on the device: the signal's
//! layout is uploaded once; each batch reads the yields and parameters from host memory or in
//! place from device memory (a CUDA tensor's), and writes the gradients to either.

use std::ffi::c_void;

use cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg, sys};
use ns_core::{Error, Result};

use super::{Buffer, CudaSession, ModelBuffers, driver};
use crate::backend::{DeviceSlice, SignalBatch, Values, ValuesMut, not_finite};
use crate::cuda::abi::{EVAL_MAX_THREADS, NllGradArgs, SignalView};
use crate::data::PreparedData;
use crate::layout::SignalLayout;
use crate::signal::ExternalSignal;

/// An external signal's layout on the device.
pub struct DeviceSignal {
    /// `values` and `d_signal` are null here; each launch sets them.
    pub(super) view: SignalView,
    _buffers: ModelBuffers,
    pub(super) n_signal: usize,
}

/// The buffers of signal evaluations (reused across calls).
#[derive(Default)]
pub(super) struct SignalBuffers {
    data: Buffer<f64>,
    /// What `data` holds (main then aux).
    data_host: Vec<f64>,
    zeros: Buffer<u32>,
    signals: Buffer<f64>,
    pars: Buffer<f64>,
    d_signal: Buffer<f64>,
}

impl CudaSession {
    /// Upload the layout of `external` (made for the model of this session).
    pub fn upload_signal(&self, external: &ExternalSignal) -> Result<DeviceSignal> {
        let v = &self.view;
        let l = SignalLayout::new(
            external,
            v.n_entries as usize,
            v.n_gauss as usize,
            self.n_deltas,
        );
        let mut up = ModelBuffers {
            stream: self.stream.clone(),
            u32s: Vec::new(),
            f64s: Vec::new(),
        };
        let view = SignalView {
            values: 0,
            d_signal: 0,
            entry_signal: up.u32(&l.entry_signal)?,
            signal_entry: up.u32(&l.signal_entry)?,
            templates: up.f64(&l.templates)?,
            gauss_link: up.u32(&l.gauss_link)?,
            link_gauss: up.u32(&l.link_gauss)?,
            link_absolute: up.f64(&l.link_absolute)?,
            link_fixed: up.f64(&l.link_fixed)?,
            link_member_start: up.u32(&l.link_member_start)?,
            link_members: up.u32(&l.link_members)?,
            signal_link_start: up.u32(&l.signal_link_start)?,
            signal_links: up.u32(&l.signal_links)?,
            n_signal: external.len() as i32,
            n_links: external.staterror().len() as i32,
            width_terms: 0,
        };
        Ok(DeviceSignal {
            view,
            _buffers: up,
            n_signal: external.len(),
        })
    }

    /// The address of `slice` after checking with the driver that it lies, 8-byte aligned, in
    /// one allocation on this session's device.
    fn device_address(&self, slice: DeviceSlice, what: &str) -> Result<u64> {
        let ctx = self.stream.context();
        ctx.bind_to_thread()
            .map_err(|e| driver("binding the context", e))?;
        let ptr = slice.ptr();
        let refuse = |why: String| {
            Error::InvalidInput(format!(
                "{what} at {ptr:#x} ({} values) is not usable device memory: {why}",
                slice.len()
            ))
        };
        let (mut start, mut size, mut ordinal) = (0u64, 0usize, -1i32);
        use sys::CUpointer_attribute::*;
        let mut attributes = [
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        let mut values = [
            &mut start as *mut u64 as *mut c_void,
            &mut size as *mut usize as *mut c_void,
            &mut ordinal as *mut i32 as *mut c_void,
        ];
        // SAFETY: the driver writes one value of each attribute's type through the matching
        // pointer, each to a live local of that type; an address it does not know leaves them
        // at their defaults (a range of size 0), which the checks below refuse.
        unsafe {
            sys::cuPointerGetAttributes(3, attributes.as_mut_ptr(), values.as_mut_ptr(), ptr)
        }
        .result()
        .map_err(|e| refuse(format!("the CUDA driver does not know it ({e})")))?;
        if size == 0 {
            return Err(refuse("the CUDA driver knows no allocation there".into()));
        }
        if ordinal < 0 || ordinal as usize != ctx.ordinal() {
            return Err(refuse(format!(
                "it is on device {ordinal}, the engine on device {}",
                ctx.ordinal()
            )));
        }
        let end = (slice.len() as u64)
            .checked_mul(8)
            .and_then(|bytes| ptr.checked_add(bytes));
        if !ptr.is_multiple_of(8) || end.is_none_or(|end| end > start + size as u64) {
            return Err(refuse(format!(
                "its allocation is {size} bytes from {start:#x}, or it is not 8-byte aligned"
            )));
        }
        Ok(ptr)
    }

    /// The device address of input values: in place where they are on the device, else copied
    /// into `buffer`.
    fn input_address(&mut self, values: Values, which: Input, what: &str) -> Result<u64> {
        match values {
            Values::Device(d) => self.device_address(d, what),
            Values::Host(v) => {
                let s = self.stream.clone();
                let buffer = match which {
                    Input::Signals => &mut self.signal_buffers.signals,
                    Input::Pars => &mut self.signal_buffers.pars,
                };
                let dev = buffer.with_len(&s, v.len())?;
                s.memcpy_htod(v, dev)
                    .map_err(|e| driver("signal upload", e))?;
                Ok(dev.device_ptr(&s).0)
            }
        }
    }

    /// The device address of an output: in place where it is on the device, else the session's
    /// buffer `which` (read back after the kernel).
    fn output_address(&mut self, out: &ValuesMut, which: Output, what: &str) -> Result<u64> {
        if let ValuesMut::Device(d) = out {
            return self.device_address(*d, what);
        }
        let s = self.stream.clone();
        let buffer = match which {
            Output::Nll => &mut self.nll,
            Output::Signal => &mut self.signal_buffers.d_signal,
            Output::Pars => &mut self.grad,
        };
        Ok(buffer.with_len(&s, out.len())?.device_ptr(&s).0)
    }

    /// Main and auxiliary data on the device (uploaded again only when they change: a training
    /// loop passes the same data every step); the addresses of both.
    fn data_address(&mut self, data: &PreparedData) -> Result<(u64, u64)> {
        if data.main.len() != self.n_main || data.aux.len() != self.n_aux {
            return Err(Error::InvalidInput(
                "dataset does not match the model's bin and auxdata counts".into(),
            ));
        }
        let s = self.stream.clone();
        let b = &mut self.signal_buffers;
        let same = b.data_host.len() == data.main.len() + data.aux.len()
            && b.data_host.iter().eq(data.main.iter().chain(&data.aux));
        let dev = b.data.with_len(&s, data.main.len() + data.aux.len())?;
        if !same {
            b.data_host.clear();
            b.data_host.extend(data.main.iter().chain(&data.aux));
            s.memcpy_htod(&b.data_host, dev)
                .map_err(|e| driver("signal data upload", e))?;
        }
        let main = dev.device_ptr(&s).0;
        Ok((main, main + 8 * self.n_main as u64))
    }

    /// NLL and gradients with external yields for every row of `batch` (`Backend::nll_grad_signal`).
    pub fn nll_grad_signal(&mut self, signal: &DeviceSignal, batch: SignalBatch) -> Result<()> {
        let (n, p) = (signal.n_signal, self.n_params);
        let (rows, shared) = batch.rows(n, p)?;
        let s = self.stream.clone();
        let (main_ptr, aux_ptr) = self.data_address(batch.data)?;
        // Every evaluation reads dataset 0: a buffer of zeros (allocated zeroed, never written).
        let zeros_ptr = self
            .signal_buffers
            .zeros
            .with_len(&s, rows)?
            .device_ptr(&s)
            .0;
        let signals_ptr = self.input_address(batch.signals, Input::Signals, "the signal")?;
        let pars_ptr = self.input_address(batch.pars, Input::Pars, "the parameters")?;
        let nll_ptr = self.output_address(&batch.nll, Output::Nll, "the NLL")?;
        let d_signal_ptr = self.output_address(&batch.d_signal, Output::Signal, "∂NLL/∂s")?;
        let d_pars_ptr = self.output_address(&batch.d_pars, Output::Pars, "∂NLL/∂θ")?;

        let mut view = signal.view;
        view.values = signals_ptr;
        view.d_signal = d_signal_ptr;
        view.width_terms = 1;
        let args = NllGradArgs {
            model: self.view,
            signal: view,
            params: pars_ptr,
            eval_dataset: zeros_ptr,
            main_data: main_ptr,
            aux_data: aux_ptr,
            scratch: self.scratch.device_ptr(&s).0,
            nll_out: nll_ptr,
            grad_out: d_pars_ptr,
            nll_offset: batch.data.constant,
            params_stride: if shared { 0 } else { p as i32 },
            n_eval: rows as i32,
        };
        let cfg = LaunchConfig {
            grid_dim: (self.grid.min(rows as u32).max(1), 1, 1),
            block_dim: (EVAL_MAX_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = s.launch_builder(&self.kernels.nll_grad);
        launch.arg(&args);
        // SAFETY: `args` is nll_grad's one parameter (its layout checked against the generated
        // header); every pointer is a buffer of
        // this session sized for `rows` above, or device memory the driver confirmed holds the
        // values `batch.rows` checked the lengths of; the grid and block are within the limits
        // the kernel was compiled for (NS_EVAL_MAX_BLOCK).
        unsafe { launch.launch(cfg) }.map_err(|e| driver("signal NLL kernel launch", e))?;
        // Host outputs are read back (which waits for the kernel); device outputs are left to
        // the stream's order.
        let download = |e| driver("signal NLL kernel", e);
        if let ValuesMut::Host(out) = batch.d_signal {
            let dev = self
                .signal_buffers
                .d_signal
                .slice
                .as_ref()
                .expect("sized above");
            s.memcpy_dtoh(&dev.slice(0..rows * n), out)
                .map_err(download)?;
        }
        if let ValuesMut::Host(out) = batch.d_pars {
            let dev = self.grad.slice.as_ref().expect("sized above");
            s.memcpy_dtoh(&dev.slice(0..rows * p), out)
                .map_err(download)?;
        }
        if let ValuesMut::Host(out) = batch.nll {
            let dev = self.nll.slice.as_ref().expect("sized above");
            s.memcpy_dtoh(&dev.slice(0..rows), out).map_err(download)?;
            if let Some(r) = out.iter().position(|v| !v.is_finite()) {
                return Err(not_finite(r));
            }
        }
        Ok(())
    }
}

/// Which session buffer an output goes to when the caller wants it on the host.
#[derive(Clone, Copy)]
enum Output {
    Nll,
    Signal,
    Pars,
}

/// Which input buffer host values go to.
#[derive(Clone, Copy)]
enum Input {
    Signals,
    Pars,
}
