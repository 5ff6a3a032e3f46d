//! `remove_stale` removes an object only when the kernel proves nobody holds
//! it (a write lease), so users `/proc` does not show keep it too: a holder
//! the scan could not read because we ran out of descriptors, a descriptor
//! in flight in an `SCM_RIGHTS` message that no process holds, a holder the
//! scan was not given at all. Each is kept with the reason, and removed once
//! it is really abandoned.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use nodeipc_shm::{KeepReason, ProcessScan, Region, remove_stale, remove_stale_with};
use nodeipc_testkit::{FullFdTable, Watchdog, shm_leftovers, spawn_child, unique_name};
use rustix::io::Errno;

/// Set in the child: the name of the object its parent maps.
const CHILD: &str = "NODEIPC_SHM_TEST_LIST_PROOF_CHILD";
const TEST: &str = "regression_out_of_descriptors_a_held_object_is_kept_and_says_why";

fn child(name: &str) {
    println!(); // our lines start after the harness's "test … ..."
    // One free slot: /dev/shm can be listed and the lease tried, but the
    // scan of /proc fails at once. None: not even /dev/shm can be listed.
    for free in [1, 0] {
        let table = FullFdTable::fill(free);
        let done = remove_stale(name);
        drop(table);
        match done {
            Ok(done) => {
                for object in &done.removed {
                    println!("{free} free: removed {}", object.name);
                }
                for (object, reason) in &done.kept {
                    println!("{free} free: kept {} ({reason})", object.name);
                }
            }
            Err(e) => println!("{free} free: error: {e}"),
        }
    }
}

#[test]
fn regression_out_of_descriptors_a_held_object_is_kept_and_says_why() {
    if let Ok(name) = std::env::var(CHILD) {
        return child(&name);
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let name = unique_name("proof-emfile");
    let live = Region::create(&name, 4096).unwrap();
    let out = spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), TEST))
            .env(CHILD, &name),
    )
    .output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed: {context}");
    assert!(
        !shm_leftovers(&name).is_empty(),
        "removed while mapped: {context}"
    );
    assert!(!stdout.contains("removed"), "{context}");
    let emfile = std::io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()).to_string();
    let kept = |free: usize| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{free} free: kept {name} (in use or unknown: ")))
            .unwrap_or_else(|| panic!("{free} free: not kept as in use or unknown: {context}"))
    };
    let one = kept(1);
    assert!(
        one.contains("the kernel refused a write lease")
            && one.contains("cannot read /proc/")
            && one.contains(&emfile),
        "{one}"
    );
    let none = format!("0 free: error: read_dir failed for /dev/shm: {emfile}");
    assert!(
        stdout.lines().any(|l| l == none),
        "expected `{none}`: {context}"
    );
    drop(live);
    assert!(shm_leftovers(&name).is_empty());
}

/// Sends `file`'s descriptor over `socket` (`SCM_RIGHTS`).
fn send_fd(socket: &UnixDatagram, file: &std::fs::File) {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let fds = [std::os::fd::AsFd::as_fd(file)];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let sent = sendmsg(
        socket,
        &[std::io::IoSlice::new(b"x")],
        &mut control,
        SendFlags::empty(),
    )
    .unwrap();
    assert_eq!(sent, 1);
}

#[test]
fn regression_a_descriptor_in_flight_keeps_the_object() {
    let _dog = Watchdog::new("descriptor in flight", Duration::from_secs(30));
    let name = unique_name("proof-flight");
    let region = Region::create(&name, 4096).unwrap();
    region.persist();
    drop(region);
    // The only reference: a descriptor in a message nobody has received.
    let (sender, receiver) = UnixDatagram::pair().unwrap();
    let path = format!("/dev/shm{name}");
    let file = std::fs::File::open(&path).unwrap();
    send_fd(&sender, &file);
    drop(file);
    let done = remove_stale(&name).unwrap();
    assert!(done.removed.is_empty(), "{done:?}");
    assert_eq!(done.kept.len(), 1, "{done:?}");
    assert!(
        matches!(done.kept[0].1, KeepReason::HeldUnseen { .. }),
        "{done:?}"
    );
    assert!(
        done.kept[0]
            .1
            .to_string()
            .starts_with("in use or unknown: "),
        "{}",
        done.kept[0].1
    );
    // Received and closed: abandoned now.
    drop(receiver);
    drop(sender);
    let done = remove_stale(&name).unwrap();
    assert_eq!(done.removed.len(), 1, "{done:?}");
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_holder_no_scan_saw_keeps_the_object_and_an_abandoned_one_goes() {
    let prefix = unique_name("proof-blind");
    let held = Region::create(&format!("{prefix}-held"), 4096).unwrap();
    let abandoned = Region::create(&format!("{prefix}-gone"), 4096).unwrap();
    abandoned.persist();
    drop(abandoned);
    // A scan that saw no process at all: the lease alone decides.
    let done = remove_stale_with(&prefix, &ProcessScan::default()).unwrap();
    assert_eq!(done.removed.len(), 1, "{done:?}");
    assert_eq!(done.removed[0].name, format!("{prefix}-gone"));
    assert_eq!(done.kept.len(), 1, "{done:?}");
    assert_eq!(done.kept[0].0.name, format!("{prefix}-held"));
    assert_eq!(done.kept[0].1, KeepReason::HeldUnseen { gap: None });
    drop(held);
    assert!(shm_leftovers(&prefix).is_empty());
}
