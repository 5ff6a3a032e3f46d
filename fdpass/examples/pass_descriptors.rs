//! Descriptors passed both ways between two processes: the parent starts a
//! copy of this program as its child, and over one Unix socket
//!
//! 1. the parent sends the child a memfd over `SCM_RIGHTS` ([`send_fds`]);
//!    the child reads what the parent wrote and writes a line of its own
//!    into the same file, which the parent then reads back;
//! 2. the child sends the parent another memfd the same way;
//! 3. the child exports a third memfd as a `{pid, fd}` value
//!    ([`FdHandle`], 24 bytes sent as plain data), and the parent imports it
//!    with `pidfd_getfd` ([`FdHandle::import`]). Where the kernel does not
//!    permit that (another user, Yama, a kernel before 5.6) the parent says
//!    so and asks the child to send that descriptor over `SCM_RIGHTS`
//!    instead.
//!
//! ```text
//! cargo run -p nodeipc-fdpass --example pass_descriptors
//! cargo run -p nodeipc-fdpass --example pass_descriptors -- --child-not-dumpable
//! ```
//!
//! With `--child-not-dumpable` the child makes itself non-dumpable
//! (`PR_SET_DUMPABLE` 0, as a process holding secrets does): a parent
//! without `CAP_SYS_PTRACE` (not root) is then refused `pidfd_getfd` and
//! takes the fallback.
//!
//! Every file's contents are checked. The socket lives in a private 0700
//! directory under the temporary directory, removed at the end; every read
//! has a timeout; the child dies with its parent (`PR_SET_PDEATHSIG`) and
//! the parent kills the child on every error path. Exits 0 only when every
//! check passed.

use std::error::Error;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{FdHandle, Listener, connect_unix_when_up, recv_fds, send_fds};

