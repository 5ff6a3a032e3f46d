//! `list`, `plan_cleanup` and `remove_stale` against real objects.

use nodeipc_shm::{KeepReason, ObjectKind, Region, list, plan_cleanup, remove_stale};
use nodeipc_testkit::{shm_leftovers, unique_name};

#[test]
fn list_reports_owner_size_mode_and_users() {
    let name = unique_name("list");
    let region = Region::create(&name, 12288).unwrap();
    let found = list(&name).unwrap();
    assert_eq!(found.len(), 1);
    let object = &found[0];
    assert_eq!(object.name, name);
    assert_eq!(object.kind, ObjectKind::Region);
    assert_eq!(object.size, 12288);
    assert_eq!(object.mode, 0o600);
    assert_eq!(object.owner, rustix::process::geteuid().as_raw());
    assert_eq!(object.users, vec![std::process::id()]);
    drop(region);
    assert!(list(&name).unwrap().is_empty());
}

#[test]
fn remove_stale_keeps_what_is_mapped_and_removes_what_is_not() {
    let prefix = unique_name("stale");
    let live = Region::create(&format!("{prefix}-live"), 4096).unwrap();
    let dead = Region::create(&format!("{prefix}-dead"), 4096).unwrap();
    dead.persist();
    drop(dead); // unmapped and closed: a leftover like a crash leaves
    let plan = plan_cleanup(&prefix).unwrap();
    assert_eq!(plan.removed.len(), 1);
    assert_eq!(shm_leftovers(&prefix).len(), 2, "a plan removed something");

    let done = remove_stale(&prefix).unwrap();
    assert_eq!(done.removed.len(), 1);
    assert_eq!(done.removed[0].name, format!("{prefix}-dead"));
    assert_eq!(done.kept.len(), 1);
    assert_eq!(
        done.kept[0].1,
        KeepReason::InUse {
            pids: vec![std::process::id()]
        }
    );
    assert_eq!(
        shm_leftovers(&prefix),
        vec![format!("{}-live", &prefix[1..])]
    );
    drop(live);
}

#[test]
fn an_unlinked_but_mapped_object_is_not_listed() {
    let name = unique_name("gone");
    let region = Region::create(&name, 4096).unwrap();
    region.unlink_now().unwrap();
    assert!(list(&name).unwrap().is_empty());
}

#[test]
fn a_prefix_with_an_inner_slash_is_refused() {
    assert!(list("/a/b").is_err());
}
