//! The health-check section of a configuration ([`HostConfig`](crate::HostConfig)):
//! which checks run, each at its own interval, and what they look at.

use std::path::PathBuf;
use std::time::Duration;

use nodeipc_monitor::MAX_CHECK_INTERVAL;

#[cfg(doc)]
use crate::Error;
use crate::{Result, config_error};

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

fn check_interval(what: &str, interval: Duration) -> Result<()> {
    if interval.is_zero() || interval > MAX_CHECK_INTERVAL {
        return Err(config_error(format!(
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
                return Err(config_error(format!(
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
                    return Err(config_error(format!(
                        "health_checks.nic.devices: {name:?} is not a device name (1 to {MAX_NIC_NAME} bytes, no '/')"
                    )));
                }
            }
            let root = nic.sysfs_root.as_os_str();
            if root.is_empty() || root.len() > MAX_SYSFS_ROOT || root.to_str().is_none() {
                return Err(config_error(format!(
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
                return Err(config_error(format!(
                    "health_checks.gpu.cuda_visible_devices of {} bytes; at most {MAX_VISIBLE_DEVICES}",
                    list.len()
                )));
            }
        }
        Ok(())
    }
}
