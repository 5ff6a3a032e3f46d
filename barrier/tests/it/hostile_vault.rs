//! A vault another process wrote, met by a joining rank: every header field
//! that does not fit is refused by name, a slot length past its slot is
//! `Corrupt`, a descriptor handle naming another process is refused, and
//! no counter a peer left can make a rank panic; a header rank 0 never
//! published times the join out, naming that wait.
//!
//! The test writes the vault itself, as a (hostile) rank 0 would: this
//! process plays rank 0's registered process, so the join goes through
//! to the collectives.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nodeipc_barrier::{Error, Group, GroupOptions, TransportChoice};
use nodeipc_fdpass::{FdHandle, process_start_time};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, shm_leftovers, spawn_child, unique_name};

// Where things are in a vault (`src/vault.rs`).
const VERSION: usize = 8;
const WORLD: usize = 12;
const SLOT: usize = 16;
const INIT: usize = 20;
const JOINED: usize = 24;
const COUNT: usize = 256;
const RANKS: usize = 768;
/// World 2, 64-byte slots: the data slots start here, 72 bytes apart.
const DATA: usize = 832;
const DATA_STRIDE: usize = 72;
/// ... and the descriptor handle slots here, 32 bytes apart.
const HANDLES: usize = 1152;
const SIZE: usize = 1280;

/// A vault for 2 ranks as rank 0 leaves it once registered, this process
/// standing in for rank 0's process.
fn vault(name: &str) -> Region {
    let region = Region::create(name, SIZE).unwrap();
    region.write_at(0, b"NIPCVLT1").unwrap();
    for (at, value) in [
        (VERSION, 1u32),
        (WORLD, 2),
        (SLOT, 64),
        (INIT, 1),
        (JOINED, 1),
    ] {
        region.write_at(at, &value.to_le_bytes()).unwrap();
    }
    let start = process_start_time(std::process::id()).unwrap();
    region.write_at(RANKS, &start.to_le_bytes()).unwrap();
    region
        .write_at(RANKS + 8, &std::process::id().to_le_bytes())
        .unwrap();
    // Joined, probed, may use pidfd_getfd.
    region.write_at(RANKS + 12, &13u32.to_le_bytes()).unwrap();
    // Rank 0 is already waiting at the barrier the join ends with.
    region.write_at(COUNT, &1u32.to_le_bytes()).unwrap();
    region
}

fn join(name: &str) -> nodeipc_barrier::Result<Group> {
    Group::join(
        GroupOptions::new(name, 1, 2)
            .timeout(Duration::from_millis(300))
            .transport(TransportChoice::Pidfd),
    )
}

/// Rank 0 arrives at the next barrier.
fn rank0_arrives(region: &Region) {
    region
        .view::<AtomicU32>(COUNT)
        .unwrap()
        .fetch_add(1, Ordering::AcqRel);
}

#[test]
fn each_header_field_that_does_not_fit_is_refused_by_name() {
    let _dog = Watchdog::new("vault fields", Duration::from_secs(60));
    let cases: [(&str, usize, u32, &str); 3] = [
        ("version", VERSION, 2, "layout version"),
        ("world", WORLD, 3, "world size"),
        ("slot", SLOT, 128, "slot size"),
    ];
    for (tag, at, value, field) in cases {
        let name = unique_name(&format!("hostile-vault-{tag}"));
        let region = vault(&name);
        region.write_at(at, &value.to_le_bytes()).unwrap();
        match join(&name) {
            Err(Error::Mismatch { what, theirs, .. }) => {
                assert_eq!(what, field);
                assert_eq!(theirs, u64::from(value));
            }
            other => panic!("{tag}: expected Mismatch, got {other:?}"),
        }
    }
    let name = unique_name("hostile-vault-magic");
    let region = vault(&name);
    region.write_at(0, b"NOTAVLT!").unwrap();
    match join(&name) {
        Err(Error::NotAVault { magic, .. }) => assert_eq!(&magic.to_le_bytes(), b"NOTAVLT!"),
        other => panic!("expected NotAVault, got {other:?}"),
    }
    // A vault smaller than its header says.
    let name = unique_name("hostile-vault-size");
    let small = Region::create(&name, 1024).unwrap();
    small.write_at(0, b"NIPCVLT1").unwrap();
    for (at, value) in [(VERSION, 1u32), (WORLD, 2), (SLOT, 64), (INIT, 1)] {
        small.write_at(at, &value.to_le_bytes()).unwrap();
    }
    match join(&name) {
        Err(Error::Mismatch {
            what, ours, theirs, ..
        }) => {
            assert_eq!(what, "vault size");
            assert_eq!((ours, theirs), (SIZE as u64, 1024));
        }
        other => panic!("expected Mismatch of the vault size, got {other:?}"),
    }
}

#[test]
fn a_crafted_vault_joins_and_an_honest_all_gather_works() {
    let _dog = Watchdog::new("crafted vault", Duration::from_secs(60));
    let name = unique_name("hostile-vault-ok");
    let region = vault(&name);
    let mut group = join(&name).expect("the crafted vault is a valid one");
    assert!(
        shm_leftovers(&name).is_empty(),
        "the joiner removes the name"
    );
    region.write_at(DATA + 8, b"from rank 0").unwrap();
    region.write_at(DATA, &11u64.to_le_bytes()).unwrap();
    rank0_arrives(&region);
    let all = group.all_gather(b"from rank 1").unwrap();
    assert_eq!(all, vec![b"from rank 0".to_vec(), b"from rank 1".to_vec()]);
}

