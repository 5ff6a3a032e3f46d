//! What another process can plant at a semaphore's name or write into its
//! words: each is refused at once with an error naming it, never a hang, an
//! abort or a `SIGBUS`.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeipc_sem::{Error, NamedSemaphore, Semaphore};
use nodeipc_testkit::{NOBODY, Watchdog, is_root, shm_leftovers, spawn_child, unique_name};

fn sem_file(name: &str) -> String {
    format!("/dev/shm/sem.{}", &name[1..])
}

/// Removes whatever sits at a semaphore's name when dropped (a file, a
/// FIFO, a directory), so a failing test leaves nothing under `/dev/shm`.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let path = sem_file(&self.0);
        if std::fs::remove_file(&path).is_err() {
            let _ = std::fs::remove_dir(&path);
        }
    }
}

/// A FIFO at `name`'s file, mode 0666: planted by `nobody` when we are root
/// (any user can, in the world-writable `/dev/shm`), else by us.
fn plant_fifo(name: &str) {
    let mut command = Command::new("mkfifo");
    command.args(["-m", "0666", &sem_file(name)]);
    if is_root() {
        command.uid(NOBODY.0).gid(NOBODY.1);
    }
    let out = spawn_child(command.stdout(Stdio::null()).stderr(Stdio::piped()))
        .output_timeout(Duration::from_secs(10));
    assert!(
        out.status.success(),
        "mkfifo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn regression_a_fifo_at_the_name_is_refused_at_once_naming_it() {
    // Before the fix, `open` blocked in open(2) of the FIFO, for ever.
    let _dog = Watchdog::new("fifo at a semaphore's name", Duration::from_secs(20));
    let name = unique_name("sem-fifo");
    let _guard = RemoveOnDrop(name.clone());
    plant_fifo(&name);
    let start = Instant::now();
    for (what, result) in [
        ("open", NamedSemaphore::open(&name)),
        (
            "open_wait",
            NamedSemaphore::open_wait(&name, Duration::from_secs(30)),
        ),
    ] {
        match result {
            Err(Error::NotRegular {
                found, ref path, ..
            }) => {
                assert_eq!(found, "a FIFO", "{what}");
                assert_eq!(path.to_str(), Some(sem_file(&name).as_str()), "{what}");
            }
            other => panic!("{what}: expected NotRegular, got {other:?}"),
        }
    }
    let message = NamedSemaphore::open(&name).unwrap_err().to_string();
    assert!(
        message.contains("a FIFO") && message.contains(&name),
        "{message}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "a refusal waited {:?}",
        start.elapsed()
    );
    // Creation never follows or adopts it either.
    assert!(matches!(
        NamedSemaphore::create(&name, 0),
        Err(Error::AlreadyExists { .. })
    ));
}

#[test]
fn regression_a_directory_at_the_name_is_named_not_reported_by_its_mode() {
    let name = unique_name("sem-dir");
    let _guard = RemoveOnDrop(name.clone());
    std::fs::create_dir(sem_file(&name)).unwrap();
    let err = NamedSemaphore::open(&name).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotRegular {
                found: "a directory",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains("mode"), "{err}");
}

/// Writes `bytes` over the start of `name`'s file (0600, ours).
fn overwrite(name: &str, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(sem_file(name))
        .unwrap()
        .write_all_at(bytes, 0)
        .unwrap();
}

#[test]
fn regression_a_file_shorter_than_a_sem_t_is_corrupt_not_sigbus() {
    // Before the fix, sem_open mapped an empty file and the first access
    // (value, post, wait) died of SIGBUS.
    for size in [0usize, 31] {
        let name = unique_name("sem-short");
        let _guard = RemoveOnDrop(name.clone());
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(sem_file(&name))
            .unwrap()
            .write_all_at(&vec![0; size], 0)
            .unwrap();
        match NamedSemaphore::open(&name) {
            Err(Error::Corrupt { what, .. }) => {
                assert!(what.contains(&format!("holds {size} bytes")), "{what}");
                assert!(what.contains("32"), "{what}");
            }
            other => panic!("{size} bytes: expected Corrupt, got {other:?}"),
        }
    }
}

/// `struct new_sem` as glibc lays it out on a 64-bit little-endian machine.
fn sem_bytes(value: u32, waiters: u32, private: i32) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[..4].copy_from_slice(&value.to_le_bytes());
    bytes[4..8].copy_from_slice(&waiters.to_le_bytes());
    bytes[8..12].copy_from_slice(&private.to_le_bytes());
    bytes
}

