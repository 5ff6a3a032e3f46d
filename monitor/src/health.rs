//! Health checks the server polls at every periodic check: a failed one
//! terminates the rank exactly as a timeout does. The checks themselves
//! (process alive, NIC, GPU) and the configuration section that asks for
//! them are `nodeipc-monitor-host`'s.

use nodeipc_fdpass::Pidfd;

use crate::RankInfo;

/// What a health check may look at: the registered rank and its pidfd.
#[derive(Debug)]
pub struct RankContext<'a> {
    /// Who the rank is (its `pid` is the process the pidfd names).
    pub rank: &'a RankInfo,
    /// The rank's process, pinned: never a later process with a recycled pid.
    pub pidfd: &'a Pidfd,
}

/// A check the server runs at every periodic check while a rank is
/// registered and not already timed out. Implementations must return
/// quickly: the server's loop waits for them.
///
/// # Examples
/// ```
/// use nodeipc_monitor::{HealthCheck, RankContext};
///
/// /// Fails once a file appears (a GPU watchdog could drop it, say).
/// struct FlagFile(std::path::PathBuf);
///
/// impl HealthCheck for FlagFile {
///     fn name(&self) -> &str {
///         "flag file"
///     }
///     fn check(&mut self, _rank: &RankContext<'_>) -> Result<(), String> {
///         match self.0.exists() {
///             true => Err(format!("{} exists", self.0.display())),
///             false => Ok(()),
///         }
///     }
/// }
/// ```
pub trait HealthCheck: Send {
    /// A short name for logs and `Status.last_timeout`.
    fn name(&self) -> &str;

    /// `Ok` when the rank is healthy; `Err(reason)` terminates it.
    ///
    /// # Errors
    /// The reason the rank is unhealthy, for people.
    fn check(&mut self, rank: &RankContext<'_>) -> Result<(), String>;
}

/// A boxed check is a check: what `nodeipc-monitor-host` builds can go
/// straight to [`MonitorServer::add_health_check`](crate::MonitorServer::add_health_check).
impl HealthCheck for Box<dyn HealthCheck> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn check(&mut self, rank: &RankContext<'_>) -> Result<(), String> {
        (**self).check(rank)
    }
}
