//! The fork generation, and a region copied into a forked child: the
//! child's drop unmaps and closes its copy and leaves the name to the parent
//! that made it.

use std::time::Duration;

use nodeipc_shm::{ForkGeneration, OpenOptions, Region};
use nodeipc_testkit::{Watchdog, fork_child, shm_leftovers, unique_name};

#[test]
fn a_forked_child_sees_its_parents_generation_as_forked() {
    let _dog = Watchdog::new("fork generation", Duration::from_secs(60));
    let born = ForkGeneration::current();
    assert!(!born.is_forked());
    assert_eq!(born.pid(), std::process::id());
    let code = fork_child("generation", Duration::from_secs(20), || {
        let here = ForkGeneration::current();
        // The parent's handle is forked; a handle made here is not, until
        // this child forks in turn.
        let grandchild = fork_child("grandchild", Duration::from_secs(10), || {
            i32::from(!(born.is_forked() && here.is_forked()))
        });
        let forked = born.check("the parent's region").unwrap_err();
        let named = forked.to_string().contains("the parent's region")
            && forked.parent == born.pid()
            && forked.child == std::process::id();
        i32::from(!(born.is_forked() && !here.is_forked() && grandchild == 0 && named))
    });
    assert_eq!(code, 0);
    assert!(!born.is_forked(), "the parent took itself for a child");
}

#[test]
fn regression_a_region_dropped_in_a_forked_child_leaves_the_parents_name() {
    let _dog = Watchdog::new("region dropped in a forked child", Duration::from_secs(60));
    let name = unique_name("fork-region");
    // In an `Option` the child takes from: the parent's stays untouched.
    let mut region = Some(Region::create(&name, 4096).unwrap());
    region.as_ref().unwrap().write_at(0, b"parent").unwrap();
    let code = fork_child("region", Duration::from_secs(20), || {
        // The child's copy maps the same memory; dropping it must not
        // remove the parent's name.
        let mut seen = [0u8; 6];
        region.as_ref().unwrap().read_at(0, &mut seen).unwrap();
        drop(region.take());
        i32::from(&seen != b"parent")
    });
    assert_eq!(code, 0, "the child did not see the parent's bytes");
    // The name is still there for peers to open, and the parent removes it.
    let peer = Region::open(&name, OpenOptions::default())
        .expect("the child's drop removed the parent's name");
    let mut seen = [0u8; 6];
    peer.read_at(0, &mut seen).unwrap();
    assert_eq!(&seen, b"parent");
    drop(peer);
    drop(region);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
