//! Who may `pidfd_getfd` from whom: a child dropped to another uid finds
//! `pidfd_getfd` unavailable on its root parent (so `SCM_RIGHTS` is the
//! transport) and is refused an import with the ways out; `allow_ptracer`
//! accepts what it should, refuses a pid that is no pid, and under Yama's
//! `ptrace_scope = 1` lets a process that is not an ancestor import.
//!
//! Children are this test binary again, told their role by an environment
//! variable.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use nodeipc_fdpass::{Error, FdHandle, Ptracer, Transport, allow_ptracer, pidfd_getfd_available};
use nodeipc_testkit::{ChildGuard, NOBODY, Watchdog, is_root, skip, spawn_child};

/// Yama's setting; absent when Yama is not loaded.
const PTRACE_SCOPE: &str = "/proc/sys/kernel/yama/ptrace_scope";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// This test binary, filtered to `test`, as a child with `env` set to `value`.
fn this_test(test: &str, env: &str, value: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            &nodeipc_testkit::test_path(module_path!(), test),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, value);
    command
}

/// Set in the child of
/// [`an_unprivileged_child_finds_pidfd_getfd_unavailable_and_import_not_permitted`]:
/// `<parent pid> <handle as hex>`.
const PROBE_CHILD: &str = "NODEIPC_FDPASS_TEST_PROBE_CHILD";

/// The probing child's part: probe the parent, import its handle, and say
/// what came of each on a line of its own.
fn probe_child(value: &str) {
    println!(); // our lines start after the harness's "test … ..."
    let (parent, handle) = value.split_once(' ').unwrap();
    let parent: u32 = parent.parse().unwrap();
    let handle = FdHandle::from_bytes(&unhex(handle)).unwrap();
    println!("child available: {}", pidfd_getfd_available(parent));
    println!("child transport: {:?}", Transport::probe(parent));
    match handle.import() {
        Ok(_) => println!("child import: ok"),
        Err(err @ Error::NotPermitted { pid, fd }) => {
            println!("child import: NotPermitted pid={pid} fd={fd}");
            println!("child message: {err}");
        }
        Err(other) => println!("child import: other error {other:?}"),
    }
}

