//! Names squatted by another uid, or ours with a loose mode, for the upper
//! layers: a rank group's vault, an execute channel's regions and named
//! semaphores, the group's `SCM_RIGHTS` directory. Creators get
//! `AlreadyExists` (never someone else's object), openers a refusal naming
//! the owner and mode (never a mapping of it). As root we drop to `nobody`
//! in a child to be the squatter.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions, TransportChoice};
use nodeipc_channel::{Channel, Direction, Role, SemKind};
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

fn untrusted_by_nobody(e: &nodeipc_shm::Error) -> bool {
    matches!(e, nodeipc_shm::Error::Untrusted { owner, .. } if *owner == NOBODY.0)
}

#[test]
fn a_group_name_squatted_by_another_uid_is_refused_to_creator_and_joiners() {
    let _dog = Watchdog::new("group squatted", Duration::from_secs(60));
    let name = unique_name("squat-group");
    if !as_nobody(&["shm-create", &name, "4096"]) {
        skip("a_group_name_squatted_by_another_uid", "needs root");
        return;
    }
    let options = |rank| GroupOptions::new(&name, rank, 2).timeout(Duration::from_secs(2));
    match Group::join(options(0)) {
        Err(nodeipc_barrier::Error::NameTaken { group }) => assert_eq!(group, name),
        other => panic!("rank 0: expected NameTaken, got {other:?}"),
    }
    match Group::join(options(1)) {
        Err(nodeipc_barrier::Error::Shm { source, .. }) => {
            assert!(untrusted_by_nobody(&source), "{source}")
        }
        other => panic!("rank 1: expected Untrusted, got {other:?}"),
    }
    // The squatter's object is left to its owner (or `nodeipc clean` as root).
    assert_eq!(shm_leftovers(&name).len(), 1);
    nodeipc_shm::unlink(&name).unwrap();
}

