//! `nodeipc bench` as other programs drive it: the JSON rows carry the keys
//! the issues name, and the table prints the machine it ran on.

use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{Watchdog, spawn_child};

fn bench(args: &[&str]) -> String {
    let out = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .arg("bench")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn barrier_json_has_bench_ranks_and_ns_per_op() {
    let _dog = Watchdog::new("bench barrier json", Duration::from_secs(150));
    let out = bench(&[
        "--quick", "--json", "barrier", "--ranks", "2", "--iters", "500",
    ]);
    let line = out.lines().next().expect("one row");
    for key in [
        "\"bench\":\"barrier\"",
        "\"ranks\":2",
        "\"iters\":500",
        "\"ns_per_op\":",
        "\"pthread_barrier (process-shared)\"",
        "\"ratio\":",
    ] {
        assert!(line.contains(key), "{key} missing from {line}");
    }
}

#[test]
fn channel_json_has_bench_workers_payload_and_ns_per_op() {
    let _dog = Watchdog::new("bench channel json", Duration::from_secs(150));
    let out = bench(&[
        "--quick",
        "--json",
        "channel",
        "--workers",
        "1",
        "--payload",
        "128",
        "--iters",
        "200",
    ]);
    let line = out.lines().next().expect("one row");
    for key in [
        "\"bench\":\"channel\"",
        "\"workers\":1",
        "\"payload\":128",
        "\"ns_per_op\":",
        "\"glibc-sem-lockstep\"",
        "\"unix-socket\"",
    ] {
        assert!(line.contains(key), "{key} missing from {line}");
    }
}

#[test]
fn the_table_names_the_machine_and_every_implementation() {
    let _dog = Watchdog::new("bench table", Duration::from_secs(150));
    let out = bench(&["--quick", "fdpass", "--fds", "4"]);
    assert!(out.starts_with("machine: "), "{out}");
    assert!(out.contains("cores") && out.contains("Linux"), "{out}");
    assert!(
        out.contains("nodeipc send_fds/recv_fds") && out.contains("bare sendmsg/recvmsg"),
        "{out}"
    );
}
