//! The traps a path can hold, each refused by name and none of them blocking.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use nodeipc_fs::{
    Error, Existing, ModeRule, PrivateDir, check_private_dir, create_exclusive, create_output,
    create_private_dir, create_unique_private_dir, open_regular, read_capped,
};
use nodeipc_testkit::{NOBODY, TempDir, Watchdog, deny_chmod, is_root, skip, spawn_child};

fn mkfifo(path: &std::path::Path, mode: u32) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(mode),
        0,
    )
    .expect("mkfifo");
}

#[test]
fn a_fifo_is_refused_at_once_not_waited_on() {
    let _dog = Watchdog::new("fifo", Duration::from_secs(20));
    let dir = TempDir::new("fs-fifo");
    let path = dir.join("planted");
    mkfifo(&path, 0o600);
    for write in [false, true] {
        match open_regular(&path, write, ModeRule::Exactly(0o600)) {
            Err(Error::NotRegular { found, .. }) => assert_eq!(found, "a FIFO"),
            other => panic!("a FIFO must be refused, got {other:?}"),
        }
    }
    let err = read_capped(&path, ModeRule::NotWritableByOthers, 1 << 20).unwrap_err();
    assert!(
        err.to_string()
            .contains("found a FIFO, expected a regular file"),
        "{err}"
    );
}

#[test]
fn a_symlink_a_directory_and_a_device_are_refused_naming_what_they_are() {
    let dir = TempDir::new("fs-types");
    let target = dir.join("target");
    std::fs::write(&target, b"x").unwrap();
    std::fs::set_permissions(&target, PermissionsExt::from_mode(0o600)).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let found = |p: &std::path::Path| match open_regular(p, false, ModeRule::Exactly(0o600)) {
        Err(Error::NotRegular { found, .. }) => found,
        other => panic!("{} must be refused, got {other:?}", p.display()),
    };
    assert_eq!(found(&link), "a symlink");
    assert_eq!(found(dir.path()), "a directory");
    assert_eq!(
        found(std::path::Path::new("/dev/zero")),
        "a character device"
    );
    assert!(open_regular(&target, false, ModeRule::Exactly(0o600)).is_ok());
}

#[test]
fn regression_a_directory_or_socket_opened_for_writing_is_named_not_an_errno() {
    let dir = TempDir::new("fs-types-rw");
    let socket_path = dir.join("socket");
    let _socket = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    for (path, expected) in [(dir.path(), "a directory"), (&*socket_path, "a socket")] {
        match open_regular(path, true, ModeRule::Exactly(0o600)) {
            Err(Error::NotRegular { found, .. }) => assert_eq!(found, expected),
            other => panic!(
                "{} must be refused as {expected}, got {other:?}",
                path.display()
            ),
        }
    }
}

#[test]
fn a_loose_mode_is_refused_naming_owner_and_mode() {
    let dir = TempDir::new("fs-mode");
    let path = dir.join("config");
    std::fs::write(&path, b"{}").unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o666)).unwrap();
    let err = open_regular(&path, false, ModeRule::NotWritableByOthers).unwrap_err();
    match &err {
        Error::Untrusted { mode, owner, .. } => {
            assert_eq!(*mode, 0o666);
            assert_eq!(*owner, rustix::process::geteuid().as_raw());
        }
        other => panic!("expected Untrusted, got {other:?}"),
    }
    assert!(err.to_string().contains("mode 0666"), "{err}");
    assert!(
        err.to_string()
            .contains("no write permission for group or others"),
        "{err}"
    );
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o644)).unwrap();
    assert!(open_regular(&path, false, ModeRule::NotWritableByOthers).is_ok());
    assert!(matches!(
        open_regular(&path, false, ModeRule::Exactly(0o600)),
        Err(Error::Untrusted { mode: 0o644, .. })
    ));
}

#[test]
fn a_file_of_another_owner_is_refused_even_with_a_tight_mode() {
    if !is_root() {
        skip("a_file_of_another_owner_is_refused", "needs root to chown");
        return;
    }
    let dir = TempDir::new("fs-owner");
    let path = dir.join("config");
    std::fs::write(&path, b"{}").unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&path, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
    match open_regular(&path, false, ModeRule::NotWritableByOthers) {
        Err(Error::Untrusted { owner, .. }) => assert_eq!(owner, NOBODY.0),
        other => panic!("expected Untrusted, got {other:?}"),
    }
}

