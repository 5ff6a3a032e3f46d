//! Names squatted by someone else are refused. As root we drop to `nobody`
//! in a child to be that someone else.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nodeipc_sem::NamedSemaphore;
use nodeipc_shm::{OpenOptions, Region};
use nodeipc_testkit::{NOBODY, Watchdog, is_root, shm_leftovers, skip, spawn_child, unique_name};

/// Runs the peer as `nobody`; `false` if we cannot (not root).
fn as_nobody(args: &[&str]) -> bool {
    if !is_root() {
        return false;
    }
    let status = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_peer"))
            .args(args)
            .uid(NOBODY.0)
            .gid(NOBODY.1),
    )
    .wait_timeout(Duration::from_secs(20));
    assert!(status.success(), "peer as nobody failed: {args:?}");
    true
}

#[test]
fn a_region_created_by_another_uid_is_refused_naming_owner_and_mode() {
    let _dog = Watchdog::new("region squatted", Duration::from_secs(30));
    let name = unique_name("squat");
    if !as_nobody(&["shm-create", &name, "4096"]) {
        skip(
            "a_region_created_by_another_uid_is_refused",
            "needs root to drop privileges",
        );
        return;
    }
    let err = Region::open(&name, OpenOptions::wait(1, Duration::from_secs(2))).unwrap_err();
    nodeipc_shm::unlink(&name).unwrap();
    let message = err.to_string();
    match err {
        nodeipc_shm::Error::Untrusted { owner, mode, .. } => {
            assert_eq!((owner, mode), (NOBODY.0, 0o600));
            assert!(
                message.contains("65534") && message.contains(&name),
                "{message}"
            );
        }
        other => panic!("expected Untrusted, got {other}"),
    }
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_semaphore_created_by_another_uid_is_refused() {
    let _dog = Watchdog::new("semaphore squatted", Duration::from_secs(30));
    let name = unique_name("sem-squat");
    if !as_nobody(&["sem-create", &name]) {
        skip(
            "a_semaphore_created_by_another_uid_is_refused",
            "needs root to drop privileges",
        );
        return;
    }
    let err = NamedSemaphore::open(&name).unwrap_err();
    NamedSemaphore::unlink(&name).unwrap();
    assert!(
        matches!(err, nodeipc_sem::Error::Untrusted { owner, .. } if owner == NOBODY.0),
        "{err}"
    );
}

#[test]
fn a_region_with_mode_0644_is_refused_even_when_ours() {
    let name = unique_name("loose");
    let region = Region::create(&name, 4096).unwrap();
    std::fs::set_permissions(
        format!("/dev/shm{name}"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    assert!(matches!(
        Region::open(&name, OpenOptions::default()),
        Err(nodeipc_shm::Error::Untrusted { mode: 0o644, .. })
    ));
    drop(region);
}

#[test]
fn an_unprivileged_user_cannot_open_our_region() {
    let _dog = Watchdog::new("unprivileged open", Duration::from_secs(30));
    let name = unique_name("private");
    let _region = Region::create(&name, 4096).unwrap();
    if !is_root() {
        skip(
            "an_unprivileged_user_cannot_open_our_region",
            "needs root to drop privileges",
        );
        return;
    }
    let out = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_peer"))
            .args(["shm-read", &name, "0", "1"])
            .uid(NOBODY.0)
            .gid(NOBODY.1)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(20));
    assert!(!out.status.success(), "nobody opened a 0600 region of root");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing") && stderr.contains("owner uid 0"),
        "{stderr}"
    );
}
