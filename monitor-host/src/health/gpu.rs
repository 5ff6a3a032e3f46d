//! The GPU health check: a rank's device, found from its local rank
//! through `CUDA_VISIBLE_DEVICES`, asked through a [`GpuProbe`] (NVML on a
//! real machine, a fake in tests).

use nodeipc_monitor::{HealthCheck, RankContext};

/// A GPU as `CUDA_VISIBLE_DEVICES` names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GpuId {
    /// By its index among the machine's devices.
    Index(u32),
    /// By its UUID (`GPU-…`, or `MIG-…`).
    Uuid(String),
}

impl std::fmt::Display for GpuId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuId::Index(i) => write!(f, "GPU {i}"),
            GpuId::Uuid(u) => write!(f, "GPU {u}"),
        }
    }
}

/// The device of local rank `local_rank`, as torchrun and CUDA see it: the
/// `local_rank`-th entry of `CUDA_VISIBLE_DEVICES` when it is set, else
/// device `local_rank`.
///
/// # Errors
/// A sentence saying the list is too short for the rank, or an entry is
/// neither an index nor a UUID.
pub(crate) fn gpu_for_local_rank(
    local_rank: u32,
    cuda_visible_devices: Option<&str>,
) -> Result<GpuId, String> {
    let Some(list) = cuda_visible_devices else {
        return Ok(GpuId::Index(local_rank));
    };
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    let entry = usize::try_from(local_rank)
        .ok()
        .and_then(|i| entries.get(i))
        .ok_or_else(|| {
            format!(
                "local rank {local_rank} has no device: CUDA_VISIBLE_DEVICES={list:?} lists {}",
                entries.len()
            )
        })?;
    if let Ok(index) = entry.parse::<u32>() {
        Ok(GpuId::Index(index))
    } else if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
        Ok(GpuId::Uuid((*entry).to_owned()))
    } else {
        Err(format!(
            "CUDA_VISIBLE_DEVICES entry {entry:?} (local rank {local_rank}) is neither an index nor a GPU-/MIG- UUID"
        ))
    }
}

/// Asks a device whether it is healthy.
pub trait GpuProbe: Send {
    /// `Ok` when `gpu` answers and reports no XID error, no new
    /// uncorrected ECC error and no retired page pending.
    ///
    /// # Errors
    /// What is wrong, for people.
    fn check(&mut self, gpu: &GpuId) -> Result<(), String>;
}

/// Fails when the rank's GPU does not answer or reports an error.
#[derive(Debug)]
pub(crate) struct GpuCheck<P> {
    probe: P,
    gpu: GpuId,
}

impl<P: GpuProbe> GpuCheck<P> {
    /// Watches `gpu` through `probe`.
    pub(crate) fn new(probe: P, gpu: GpuId) -> GpuCheck<P> {
        GpuCheck { probe, gpu }
    }
}

impl<P: GpuProbe> HealthCheck for GpuCheck<P> {
    fn name(&self) -> &str {
        "GPU"
    }

    fn check(&mut self, _rank: &RankContext<'_>) -> Result<(), String> {
        self.probe
            .check(&self.gpu)
            .map_err(|why| format!("{}: {why}", self.gpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_finds_its_gpu_through_cuda_visible_devices() {
        assert_eq!(gpu_for_local_rank(0, None), Ok(GpuId::Index(0)));
        assert_eq!(gpu_for_local_rank(3, None), Ok(GpuId::Index(3)));
        assert_eq!(gpu_for_local_rank(1, Some("2, 5 ,7")), Ok(GpuId::Index(5)));
        assert_eq!(
            gpu_for_local_rank(0, Some("GPU-8e0a5b1c-0000-1111-2222-333344445555,1")),
            Ok(GpuId::Uuid(
                "GPU-8e0a5b1c-0000-1111-2222-333344445555".to_owned()
            ))
        );
        let short = gpu_for_local_rank(2, Some("0,1")).unwrap_err();
        assert!(
            short.contains("local rank 2 has no device") && short.contains("lists 2"),
            "{short}"
        );
        let bad = gpu_for_local_rank(0, Some("zero")).unwrap_err();
        assert!(bad.contains("\"zero\""), "{bad}");
        // An empty list hides every device.
        assert!(gpu_for_local_rank(0, Some("")).is_err());
    }
}
