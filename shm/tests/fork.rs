//! A region copied into a forked child: the child's drop unmaps and closes
//! its copy and leaves the name to the parent that made it.

use std::time::Duration;

use nodeipc_shm::{OpenOptions, Region};
use nodeipc_testkit::{Watchdog, fork_child, shm_leftovers, unique_name};

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
