//! The health checks a configuration's `health_checks` section asks for:
//! the NIC check (sysfs) and the GPU check (NVML, loaded at run time),
//! each at its own interval, built for one local rank or for whichever
//! rank registers.

mod alive;
mod config;
mod every;
mod gpu;
mod nic;
mod nvml;
mod rank_gpu;

#[cfg(doc)]
use crate::Error;
use crate::Result;
use nodeipc_monitor::HealthCheck;

pub use alive::ProcessAlive;
pub use config::{DEFAULT_HEALTH_INTERVAL, GpuHealth, HealthConfig, MAX_NICS, NicHealth};

pub(crate) use every::Every;
pub(crate) use gpu::{GpuCheck, gpu_for_local_rank};
pub use gpu::{GpuId, GpuProbe};
pub(crate) use nic::NicCheck;
pub(crate) use nvml::Nvml;
pub(crate) use rank_gpu::RankGpuCheck;

/// A check the configuration asks for that cannot run here (no NVML, no
/// device for the rank): reported once at start, never a failure later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    /// Which check (`GPU (local rank 3)`).
    pub check: String,
    /// Why, for people.
    pub reason: String,
}

/// The checks built for one local rank, and those that cannot run.
pub struct HealthSetup {
    /// To hand to the rank's monitor.
    pub checks: Vec<Box<dyn HealthCheck>>,
    /// Asked for but not run.
    pub unavailable: Vec<Unavailable>,
}

impl std::fmt::Debug for HealthSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.checks.iter().map(|c| c.name()).collect();
        f.debug_struct("HealthSetup")
            .field("checks", &names)
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

impl GpuProbe for Box<dyn GpuProbe> {
    fn check(&mut self, gpu: &GpuId) -> std::result::Result<(), String> {
        (**self).check(gpu)
    }
}

/// Builds the checks a [`HealthConfig`] asks for, each wrapped to run at
/// its own interval, ready for
/// [`MonitorServer::add_health_check`](nodeipc_monitor::MonitorServer::add_health_check).
pub trait HealthChecks {
    /// The checks of local rank `local_rank`. The GPU is found through
    /// `cuda_visible_devices` (the configuration's, else
    /// `env_visible_devices`, the builder's `CUDA_VISIBLE_DEVICES`), and
    /// asked through the probe `gpu_probe` returns (NVML on a real
    /// machine: [`checks_with_nvml`](HealthChecks::checks_with_nvml); another
    /// GPU stack, or a fake in tests). A GPU the rank has no device for, or
    /// a probe that cannot load, is [`Unavailable`], not an error: a
    /// machine without NVML never fails the check later for that reason.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid section, or a NIC that is not
    /// there now (a typo would otherwise pass silently).
    fn checks_for(
        &self,
        local_rank: u32,
        env_visible_devices: Option<&str>,
        gpu_probe: &mut dyn FnMut() -> std::result::Result<Box<dyn GpuProbe>, String>,
    ) -> Result<HealthSetup>;

    /// The checks for a monitor that learns its rank only at `Init` (a
    /// monitor process of its own): as [`checks_for`](HealthChecks::checks_for),
    /// but the GPU is found from each registered rank's local rank when it
    /// is first checked (a rank with no device is logged once and not
    /// checked). Only a probe that does not load is [`Unavailable`] here.
    ///
    /// # Errors
    /// As `checks_for`.
    fn checks_for_any_rank(
        &self,
        env_visible_devices: Option<&str>,
        gpu_probe: &mut dyn FnMut() -> std::result::Result<Box<dyn GpuProbe>, String>,
    ) -> Result<HealthSetup>;

    /// [`checks_for`](HealthChecks::checks_for) with this process's
    /// `CUDA_VISIBLE_DEVICES` and NVML, loaded at run time
    /// (`libnvidia-ml.so.1`).
    ///
    /// # Errors
    /// As `checks_for`.
    fn checks_with_nvml(&self, local_rank: u32) -> Result<HealthSetup> {
        let env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        self.checks_for(local_rank, env.as_deref(), &mut nvml_probe)
    }
}

/// NVML as a probe, or why it does not load.
pub(crate) fn nvml_probe() -> std::result::Result<Box<dyn GpuProbe>, String> {
    Nvml::load().map(|n| Box::new(n) as Box<dyn GpuProbe>)
}

impl HealthChecks for HealthConfig {
    fn checks_for(
        &self,
        local_rank: u32,
        env_visible_devices: Option<&str>,
        gpu_probe: &mut dyn FnMut() -> std::result::Result<Box<dyn GpuProbe>, String>,
    ) -> Result<HealthSetup> {
        self.validate()?;
        let mut setup = HealthSetup {
            checks: Vec::new(),
            unavailable: Vec::new(),
        };
        if let Some(nic) = &self.nic {
            let check = NicCheck::new(&nic.sysfs_root, &nic.devices)?;
            setup.checks.push(Box::new(Every::new(check, nic.interval)));
        }
        if let Some(gpu) = &self.gpu {
            let list = gpu.cuda_visible_devices.as_deref().or(env_visible_devices);
            let found = gpu_for_local_rank(local_rank, list)
                .and_then(|device| gpu_probe().map(|probe| (device, probe)));
            match found {
                Ok((device, probe)) => setup.checks.push(Box::new(Every::new(
                    GpuCheck::new(probe, device),
                    gpu.interval,
                ))),
                Err(reason) => setup.unavailable.push(Unavailable {
                    check: format!("GPU (local rank {local_rank})"),
                    reason,
                }),
            }
        }
        Ok(setup)
    }

    fn checks_for_any_rank(
        &self,
        env_visible_devices: Option<&str>,
        gpu_probe: &mut dyn FnMut() -> std::result::Result<Box<dyn GpuProbe>, String>,
    ) -> Result<HealthSetup> {
        let without_gpu = HealthConfig {
            nic: self.nic.clone(),
            gpu: None,
        };
        let mut setup = without_gpu.checks_for(0, None, gpu_probe)?;
        if let Some(gpu) = self.gpu.clone() {
            let list = gpu
                .cuda_visible_devices
                .or_else(|| env_visible_devices.map(str::to_owned));
            match gpu_probe() {
                Ok(probe) => setup.checks.push(Box::new(Every::new(
                    RankGpuCheck::new(probe, list),
                    gpu.interval,
                ))),
                Err(reason) => setup.unavailable.push(Unavailable {
                    check: "GPU".to_owned(),
                    reason,
                }),
            }
        }
        Ok(setup)
    }
}
