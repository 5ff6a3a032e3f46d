//! Read-only regions: a process that maps a region `PROT_READ` can read it
//! and can neither write it through the API (an error), nor by a stray store
//! (a fault, not a change), nor map it writable again from the descriptor it
//! was given.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use nodeipc_shm::{Error, OpenOptions, Region};
use nodeipc_testkit::{Watchdog, spawn_child, unique_name};

#[test]
fn a_read_only_mapping_reads_what_the_owner_writes_and_refuses_writes() {
    let owner = Region::anonymous(4096).unwrap();
    let reader = Region::from_fd_read_only(owner.reopen_read_only().unwrap()).unwrap();
    assert!(!reader.is_writable());
    assert!(owner.is_writable());
    owner.write_at(100, b"fresh").unwrap();
    let mut buf = [0u8; 5];
    reader.read_at(100, &mut buf).unwrap();
    assert_eq!(&buf, b"fresh", "the reader sees the owner's later writes");
    let err = reader.write_at(0, b"x").unwrap_err();
    assert!(
        matches!(err, Error::ReadOnly { .. }) && err.to_string().contains("read-only"),
        "{err}"
    );
    // SAFETY: never reached with a slice: the region refuses before mapping one.
    let err = unsafe { reader.bytes_mut(0, 1) }.unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
}

#[test]
fn a_read_only_descriptor_cannot_be_mapped_writable_truncated_or_sealed() {
    let owner = Region::anonymous(8192).unwrap();
    let fd = owner.reopen_read_only().unwrap();
    let err = Region::from_fd(fd.try_clone().unwrap()).unwrap_err();
    assert!(
        matches!(&err, Error::Io { op: "mmap", source, .. } if source.raw_os_error() == Some(libc::EACCES)),
        "a writable mapping of a read-only descriptor: {err}"
    );
    assert!(
        rustix::fs::ftruncate(&fd, 0).is_err(),
        "truncated through a read-only fd"
    );
    let reader = Region::from_fd_read_only(fd).unwrap();
    assert!(
        reader.seal_grow_shrink().is_err(),
        "sealed through a read-only fd"
    );
    assert_eq!(owner.len(), 8192);
}

#[test]
fn a_named_region_opened_read_only_refuses_writes() {
    let name = unique_name("ro-open");
    let owner = Region::create(&name, 4096).unwrap();
    owner.write_at(0, b"named").unwrap();
    let reader = Region::open(
        &name,
        OpenOptions::wait(4096, Duration::from_secs(1)).read_only(),
    )
    .unwrap();
    let mut buf = [0u8; 5];
    reader.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"named");
    assert!(matches!(
        reader.write_at(0, b"x"),
        Err(Error::ReadOnly { .. })
    ));
}

const FAULT_TEST: &str = "a_stray_store_into_a_read_only_mapping_faults_and_changes_nothing";
const FAULT_CHILD: &str = "NODEIPC_TEST_RO_FAULT_CHILD";

#[test]
fn a_stray_store_into_a_read_only_mapping_faults_and_changes_nothing() {
    if let Ok(name) = std::env::var(FAULT_CHILD) {
        let reader = Region::open(
            &name,
            OpenOptions::wait(4096, Duration::from_secs(5)).read_only(),
        )
        .unwrap();
        println!("child: mapped");
        // SAFETY: deliberately wrong — a store through the pointer of a
        // PROT_READ mapping, which the kernel must stop with SIGSEGV.
        unsafe { reader.as_ptr().write_volatile(b'!') };
        println!("child: the store went through");
        return;
    }
    let _dog = Watchdog::new(FAULT_TEST, Duration::from_secs(60));
    let name = unique_name("ro-fault");
    let owner = Region::create(&name, 4096).unwrap();
    owner.write_at(0, b"intact").unwrap();
    let out = spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(
            module_path!(),
            FAULT_TEST,
        ))
        .env(FAULT_CHILD, &name),
    )
    .output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("child: mapped"),
        "the child did not run: {stdout}"
    );
    assert!(!stdout.contains("went through"), "{stdout}");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{:?}", out.status);
    let mut buf = [0u8; 6];
    owner.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"intact");
}
