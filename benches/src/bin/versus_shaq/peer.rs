//! The second process of a sample: this executable again, told its part by
//! an environment variable, inheriting the regions' descriptors, pinned to
//! core 1.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ENV: &str = "NODEIPC_VERSUS_SHAQ_PEER";

/// The part this process plays, if it is a peer.
pub(crate) fn role() -> Option<String> {
    std::env::var(ENV).ok()
}

/// A peer, killed and reaped if the sample ends early.
pub(crate) struct Peer(Option<Child>);

impl Peer {
    /// Spawns the peer playing `spec`, inheriting `fds` under their numbers.
    pub(crate) fn spawn(spec: &str, fds: &[BorrowedFd<'_>], pin: bool) -> io::Result<Peer> {
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let mut command = Command::new(std::env::current_exe()?);
        command.env(ENV, spec);
        let prepare = move || {
            for &fd in &raw {
                // SAFETY: `fd` stays open in the parent for the whole spawn.
                let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            }
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            if pin {
                nodeipc_benches::machine::pin_current_thread(1)?;
            }
            Ok(())
        };
        // SAFETY: `prepare` runs between fork and exec and makes only
        // async-signal-safe system calls (fcntl, prctl, sched_setaffinity).
        unsafe { command.pre_exec(prepare) };
        Ok(Peer(Some(command.spawn()?)))
    }

    /// Waits (bounded) for the peer to exit successfully.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        let mut child = self.0.take().expect("peer present");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(io::Error::other(format!("peer failed: {status}")))
                };
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other("peer did not finish in 60 s"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Takes a descriptor inherited under `number`.
pub(crate) fn inherited(number: &str) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let raw: RawFd = number
        .parse()
        .map_err(|_| io::Error::other(format!("bad descriptor {number:?}")))?;
    // SAFETY: the parent passed `raw` down for this peer's sole use, and
    // nothing else in this process owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}
