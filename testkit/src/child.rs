//! Child processes of a test: spawned ones that cannot outlive it, forked
//! ones bounded in time, and a test binary running one of its own tests
//! again in a process of its own.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

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