/// Names this process's role (and the socket) in the child.
const SOCKET_ENV: &str = "NODEIPC_EXAMPLE_FDPASS_SOCKET";
const PARENT_ENV: &str = "NODEIPC_EXAMPLE_PARENT";
/// Set in the child when it is to make itself non-dumpable.
const NOT_DUMPABLE_ENV: &str = "NODEIPC_EXAMPLE_FDPASS_NOT_DUMPABLE";
/// The bound on every wait.
const STEP: Duration = Duration::from_secs(5);
/// Where the child writes its line in the parent's memfd.
const CHILD_LINE_AT: u64 = 64;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    let (who, result) = match std::env::var_os(SOCKET_ENV) {
        Some(socket) => ("child", child(Path::new(&socket))),
        None => ("parent", parent()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pass_descriptors ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn parent() -> Result<()> {
    let child_not_dumpable = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--child-not-dumpable") => true,
        Some(other) => {
            return Err(format!("unknown argument {other:?} (only --child-not-dumpable)").into());
        }
    };
    let me = std::process::id();
    // Declared first, dropped last: after the listener removed its socket.
    let dir = PrivateDir::create(&format!("nodeipc-example-fdpass-{me}"))?;
    let listener = Listener::bind(&dir.0.join("sock"))?;
    let mut peer = Peer::spawn(SOCKET_ENV, listener.path().as_os_str(), child_not_dumpable)?;
    let child_pid = peer.id();
    let stream = accept_bounded(&listener, &mut peer)?;
    drop(listener);
    stream.set_read_timeout(Some(STEP))?;

    // 1. Parent -> child over SCM_RIGHTS.
    let mine = memfd_with("parent's file", &format!("written by the parent {me}"))?;
    send_fds(&stream, b"M", &[mine.as_fd()])?;
    println!("parent {me}: sent a memfd to child {child_pid} over SCM_RIGHTS");

    // 2. Child -> parent over SCM_RIGHTS (after the child wrote into ours).
    let theirs = recv_one(&stream, b'C')?;
    expect_contents(&theirs, 0, &format!("written by the child {child_pid}"))?;
    expect_contents(
        &mine,
        CHILD_LINE_AT,
        &format!("and read by the child {child_pid}"),
    )?;
    println!("parent: the child read our memfd and wrote into it; its own memfd arrived intact");

    // 3. A {pid, fd} value, imported with pidfd_getfd where permitted.
    let mut bytes = [0u8; FdHandle::SIZE];
    (&stream).read_exact(&mut bytes)?;
    let handle = FdHandle::from_bytes(&bytes)?;
    if handle.pid != child_pid {
        return Err(format!("handle names pid {}, the child is {child_pid}", handle.pid).into());
    }
    let expected = format!("exported by the child {child_pid}");
    match handle.import() {
        Ok(fd) => {
            expect_contents(&File::from(fd), 0, &expected)?;
            (&stream).write_all(b"D")?;
            println!(
                "parent: imported {} of process {} with pidfd_getfd",
                handle.fd, handle.pid
            );
        }
        Err(
            e @ (nodeipc_fdpass::Error::NotPermitted { .. }
            | nodeipc_fdpass::Error::Unsupported { .. }),
        ) => {
            println!("parent: pidfd_getfd not available here ({e}); falling back to SCM_RIGHTS");
            (&stream).write_all(b"S")?;
            expect_contents(&recv_one(&stream, b'H')?, 0, &expected)?;
            println!("parent: the same descriptor arrived over SCM_RIGHTS instead");
        }
        Err(e) => return Err(e.into()),
    }
    peer.wait_success(STEP)?;
    println!("parent: every descriptor checked, child exited 0");
    Ok(())
}

fn child(socket: &Path) -> Result<()> {
    die_with_parent()?;
    if std::env::var_os(NOT_DUMPABLE_ENV).is_some() {
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    }
    let me = std::process::id();
    let parent: u32 = std::env::var(PARENT_ENV)?.parse()?;
    let stream = connect_unix_when_up(socket, STEP)?;
    stream.set_read_timeout(Some(STEP))?;

    let parents = recv_one(&stream, b'M')?;
    expect_contents(&parents, 0, &format!("written by the parent {parent}"))?;
    parents.write_all_at(
        format!("and read by the child {me}").as_bytes(),
        CHILD_LINE_AT,
    )?;
    let mine = memfd_with("child's file", &format!("written by the child {me}"))?;
    send_fds(&stream, b"C", &[mine.as_fd()])?;

    // Kept open until the parent says it is done: its number is in the handle.
    let exported = memfd_with("exported file", &format!("exported by the child {me}"))?;
    (&stream).write_all(&FdHandle::export(&exported)?.to_bytes())?;
    let mut answer = [0u8; 1];
    (&stream).read_exact(&mut answer)?;
    match &answer {
        b"D" => {}
        b"S" => {
            send_fds(&stream, b"H", &[exported.as_fd()])?;
        }
        other => return Err(format!("unexpected answer {other:?} from the parent").into()),
    }
    println!("child {me}: received, wrote and sent descriptors as asked");
    Ok(())
}

/// Receives one message of one byte, `tag`, carrying exactly one descriptor.
fn recv_one(stream: &UnixStream, tag: u8) -> Result<File> {
    let mut byte = [0u8; 1];
    let mut got = recv_fds(stream, &mut byte, 1)?;
    if got.len != 1 || byte[0] != tag || got.fds.len() != 1 {
        return Err(format!(
            "expected {:?} with one descriptor, got {} byte(s) {:?} with {} descriptor(s)",
            tag as char,
            got.len,
            byte[0] as char,
            got.fds.len()
        )
        .into());
    }
    let fd: OwnedFd = got.fds.pop().ok_or("no descriptor")?;
    Ok(File::from(fd))
}

fn memfd_with(label: &str, text: &str) -> Result<File> {
    let fd = rustix::fs::memfd_create(label, rustix::fs::MemfdFlags::CLOEXEC)?;
    let file = File::from(fd);
    file.write_all_at(text.as_bytes(), 0)?;
    Ok(file)
}

fn expect_contents(file: &File, at: u64, expected: &str) -> Result<()> {
    let mut buf = vec![0u8; expected.len()];
    file.read_exact_at(&mut buf, at)?;
    if buf != expected.as_bytes() {
        return Err(format!(
            "at offset {at}: expected {expected:?}, found {:?}",
            String::from_utf8_lossy(&buf)
        )
        .into());
    }
    Ok(())
}

/// Accepts the child's connection, giving up after [`STEP`] or when the
/// child has already exited.
fn accept_bounded(listener: &Listener, peer: &mut Peer) -> Result<UnixStream> {
    let deadline = Instant::now() + STEP;
    loop {
        if let Some((stream, credentials)) = listener.accept()? {
            if credentials.pid != peer.id() {
                return Err(
                    format!("connection from pid {}, not the child", credentials.pid).into(),
                );
            }
            return Ok(stream);
        }
        peer.check_running()?;
        if Instant::now() >= deadline {
            return Err(format!("the child did not connect within {STEP:?}").into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A 0700 directory of ours under the temporary directory, removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(name: &str) -> Result<PrivateDir> {
        let path = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateDir(path))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The child asks the kernel to kill it when its parent goes, then checks
/// the parent had not already gone before it asked.
fn die_with_parent() -> Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let parent: i32 = std::env::var(PARENT_ENV)?.parse()?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return Err("the parent exited before the child started".into());
    }
    Ok(())
}

/// The child process, killed and reaped if it is dropped unwaited.
struct Peer(Option<Child>);

impl Peer {
    fn spawn(env: &str, value: &std::ffi::OsStr, not_dumpable: bool) -> Result<Peer> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .env(env, value)
            .env(PARENT_ENV, std::process::id().to_string());
        if not_dumpable {
            command.env(NOT_DUMPABLE_ENV, "1");
        }
        let child = command.spawn()?;
        Ok(Peer(Some(child)))
    }

    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    fn check_running(&mut self) -> Result<()> {
        match self.0.as_mut().map(Child::try_wait).transpose()?.flatten() {
            Some(status) => Err(format!("the child exited early ({status})").into()),
            None => Ok(()),
        }
    }

    /// Waits up to `limit` for an exit with status 0.
    fn wait_success(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let Some(child) = self.0.as_mut() else {
            return Err("no child".into());
        };
        loop {
            if let Some(status) = child.try_wait()? {
                self.0 = None;
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("child exited with {status}").into())
                };
            }
            if Instant::now() >= deadline {
                return Err(format!("child still running after {limit:?}").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
