//! A process that SIGKILL cannot end, made for real: a FUSE mount whose
//! server (a thread of the test) reads the LOOKUP of `stuck` and never
//! answers it. A process looking that name up waits in the kernel's
//! `request_wait_answer`; once a fatal signal comes, the request being
//! already with the server, it waits uninterruptibly (state `D`) and its
//! SIGKILL stays pending until the connection ends. Dropping the mount
//! ends the connection: the process then dies of its pending signal.
//!
//! A module of `stuck.rs` and of the etcd tests (whose `etcd_kit` ranks
//! look `STUCK_NAME` up); each uses only part of it.
#![allow(dead_code, unreachable_pub)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nodeipc_testkit::TempDir;

/// The name whose lookup never ends.
pub const STUCK_NAME: &str = "stuck";

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_INIT: u32 = 26;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_DESTROY: u32 = 38;
const FUSE_BATCH_FORGET: u32 = 42;
const ROOT_ID: u64 = 1;

/// `struct fuse_in_header`: len, opcode, unique, nodeid, uid, gid, pid, …
const IN_HEADER: usize = 40;
/// `struct fuse_out_header`: len, error, unique.
const OUT_HEADER: usize = 16;
/// `struct fuse_init_out` since protocol 7.36.
const INIT_OUT: usize = 64;
/// `struct fuse_attr_out`: valid (8), valid_nsec (4), dummy (4), attr (88).
const ATTR_OUT: usize = 104;
/// The kernel refuses a read buffer smaller than a whole request can be
/// (header + write header + max_write, at least 8 KiB): be generous.
const READ_BUFFER: usize = 136 * 1024;
/// How often the server looks at its stop flag.
const POLL_MS: i32 = 50;

/// A FUSE mount on a temporary directory where any access to
/// `<dir>/stuck` hangs until the mount is dropped.
pub struct StuckMount {
    dir: TempDir,
    stop: Arc<AtomicBool>,
    stuck: Arc<Mutex<Vec<u32>>>,
    server: Option<JoinHandle<OwnedFd>>,
}

