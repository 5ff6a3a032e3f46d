//! `nodeipc` with a full `/dev/shm`: `shm create` and the demo fail at once
//! with one line saying there is no space, never with a `SIGBUS` later, and
//! leave nothing behind.
//!
//! The test re-runs itself in a child process with a mount namespace of its
//! own and a 64 KiB tmpfs over `/dev/shm`; the `nodeipc` processes it starts
//! inherit that namespace. The host's `/dev/shm` is never touched.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nodeipc_testkit::{Watchdog, in_small_dev_shm, is_root, skip, spawn_child};

/// Set in the child: it runs in the private namespace.
const CHILD: &str = "NODEIPC_CLI_TEST_IN_SMALL_TMPFS";
const TEST: &str = "regression_a_full_dev_shm_fails_shm_create_and_the_demo_cleanly";

#[test]
fn regression_a_full_dev_shm_fails_shm_create_and_the_demo_cleanly() {
    if std::env::var_os(CHILD).is_some() {
        in_the_small_tmpfs();
        return;
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(120));
    if !is_root() {
        skip(TEST, "needs root (CAP_SYS_ADMIN) for a mount namespace");
        return;
    }
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            &nodeipc_testkit::test_path(module_path!(), TEST),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(in_small_dev_shm(&mut command)).output_timeout(Duration::from_secs(100));
    let context = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed: {context}");
    assert!(
        context.contains("child: every case passed"),
        "the child did not run its cases: {context}"
    );
}

fn nodeipc(args: &[&str], input: &[u8]) -> (Output, u32) {
    let mut guard = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let pid = guard.id();
    let mut stdin = guard.child().stdin.take().unwrap();
    // The command may refuse (and exit) before reading: `shm write` of a
    // region that does not exist. A closed pipe is fine; the checks are on
    // its exit and stderr.
    if let Err(e) = stdin.write_all(input) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(stdin);
    (guard.output_timeout(Duration::from_secs(60)), pid)
}

/// Exit 0, or (with `refusal`) a plain failure: no signal, one line on
/// stderr holding every fragment.
fn check(args: &[&str], out: &Output, refusal: Option<&[&str]>) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        None,
        "nodeipc {args:?} died of a signal (SIGBUS is 7): {stderr}"
    );
    let Some(fragments) = refusal else {
        assert!(out.status.success(), "nodeipc {args:?}: {stderr}");
        return;
    };
    assert!(!out.status.success(), "nodeipc {args:?} succeeded");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    for fragment in fragments {
        assert!(stderr.contains(fragment), "{stderr:?} lacks {fragment:?}");
    }
}

fn dev_shm() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The cases, in the child's namespace.
fn in_the_small_tmpfs() {
    println!();
    let vfs = rustix::fs::statvfs("/dev/shm").unwrap();
    assert_eq!(
        vfs.f_blocks * vfs.f_frsize,
        64 << 10,
        "not the private tmpfs"
    );

    // Larger than the whole tmpfs.
    let big = "/nodeipc-test-cli-full-big";
    let args = ["shm", "create", big, "--size", "1048576"];
    check(
        &args,
        &nodeipc(&args, b"").0,
        Some(&[big, "1048576", "no space"]),
    );
    assert!(dev_shm().is_empty(), "{:?}", dev_shm());

    // What fits works end to end.
    let fits = "/nodeipc-test-cli-full-fits";
    for (args, input) in [
        (&["shm", "create", fits, "--size", "8192"][..], &b""[..]),
        (&["shm", "write", fits], &[0x5A; 8192][..]),
        (&["shm", "unlink", fits], b""),
    ] {
        check(args, &nodeipc(args, input).0, None);
    }

    // A full tmpfs (what a crashed run leaves): the region that used to be
    // made, and to kill `shm write` with SIGBUS, is refused by `shm create`.
    let filler = "/dev/shm/nodeipc-test-cli-full-filler";
    let mut file = std::fs::File::create(filler).unwrap();
    while file.write_all(&[1; 4096]).is_ok() {}
    drop(file);
    let late = "/nodeipc-test-cli-full-late";
    let args = ["shm", "create", late, "--size", "8192"];
    check(
        &args,
        &nodeipc(&args, b"").0,
        Some(&[late, "8192", "no space"]),
    );
    let args = ["shm", "write", late];
    check(
        &args,
        &nodeipc(&args, b"hello").0,
        Some(&[late, "does not exist"]),
    );
    assert_eq!(dev_shm(), ["nodeipc-test-cli-full-filler"]);

    // The demo: its group vault is refused, it says so in one line, and its
    // private directory goes with it.
    let args = ["demo", "--workers", "1", "--requests", "10"];
    let (out, pid) = nodeipc(&args, b"");
    check(&args, &out, Some(&["group", "no space"]));
    assert_eq!(dev_shm(), ["nodeipc-test-cli-full-filler"]);
    let demo_dirs: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("nodeipc-demo-{pid}-")))
        .collect();
    assert!(demo_dirs.is_empty(), "the demo left {demo_dirs:?}");

    std::fs::remove_file(filler).unwrap();
    println!("child: every case passed");
}
