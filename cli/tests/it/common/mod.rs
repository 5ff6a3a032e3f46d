//! What the tests of the `nodeipc` command share: running it bounded, and
//! finding the processes and directories a demo makes.
#![allow(dead_code)] // each test file uses part of it

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nodeipc_testkit::spawn_child;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_nodeipc");

/// Runs `nodeipc` with `args` (stdin empty unless given), output captured,
/// killed after a minute.
pub(crate) fn nodeipc(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn_child(&mut command);
    if let Some(input) = stdin {
        // The command may refuse before reading: a closed pipe is fine.
        let _ = child.child().stdin.take().unwrap().write_all(input);
    }
    child.output_timeout(Duration::from_secs(60))
}

/// The stderr of `out` as text.
pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A write end of a pipe whose read end is already closed: every write to
/// it fails with `EPIPE`.
pub(crate) fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer
}

/// `nodeipc args` with standard output a pipe nobody reads; stderr captured.
pub(crate) fn nodeipc_into_closed_pipe(args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::piped());
    spawn_child(&mut command).output_timeout(Duration::from_secs(60))
}

/// The demo's directory in `tmpdir`: `nodeipc-demo-<pid>-<random>`.
pub(crate) fn demo_dir(tmpdir: &Path, pid: u32) -> Option<PathBuf> {
    let prefix = format!("nodeipc-demo-{pid}-");
    std::fs::read_dir(tmpdir)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
}

/// Waits (bounded) until `done` holds, polling.
pub(crate) fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Live (not zombie) children of `parent`.
pub(crate) fn children(parent: u32) -> Vec<u32> {
    live_processes_with(STAT_PPID, parent)
}

/// Where the parent pid and the process group are among the fields of
/// `/proc/<pid>/stat` that follow the command name (the state is 0).
pub(crate) const STAT_PPID: usize = 1;
pub(crate) const STAT_PGRP: usize = 2;

/// Live (not zombie) processes whose `/proc/<pid>/stat` field `field` (as
/// counted after the command name) is `value`.
pub(crate) fn live_processes_with(field: usize, value: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        if fields.get(field).and_then(|f| f.parse::<u32>().ok()) == Some(value) && fields[0] != "Z"
        {
            pids.push(pid);
        }
    }
    pids
}

/// Whether `pid` is a live process (a zombie counts as gone).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// The monitor serving `socket` among `pids` (by its environment).
pub(crate) fn monitor_of(pids: &[u32], socket: &Path) -> Option<u32> {
    let wanted = format!("NODEIPC_MONITOR_SERVE={}", socket.display());
    pids.iter().copied().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == wanted.as_bytes()))
    })
}

/// Sends `signal` to `pid`.
pub(crate) fn signal(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    rustix::process::kill_process(pid, signal).expect("kill");
}

/// A `nodeipc demo` command with `TMPDIR` set, output captured, run in its
/// own process group (so a test's signal goes to it alone).
pub(crate) fn demo_command(tmpdir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("demo")
        .args(args)
        .env("TMPDIR", tmpdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    command
}
