//! The machine a benchmark runs on: what to print beside the figures, and
//! pinning processes to cores.

use std::io;

/// Cores, CPU model and kernel, in one line.
pub fn describe() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let uname = rustix::system::uname();
    format!(
        "{cores} cores, {model}, Linux {}",
        uname.release().to_string_lossy()
    )
}

/// How many cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Pins the calling thread to one core.
///
/// # Errors
/// The kernel refusing the affinity.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// Pins the calling thread to `cpu` until the guard drops, then restores
/// the affinity it had.
pub struct Pinned {
    previous: rustix::thread::CpuSet,
}

impl Pinned {
    /// Pins the calling thread to `cpu`.
    ///
    /// # Errors
    /// The kernel refusing the affinity.
    pub fn to(cpu: usize) -> io::Result<Pinned> {
        Pinned::to_cores(&[cpu])
    }

    /// Lets the calling thread (and the processes it spawns meanwhile,
    /// which inherit its affinity) run on any of `cpus`: a row of more
    /// processes than cores, run from a thread pinned to one, would
    /// otherwise put them all on that one.
    ///
    /// # Errors
    /// The kernel refusing the affinity.
    pub fn to_cores(cpus: &[usize]) -> io::Result<Pinned> {
        let previous = rustix::thread::sched_getaffinity(None)?;
        let mut set = rustix::thread::CpuSet::new();
        for &cpu in cpus {
            set.set(cpu);
        }
        rustix::thread::sched_setaffinity(None, &set)?;
        Ok(Pinned { previous })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = rustix::thread::sched_setaffinity(None, &self.previous);
    }
}