#[test]
fn regression_corrupt_words_are_refused_by_every_operation_not_an_abort() {
    // Before the fix, glibc's sem_post and sem_wait on the first of these
    // aborted the process ("The futex facility returned an unexpected error code").
    let _dog = Watchdog::new("corrupt semaphore words", Duration::from_secs(30));
    let cases = [
        (sem_bytes(0, 1, 0x1234), "`private` word is 0x1234"),
        (sem_bytes(0, 0xdead_beef, 128), "waiter count is 3735928559"),
        (sem_bytes(0x8000_0000, 0, 128), "count is 2147483648"),
        (sem_bytes(u32::MAX, 1, 128), "count is 4294967295"),
    ];
    for (bytes, fragment) in cases {
        let name = unique_name("sem-corrupt");
        let sem = NamedSemaphore::create(&name, 0).unwrap();
        let peer = NamedSemaphore::open(&name).unwrap();
        overwrite(&name, &bytes);
        let start = Instant::now();
        let results = [
            ("post", sem.post()),
            ("wait", sem.wait()),
            ("wait_timeout", sem.wait_timeout(Duration::from_secs(30))),
            ("try_wait", sem.try_wait().map(drop)),
            ("value", sem.value().map(drop)),
            ("peer post", peer.post()),
        ];
        for (op, result) in results {
            match result {
                Err(Error::Corrupt { ref what, .. }) => {
                    assert!(what.contains(fragment), "{op}: {what:?} lacks {fragment:?}")
                }
                other => panic!("{op} on {fragment}: expected Corrupt, got {other:?}"),
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a refusal waited"
        );
        let message = sem.post().unwrap_err().to_string();
        assert!(
            message.contains(&name) && message.contains("corrupt"),
            "{message}"
        );
        // The words are left as they were found: ours to report, not to repair.
        let mut now = [0u8; 32];
        std::fs::File::open(sem_file(&name))
            .unwrap()
            .read_exact_at(&mut now, 0)
            .unwrap();
        assert_eq!(now, bytes);
        drop((sem, peer));
        assert!(shm_leftovers(&name).is_empty());
    }
}

#[test]
fn a_waiter_that_times_out_or_is_refused_leaves_the_waiter_count_as_it_was() {
    let name = unique_name("sem-waiters");
    let sem = NamedSemaphore::create(&name, 0).unwrap();
    let words = || {
        let mut now = [0u8; 32];
        std::fs::File::open(sem_file(&name))
            .unwrap()
            .read_exact_at(&mut now, 0)
            .unwrap();
        now
    };
    assert!(
        sem.wait_timeout(Duration::from_millis(20))
            .unwrap_err()
            .is_timeout()
    );
    assert_eq!(words(), sem_bytes(0, 0, 128));
    sem.post().unwrap();
    sem.wait_timeout(Duration::from_millis(20)).unwrap();
    assert_eq!(words(), sem_bytes(0, 0, 128));
}

#[test]
fn create_never_follows_a_dangling_symlink_at_the_name() {
    let (name, target) = (unique_name("sem-dangling"), unique_name("sem-victim"));
    let (_guard, _target_guard) = (RemoveOnDrop(name.clone()), RemoveOnDrop(target.clone()));
    std::os::unix::fs::symlink(sem_file(&target), sem_file(&name)).unwrap();
    assert!(matches!(
        NamedSemaphore::create(&name, 0),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(shm_leftovers(&target).is_empty(), "the link was followed");
}
