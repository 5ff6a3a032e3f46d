//! A full `/dev/shm`: regions are refused at creation with `NoSpace`, never
//! made with room they do not have (a `SIGBUS` at the first write).
//!
//! The test re-runs itself in a child process with a mount namespace of its
//! own, a 64 KiB tmpfs mounted over `/dev/shm` there: nothing of the host's
//! `/dev/shm` is touched, and the tmpfs goes with the child.

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_shm::{Error, OpenOptions, Region};
use nodeipc_testkit::{Watchdog, in_small_dev_shm, is_root, skip, spawn_child};

/// Set in the child: it runs in the private namespace.
const CHILD: &str = "NODEIPC_SHM_TEST_IN_SMALL_TMPFS";
const TMPFS_SIZE: u64 = 64 << 10;

#[test]
fn regression_a_full_dev_shm_is_no_space_at_creation_not_a_sigbus() {
    if std::env::var_os(CHILD).is_some() {
        in_the_small_tmpfs();
        return;
    }
    let _dog = Watchdog::new("full /dev/shm", Duration::from_secs(60));
    if !is_root() {
        skip(
            "regression_a_full_dev_shm_is_no_space_at_creation_not_a_sigbus",
            "needs root (CAP_SYS_ADMIN) for a mount namespace",
        );
        return;
    }
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            &nodeipc_testkit::test_path(
                module_path!(),
                "regression_a_full_dev_shm_is_no_space_at_creation_not_a_sigbus",
            ),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(in_small_dev_shm(&mut command)).output_timeout(Duration::from_secs(30));
    let context = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.signal(),
        None,
        "the child died of a signal (SIGBUS is 7): {context}"
    );
    assert!(out.status.success(), "the child failed: {context}");
    assert!(
        context.contains("child: every case passed"),
        "the child did not run its cases: {context}"
    );
}

/// What `/dev/shm` holds (in the child: only what the cases left).
fn dev_shm() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn assert_no_space(err: &Error, name: &str, size: u64) {
    match err {
        Error::NoSpace {
            name: n, size: s, ..
        } => {
            assert_eq!((n.as_str(), *s), (name, size), "{err}")
        }
        other => panic!("expected NoSpace for {name}, got {other}"),
    }
    assert_eq!(
        err.raw_os_error(),
        Some(rustix::io::Errno::NOSPC.raw_os_error()),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(name) && text.contains(&size.to_string()),
        "{text}"
    );
}

/// The cases, in the child's namespace.
fn in_the_small_tmpfs() {
    println!();
    let vfs = rustix::fs::statvfs("/dev/shm").unwrap();
    assert_eq!(
        vfs.f_blocks * vfs.f_frsize,
        TMPFS_SIZE,
        "not the private tmpfs"
    );
    assert!(dev_shm().is_empty(), "{:?}", dev_shm());

    // Larger than the whole tmpfs: refused, nothing left under the name.
    let big = "/nodeipc-test-full-big";
    let err = Region::create(big, 1 << 20).unwrap_err();
    println!("child: {err}");
    assert_no_space(&err, big, 1 << 20);
    assert!(dev_shm().is_empty(), "{:?}", dev_shm());

    // What fits is made, and every byte of it can be written.
    let small = "/nodeipc-test-full-small";
    let region = Region::create(small, 8192).unwrap();
    region.write_at(0, &[0xA5; 8192]).unwrap();
    drop(region);
    assert!(dev_shm().is_empty(), "{:?}", dev_shm());

    // Fill most of it; a region that fits the tmpfs but not what is left of
    // it is refused too (the case that used to be a SIGBUS at `shm write`).
    let filler = Region::create("/nodeipc-test-full-filler", 48 << 10).unwrap();
    filler.write_at(0, &[1; 48 << 10]).unwrap();
    let late = "/nodeipc-test-full-late";
    let err = Region::create(late, 32 << 10).unwrap_err();
    assert_no_space(&err, late, 32 << 10);
    assert_eq!(dev_shm(), ["nodeipc-test-full-filler"]);

    // A region another program made with a bare ftruncate, bigger than the
    // room left: opening it is NoSpace, not a mapping that faults.
    let sparse = "/nodeipc-test-full-sparse";
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(format!("/dev/shm{sparse}"))
        .unwrap();
    file.set_len(32 << 10).unwrap();
    let err = Region::open(sparse, OpenOptions::default()).unwrap_err();
    assert_no_space(&err, sparse, 32 << 10);
    std::fs::remove_file(format!("/dev/shm{sparse}")).unwrap();

    // Memfds live on the kernel's internal tmpfs, not /dev/shm: still made,
    // and their memory taken at creation. (A full internal tmpfs cannot be
    // staged here: it has no size limit, only memory bounds it, and running
    // memory out wakes the OOM killer. The memory check before allocating is
    // `region::zero_and_oversized_sizes_are_refused_and_leave_nothing`.)
    let memfd = Region::anonymous(1 << 20).unwrap();
    let stat = rustix::fs::fstat(memfd.as_fd()).unwrap();
    assert!(stat.st_blocks as u64 * 512 >= 1 << 20);
    memfd.write_at((1 << 20) - 1, &[1]).unwrap();

    drop(filler);
    assert!(dev_shm().is_empty(), "{:?}", dev_shm());
    println!("child: every case passed");
}
