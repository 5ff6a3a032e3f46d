//! The health checks each monitor gets: the `health_checks` section of the
//! monitor configuration, with the launch's own [`HealthOptions`] (the
//! command-line flags) laid over it, built once per local rank at start;
//! what cannot run here is reported, not fatal.

use nodeipc_monitor::{HealthCheck, RankContext, RankInfo};
use nodeipc_monitor_host::{GpuHealth, HealthChecks, HealthConfig, NicHealth};

use crate::events::{Event, Events};
use crate::options::{HealthOptions, LaunchOptions};
use crate::{Error, Result};

/// `config` with `flags` laid over it. A flag left at its default
/// ([`HealthOptions::default`]) leaves the configuration's value; a NIC
/// named by a flag is added to the configuration's; `gpu` turns the GPU
/// check on; a non-default interval replaces every check's; a non-default
/// sysfs root replaces the NIC check's.
pub(crate) fn merged(config: &HealthConfig, flags: &HealthOptions) -> HealthConfig {
    let defaults = HealthOptions::default();
    let interval_given = flags.interval != defaults.interval;
    let mut merged = config.clone();
    if !flags.nics.is_empty() {
        let nic = merged.nic.get_or_insert_with(|| NicHealth {
            devices: Vec::new(),
            sysfs_root: flags.sysfs_root.clone(),
            interval: flags.interval,
        });
        for name in &flags.nics {
            if !nic.devices.contains(name) {
                nic.devices.push(name.clone());
            }
        }
    }
    if flags.gpu && merged.gpu.is_none() {
        merged.gpu = Some(GpuHealth {
            interval: flags.interval,
            cuda_visible_devices: None,
        });
    }
    if let Some(nic) = merged.nic.as_mut() {
        if flags.sysfs_root != defaults.sysfs_root {
            nic.sysfs_root = flags.sysfs_root.clone();
        }
        if interval_given {
            nic.interval = flags.interval;
        }
    }
    if let Some(gpu) = merged.gpu.as_mut()
        && interval_given
    {
        gpu.interval = flags.interval;
    }
    merged
}

/// The checks of local rank `local_rank`: the configuration's and the
/// flags' (see [`merged`]); a GPU check that cannot run is an event.
pub(crate) fn checks_for(
    options: &LaunchOptions,
    local_rank: u32,
    events: &mut Events,
) -> Result<Vec<Box<dyn HealthCheck>>> {
    let health = merged(&options.health_checks, &options.health);
    let setup = health.checks_with_nvml(local_rank).map_err(|e| {
        Error::options(format!(
            "health checks (the monitor configuration's health_checks, --nic, --gpu-health): {e}"
        ))
    })?;
    for unavailable in setup.unavailable {
        events.emit(Event::HealthUnavailable {
            check: unavailable.check,
            reason: unavailable.reason,
        })?;
    }
    Ok(setup.checks)
}

/// The node's checks before a round starts, as nvidia-resiliency-ext runs
/// its GPU and NIC checks before each rendezvous: every local rank's
/// checks, run once with the launcher standing in for the rank (the rank
/// does not exist yet; a check of a GPU or a NIC asks about the node).
/// `Err` names the first check that failed, its rank and why.
pub(crate) fn before_round(
    checks: &mut [Vec<Box<dyn HealthCheck>>],
) -> Result<std::result::Result<(), String>> {
    if checks.iter().all(Vec::is_empty) {
        return Ok(Ok(()));
    }
    let pidfd = nodeipc_fdpass::Pidfd::open(std::process::id())
        .map_err(|e| Error::io("pidfd_open of the launcher itself", std::io::Error::from(e)))?;
    for (local, checks) in checks.iter_mut().enumerate() {
        let local = u32::try_from(local).unwrap_or(u32::MAX);
        let rank = RankInfo::this_process(local, local);
        let context = RankContext {
            rank: &rank,
            pidfd: &pidfd,
        };
        for check in checks.iter_mut() {
            if let Err(why) = check.check(&context) {
                return Ok(Err(format!(
                    "{} health check of local rank {local} failed: {why}",
                    check.name()
                )));
            }
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;

    fn config() -> HealthConfig {
        HealthConfig {
            nic: Some(NicHealth {
                devices: vec!["eth0".into()],
                sysfs_root: PathBuf::from("/fixture"),
                interval: Duration::from_millis(700),
            }),
            gpu: None,
        }
    }

    #[test]
    fn default_flags_leave_the_configuration_as_it_is() {
        assert_eq!(merged(&config(), &HealthOptions::default()), config());
        assert_eq!(
            merged(&HealthConfig::default(), &HealthOptions::default()),
            HealthConfig::default()
        );
    }

    #[test]
    fn flags_add_nics_and_the_gpu_and_override_root_and_interval() {
        let flags = HealthOptions {
            nics: vec!["eth0".into(), "ib0".into()],
            gpu: true,
            ..HealthOptions::default()
        };
        let m = merged(&config(), &flags);
        let nic = m.nic.as_ref().unwrap();
        assert_eq!(nic.devices, ["eth0", "ib0"], "added, not repeated");
        assert_eq!(nic.sysfs_root, PathBuf::from("/fixture"), "root kept");
        assert_eq!(nic.interval, Duration::from_millis(700), "interval kept");
        assert_eq!(m.gpu.unwrap().interval, Duration::from_secs(5));

        let flags = HealthOptions {
            sysfs_root: PathBuf::from("/elsewhere"),
            interval: Duration::from_secs(2),
            ..HealthOptions::default()
        };
        let m = merged(&config(), &flags);
        let nic = m.nic.unwrap();
        assert_eq!(nic.sysfs_root, PathBuf::from("/elsewhere"));
        assert_eq!(nic.interval, Duration::from_secs(2));
        assert!(m.gpu.is_none(), "not turned on by an interval");

        // With no configuration, the flags alone.
        let flags = HealthOptions {
            nics: vec!["lo".into()],
            ..HealthOptions::default()
        };
        let nic = merged(&HealthConfig::default(), &flags).nic.unwrap();
        assert_eq!(nic.devices, ["lo"]);
        assert_eq!(nic.sysfs_root, PathBuf::from("/sys"));
    }
}
