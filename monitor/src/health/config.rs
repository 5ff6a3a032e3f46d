//! The health-check section of [`MonitorConfig`](crate::MonitorConfig):
//! which checks run, each at its own interval, and what they look at; and
//! the checks it builds for one local rank.

use std::path::PathBuf;
use std::time::Duration;

use crate::health::{
    Every, GpuCheck, GpuId, GpuProbe, HealthCheck, NicCheck, RankGpuCheck, gpu_for_local_rank,
};
use crate::{Error, MAX_CHECK_INTERVAL, Result};

/// Most NICs one configuration names.
pub const MAX_NICS: usize = 64;

/// Longest NIC device name (Linux's `IFNAMSIZ` is 16; InfiniBand names are
/// short too).
const MAX_NIC_NAME: usize = 64;

/// Longest `cuda_visible_devices` list accepted.
const MAX_VISIBLE_DEVICES: usize = 4096;

/// Longest sysfs root path.
const MAX_SYSFS_ROOT: usize = 4096;

/// How often a check runs when the configuration does not say.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// The health checks a configuration turns on (none by default). A failed
/// check is treated like a timeout: the rank is terminated, and a launcher
/// restarts it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthConfig {
    /// The NICs that must stay up.
    pub nic: Option<NicHealth>,
    /// The rank's GPU, through NVML.
    pub gpu: Option<GpuHealth>,
}

/// The NIC check: `<sysfs_root>/class/net/<name>/operstate`, or every port
/// `state` of `<sysfs_root>/class/infiniband/<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicHealth {
    /// Device names (1 to [`MAX_NICS`]); each must exist when the check is
    /// built.
    pub devices: Vec<String>,
    /// Where sysfs is (`/sys`; a fixture directory in tests).
    pub sysfs_root: PathBuf,
    /// How often the check runs (the monitor's check interval is the finer
    /// grain).
    pub interval: Duration,
}

impl Default for NicHealth {
    fn default() -> Self {
        NicHealth {
            devices: Vec::new(),
            sysfs_root: PathBuf::from("/sys"),
            interval: DEFAULT_HEALTH_INTERVAL,
        }
    }
}

/// The GPU check: the rank's device, found by its local rank through
/// `CUDA_VISIBLE_DEVICES`, asked through NVML for XID errors, ECC errors,
/// retired pages pending and whether it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuHealth {
    /// How often the check runs.
    pub interval: Duration,
    /// The device list to map local ranks through, in
    /// `CUDA_VISIBLE_DEVICES`' syntax; `None`: that variable of the
    /// process building the checks (unset: device = local rank).
    pub cuda_visible_devices: Option<String>,
}

impl Default for GpuHealth {
    fn default() -> Self {
        GpuHealth {
            interval: DEFAULT_HEALTH_INTERVAL,
            cuda_visible_devices: None,
        }
    }
}

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

fn check_interval(what: &str, interval: Duration) -> Result<()> {
    if interval.is_zero() || interval > MAX_CHECK_INTERVAL {
        return Err(Error::config(format!(
            "health_checks.{what}.interval {} must be between 1 ms and {}",
            nodeipc_text::duration(interval),
            nodeipc_text::duration(MAX_CHECK_INTERVAL)
        )));
    }
    Ok(())
}

impl HealthConfig {
    /// Whether any check is on.
    pub fn is_empty(&self) -> bool {
        self.nic.is_none() && self.gpu.is_none()
    }

    /// Checks every value: intervals between 1 ms and an hour, 1 to
    /// [`MAX_NICS`] NIC names, each a plain file name, a UTF-8 sysfs root
    /// (it is written into the JSON form), a bounded device list.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field and its bound.
    pub fn validate(&self) -> Result<()> {
        if let Some(nic) = &self.nic {
            check_interval("nic", nic.interval)?;
            if nic.devices.is_empty() || nic.devices.len() > MAX_NICS {
                return Err(Error::config(format!(
                    "health_checks.nic.devices lists {} devices: 1 to {MAX_NICS}",
                    nic.devices.len()
                )));
            }
            for name in &nic.devices {
                if name.is_empty()
                    || name.len() > MAX_NIC_NAME
                    || name.contains(['/', '\0'])
                    || name == "."
                    || name == ".."
                {
                    return Err(Error::config(format!(
                        "health_checks.nic.devices: {name:?} is not a device name (1 to {MAX_NIC_NAME} bytes, no '/')"
                    )));
                }
            }
            let root = nic.sysfs_root.as_os_str();
            if root.is_empty() || root.len() > MAX_SYSFS_ROOT || root.to_str().is_none() {
                return Err(Error::config(format!(
                    "health_checks.nic.sysfs_root {:?} must be a UTF-8 path of 1 to {MAX_SYSFS_ROOT} bytes",
                    nic.sysfs_root
                )));
            }
        }
        if let Some(gpu) = &self.gpu {
            check_interval("gpu", gpu.interval)?;
            if let Some(list) = &gpu.cuda_visible_devices
                && list.len() > MAX_VISIBLE_DEVICES
            {
                return Err(Error::config(format!(
                    "health_checks.gpu.cuda_visible_devices of {} bytes; at most {MAX_VISIBLE_DEVICES}",
                    list.len()
                )));
            }
        }
        Ok(())
    }

    /// The checks of local rank `local_rank`, each wrapped in [`Every`] at
    /// its interval. The GPU is found through `cuda_visible_devices` (the
    /// configuration's, else `env_visible_devices`, the builder's
    /// `CUDA_VISIBLE_DEVICES`), and asked through the probe `gpu_probe`
    /// returns (NVML on a real machine: [`checks_with_nvml`](HealthConfig::checks_with_nvml)).
    /// A GPU the rank has no device for, or a probe that cannot load, is
    /// [`Unavailable`], not an error: a machine without NVML never fails
    /// the check later for that reason.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid section, or a NIC that is not
    /// there now (a typo would otherwise pass silently).
    pub fn checks_for(
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

    /// The checks for a monitor that learns its rank only at `Init` (a
    /// monitor process of its own): as [`checks_for`](HealthConfig::checks_for),
    /// but the GPU is found from each registered rank's local rank when it
    /// is first checked ([`RankGpuCheck`]; a rank with no device is logged
    /// once and not checked). Only a probe that does not load is
    /// [`Unavailable`] here.
    ///
    /// # Errors
    /// As `checks_for`.
    pub fn checks_for_any_rank(
        &self,
        env_visible_devices: Option<&str>,
        gpu_probe: &mut dyn FnMut() -> std::result::Result<Box<dyn GpuProbe>, String>,
    ) -> Result<HealthSetup> {
        let gpu = self.gpu.clone();
        let without_gpu = HealthConfig {
            nic: self.nic.clone(),
            gpu: None,
        };
        let mut setup = without_gpu.checks_for(0, None, gpu_probe)?;
        if let Some(gpu) = gpu {
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

    /// [`checks_for`](HealthConfig::checks_for) with this process's
    /// `CUDA_VISIBLE_DEVICES` and NVML loaded from
    /// [`NVML_LIBRARY`](crate::NVML_LIBRARY).
    ///
    /// # Errors
    /// As `checks_for`.
    pub fn checks_with_nvml(&self, local_rank: u32) -> Result<HealthSetup> {
        let env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        self.checks_for(local_rank, env.as_deref(), &mut || {
            crate::Nvml::load().map(|n| Box::new(n) as Box<dyn GpuProbe>)
        })
    }
}
