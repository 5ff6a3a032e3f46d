//! Test support shared by every nodeipc crate: unique names, a deadlock
//! watchdog, child processes that cannot outlive their test, and the counts a
//! leak check needs (open fds, objects under `/dev/shm`).
#![deny(unsafe_op_in_unsafe_fn)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod child;

pub use child::{
    ChildGuard, fork_child, passes_in_a_child, spawn_child, test_path, this_test_in_a_child,
};

/// The prefix of every name a test creates, so `/dev/shm` leftovers are ours
/// at a glance and the CI check can find them.
pub const TEST_PREFIX: &str = "/nodeipc-test-";

/// The uid and gid an unprivileged child drops to (`nobody`).
pub const NOBODY: (u32, u32) = (65534, 65534);

/// A name no other test, run or process on this node uses:
/// `/nodeipc-test-<tag>-<pid>-<counter>-<nanos>`.
pub fn unique_name(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{TEST_PREFIX}{tag}-{}-{n}-{nanos:x}", std::process::id())
}

/// A private temporary directory (0700), removed on drop: socket paths go here.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `/tmp/nodeipc-test-<tag>-…`.
    pub fn new(tag: &str) -> TempDir {
        let path = PathBuf::from(format!("/tmp{}", unique_name(tag)));
        // 0700 in the creating call, as the code under test makes its own.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&path)
            .expect("create test directory");
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Aborts the whole test process (and with it every child spawned through
/// [`spawn_child`]) if the test is still running after its deadline: a
/// deadlock fails loudly instead of hanging CI. Disarmed on drop.
pub struct Watchdog {
    state: Arc<(Mutex<bool>, Condvar)>,
}

impl Watchdog {
    /// Arms a watchdog named after the test.
    pub fn new(test: &str, limit: Duration) -> Watchdog {
        let state = Arc::new((Mutex::new(false), Condvar::new()));
        let watched = Arc::clone(&state);
        let test = test.to_owned();
        thread::spawn(move || {
            let (done, cvar) = &*watched;
            let deadline = Instant::now() + limit;
            let mut finished = done.lock().unwrap_or_else(|e| e.into_inner());
            while !*finished {
                let now = Instant::now();
                if now >= deadline {
                    eprintln!("watchdog: test `{test}` still running after {limit:?}; aborting");
                    std::process::abort();
                }
                finished = cvar
                    .wait_timeout(finished, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        });
        Watchdog { state }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (done, cvar) = &*self.state;
        *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cvar.notify_all();
    }
}

/// How many descriptors this process has open (`/proc/self/fd`).
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .expect("read /proc/self/fd")
}

/// Files under `/dev/shm` whose name contains `fragment` (for a semaphore,
/// the file is `sem.<name>`).
pub fn shm_leftovers(fragment: &str) -> Vec<String> {
    let fragment = fragment.trim_start_matches('/');
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.contains(fragment))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether we run as root (permission tests need it to drop to another uid).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether this run is CI's (`CI=true`), where a test that cannot run fails.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Prints why a test is skipped; returns `true` so callers can `return` on it.
///
/// # Panics
/// Under `CI=true`: a skipped test is not a passed one, so CI fails instead.
pub fn skip(test: &str, why: &str) -> bool {
    if in_ci() {
        panic!("{test} cannot run under CI=true: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    true
}

/// Compiles a C program with the system's `cc`, if there is one; `None` (and
/// a message) when no compiler is found.
pub fn compile_c(source: &Path, output: &Path, extra_args: &[&str]) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .arg("-O2")
        .arg("-o")
        .arg(output)
        .arg(source)
        .args(extra_args)
        .status();
    match status {
        Ok(s) if s.success() => Some(output.to_owned()),
        Ok(s) => panic!("{cc} failed to compile {}: {s}", source.display()),
        Err(e) if in_ci() => panic!("no C compiler ({cc}: {e}) under CI=true"),
        Err(e) => {
            eprintln!("no C compiler ({cc}: {e})");
            None
        }
    }
}

/// Makes every later `chmod`, `fchmod`, `fchmodat` and `fchmodat2` of this
/// process (and its children) fail with `EPERM`, through a seccomp filter.
///
/// For tests that must prove a file or directory got its mode in the one
/// call that created it: code that creates with a loose mode and tightens
/// it afterwards (leaving a window in which others can get in) fails under
/// this filter, code that creates with the right mode does not. Call it only
/// in a child process made for the purpose: it cannot be undone.
///
/// # Panics
/// If the kernel refuses the filter, or on an architecture it does not know.
pub fn deny_chmod() {
    install_chmod_filter(true);
}

/// As [`deny_chmod`], for the calls that take a path (`chmod`, `fchmodat`,
/// `fchmodat2`) only: `fchmod` of a descriptor still works. For code that
/// sets a mode on a descriptor before the object has a name — a socket made
/// 0600 before `bind` — and must never change a mode by path afterwards.
///
/// # Panics
/// As [`deny_chmod`].
pub fn deny_path_chmod() {
    install_chmod_filter(false);
}

fn install_chmod_filter(fchmod_too: bool) {
    #[cfg(target_arch = "x86_64")]
    const ARCH_AND_CALLS: (u32, [u32; 3], u32) = (0xc000_003e, [90, 268, 452], 91);
    #[cfg(target_arch = "aarch64")]
    const ARCH_AND_CALLS: (u32, [u32; 3], u32) = (0xc000_00b7, [53, 53, 452], 52);
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO_EPERM: u32 = 0x0005_0000 | 1;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let (arch, paths, fchmod) = ARCH_AND_CALLS;
    // With fchmod allowed, its slot repeats a path call: same verdict.
    let fourth = if fchmod_too { fchmod } else { paths[0] };
    let filter = [
        op(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        op(JEQ_K, 1, 0, arch),
        op(RET_K, 0, 0, ALLOW),
        op(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(JEQ_K, 4, 0, paths[0]),
        op(JEQ_K, 3, 0, paths[1]),
        op(JEQ_K, 2, 0, paths[2]),
        op(JEQ_K, 1, 0, fourth),
        op(RET_K, 0, 0, ALLOW),
        op(RET_K, 0, 0, ERRNO_EPERM),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with these arguments only sets a flag of this process.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(
        rc,
        0,
        "PR_SET_NO_NEW_PRIVS: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `program` points at `filter`, which outlives the call; the
    // kernel copies the program before returning.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &program as *const libc::sock_fprog,
        )
    };
    assert_eq!(rc, 0, "seccomp: {}", std::io::Error::last_os_error());
}

/// This process's descriptor table, filled up: the soft `RLIMIT_NOFILE`
/// lowered to a little above what is open, then every slot but `free`
/// taken. For tests of what code does out of descriptors (`EMFILE`). Drop
/// it to free the slots and put the old limit back; run it in a child made
/// for the purpose when other threads may need descriptors meanwhile.
pub struct FullFdTable {
    fillers: Vec<std::os::fd::OwnedFd>,
    limit: rustix::process::Rlimit,
}

impl FullFdTable {
    /// Fills the table, leaving `free` slots.
    ///
    /// # Panics
    /// If the limit cannot be lowered or the table does not fill up.
    pub fn fill(free: usize) -> FullFdTable {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let open = std::fs::read_dir("/proc/self/fd")
            .expect("list /proc/self/fd")
            .count() as u64;
        let lowered = Rlimit {
            current: Some(open + 16),
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, lowered).expect("lower RLIMIT_NOFILE");
        let mut fillers = Vec::new();
        let full = loop {
            match rustix::io::fcntl_dupfd_cloexec(std::io::stdin(), 0) {
                Ok(fd) => fillers.push(fd),
                Err(e) => break e,
            }
        };
        assert_eq!(full, rustix::io::Errno::MFILE, "the table did not fill up");
        fillers.truncate(fillers.len().saturating_sub(free));
        FullFdTable { fillers, limit }
    }
}

impl Drop for FullFdTable {
    fn drop(&mut self) {
        self.fillers.clear();
        let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, self.limit);
    }
}

/// Makes the process about to `exec` see a private 64 KiB tmpfs at
/// `/dev/shm`, in a mount namespace of its own (needs root): a full
/// `/dev/shm` without touching the machine's.
pub fn in_small_dev_shm(command: &mut Command) -> &mut Command {
    // SAFETY: runs between fork and exec in a single-threaded child; only
    // system calls on constant C strings, nothing allocated or locked.
    unsafe {
        command.pre_exec(|| {
            // SAFETY: the child has one thread, so no descriptor table is shared.
            rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS)?;
            // Our mounts must not propagate back to the host's namespace.
            rustix::mount::mount_change(
                c"/",
                rustix::mount::MountPropagationFlags::PRIVATE
                    | rustix::mount::MountPropagationFlags::REC,
            )?;
            rustix::mount::mount(
                c"tmpfs",
                c"/dev/shm",
                c"tmpfs",
                rustix::mount::MountFlags::empty(),
                c"size=64k",
            )?;
            Ok(())
        })
    }
}

/// Connections that fill the listen backlog of the (stopped, or never
/// accepting) server at `path`: non-blocking connects until the kernel says
/// the backlog is full (`EAGAIN`). Hold them while the test runs.
///
/// # Panics
/// On any other failure, or if the backlog never fills.
pub fn fill_backlog(path: &Path) -> Vec<std::os::fd::OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let address = SocketAddrUnix::new(path).expect("a socket path");
    let mut held = Vec::new();
    loop {
        let socket = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .expect("socket");
        match rustix::net::connect(&socket, &address) {
            Ok(()) => held.push(socket),
            Err(rustix::io::Errno::AGAIN) => return held,
            Err(e) => panic!("filling the backlog of {}: {e}", path.display()),
        }
        assert!(
            held.len() < 1024,
            "the backlog of {} never filled",
            path.display()
        );
    }
}

/// A live listener at `path` that never accepts (backlog 0), its backlog
/// full ([`fill_backlog`]): the next connect finds no room.
///
/// # Panics
/// If the socket cannot be bound or the backlog never fills.
pub fn full_backlog_listener(path: &Path) -> (std::os::fd::OwnedFd, Vec<std::os::fd::OwnedFd>) {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let listener = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .expect("socket");
    rustix::net::bind(
        &listener,
        &SocketAddrUnix::new(path).expect("a socket path"),
    )
    .expect("bind");
    rustix::net::listen(&listener, 0).expect("listen");
    let held = fill_backlog(path);
    (listener, held)
}
