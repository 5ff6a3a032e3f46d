//! The plain-C program `tests/c/c_api.c` drives every layer through
//! `nodeipc.h` and checks that bad arguments (null pointers, zero and
//! oversized lengths, unknown handles, handles of another type) come back
//! as codes with a message, never a crash.

use crate::common;

use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

#[test]
fn c_program_uses_every_layer_and_gets_codes_for_bad_arguments() {
    let _dog = Watchdog::new("c_api", Duration::from_secs(60));
    let dir = TempDir::new("capi-c");
    let Some(program) = common::compile("c_api.c", &dir) else {
        return;
    };
    let prefix = unique_name("capi-c");
    let mut command = std::process::Command::new(&program);
    command
        .arg(&prefix)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = spawn_child(&mut command).output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Vec<&str> = stdout
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(summary.first(), Some(&"0"), "{stdout}");
    if let Some(line) = stdout.lines().find(|l| l.starts_with("eperm skip:")) {
        nodeipc_testkit::skip("the C API's EPERM check", line);
    }
    let checks: u32 = summary.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(checks > 100, "only {checks} checks ran:\n{stdout}");
    assert!(
        shm_leftovers(&prefix).is_empty(),
        "{:?}",
        shm_leftovers(&prefix)
    );
}
