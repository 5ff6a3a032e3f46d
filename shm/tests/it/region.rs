//! Single-process tests of `Region`: names, sizes, ownership of the name,
//! typed views and bounds.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_shm::{Error, OpenOptions, Region, validate_name};
use nodeipc_testkit::{shm_leftovers, unique_name};

#[test]
fn invalid_names_are_refused_before_any_syscall() {
    let long = format!("/{}", "x".repeat(255));
    for (name, fragment) in [
        ("", "empty"),
        ("no-slash", "start with '/'"),
        ("/", "nothing follows"),
        ("/a/b", "only the leading"),
        (long.as_str(), "longer than 255"),
        ("/nul\0byte", "NUL"),
        ("/..", "'.' and '..'"),
        ("/line\nbreak", "control character"),
    ] {
        let err = Region::create(name, 64).unwrap_err();
        match &err {
            Error::InvalidName { reason, .. } => {
                assert!(reason.contains(fragment), "{name:?}: {err}")
            }
            other => panic!("{name:?}: expected InvalidName, got {other}"),
        }
        assert!(matches!(
            Region::open(name, OpenOptions::default()),
            Err(Error::InvalidName { .. })
        ));
    }
    assert!(validate_name(&format!("/{}", "x".repeat(254))).is_ok());
}

#[test]
fn zero_and_oversized_sizes_are_refused_and_leave_nothing() {
    let name = unique_name("size");
    assert!(matches!(
        Region::create(&name, 0),
        Err(Error::InvalidSize { size: 0, .. })
    ));
    assert!(matches!(
        Region::anonymous(0),
        Err(Error::InvalidSize { .. })
    ));
    // More than tmpfs can hold: refused before allocating anything, and the
    // name is removed again.
    let start = Instant::now();
    let err = Region::create(&name, usize::MAX / 2).unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert_eq!(err.raw_os_error(), Some(libc_enospc()), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    assert!(
        shm_leftovers(&name).is_empty(),
        "a failed create left its name behind"
    );
    // A memfd has no tmpfs limit; memory bounds it, and is asked first.
    let err = Region::anonymous(usize::MAX / 2).unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "refusing an impossible size took {:?}: it allocated first",
        start.elapsed()
    );
}

fn libc_enospc() -> i32 {
    rustix::io::Errno::NOSPC.raw_os_error()
}

/// Memory that is reserved when the region is made cannot run out under a
/// mapping later (`SIGBUS` at the first write past a full tmpfs).
#[test]
fn regression_regions_are_backed_by_memory_when_created() {
    let backed = |region: &Region| {
        let stat = rustix::fs::fstat(region.as_fd()).unwrap();
        stat.st_blocks as u64 * 512
    };
    let name = unique_name("backed");
    let named = Region::create(&name, 1 << 20).unwrap();
    assert!(
        backed(&named) >= 1 << 20,
        "a named region of 1 MiB holds {} bytes of memory",
        backed(&named)
    );
    let anonymous = Region::anonymous((1 << 20) + 1).unwrap();
    assert!(
        backed(&anonymous) > 1 << 20,
        "a memfd of 1 MiB + 1 holds {} bytes of memory",
        backed(&anonymous)
    );
    assert_eq!(anonymous.len(), (1 << 20) + 1);
    drop(named);
    assert!(shm_leftovers(&name).is_empty());
}

/// A region another program made with a bare `ftruncate` (sparse) gets its
/// memory when we open it.
#[test]
fn a_sparse_region_is_reserved_when_opened() {
    let name = unique_name("sparse");
    let path = format!("/dev/shm{name}");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    file.set_len(256 << 10).unwrap();
    let opened = Region::open(&name, OpenOptions::default());
    let blocks = std::fs::metadata(&path).unwrap().blocks();
    std::fs::remove_file(&path).unwrap();
    let opened = opened.unwrap();
    assert_eq!(opened.len(), 256 << 10);
    assert!(blocks * 512 >= 256 << 10, "only {blocks} blocks after open");
}