#[test]
fn a_slot_length_past_the_slot_is_corrupt_never_a_read_past_it() {
    let _dog = Watchdog::new("slot length", Duration::from_secs(60));
    for len in [65u64, 72, 1 << 40, u64::MAX] {
        let name = unique_name("hostile-vault-slot");
        let region = vault(&name);
        let mut group = join(&name).unwrap();
        region.write_at(DATA, &len.to_le_bytes()).unwrap();
        rank0_arrives(&region);
        match group.all_gather(b"mine") {
            Err(Error::Corrupt {
                rank: 0,
                len: claimed,
                slot_size: 64,
                ..
            }) => assert_eq!(claimed, len),
            other => panic!("length {len}: expected Corrupt, got {other:?}"),
        }
        // Rank 1's own slot is the next one; nothing of it was disturbed.
        let mut own = [0u8; 4];
        region.read_at(DATA + DATA_STRIDE + 8, &mut own).unwrap();
        assert_eq!(&own, b"mine");
    }
}

#[test]
fn a_descriptor_handle_naming_another_process_is_refused() {
    let _dog = Watchdog::new("handle of another pid", Duration::from_secs(60));
    let mut bystander = spawn_child(std::process::Command::new("sleep").arg("30"));
    let name = unique_name("hostile-vault-handle");
    let region = vault(&name);
    let mut group = join(&name).unwrap();
    // Rank 0's handle names the bystander's descriptor 0, not rank 0's process.
    let handle = FdHandle {
        pid: bystander.id(),
        fd: nodeipc_fdpass::ForeignFd::new(0),
        start_time: process_start_time(bystander.id()).unwrap(),
    };
    region.write_at(HANDLES, &handle.to_bytes()).unwrap();
    rank0_arrives(&region);
    let memfd = Region::anonymous(64).unwrap();
    match group.exchange_fds(memfd.as_fd()) {
        Err(Error::Protocol { reason, .. }) => {
            assert!(reason.contains("not its registered pid"), "{reason}")
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
    assert!(bystander.child().try_wait().unwrap().is_none());
    // Garbage in the handle slot is refused naming what is wrong.
    let name = unique_name("hostile-vault-handle2");
    let region = vault(&name);
    let mut group = join(&name).unwrap();
    region.write_at(HANDLES, b"NIFH\x09\x00").unwrap();
    rank0_arrives(&region);
    match group.exchange_fds(memfd.as_fd()) {
        Err(Error::Protocol { reason, .. }) => {
            assert!(reason.contains("layout version"), "{reason}")
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[test]
fn regression_a_barrier_count_left_at_its_maximum_does_not_panic() {
    let _dog = Watchdog::new("count at max", Duration::from_secs(60));
    let name = unique_name("hostile-vault-count");
    let region = vault(&name);
    region.write_at(COUNT, &u32::MAX.to_le_bytes()).unwrap();
    match join(&name) {
        // The count wraps to an arrival that completes nobody's barrier.
        Err(Error::Timeout { op: "barrier", .. }) => {}
        other => panic!("expected a barrier Timeout, got {other:?}"),
    }
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_poison_word_naming_no_rank_is_reported_not_trusted() {
    let _dog = Watchdog::new("poison word", Duration::from_secs(60));
    let name = unique_name("hostile-vault-poison");
    let region = vault(&name);
    let mut group = join(&name).unwrap();
    // Poisoned "by rank 4 000 000 000, which died" (cause 1): no such rank.
    region
        .write_at(28, &4_000_000_001u32.to_le_bytes())
        .unwrap();
    region.write_at(32, &1u32.to_le_bytes()).unwrap();
    match group.all_gather(b"x") {
        Err(Error::Poisoned { rank, .. }) => assert_eq!(rank, 4_000_000_000),
        other => panic!("expected Poisoned, got {other:?}"),
    }
}

#[test]
fn a_poison_cause_this_version_does_not_know_is_named_not_taken_for_a_timeout() {
    let _dog = Watchdog::new("unknown poison cause", Duration::from_secs(60));
    let name = unique_name("hostile-vault-cause");
    let region = vault(&name);
    let mut group = join(&name).unwrap();
    // Poisoned by rank 0 (word 1) with cause 99, which no version writes.
    region.write_at(28, &1u32.to_le_bytes()).unwrap();
    region.write_at(32, &99u32.to_le_bytes()).unwrap();
    match group.all_gather(b"x") {
        Err(error @ Error::Poisoned { rank: 0, .. }) => {
            let text = error.to_string();
            assert!(text.contains("unknown cause 99"), "{text}");
            assert!(!text.contains("timed out"), "{text}");
            assert!(text.contains(&name), "{text}");
        }
        other => panic!("expected Poisoned with an unknown cause, got {other:?}"),
    }
}

#[test]
fn a_header_never_published_times_out_the_join_naming_that_wait() {
    let _dog = Watchdog::new("header never published", Duration::from_secs(60));
    let name = unique_name("hostile-vault-unpublished");
    // Sized and 0600, but rank 0 never stored `init`: it died writing the header.
    let region = Region::create(&name, SIZE).unwrap();
    let started = Instant::now();
    match join(&name) {
        Err(Error::Timeout {
            op: "join (waiting for rank 0 to publish the vault)",
            rank: 1,
            waited,
            arrived: 0,
            expected: 2,
            ..
        }) => assert!(waited >= Duration::from_millis(300), "{waited:?}"),
        other => panic!("expected the header wait to time out, got {other:?}"),
    }
    // The pauses stop at the timeout: no sleep runs far past it (a 300 ms
    // timeout; the bound only leaves room for a loaded machine).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A dead creator cannot remove its name: the joiner did.
    assert!(shm_leftovers(&name).is_empty());
    drop(region);
}
