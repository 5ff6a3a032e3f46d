//! `list` and `remove_stale` see users in other processes: a child that only
//! maps an object (its descriptor closed after `mmap`, so only
//! `/proc/<pid>/maps` shows it) and a child that only holds the descriptor
//! (never mapped, so only `/proc/<pid>/fd` shows it) each keep the object in
//! use; once the child has exited, the object is stale and removed.
//!
//! The child is this test binary again, told its role by an environment
//! variable.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use nodeipc_shm::{KeepReason, Region, list, plan_cleanup, remove_stale};
use nodeipc_testkit::{ChildGuard, Watchdog, shm_leftovers, spawn_child, unique_name};
use rustix::fs::{Mode, OFlags};

/// Set in the child: `<role> <name>`, the role being [`MAP_ONLY`] or [`HOLD_ONLY`].
const CHILD: &str = "NODEIPC_SHM_TEST_LIST_PROCESSES_CHILD";
/// The child maps the object and closes its descriptor.
const MAP_ONLY: &str = "map-only";
/// The child keeps the descriptor open and never maps it.
const HOLD_ONLY: &str = "hold-only";
/// Size of the objects these tests create.
const SIZE: usize = 4096;

fn path_of(name: &str) -> String {
    format!("/dev/shm{name}")
}

/// Removes the object's file when dropped, so a test that panics (or whose
/// child misbehaves) leaves nothing under `/dev/shm`.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(path_of(&self.0));
    }
}

/// The child's part: open the object, map it or hold it as `role` says,
/// print `ready`, and stay until stdin closes.
fn child(role: &str, name: &str) {
    println!(); // our lines start after the harness's "test … ..."
    let fd = rustix::fs::open(
        path_of(name),
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    // Whatever keeps the object in use, alive until we exit.
    let _user: Box<dyn std::any::Any> = match role {
        MAP_ONLY => {
            let map = memmap2::MmapOptions::new().len(SIZE).map_raw(&fd).unwrap();
            drop(fd); // from here on only the mapping refers to the object
            Box::new(map)
        }
        HOLD_ONLY => Box::new(fd),
        other => panic!("unknown role {other:?}"),
    };
    println!("ready");
    let mut line = String::new();
    // Returns at EOF: the parent closed stdin (or died).
    std::io::stdin().read_line(&mut line).unwrap();
}

/// Runs the child for `role` on `name` (this test binary again, filtered to
/// `test`), and waits until it says it is ready.
fn spawn_user(test: &str, role: &str, name: &str) -> (ChildGuard, BufReader<ChildStdout>) {
    let mut child = spawn_child(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &nodeipc_testkit::test_path(module_path!(), test),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, format!("{role} {name}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdout = BufReader::new(child.child().stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the child exited before it was ready: {seen}");
        if line.trim_end() == "ready" {
            break;
        }
        seen.push_str(&line);
    }
    (child, stdout)
}

/// Whether `/proc/<pid>/maps` maps `path`.
fn maps_it(pid: u32, path: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .any(|l| l.ends_with(path))
}

/// Whether a descriptor in `/proc/<pid>/fd` refers to `path`.
fn holds_it(pid: u32, path: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == Path::new(path)))
}

/// The whole check for one role: a child using the object in that one way
/// keeps it listed as in use and kept by `remove_stale`; after it exits the
/// object is stale and removed.
fn a_child_keeps_the_object_in_use_until_it_exits(test: &str, role: &str) {
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let name = unique_name(role);
    let path = path_of(&name);
    let _guard = RemoveOnDrop(name.clone());
    // Created, then left behind by us: nobody maps or holds it.
    let region = Region::create(&name, SIZE).unwrap();
    region.persist();
    drop(region);
    assert!(list(&name).unwrap()[0].users.is_empty(), "we still use it");

    let (mut child, _stdout) = spawn_user(test, role, &name);
    let pid = child.id();
    // The child uses the object in exactly the one way this test is about.
    let (mapped, held) = (maps_it(pid, &path), holds_it(pid, &path));
    match role {
        MAP_ONLY => assert!(mapped && !held, "mapped {mapped}, held {held}"),
        _ => assert!(held && !mapped, "mapped {mapped}, held {held}"),
    }

    let found = list(&name).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].name, name);
    assert_eq!(found[0].users, vec![pid], "{role}: the child is not listed");
    assert!(found[0].in_use());
    let plan = plan_cleanup(&name).unwrap();
    assert!(
        plan.removed.is_empty(),
        "{role}: planned to remove {plan:?}"
    );
    let done = remove_stale(&name).unwrap();
    assert!(
        done.removed.is_empty(),
        "{role}: removed {:?}",
        done.removed
    );
    assert_eq!(done.kept.len(), 1, "{done:?}");
    assert_eq!(done.kept[0].0.name, name);
    assert_eq!(done.kept[0].1, KeepReason::InUse { pids: vec![pid] });
    assert!(Path::new(&path).exists(), "{role}: removed while in use");

    // Closing its stdin lets the child exit; wait_timeout reaps it.
    drop(child.child().stdin.take());
    let status = child.wait_timeout(Duration::from_secs(20));
    assert!(status.success(), "the child failed: {status}");

    let found = list(&name).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].users.is_empty(),
        "{role}: users after the child exited: {:?}",
        found[0].users
    );
    let done = remove_stale(&name).unwrap();
    assert!(done.kept.is_empty(), "{role}: kept {:?}", done.kept);
    assert_eq!(done.removed.len(), 1, "{done:?}");
    assert_eq!(done.removed[0].name, name);
    assert!(shm_leftovers(&name).is_empty(), "{role}: not removed");
}

/// The child's role and object name, when this process is a child.
fn child_role() -> Option<(String, String)> {
    let value = std::env::var(CHILD).ok()?;
    let (role, name) = value.split_once(' ')?;
    Some((role.to_owned(), name.to_owned()))
}

#[test]
fn a_child_that_only_maps_the_object_keeps_it_in_use_until_it_exits() {
    if let Some((role, name)) = child_role() {
        return child(&role, &name);
    }
    a_child_keeps_the_object_in_use_until_it_exits(
        "a_child_that_only_maps_the_object_keeps_it_in_use_until_it_exits",
        MAP_ONLY,
    );
}

#[test]
fn a_child_that_only_holds_the_descriptor_keeps_it_in_use_until_it_exits() {
    if let Some((role, name)) = child_role() {
        return child(&role, &name);
    }
    a_child_keeps_the_object_in_use_until_it_exits(
        "a_child_that_only_holds_the_descriptor_keeps_it_in_use_until_it_exits",
        HOLD_ONLY,
    );
}
