//! Finding a wgpu adapter and opening a device on it, with every failure a typed error.

use std::sync::{Arc, Mutex, OnceLock};

use ns_core::{Error, Result};

use crate::device::{AdapterSummary, Device};

fn backends(device: Device) -> wgpu::Backends {
    match device {
        Device::Metal => wgpu::Backends::METAL,
        _ => wgpu::Backends::VULKAN,
    }
}

/// The process's one instance for `backends`. Creating a Vulkan instance per backend fails on
/// NVIDIA's driver after a few (measured on an H100, driver 580: the fourth backend of a process
/// found "no vulkan adapter"), and one instance serves every device anyway.
fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    static VULKAN: OnceLock<wgpu::Instance> = OnceLock::new();
    static METAL: OnceLock<wgpu::Instance> = OnceLock::new();
    static BOTH: OnceLock<wgpu::Instance> = OnceLock::new();
    let slot = if backends == wgpu::Backends::VULKAN {
        &VULKAN
    } else if backends == wgpu::Backends::METAL {
        &METAL
    } else {
        &BOTH
    };
    slot.get_or_init(|| {
        wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            flags: wgpu::InstanceFlags::from_env_or_default(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        })
    })
    .clone()
}

fn summary(info: &wgpu::AdapterInfo) -> AdapterSummary {
    AdapterSummary {
        name: info.name.clone(),
        backend: match info.backend {
            wgpu::Backend::Metal => "metal",
            wgpu::Backend::Vulkan => "vulkan",
            _ => "other",
        }
        .into(),
        kind: match info.device_type {
            wgpu::DeviceType::DiscreteGpu => "discrete",
            wgpu::DeviceType::IntegratedGpu => "integrated",
            wgpu::DeviceType::Cpu => "cpu",
            wgpu::DeviceType::VirtualGpu => "virtual",
            _ => "other",
        }
        .into(),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
    }
}

/// Every Vulkan and Metal adapter of this machine (none where no driver is installed).
pub fn adapters() -> Vec<AdapterSummary> {
    let all = wgpu::Backends::VULKAN | wgpu::Backends::METAL;
    pollster::block_on(instance(all).enumerate_adapters(all))
        .iter()
        .map(|a| summary(&a.get_info()))
        .collect()
}

/// A device and its queue on the best adapter of `device` (Vulkan or Metal), with the adapter's
/// own limits, and a slot where errors the driver reports outside a call land (device loss).
#[derive(Clone)]
pub(crate) struct Opened {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: AdapterSummary,
    pub(crate) lost: Arc<Mutex<Option<String>>>,
}

pub(crate) fn open(device: Device) -> Result<Opened> {
    let name = device.name();
    let adapter = pollster::block_on(instance(backends(device)).request_adapter(
        &wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        },
    ))
    .map_err(|e| {
        Error::Device(format!(
            "no {name} adapter: {e} (is a {name} driver installed? `nextstat devices` lists what \
             this machine offers)"
        ))
    })?;
    let info = summary(&adapter.get_info());
    let (gpu, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("nextstat"),
        required_features: wgpu::Features::empty(),
        // The adapter's own limits: buffers as large as it allows.
        required_limits: adapter.limits(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| Error::Device(format!("opening the {name} device {}: {e}", info.name)))?;
    let lost = Arc::new(Mutex::new(None));
    let slot = lost.clone();
    gpu.set_device_lost_callback(move |reason, message| {
        *slot.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(format!("the GPU device was lost ({reason:?}): {message}"));
    });
    // Errors outside an error scope would panic in wgpu's default handler: record them instead.
    let slot = lost.clone();
    gpu.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
        if s.is_none() {
            *s = Some(format!("GPU error: {e}"));
        }
    }));
    Ok(Opened {
        device: gpu,
        queue,
        info,
        lost,
    })
}
