//! The GPU check of a monitor that learns its rank only at `Init` (a
//! monitor process of its own, `nodeipc monitor serve`): the device is
//! found from the registered rank's local rank, the first time it is
//! checked. A rank with no device in the list is reported once and not
//! checked: "unavailable", never a failure.

use nodeipc_monitor::LOG_TARGET;
use nodeipc_monitor::{HealthCheck, RankContext};

use crate::health::{GpuId, GpuProbe, gpu_for_local_rank};

/// Checks the GPU of whichever rank registers, through `probe`.
#[derive(Debug)]
pub(crate) struct RankGpuCheck<P> {
    probe: P,
    visible_devices: Option<String>,
    /// The last local rank seen and its device (or why it has none).
    resolved: Option<(u32, Result<GpuId, String>)>,
}

impl<P: GpuProbe> RankGpuCheck<P> {
    /// The device of each registered rank is its local rank's entry of
    /// `visible_devices` (`CUDA_VISIBLE_DEVICES`' syntax; `None`: device =
    /// local rank).
    pub(crate) fn new(probe: P, visible_devices: Option<String>) -> RankGpuCheck<P> {
        RankGpuCheck {
            probe,
            visible_devices,
            resolved: None,
        }
    }
}

impl<P: GpuProbe> HealthCheck for RankGpuCheck<P> {
    fn name(&self) -> &str {
        "GPU"
    }

    fn check(&mut self, rank: &RankContext<'_>) -> Result<(), String> {
        let local_rank = rank.rank.local_rank;
        if self.resolved.as_ref().is_none_or(|(r, _)| *r != local_rank) {
            let device = gpu_for_local_rank(local_rank, self.visible_devices.as_deref());
            if let Err(reason) = &device {
                log::warn!(
                    target: LOG_TARGET,
                    "GPU health check unavailable for local rank {local_rank}, not run: {reason}"
                );
            }
            self.resolved = Some((local_rank, device));
        }
        match &self.resolved {
            Some((_, Ok(gpu))) => self.probe.check(gpu).map_err(|why| format!("{gpu}: {why}")),
            _ => Ok(()),
        }
    }
}
