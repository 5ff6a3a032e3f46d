//! The simplest check: is the rank's process still there.

use nodeipc_monitor::{HealthCheck, RankContext};

/// Fails when the rank's process has exited (its pidfd is readable). The
/// server notices an exit at once anyway; this check exists for symmetry
/// with checks that poll something the server cannot wait on.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessAlive;

impl HealthCheck for ProcessAlive {
    fn name(&self) -> &str {
        "process alive"
    }

    fn check(&mut self, rank: &RankContext<'_>) -> Result<(), String> {
        if rank.pidfd.is_alive() {
            Ok(())
        } else {
            Err(format!("process {} has exited", rank.pidfd.pid()))
        }
    }
}
