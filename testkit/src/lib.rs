//! Test support shared by every nodeipc crate: unique names, a deadlock
//! watchdog, child processes that cannot outlive their test, and the counts a
//! leak check needs (open fds, objects under `/dev/shm`).
#![deny(unsafe_op_in_unsafe_fn)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// A child process killed and reaped when the guard drops, and killed by the
/// kernel if the thread that spawned it dies (`PR_SET_PDEATHSIG`).
pub struct ChildGuard {
    child: Option<Child>,
}

/// Spawns `command` as a guarded child.
pub fn spawn_child(command: &mut Command) -> ChildGuard {
    // SAFETY: the closure runs between fork and exec and only calls prctl,
    // which is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    let child = command.spawn().expect("spawn child process");
    ChildGuard { child: Some(child) }
}

impl ChildGuard {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Access to the child (its pipes, say).
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("child present")
    }

    /// Waits up to `limit` for the child to exit; kills it and panics if it does not.
    pub fn wait_timeout(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        let child = self.child();
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child {} still running after {limit:?}", child.id());
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for the child's output (stdout and stderr must be piped), bounded.
    pub fn output_timeout(mut self, limit: Duration) -> std::process::Output {
        let child = self.child.take().expect("child present");
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(limit) {
            Ok(output) => output.expect("wait_with_output"),
            Err(_) => {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid as i32).expect("pid"),
                    rustix::process::Signal::KILL,
                );
                panic!("child {pid} still running after {limit:?}");
            }
        }
    }

    /// As [`output_timeout`](ChildGuard::output_timeout), and panics with the
    /// child's status, stdout and stderr unless it exited successfully: the
    /// parent's half of a test whose work runs in a child of its own
    /// ([`this_test_in_a_child`]).
    pub fn output_success(self, limit: Duration) -> std::process::Output {
        let out = self.output_timeout(limit);
        assert!(
            out.status.success(),
            "the child failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Sends SIGKILL and waits (up to `limit`) until the child is a zombie:
    /// exited, every thread of it gone, not reaped (`waitid` with `WNOWAIT`
    /// says so), its pid and `/proc/<pid>/stat` start time still there. The
    /// guard reaps it when it drops.
    pub fn kill_unreaped(&mut self, limit: Duration) {
        use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
        let pid = self.id();
        self.child().kill().expect("SIGKILL the child");
        let id = Pid::from_raw(pid as i32).expect("a child's pid");
        let deadline = Instant::now() + limit;
        // A group leader shows state Z while its other threads still exit;
        // the parent is told (and its pidfd turns readable) only once all did.
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        while waitid(WaitId::Pid(id), options)
            .expect("waitid(WNOWAIT)")
            .is_none()
        {
            assert!(
                Instant::now() < deadline,
                "child {pid} not a zombie after {limit:?}"
            );
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sends SIGKILL and reaps the child.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `body` in a child made by `fork(2)` — a copy of this process with
/// only the calling thread, as any forked child — and returns the code it
/// exits with: what `body` returns, or 101 if it panics. The child leaves
/// through `_exit`, so it runs no destructor and no exit handler of the
/// parent's. A child still running after `limit` is killed and the test
/// fails (a child that deadlocked, say, on a lock a parent thread held).
///
/// In the child, use what the test is about and little else: another
/// thread of the parent may have held any lock at the fork.
pub fn fork_child(what: &str, limit: Duration, body: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `body` (the test's own code, written for a
    // forked child) and then `_exit`s; the parent only waits for it.
    let pid = unsafe { libc::fork() };
    assert!(
        pid >= 0,
        "{what}: fork: {}",
        std::io::Error::last_os_error()
    );
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
        // SAFETY: ends the child at once, as a forked child should.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is ours.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(
            got >= 0,
            "{what}: waitpid: {}",
            std::io::Error::last_os_error()
        );
        if got == pid {
            if libc::WIFEXITED(status) {
                return libc::WEXITSTATUS(status);
            }
            panic!(
                "{what}: the forked child ended by signal {}",
                libc::WTERMSIG(status)
            );
        }
        if Instant::now() >= deadline {
            // SAFETY: our own child, not reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("{what}: the forked child was still running after {limit:?} (a deadlock?)");
        }
        thread::sleep(Duration::from_millis(2));
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

/// The name `--list` and `--exact` know a test by: `test` in the file whose
/// `module_path!()` is `module`, without the test binary's own crate name
/// (`it::grid` and `x` give `grid::x`; a file that is its own binary gives
/// `x`). Lets a test name itself whether its file is a binary of its own
/// or a module of the crate's one test binary.
pub fn test_path(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    }
}

/// A command that runs test `test` of this test binary again (its full
/// name: see [`test_path`]), alone, in a child process (`--exact TEST
/// --nocapture --test-threads=1`), its output piped: for a test whose work must happen in a process of its own (a
/// seccomp filter, a lowered limit, another uid). The caller sets the
/// environment variable that tells the child it is the child, anything
/// else it needs, and spawns it with [`spawn_child`].
pub fn this_test_in_a_child(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// The parent's half of a test whose work runs in a child of its own:
/// runs test `test` of module `module` (`module_path!()`) again alone
/// ([`this_test_in_a_child`]) with the environment variable `child.0` set
/// to `child.1` (how the child knows it is the child), and panics unless
/// it exits successfully within `limit` having printed `marker` (so a
/// child that never got to its work does not pass).
pub fn passes_in_a_child(
    module: &str,
    test: &str,
    child: (&str, &str),
    marker: &str,
    limit: Duration,
) {
    let out = spawn_child(this_test_in_a_child(&test_path(module, test)).env(child.0, child.1))
        .output_success(limit);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(marker),
        "the child never said {marker:?}: {said}"
    );
}