impl StuckMount {
    /// Mounts and starts serving; `None` (after `nodeipc_testkit::skip`,
    /// which fails under CI=true) without `/dev/fuse` or the right to mount.
    pub fn new(test: &str) -> Option<StuckMount> {
        let device = CString::new("/dev/fuse").expect("no NUL");
        // SAFETY: open(2) on a NUL-terminated path we own; it touches no
        // other memory. The fd is this process's alone (CLOEXEC: children
        // spawned meanwhile do not keep the connection alive).
        let raw = unsafe {
            libc::open(
                device.as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if raw < 0 {
            let error = std::io::Error::last_os_error();
            nodeipc_testkit::skip(test, &format!("cannot open /dev/fuse: {error}"));
            return None;
        }
        // SAFETY: `raw` was just returned by open(2) and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let dir = TempDir::new("fuse");
        let target = CString::new(dir.path().as_os_str().as_bytes()).expect("no NUL");
        let source = CString::new("nodeipc-stuck").expect("no NUL");
        let fstype = CString::new("fuse").expect("no NUL");
        let options = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fd.as_raw_fd()
        ))
        .expect("no NUL");
        // SAFETY: mount(2) reads the four NUL-terminated strings above,
        // which live until it returns; it writes no memory of ours.
        let mounted = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            let error = std::io::Error::last_os_error();
            nodeipc_testkit::skip(
                test,
                &format!(
                    "mount -t fuse on {} refused: {error} (needs root and /dev/fuse)",
                    dir.path().display()
                ),
            );
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stuck = Arc::new(Mutex::new(Vec::new()));
        let server = {
            let (stop, stuck) = (Arc::clone(&stop), Arc::clone(&stuck));
            std::thread::spawn(move || serve(fd, &stop, &stuck))
        };
        Some(StuckMount {
            dir,
            stop,
            stuck,
            server: Some(server),
        })
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `<mount>/stuck`: any access to it hangs.
    pub fn stuck_path(&self) -> PathBuf {
        self.dir.join(STUCK_NAME)
    }

    /// The pids whose lookup of `stuck` the server holds unanswered.
    pub fn stuck_pids(&self) -> Vec<u32> {
        self.stuck.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to `limit` for a process to hang on `stuck`; its pid.
    pub fn wait_for_stuck(&self, limit: Duration) -> Option<u32> {
        let began = Instant::now();
        loop {
            if let Some(pid) = self.stuck_pids().first() {
                return Some(*pid);
            }
            if began.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for StuckMount {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The server returns the fd rather than closing it: the close below
        // is then the last reference, which aborts the connection (a
        // close while another thread sits in read(2) would not).
        if let Some(fd) = self.server.take().and_then(|s| s.join().ok()) {
            drop(fd);
        }
        let target = CString::new(self.dir.path().as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: umount2(2) reads the NUL-terminated path, which lives
        // until it returns; it writes no memory of ours.
        unsafe {
            libc::umount2(target.as_ptr(), libc::MNT_DETACH);
        }
        // `dir` (now an empty directory again) is removed when it drops.
    }
}

/// Answers INIT, lookups of other names (ENOENT) and the root's
/// attributes; holds every lookup of `stuck` forever. Until `stop`, or
/// the connection ends; returns the fd for the caller to close.
fn serve(fd: OwnedFd, stop: &AtomicBool, stuck: &Mutex<Vec<u32>>) -> OwnedFd {
    let mut buffer = vec![0u8; READ_BUFFER];
    while !stop.load(Ordering::Relaxed) {
        let mut poll = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd on our stack; the fd is open (we
        // own it) and only this thread reads it.
        let ready = unsafe { libc::poll(&mut poll, 1, POLL_MS) };
        if ready <= 0 {
            continue;
        }
        // SAFETY: read(2) into our own buffer, within its length; the
        // kernel is the only writer, and only during the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR | libc::ENOENT) => continue,
                // ENODEV: the connection ended (unmounted or aborted).
                _ => break,
            }
        }
        let request = &buffer[..n as usize];
        if request.len() < IN_HEADER {
            continue;
        }
        let opcode = u32_at(request, 4);
        let unique = u64_at(request, 8);
        let node = u64_at(request, 16);
        let pid = u32_at(request, 32);
        let body = &request[IN_HEADER..];
        match opcode {
            FUSE_INIT => reply(&fd, unique, 0, &init_out()),
            FUSE_LOOKUP => {
                let name = body.split(|b| *b == 0).next().unwrap_or_default();
                if node == ROOT_ID && name == STUCK_NAME.as_bytes() {
                    // Never answered: the caller waits until the
                    // connection ends.
                    stuck.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
                } else {
                    reply(&fd, unique, -libc::ENOENT, &[]);
                }
            }
            FUSE_GETATTR if node == ROOT_ID => reply(&fd, unique, 0, &root_attr()),
            // No reply expected; an INTERRUPT of the stuck lookup is what
            // we must not act on.
            FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT | FUSE_DESTROY => {}
            _ => reply(&fd, unique, -libc::ENOSYS, &[]),
        }
    }
    fd
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Protocol 7.31, `max_write` 4096, no optional features.
fn init_out() -> Vec<u8> {
    let mut out = vec![0u8; INIT_OUT];
    out[0..4].copy_from_slice(&7u32.to_ne_bytes());
    out[4..8].copy_from_slice(&31u32.to_ne_bytes());
    // max_readahead (8..12) and flags (12..16) stay 0; max_background and
    // congestion_threshold (16..20) 0: the kernel's defaults.
    out[20..24].copy_from_slice(&4096u32.to_ne_bytes());
    out
}

/// The root: a directory, 0755, owned by root, valid for a second.
fn root_attr() -> Vec<u8> {
    let mut out = vec![0u8; ATTR_OUT];
    out[0..8].copy_from_slice(&1u64.to_ne_bytes());
    let attr = 16;
    out[attr..attr + 8].copy_from_slice(&ROOT_ID.to_ne_bytes());
    // mode after ino, size, blocks, 3 times (8 each) and 3 nsecs (4 each).
    let mode = attr + 6 * 8 + 3 * 4;
    out[mode..mode + 4].copy_from_slice(&(libc::S_IFDIR | 0o755).to_ne_bytes());
    out[mode + 4..mode + 8].copy_from_slice(&2u32.to_ne_bytes());
    out
}

fn reply(fd: &OwnedFd, unique: u64, error: i32, body: &[u8]) {
    let len = OUT_HEADER + body.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&error.to_ne_bytes());
    out.extend_from_slice(&unique.to_ne_bytes());
    out.extend_from_slice(body);
    // SAFETY: write(2) from our own buffer, within its length; the fd is
    // ours. A failed reply (the caller was interrupted) is nothing to us.
    unsafe {
        libc::write(fd.as_raw_fd(), out.as_ptr().cast(), out.len());
    }
}

/// Whether process `pid` is alive: exists and is not a zombie (a dead
/// process nobody has reaped yet: init here may not reap at once).
pub fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// Its state letter in `/proc/<pid>/stat` (`D`: uninterruptible sleep).
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