/// Control characters in a name would forge lines in logs and listings.
#[test]
fn regression_names_with_control_characters_are_refused_before_any_syscall() {
    let base = unique_name("ctl");
    for bad in ["\n", "\r", "\t", "\x1b[2J", "\x7f", "\u{9b}", "\x01"] {
        let name = format!("{base}{bad}x");
        let err = Region::create(&name, 64).unwrap_err();
        match &err {
            Error::InvalidName { reason, .. } => {
                assert!(reason.contains("control character"), "{name:?}: {err}")
            }
            other => panic!("{name:?}: expected InvalidName, got {other}"),
        }
        assert!(
            err.to_string().contains(&format!("{name:?}")),
            "the name is not shown escaped: {err}"
        );
        assert!(matches!(
            Region::open(&name, OpenOptions::default()),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            nodeipc_shm::unlink(&name),
            Err(Error::InvalidName { .. })
        ));
    }
    assert!(
        shm_leftovers(&base).is_empty(),
        "a refused name was created"
    );
    // Printable non-ASCII stays allowed.
    assert!(validate_name("/nodeipc-\u{e9}t\u{e9}").is_ok());
}

/// Whatever is planted at a region's name, opening returns at once and says
/// what is there, even while waiting for the region to appear.
#[test]
fn regression_a_fifo_socket_or_directory_at_a_name_is_refused_at_once_naming_it() {
    let fifo = unique_name("fifo");
    let socket = unique_name("sock");
    let dir = unique_name("dir");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        format!("/dev/shm{fifo}"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(format!("/dev/shm{socket}")).unwrap();
    std::fs::create_dir(format!("/dev/shm{dir}")).unwrap();
    let planted = [
        (&fifo, "a FIFO"),
        (&socket, "a socket"),
        (&dir, "a directory"),
    ];
    let mut results = Vec::new();
    for (name, _) in planted {
        let start = Instant::now();
        let result = Region::open(name, OpenOptions::wait(1, Duration::from_secs(30)));
        results.push((result, start.elapsed()));
    }
    std::fs::remove_file(format!("/dev/shm{fifo}")).unwrap();
    std::fs::remove_file(format!("/dev/shm{socket}")).unwrap();
    std::fs::remove_dir(format!("/dev/shm{dir}")).unwrap();
    for ((name, found), (result, took)) in planted.into_iter().zip(results) {
        let err = result.unwrap_err();
        // Refused at once, not after the 30 s wait.
        assert!(
            took < Duration::from_secs(10),
            "{name}: refused after {took:?}"
        );
        match &err {
            Error::NotRegular { found: f, .. } => assert_eq!(*f, found, "{err}"),
            other => panic!("{name}: expected NotRegular, got {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(name.as_str()) && text.contains(found),
            "{text}"
        );
    }
}

const UMASK_CHILD: &str = "NODEIPC_SHM_TEST_UMASK_CHILD";

/// In a child of its own: the umask is the process's, and another test of
/// this binary creating a file (or forking a child, which inherits it)
/// while it is 077 would see it.
#[test]
fn create_is_exclusive_and_mode_0600_whatever_the_umask() {
    const TEST: &str = "create_is_exclusive_and_mode_0600_whatever_the_umask";
    let Ok(name) = std::env::var(UMASK_CHILD) else {
        let _dog = nodeipc_testkit::Watchdog::new(TEST, Duration::from_secs(30));
        let name = unique_name("excl");
        nodeipc_testkit::passes_in_a_child(
            module_path!(),
            TEST,
            (UMASK_CHILD, &name),
            "child: 0600 under umask 077",
            Duration::from_secs(20),
        );
        assert!(shm_leftovers(&name).is_empty());
        return;
    };
    println!();
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let region = Region::create(&name, 4096).unwrap();
    let meta = std::fs::metadata(format!("/dev/shm{name}")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    assert!(matches!(
        Region::create(&name, 4096),
        Err(Error::AlreadyExists { .. })
    ));
    drop(region);
    assert!(
        shm_leftovers(&name).is_empty(),
        "the creator did not remove the name"
    );
    println!("child: 0600 under umask 077");
}

#[test]
fn open_of_a_missing_name_fails_at_once_or_after_the_wait() {
    let name = unique_name("missing");
    assert!(matches!(
        Region::open(&name, OpenOptions::default()),
        Err(Error::NotFound { .. })
    ));
    let start = Instant::now();
    let err = Region::open(&name, OpenOptions::wait(1, Duration::from_millis(150))).unwrap_err();
    let waited = start.elapsed();
    assert!(
        matches!(err, Error::Timeout { what: "appear", .. }),
        "{err}"
    );
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[test]
fn open_waits_for_a_creator_that_comes_late() {
    let name = unique_name("late");
    let creator = {
        let name = name.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let region = Region::create(&name, 8192).unwrap();
            region.write_at(100, b"late").unwrap();
            std::thread::sleep(Duration::from_millis(300));
        })
    };
    let opened = Region::open(&name, OpenOptions::wait(8192, Duration::from_secs(5))).unwrap();
    assert_eq!(opened.len(), 8192);
    creator.join().unwrap();
    let mut buf = [0u8; 4];
    opened.read_at(100, &mut buf).unwrap();
    assert_eq!(&buf, b"late");
}

#[test]
fn a_region_smaller_than_min_size_is_refused() {
    let name = unique_name("small");
    let _region = Region::create(&name, 4096).unwrap();
    let err = Region::open(
        &name,
        OpenOptions {
            min_size: 8192,
            wait: None,
            ..OpenOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooSmall {
                size: 4096,
                min_size: 8192,
                ..
            }
        ),
        "{err}"
    );
    let err = Region::open(&name, OpenOptions::wait(8192, Duration::from_millis(50))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                what: "reach its size",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_loose_mode_is_refused_at_once_even_when_waiting() {
    let name = unique_name("loose");
    let region = Region::create(&name, 4096).unwrap();
    std::fs::set_permissions(
        format!("/dev/shm{name}"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let start = Instant::now();
    let err = Region::open(&name, OpenOptions::wait(1, Duration::from_secs(30))).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "refusal waited for the timeout"
    );
    match err {
        Error::Untrusted { mode, .. } => assert_eq!(mode, 0o644),
        other => panic!("expected Untrusted, got {other}"),
    }
    drop(region);
}

#[test]
fn a_symlink_in_place_of_a_name_is_not_followed() {
    let name = unique_name("link");
    let target = unique_name("target");
    let real = Region::create(&target, 4096).unwrap();
    std::os::unix::fs::symlink(format!("/dev/shm{target}"), format!("/dev/shm{name}")).unwrap();
    let err = Region::open(&name, OpenOptions::default()).unwrap_err();
    std::fs::remove_file(format!("/dev/shm{name}")).unwrap();
    assert!(matches!(err, Error::NotRegular { .. }), "{err}");
    drop(real);
}

#[test]
fn persist_keeps_the_name_and_unlink_now_removes_it_while_mapped() {
    let name = unique_name("persist");
    let region = Region::create(&name, 4096).unwrap();
    region.persist();
    drop(region);
    assert_eq!(shm_leftovers(&name).len(), 1);
    let reopened = Region::open(&name, OpenOptions::default()).unwrap();
    reopened.unlink_now().unwrap();
    assert!(shm_leftovers(&name).is_empty());
    reopened.write_at(0, b"still mapped").unwrap();
}

#[test]
fn regression_drop_never_removes_a_later_object_of_the_same_name() {
    let name = unique_name("reuse");
    let first = Region::create(&name, 4096).unwrap();
    std::fs::remove_file(format!("/dev/shm{name}")).unwrap(); // someone cleaned it
    let second = Region::create(&name, 4096).unwrap();
    drop(first);
    assert_eq!(
        shm_leftovers(&name).len(),
        1,
        "dropping the first removed the second's name"
    );
    drop(second);
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn reads_and_writes_are_bounds_checked() {
    let region = Region::anonymous(4096).unwrap();
    region.write_at(4090, b"abcdef").unwrap();
    assert!(matches!(
        region.write_at(4091, b"abcdef"),
        Err(Error::OutOfBounds {
            offset: 4091,
            len: 6,
            size: 4096,
            ..
        })
    ));
    let mut buf = [0u8; 8];
    assert!(matches!(
        region.read_at(usize::MAX - 2, &mut buf),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(region.check_range(0, 4096).is_ok());
    assert!(region.check_range(1, 4096).is_err());
}

#[test]
fn views_are_shared_through_the_descriptor_and_checked() {
    let region = Region::anonymous(4096).unwrap();
    let dup = region.as_fd().try_clone_to_owned().unwrap();
    let other = Region::from_fd(dup).unwrap();
    region
        .view::<AtomicU64>(8)
        .unwrap()
        .store(0xfeed, Ordering::Release);
    assert_eq!(
        other.view::<AtomicU64>(8).unwrap().load(Ordering::Acquire),
        0xfeed
    );
    assert!(matches!(
        region.view::<AtomicU64>(4),
        Err(Error::Misaligned { align: 8, .. })
    ));
    assert!(matches!(
        region.view::<AtomicU64>(4092),
        Err(Error::OutOfBounds { .. })
    ));
    let words = region.view_slice::<AtomicU32>(0, 1024).unwrap();
    assert_eq!(words.len(), 1024);
    assert!(region.view_slice::<AtomicU32>(0, 1025).is_err());
    assert!(region.view_slice::<AtomicU32>(0, usize::MAX).is_err());
}

#[test]
fn sealing_forbids_resizing_and_named_regions_cannot_be_sealed() {
    let region = Region::anonymous(4096).unwrap();
    assert!(!region.is_size_sealed());
    region.seal_grow_shrink().unwrap();
    assert!(region.is_size_sealed());
    let err = rustix::fs::ftruncate(region.as_fd(), 0).unwrap_err();
    assert_eq!(err, rustix::io::Errno::PERM);
    let named = Region::create(&unique_name("seal"), 4096).unwrap();
    assert!(matches!(
        named.seal_grow_shrink(),
        Err(Error::NotSealable { .. })
    ));
}

/// `is_memfd` tells a memfd (made here, or received as a descriptor) from
/// a named object, also one received as a descriptor: what queue and pool
/// ask before they demand seals.
#[test]
fn a_memfd_is_told_from_a_named_object_however_it_arrived() {
    let anonymous = Region::anonymous(4096).unwrap();
    assert_eq!(anonymous.is_memfd(), Some(true));
    let received = Region::from_fd(anonymous.as_fd().try_clone_to_owned().unwrap()).unwrap();
    assert_eq!(received.is_memfd(), Some(true));
    let named = Region::create(&unique_name("memfd"), 4096).unwrap();
    assert_eq!(named.is_memfd(), Some(false));
    let by_fd = Region::from_fd(named.as_fd().try_clone_to_owned().unwrap()).unwrap();
    assert_eq!(by_fd.is_memfd(), Some(false));
}

#[test]
fn from_fd_refuses_what_is_not_a_region() {
    let (read_end, _write_end) = std::io::pipe().unwrap();
    let read_end = std::os::fd::OwnedFd::from(read_end);
    assert!(matches!(
        Region::from_fd(read_end),
        Err(Error::NotRegular { .. })
    ));
    let empty = rustix::fs::memfd_create("empty", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    assert!(matches!(
        Region::from_fd(empty),
        Err(Error::InvalidSize { size: 0, .. })
    ));
}

/// The system's default huge page size in bytes (`Hugepagesize:` in
/// `/proc/meminfo`), if it reports one.
fn huge_page_size() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<usize>()
        .ok()?;
    Some(kib * 1024)
}

#[test]
fn huge_pages_work_or_say_why_not() {
    // Not a whole number of pages of any size, so it must be rounded up.
    let asked = 4097;
    match Region::anonymous_huge(asked) {
        Ok(region) => {
            let page = huge_page_size()
                .expect("huge pages were given, yet /proc/meminfo reports no Hugepagesize");
            let len = region.len();
            assert!(len >= asked, "{len} bytes mapped, {asked} asked for");
            assert_eq!(
                len % page,
                0,
                "{len} bytes is not a whole number of {page}-byte huge pages"
            );
            assert_eq!(
                len,
                asked.div_ceil(page) * page,
                "{asked} bytes should round up to one huge page"
            );
        }
        Err(Error::HugePagesUnavailable { reason, .. }) => {
            assert!(reason.contains("huge page"), "unhelpful reason: {reason}")
        }
        Err(other) => panic!("expected a region or HugePagesUnavailable, got {other}"),
    }
}

/// Set in the child of the next test: the name it creates under `deny_chmod`.
const CREATE_WITHOUT_CHMOD: &str = "NODEIPC_SHM_TEST_CREATE_WITHOUT_CHMOD";

/// The mode is 0600 from the creating `open` (no `fchmod` needed under a
/// usual or an empty umask), so creation works where `chmod` is denied.
#[test]
fn regression_create_gets_mode_0600_from_the_open_itself() {
    const TEST: &str = "regression_create_gets_mode_0600_from_the_open_itself";
    if let Ok(name) = std::env::var(CREATE_WITHOUT_CHMOD) {
        println!();
        rustix::process::umask(rustix::fs::Mode::empty());
        nodeipc_testkit::deny_chmod();
        let region = Region::create(&name, 4096).unwrap();
        let mode = std::fs::metadata(format!("/dev/shm{name}")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        drop(region);
        println!("child: created 0600 without chmod");
        return;
    }
    let _dog = nodeipc_testkit::Watchdog::new(TEST, Duration::from_secs(30));
    let name = unique_name("nochmod");
    let out = nodeipc_testkit::spawn_child(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &nodeipc_testkit::test_path(module_path!(), TEST),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CREATE_WITHOUT_CHMOD, &name)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(20));
    let context = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed: {context}");
    assert!(
        context.contains("child: created 0600 without chmod"),
        "{context}"
    );
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn prefetch_changes_nothing_and_ignores_what_lies_past_the_mapping() {
    use nodeipc_shm::Prefetch;
    let region = Region::anonymous(3 * 4096).unwrap();
    let pattern: Vec<u8> = (0..region.len()).map(|i| (i * 7 % 251) as u8).collect();
    region.write_at(0, &pattern).unwrap();
    let read_only = Region::from_fd_read_only(region.reopen_read_only().unwrap()).unwrap();
    let len = region.len();
    // Whole lines, parts of lines, the last byte, ranges running past the
    // end or starting beyond it, lengths that overflow: none faults, on
    // the writable mapping or (for a write intent too) the read-only one.
    let ranges = [
        (0, len),
        (1, 62),
        (63, 2),
        (len - 1, 1),
        (len - 10, 4096),
        (len, 64),
        (len + 4096, 64),
        (usize::MAX - 8, 64),
        (100, usize::MAX),
        (0, 0),
    ];
    for intent in [Prefetch::Read, Prefetch::Write] {
        for (offset, n) in ranges {
            region.prefetch(offset, n, intent);
            read_only.prefetch(offset, n, intent);
        }
    }
    let mut after = vec![0u8; len];
    read_only.read_at(0, &mut after).unwrap();
    assert!(after == pattern, "a prefetch changed what the region holds");
}