/// Runs the probing child (as `uid_gid`, if given) against a handle of ours;
/// what it printed.
fn run_probe_child(test: &str, handle: &FdHandle, uid_gid: Option<(u32, u32)>) -> String {
    let value = format!("{} {}", std::process::id(), hex(&handle.to_bytes()));
    let mut command = this_test(test, PROBE_CHILD, &value);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some((uid, gid)) = uid_gid {
        command.uid(uid).gid(gid);
    }
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn has_line(stdout: &str, line: &str) -> bool {
    stdout.lines().any(|l| l == line)
}

#[test]
fn an_unprivileged_child_finds_pidfd_getfd_unavailable_and_import_not_permitted() {
    const TEST: &str =
        "an_unprivileged_child_finds_pidfd_getfd_unavailable_and_import_not_permitted";
    if let Ok(value) = std::env::var(PROBE_CHILD) {
        return probe_child(&value);
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let (reader, _writer) = std::io::pipe().unwrap();
    let handle = FdHandle::export(&reader.as_fd()).unwrap();

    // The control: a child of our own uid may copy our descriptors.
    let stdout = run_probe_child(TEST, &handle, None);
    for line in [
        "child available: true",
        "child transport: Pidfd",
        "child import: ok",
    ] {
        assert!(has_line(&stdout, line), "same uid: no `{line}`: {stdout}");
    }

    if !is_root() {
        // Fails under CI=true: a missing privilege is not a pass.
        skip(TEST, "the unprivileged half needs root to drop privileges");
        return;
    }
    let stdout = run_probe_child(TEST, &handle, Some(NOBODY));
    let (pid, fd) = (std::process::id(), handle.fd.raw());
    for line in [
        "child available: false".to_owned(),
        "child transport: ScmRights".to_owned(),
        format!("child import: NotPermitted pid={pid} fd={fd}"),
    ] {
        assert!(has_line(&stdout, &line), "as nobody: no `{line}`: {stdout}");
    }
    let message = stdout
        .lines()
        .find_map(|l| l.strip_prefix("child message: "))
        .unwrap_or_else(|| panic!("no message from the child: {stdout}"));
    for fragment in [
        format!("descriptor {fd} in process {pid}"),
        "not permitted".to_owned(),
        "same user".to_owned(),
        format!("have process {pid} allow this one to trace it"),
        "prctl(PR_SET_PTRACER".to_owned(),
        "over a Unix socket with SCM_RIGHTS".to_owned(),
    ] {
        assert!(
            message.contains(&fragment),
            "{message:?} lacks {fragment:?}"
        );
    }
    // C and Python callers read it too: no remedy only Rust has.
    for rust_only in ["allow_ptracer", "Transport::"] {
        assert!(
            !message.contains(rust_only),
            "{message:?} names {rust_only:?}"
        );
    }
}

/// Whether Yama is loaded (its `ptrace_scope` exists).
fn yama_loaded() -> bool {
    std::path::Path::new(PTRACE_SCOPE).exists()
}

#[test]
fn allow_ptracer_accepts_a_pid_any_and_none() {
    // Only this process's Yama exception changes, and None puts back the default.
    let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32);
    for tracer in [
        Ptracer::Process(std::process::id()),
        Ptracer::Process(parent),
        Ptracer::Any,
        Ptracer::None,
    ] {
        if let Err(e) = allow_ptracer(tracer) {
            panic!("allow_ptracer({tracer:?}): {e:?}");
        }
    }
    if !yama_loaded() {
        println!(
            "Yama is not loaded ({PTRACE_SCOPE} absent): allow_ptracer does nothing here, \
             so only its Ok answers are tested, not their effect"
        );
    }
}

#[test]
fn allow_ptracer_refuses_a_pid_that_is_no_pid() {
    // Refused before any system call, so the same with or without Yama.
    for pid in [0, i32::MAX as u32 + 1, u32::MAX] {
        match allow_ptracer(Ptracer::Process(pid)) {
            Err(Error::ProcessGone { pid: named, reason }) => {
                assert_eq!(named, pid);
                assert_eq!(reason, "not a valid pid");
            }
            other => panic!("allow_ptracer(Process({pid})): expected ProcessGone, got {other:?}"),
        }
    }
}

/// Set in the children of [`under_yama_scope_1_allow_ptracer_lets_a_sibling_import`]:
/// `exporter` or `importer`.
const YAMA_CHILD: &str = "NODEIPC_FDPASS_TEST_YAMA_CHILD";

/// The exporter: a memfd holding "yama"; prints its handle, then obeys
/// `allow <pid>` lines on stdin until EOF.
fn yama_exporter() {
    println!();
    let file = std::fs::File::from(
        rustix::fs::memfd_create("yama", rustix::fs::MemfdFlags::CLOEXEC).unwrap(),
    );
    file.write_all_at(b"yama", 0).unwrap();
    let handle = FdHandle::export(&file.as_fd()).unwrap();
    println!("handle {}", hex(&handle.to_bytes()));
    for line in std::io::stdin().lines() {
        let line = line.unwrap();
        let pid: u32 = line.strip_prefix("allow ").unwrap().parse().unwrap();
        match allow_ptracer(Ptracer::Process(pid)) {
            Ok(()) => println!("allowed"),
            Err(e) => println!("allow failed: {e:?}"),
        }
    }
}

/// The importer: obeys `import <hex>` lines on stdin until EOF, printing what
/// the file behind the handle holds, or why it was refused.
fn yama_importer() {
    println!();
    for line in std::io::stdin().lines() {
        let line = line.unwrap();
        let handle = FdHandle::from_bytes(&unhex(line.strip_prefix("import ").unwrap())).unwrap();
        match handle.import() {
            Ok(fd) => {
                // Read at an offset: the file's own offset is shared with the exporter.
                let mut text = [0u8; 4];
                std::fs::File::from(fd).read_exact_at(&mut text, 0).unwrap();
                println!("imported {}", String::from_utf8_lossy(&text));
            }
            Err(Error::NotPermitted { .. }) => println!("refused NotPermitted"),
            Err(other) => println!("refused {other:?}"),
        }
    }
}

/// A child taking lines on stdin and answering on stdout.
struct Talker {
    child: ChildGuard,
    stdout: BufReader<ChildStdout>,
}

impl Talker {
    fn spawn(test: &str, role: &str) -> Talker {
        let mut command = this_test(test, YAMA_CHILD, role);
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        // Root could trace anyone (CAP_SYS_PTRACE): both become nobody.
        if is_root() {
            command.uid(NOBODY.0).gid(NOBODY.1);
        }
        let mut child = spawn_child(&mut command);
        let stdout = BufReader::new(child.child().stdout.take().unwrap());
        Talker { child, stdout }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.child().stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line that is not the harness's, or not empty.
    fn hear(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "child {} exited without answering", self.child.id());
            let line = line.trim_end();
            if !(line.is_empty() || line.starts_with("running ") || line.starts_with("test ")) {
                return line.to_owned();
            }
        }
    }

    fn finish(mut self) {
        drop(self.child.child().stdin.take());
        let status = self.child.wait_timeout(Duration::from_secs(20));
        assert!(status.success(), "child failed: {status}");
    }
}

#[test]
fn under_yama_scope_1_allow_ptracer_lets_a_sibling_import() {
    const TEST: &str = "under_yama_scope_1_allow_ptracer_lets_a_sibling_import";
    match std::env::var(YAMA_CHILD).as_deref() {
        Ok("exporter") => return yama_exporter(),
        Ok("importer") => return yama_importer(),
        Ok(other) => panic!("unknown role {other:?}"),
        Err(_) => {}
    }
    if !yama_loaded() {
        println!("skipped: {TEST}: Yama is not loaded ({PTRACE_SCOPE} absent)");
        return;
    }
    let scope = std::fs::read_to_string(PTRACE_SCOPE).unwrap();
    if scope.trim() != "1" {
        println!(
            "skipped: {TEST}: Yama's ptrace_scope is {}, and only 1 restricts to ancestors \
             with PR_SET_PTRACER exceptions",
            scope.trim()
        );
        return;
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let mut exporter = Talker::spawn(TEST, "exporter");
    let said = exporter.hear();
    let handle = said
        .strip_prefix("handle ")
        .unwrap_or_else(|| panic!("exporter said {said:?}"))
        .to_owned();
    // The importer is the exporter's sibling, not its ancestor.
    let mut importer = Talker::spawn(TEST, "importer");
    importer.say(&format!("import {handle}"));
    assert_eq!(
        importer.hear(),
        "refused NotPermitted",
        "before allow_ptracer"
    );
    exporter.say(&format!("allow {}", importer.child.id()));
    assert_eq!(exporter.hear(), "allowed");
    importer.say(&format!("import {handle}"));
    assert_eq!(importer.hear(), "imported yama", "after allow_ptracer");
    importer.finish();
    exporter.finish();
}