#[test]
fn a_group_vault_of_ours_with_a_loose_mode_is_refused() {
    let _dog = Watchdog::new("group loose", Duration::from_secs(60));
    let name = unique_name("loose-group");
    let rank0 = {
        let name = name.clone();
        std::thread::spawn(move || {
            Group::join(GroupOptions::new(name, 0, 2).timeout(Duration::from_secs(2))).map(drop)
        })
    };
    // Once rank 0 made it, someone of our uid loosens it.
    let region = Region::open(&name, OpenOptions::wait(256, Duration::from_secs(20))).unwrap();
    std::fs::set_permissions(format!("/dev/shm{name}"), PermissionsExt::from_mode(0o644)).unwrap();
    match Group::join(GroupOptions::new(&name, 1, 2).timeout(Duration::from_secs(2))) {
        Err(nodeipc_barrier::Error::Shm {
            source: nodeipc_shm::Error::Untrusted { mode, .. },
            ..
        }) => assert_eq!(mode, 0o644),
        other => panic!("expected Untrusted, got {other:?}"),
    }
    drop(region);
    assert!(rank0.join().unwrap().is_err(), "rank 0 met nobody");
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn channel_regions_squatted_by_another_uid_are_refused() {
    let _dog = Watchdog::new("channel squatted", Duration::from_secs(60));
    let name = unique_name("squat-chan");
    let config = Channel::builder(&name)
        .workers(1)
        .timeout(Duration::from_secs(2));
    if !as_nobody(&[
        "shm-create",
        &config.config().request_region_name(),
        "65536",
    ]) {
        skip("channel_regions_squatted_by_another_uid", "needs root");
        return;
    }
    match config.clone().create() {
        Err(nodeipc_channel::Error::Shm {
            source: nodeipc_shm::Error::AlreadyExists { name: taken },
            ..
        }) => assert_eq!(taken, config.config().request_region_name()),
        Err(other) => panic!("expected AlreadyExists, got {other}"),
        Ok(_) => panic!("a coordinator was made over a squatted name"),
    }
    match config.clone().join(0) {
        Err(nodeipc_channel::Error::Shm { source, .. }) => {
            assert!(untrusted_by_nobody(&source), "{source}")
        }
        Err(other) => panic!("expected Untrusted, got {other}"),
        Ok(_) => panic!("a worker joined a squatted region"),
    }
    // Nothing of ours was left beside the squatter's object.
    assert_eq!(
        shm_leftovers(&name),
        vec![config.config().request_region_name()[1..].to_owned()]
    );
    nodeipc_shm::unlink(&config.config().request_region_name()).unwrap();
}

#[test]
fn channel_semaphores_squatted_by_another_uid_are_refused() {
    let _dog = Watchdog::new("channel sems squatted", Duration::from_secs(60));
    let name = unique_name("squat-sems");
    let config = Channel::builder(&name)
        .workers(1)
        .sems(SemKind::Named)
        .timeout(Duration::from_secs(2));
    let squatted = config
        .config()
        .semaphore_name(Direction::Response, Role::Consume, 0);
    if !as_nobody(&["sem-create", &squatted]) {
        skip("channel_semaphores_squatted_by_another_uid", "needs root");
        return;
    }
    match config.clone().create() {
        Err(nodeipc_channel::Error::Sem {
            source: nodeipc_sem::Error::AlreadyExists { .. },
            ..
        }) => {}
        Err(other) => panic!("expected AlreadyExists, got {other}"),
        Ok(_) => panic!("a coordinator was made over a squatted semaphore"),
    }
    // What the failed coordinator had made is gone; the squatter's is not ours.
    assert_eq!(shm_leftovers(&name).len(), 1, "{:?}", shm_leftovers(&name));
    nodeipc_sem::NamedSemaphore::unlink(&squatted).unwrap();
}

#[test]
fn a_channel_region_of_ours_with_a_loose_mode_is_refused_by_workers() {
    let _dog = Watchdog::new("channel loose", Duration::from_secs(60));
    let name = unique_name("loose-chan");
    let config = Channel::builder(&name)
        .workers(1)
        .timeout(Duration::from_secs(2));
    let coordinator = config.clone().create().unwrap();
    std::fs::set_permissions(
        format!("/dev/shm{}", config.config().response_region_name()),
        PermissionsExt::from_mode(0o660),
    )
    .unwrap();
    match config.join(0) {
        Err(nodeipc_channel::Error::Shm {
            source: nodeipc_shm::Error::Untrusted { mode, .. },
            ..
        }) => assert_eq!(mode, 0o660),
        Err(other) => panic!("expected Untrusted, got {other}"),
        Ok(_) => panic!("a worker joined a region others may write"),
    }
    drop(coordinator);
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_squatted_group_socket_directory_fails_the_join_and_is_never_used() {
    let _dog = Watchdog::new("mesh squatted", Duration::from_secs(60));
    if !is_root() {
        skip("a_squatted_group_socket_directory", "needs root to chown");
        return;
    }
    let name = unique_name("squat-mesh");
    let join = |rank: u32| {
        let name = name.clone();
        std::thread::spawn(move || {
            Group::join(
                GroupOptions::new(name, rank, 2)
                    .timeout(Duration::from_secs(3))
                    .transport(TransportChoice::ScmRights),
            )
            .map(drop)
        })
    };
    let rank0 = join(0);
    // The directory's name comes from a random nonce in the 0600 vault; a
    // stranger who learnt it (here: we read it) and made the directory first...
    let vault = Region::open(&name, OpenOptions::wait(256, Duration::from_secs(20))).unwrap();
    let mut nonce = [0u8; 8];
    while {
        vault.read_at(20, &mut nonce[..4]).unwrap();
        nonce[..4] != [1, 0, 0, 0]
    } {
        std::thread::sleep(Duration::from_millis(1));
    }
    vault.read_at(40, &mut nonce).unwrap();
    let dir = std::path::PathBuf::from(format!(
        "/tmp/nodeipc-group-0-{:016x}",
        u64::from_le_bytes(nonce)
    ));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(&dir, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
    drop(vault);
    let rank1 = join(1);
    // ... gets the join refused, not our sockets.
    let (r0, r1) = (rank0.join().unwrap(), rank1.join().unwrap());
    assert!(
        matches!(r0, Err(nodeipc_barrier::Error::Io { op: "mkdir", .. })),
        "{r0:?}"
    );
    assert!(r1.is_err(), "rank 1 formed a group without rank 0");
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "a socket was bound in the squatted directory"
    );
    std::fs::remove_dir(&dir).unwrap();
    assert!(shm_leftovers(&name).is_empty());
}
