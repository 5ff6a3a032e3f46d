//! The health checks each monitor gets from [`HealthOptions`]: built once
//! per local rank at start; what cannot run here is reported, not fatal.

use nodeipc_monitor::{Every, GpuCheck, HealthCheck, NicCheck, Nvml, gpu_for_local_rank};

use crate::events::{Event, Events};
use crate::options::HealthOptions;
use crate::{Error, Result};

/// The checks of local rank `local_rank`.
pub(crate) fn checks_for(
    options: &HealthOptions,
    local_rank: u32,
    events: &mut Events,
) -> Result<Vec<Box<dyn HealthCheck>>> {
    let mut checks: Vec<Box<dyn HealthCheck>> = Vec::new();
    if !options.nics.is_empty() {
        let nic = NicCheck::new(&options.sysfs_root, &options.nics)
            .map_err(|e| Error::options(format!("--nic: {e}")))?;
        checks.push(Box::new(Every::new(nic, options.interval)));
    }
    if options.gpu {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let unavailable = |reason: String| Event::HealthUnavailable {
            check: format!("GPU (local rank {local_rank})"),
            reason,
        };
        match gpu_for_local_rank(local_rank, visible.as_deref()) {
            Err(reason) => events.emit(unavailable(reason))?,
            Ok(gpu) => match Nvml::load() {
                Ok(nvml) => {
                    checks.push(Box::new(Every::new(
                        GpuCheck::new(nvml, gpu),
                        options.interval,
                    )));
                }
                Err(reason) => events.emit(unavailable(reason))?,
            },
        }
    }
    Ok(checks)
}
