//! A rank group whose creator (rank 0) is killed while the others are still
//! joining leaves nothing under `/dev/shm`: the joiners that find it dead
//! (or never registered) remove the vault's name on their way out.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeipc_barrier::{Error, Group, GroupOptions};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, shm_leftovers, spawn_child, unique_name};

fn wait_until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn regression_a_vault_whose_creator_was_killed_mid_join_is_removed_by_the_joiner() {
    let _dog = Watchdog::new("creator killed mid join", Duration::from_secs(60));
    let name = unique_name("vault-orphan");
    // Rank 0 of three creates the vault, registers, and waits for ranks 1 and 2.
    let mut rank0 = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_rank"))
            .args(["hang-after", &name, "0", "3", "pidfd", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let probe = name.clone();
    wait_until(
        Duration::from_secs(20),
        "rank 0 never created the vault",
        || !shm_leftovers(&probe).is_empty(),
    );
    // Let it register its pid (the joiner must find a registered, dead rank 0).
    std::thread::sleep(Duration::from_millis(100));
    rank0.kill();
    let started = Instant::now();
    let joined = Group::join(GroupOptions::new(&name, 1, 3).timeout(Duration::from_secs(10)));
    match joined {
        Err(Error::PeerDied { rank: 0, .. }) => {}
        other => panic!("expected PeerDied of rank 0, got {other:?}"),
    }
    // Seen dead, not waited on for the 10 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn regression_a_vault_whose_creator_never_registered_is_removed_after_the_timeout() {
    let _dog = Watchdog::new("creator never registered", Duration::from_secs(60));
    let name = unique_name("vault-unregistered");
    // A creator that published the header and died before registering: the
    // vault as it was left (created 0600, header written, name kept).
    let left = Region::create(&name, 4096).unwrap();
    left.write_at(0, b"NIPCVLT1").unwrap();
    for (at, value) in [(8usize, 1u32), (12, 2), (16, 64), (20, 1)] {
        left.write_at(at, &value.to_le_bytes()).unwrap();
    }
    left.persist();
    drop(left);
    let joined = Group::join(GroupOptions::new(&name, 1, 2).timeout(Duration::from_millis(200)));
    assert!(
        matches!(joined, Err(Error::Timeout { rank: 1, .. })),
        "{joined:?}"
    );
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn a_joiner_of_another_shape_leaves_the_vault_of_a_live_group_alone() {
    let _dog = Watchdog::new("misfit joiner", Duration::from_secs(60));
    let name = unique_name("vault-misfit");
    let rank0 = {
        let name = name.clone();
        std::thread::spawn(move || {
            Group::join(GroupOptions::new(name, 0, 2).timeout(Duration::from_secs(20)))
                .map(|g| g.world_size())
        })
    };
    let probe = name.clone();
    wait_until(Duration::from_secs(20), "no vault", || {
        !shm_leftovers(&probe).is_empty()
    });
    let misfit = Group::join(GroupOptions::new(&name, 1, 3).timeout(Duration::from_secs(5)));
    assert!(
        matches!(
            misfit,
            Err(Error::Mismatch {
                what: "world size",
                ours: 3,
                theirs: 2,
                ..
            })
        ),
        "{misfit:?}"
    );
    assert!(
        !shm_leftovers(&name).is_empty(),
        "a misfit removed a live group's vault"
    );
    let fitting = Group::join(GroupOptions::new(&name, 1, 2).timeout(Duration::from_secs(20)));
    assert!(fitting.is_ok(), "{fitting:?}");
    assert_eq!(rank0.join().unwrap().unwrap(), 2);
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn regression_a_vault_whose_creator_died_before_sizing_it_is_removed_after_the_timeout() {
    let _dog = Watchdog::new("creator died mid-create", Duration::from_secs(60));
    let name = unique_name("vault-unsized");
    // What `shm_open(O_CREAT|O_EXCL)` leaves when its caller is killed
    // before `ftruncate`: an empty object of ours under the name.
    let path = format!("/dev/shm{name}");
    std::fs::File::create(&path).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let joined = Group::join(GroupOptions::new(&name, 1, 2).timeout(Duration::from_millis(200)));
    assert!(
        matches!(joined, Err(Error::Timeout { rank: 1, .. })),
        "{joined:?}"
    );
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

/// A registered rank killed and not yet reaped (a zombie: its pid and start
/// time unchanged) is dead on the first look of a rank still joining: its
/// join ends with `PeerDied` at once (it once took the zombie for alive and
/// waited out its whole timeout for the missing rank).
#[test]
fn regression_a_registered_rank_killed_and_not_yet_reaped_is_dead_at_once() {
    let _dog = Watchdog::new("registered rank, zombie", Duration::from_secs(60));
    let name = unique_name("vault-zombie");
    // Rank 0 of three creates the vault, registers, and waits for ranks 1 and 2.
    let mut rank0 = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_rank"))
            .args(["hang-after", &name, "0", "3", "pidfd", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let pid = rank0.id();
    let probe = name.clone();
    wait_until(
        Duration::from_secs(20),
        "rank 0 never created the vault",
        || !shm_leftovers(&probe).is_empty(),
    );
    // Its registration: rank 0's entry (`barrier/src/vault.rs`: entries at
    // 768, the pid at +8) names it.
    let vault = Region::open(
        &name,
        nodeipc_shm::OpenOptions::wait(1024, Duration::from_secs(10)),
    )
    .unwrap();
    let registered = vault.view::<std::sync::atomic::AtomicU32>(768 + 8).unwrap();
    wait_until(Duration::from_secs(20), "rank 0 never registered", || {
        registered.load(std::sync::atomic::Ordering::Acquire) == pid
    });
    drop(vault);
    rank0.kill_unreaped(Duration::from_secs(10));
    let started = Instant::now();
    let joined = Group::join(GroupOptions::new(&name, 1, 3).timeout(Duration::from_secs(10)));
    let waited = started.elapsed();
    match joined {
        Err(Error::PeerDied { rank: 0, .. }) => {}
        other => panic!("expected PeerDied of rank 0 after {waited:?}, got {other:?}"),
    }
    // Far below the join's 10 s: the zombie was not waited for.
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    drop(rank0);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