#[test]
fn read_capped_refuses_a_large_file_before_reading_it() {
    let dir = TempDir::new("fs-cap");
    let path = dir.join("big");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(1 << 40).unwrap(); // sparse: a terabyte it must not read
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o600)).unwrap();
    match read_capped(&path, ModeRule::Exactly(0o600), 1 << 20) {
        Err(Error::TooLarge { size, max, .. }) => assert_eq!((size, max), (1 << 40, 1 << 20)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    file.set_len(5).unwrap();
    assert_eq!(
        read_capped(&path, ModeRule::Exactly(0o600), 5).unwrap(),
        vec![0; 5]
    );
}

#[test]
fn create_exclusive_never_follows_or_reuses_what_is_there() {
    let dir = TempDir::new("fs-excl");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let link = dir.join("log");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let err = create_exclusive(&link, 0o600).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_eexist()), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    let fifo = dir.join("fifo");
    mkfifo(&fifo, 0o666);
    assert_eq!(
        create_exclusive(&fifo, 0o600).unwrap_err().raw_os_error(),
        Some(libc_eexist())
    );
    let fresh = dir.join("fresh");
    drop(create_exclusive(&fresh, 0o600).unwrap());
    assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o7777, 0o600);
}

/// An output file is made new, or is our own regular file that only we
/// may write, appended to or emptied; a symlink (named with its owner, who
/// planted it), a FIFO (at once, never waited on), another user's file, a
/// file its owner may not write, and a kernel interface file that passes
/// for a regular one are refused, and nothing they lead to is touched.
#[test]
fn create_output_writes_only_a_new_file_or_our_own() {
    use std::io::Write;
    let _dog = Watchdog::new("create_output", Duration::from_secs(20));
    let dir = TempDir::new("fs-output");
    let write = |path: &std::path::Path, existing, text: &str| {
        create_output(path, 0o644, existing)
            .map(|fd| std::fs::File::from(fd).write_all(text.as_bytes()).unwrap())
    };
    let fresh = dir.join("fresh.1");
    write(&fresh, Existing::Truncate, "one\n").unwrap();
    assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o7777, 0o644);
    write(&fresh, Existing::Append, "two\n").unwrap();
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "one\ntwo\n");
    write(&fresh, Existing::Truncate, "three\n").unwrap();
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "three\n");

    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = dir.join("link.1");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let planter = if is_root() {
        rustix::fs::chownat(
            rustix::fs::CWD,
            &link,
            Some(rustix::process::Uid::from_raw(NOBODY.0)),
            None,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
        NOBODY.0
    } else {
        rustix::process::geteuid().as_raw()
    };
    let fifo = dir.join("fifo.1");
    mkfifo(&fifo, 0o644);
    for existing in [Existing::Truncate, Existing::Append] {
        let err = write(&link, existing, "x").unwrap_err();
        assert!(
            matches!(err, Error::NotRegular { found: "a symlink", owner: Some(o), .. } if o == planter),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("link.1") && text.contains(&format!("owner uid {planter}")),
            "{text}"
        );
        let err = write(&fifo, existing, "x").unwrap_err();
        assert!(
            matches!(
                err,
                Error::NotRegular {
                    found: "a FIFO",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

    let read_only = dir.join("read-only.1");
    std::fs::write(&read_only, b"kept").unwrap();
    std::fs::set_permissions(&read_only, PermissionsExt::from_mode(0o444)).unwrap();
    let err = write(&read_only, Existing::Truncate, "x").unwrap_err();
    assert!(
        matches!(err, Error::Untrusted { mode: 0o444, .. }),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&read_only).unwrap(), b"kept");
    let shared = dir.join("shared.1");
    std::fs::write(&shared, b"kept").unwrap();
    std::fs::set_permissions(&shared, PermissionsExt::from_mode(0o664)).unwrap();
    let err = write(&shared, Existing::Append, "x").unwrap_err();
    assert!(
        matches!(err, Error::Untrusted { mode: 0o664, .. }),
        "{err:?}"
    );
    if is_root() {
        let theirs = dir.join("theirs.1");
        std::fs::write(&theirs, b"kept").unwrap();
        std::os::unix::fs::chown(&theirs, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
        let err = write(&theirs, Existing::Truncate, "x").unwrap_err();
        assert!(
            matches!(err, Error::Untrusted { owner, .. } if owner == NOBODY.0),
            "{err:?}"
        );
        assert_eq!(std::fs::read(&theirs).unwrap(), b"kept");
    }
    // Our own, 0644, a regular file to fstat: a kernel interface all the
    // same (writing it would rename this process).
    let comm = std::path::Path::new("/proc/thread-self/comm");
    let before = std::fs::read_to_string(comm).unwrap();
    let err = write(comm, Existing::Append, "renamed").unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotRegular {
                found: "a procfs file",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(std::fs::read_to_string(comm).unwrap(), before);
    let err = write(
        std::path::Path::new("/proc/self/status"),
        Existing::Append,
        "x",
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Untrusted { mode: 0o444, .. }),
        "{err:?}"
    );
}

fn libc_eexist() -> i32 {
    rustix::io::Errno::EXIST.raw_os_error()
}

#[test]
fn private_dirs_are_0700_ours_and_never_adopted() {
    let parent = TempDir::new("fs-dir");
    let made = create_unique_private_dir(parent.path(), "run-").unwrap();
    assert!(
        made.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("run-")
    );
    check_private_dir(&made).unwrap();
    // An existing directory, even a private one of ours, is not adopted.
    assert_eq!(
        create_private_dir(&made).unwrap_err().raw_os_error(),
        Some(libc_eexist())
    );
    let loose = parent.join("loose");
    std::fs::create_dir(&loose).unwrap();
    std::fs::set_permissions(&loose, PermissionsExt::from_mode(0o755)).unwrap();
    assert!(matches!(
        check_private_dir(&loose),
        Err(Error::Untrusted { mode: 0o755, .. })
    ));
    let link = parent.join("link");
    std::os::unix::fs::symlink(&made, &link).unwrap();
    assert!(matches!(
        check_private_dir(&link),
        Err(Error::NotRegular {
            found: "a symlink",
            ..
        })
    ));
}

/// A `PrivateDir` is a private directory while it lives and is gone, with
/// what was made in it, once dropped; a link in it is removed, never
/// followed out of it.
#[test]
fn a_private_dir_removes_itself_and_its_contents_on_drop() {
    let parent = TempDir::new("fs-private");
    let outside = parent.join("outside");
    std::fs::write(&outside, b"keep").unwrap();
    let dir = PrivateDir::create(parent.path(), "scratch-").unwrap();
    let path = dir.path().to_owned();
    assert!(
        path.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("scratch-")
    );
    check_private_dir(&path).unwrap();
    drop(create_exclusive(&path.join("log"), 0o600).unwrap());
    std::fs::create_dir(path.join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, path.join("sub/link")).unwrap();
    drop(dir);
    assert!(!path.exists(), "{} outlived its PrivateDir", path.display());
    assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
}

/// Set in the child of the umask test: the directory to make there.
const UMASK_CHILD: &str = "NODEIPC_FS_TEST_UMASK_CHILD";

/// Regression: a private directory made by `mkdir` then `chmod 0700` is
/// world-writable in between under umask 000. Under a filter that refuses
/// every chmod, only code that gets the mode right in the one `mkdir` call
/// (and the one `open(O_CREAT)` call) succeeds.
#[test]
fn regression_private_dirs_and_files_get_their_mode_in_the_creating_call() {
    if let Ok(path) = std::env::var(UMASK_CHILD) {
        let path = std::path::PathBuf::from(path);
        rustix::process::umask(rustix::fs::Mode::empty());
        deny_chmod();
        assert!(std::fs::set_permissions(&path, PermissionsExt::from_mode(0o700)).is_err());
        create_private_dir(&path).expect("create_private_dir under umask 000 without chmod");
        drop(create_exclusive(&path.join("log"), 0o600).expect("create_exclusive without fchmod"));
        let made = create_unique_private_dir(&path, "inner-").expect("unique dir");
        println!("\nchild made {}", made.display());
        return;
    }
    let _dog = Watchdog::new("umask child", Duration::from_secs(60));
    let parent = TempDir::new("fs-umask");
    let path = parent.join("private");
    let out = spawn_child(
        nodeipc_testkit::this_test_in_a_child(
            "regression_private_dirs_and_files_get_their_mode_in_the_creating_call",
        )
        .env(UMASK_CHILD, &path),
    )
    .output_timeout(Duration::from_secs(30));
    let context = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed: {context}");
    assert!(context.contains("child made"), "{context}");
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o700);
    assert_eq!(
        std::fs::metadata(path.join("log")).unwrap().mode() & 0o7777,
        0o600
    );
}
