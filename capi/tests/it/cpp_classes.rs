//! nodeipc.hpp's RAII classes (tests/c/hpp_classes.cpp): Region and
//! Semaphore over every constructor, moves, and nodeipc::Error's codes;
//! names with a NUL byte refused by every class, and every std::chrono
//! duration converted without overflow (saturating, NaN refused); the
//! Coordinator's recv_aggregated keeping what its callable picks, and
//! rethrowing what it throws.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

#[test]
fn cpp_raii_classes_work_and_throw_codes() {
    let _dog = Watchdog::new(
        "cpp_raii_classes_work_and_throw_codes",
        Duration::from_secs(60),
    );
    let dir = TempDir::new("capi-hpp");
    let Some(program) = common::compile("hpp_classes.cpp", &dir) else {
        return;
    };
    let prefix = unique_name("capi-hpp");
    let mut command = Command::new(&program);
    command
        .arg(&prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Vec<&str> = stdout
        .lines()
        .last()
        .unwrap_or_default()
        .split(' ')
        .collect();
    assert_eq!(summary.first(), Some(&"0"), "{stdout}");
    let checks: u32 = summary.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(checks >= 50, "{stdout}");
    assert!(
        shm_leftovers(&prefix).is_empty(),
        "{:?}",
        shm_leftovers(&prefix)
    );
}

#[test]
fn cpp_response_thread_replies_in_order_and_catches_exceptions() {
    let _dog = Watchdog::new(
        "cpp_response_thread_replies_in_order_and_catches_exceptions",
        Duration::from_secs(120),
    );
    let dir = TempDir::new("capi-hpp-thread");
    let Some(program) = common::compile("response_thread.cpp", &dir) else {
        return;
    };
    let socket = dir.join("logon.sock");
    let mut command = Command::new(&program);
    command
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let summary: Vec<&str> = stdout
        .lines()
        .last()
        .unwrap_or_default()
        .split(' ')
        .collect();
    assert_eq!(summary.first(), Some(&"0"), "{stdout}");
    let checks: u32 = summary.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(checks >= 300, "{stdout}");
    // log_and_continue said what it caught.
    assert!(
        stderr.contains("response function threw on request") && stderr.contains("even request"),
        "{stderr}"
    );
}
