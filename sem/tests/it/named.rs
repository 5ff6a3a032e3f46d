//! What only named semaphores have: names, exclusivity, owner and mode checks.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeipc_sem::{Error, NamedSemaphore, SEM_VALUE_MAX, Semaphore};
use nodeipc_testkit::{NOBODY, Watchdog, is_root, shm_leftovers, skip, spawn_child, unique_name};

fn sem_file(name: &str) -> String {
    format!("/dev/shm/sem.{}", &name[1..])
}

/// Removes a semaphore's file when dropped, so a test that panics (or whose
/// child dies) leaves nothing under `/dev/shm`.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(sem_file(&self.0));
    }
}

/// `name` padded with `s` to exactly `len` bytes.
fn padded(name: &str, len: usize) -> String {
    assert!(
        name.len() <= len,
        "{name} is already longer than {len} bytes"
    );
    format!("{name}{}", "s".repeat(len - name.len()))
}

#[test]
fn names_are_checked_before_sem_open() {
    let unique = unique_name("sem-len");
    // The longest name whose file, sem.<name without '/'>, fits in 255 bytes.
    let longest = padded(&unique, 252);
    let too_long = padded(&unique, 253);
    let _guard = RemoveOnDrop(longest.clone());
    let without_slash = unique[1..].to_owned();
    let nested = format!("{unique}/b");
    let with_nul = format!("{unique}\0");
    for name in [
        "",
        without_slash.as_str(),
        nested.as_str(),
        "/",
        too_long.as_str(),
        with_nul.as_str(),
    ] {
        match NamedSemaphore::create(name, 0) {
            Err(Error::InvalidName { .. }) => {}
            other => panic!("{name:?}: expected InvalidName, got {other:?}"),
        }
    }
    match NamedSemaphore::create(&too_long, 0) {
        Err(Error::InvalidName { reason, .. }) => {
            assert!(reason.contains("252 bytes"), "{reason}")
        }
        other => panic!("expected InvalidName for a 253-byte name, got {other:?}"),
    }
    assert!(
        shm_leftovers(&unique).is_empty(),
        "a refused name was created"
    );
    let sem = NamedSemaphore::create(&longest, 0).unwrap();
    assert_eq!(shm_leftovers(&unique).len(), 1);
    drop(sem);
    assert!(shm_leftovers(&unique).is_empty());
}

/// Set in the child of [`another_users_semaphore_is_refused_naming_owner_and_mode`]:
/// the name it opens as `nobody`.
const OPEN_AS_NOBODY: &str = "NODEIPC_SEM_TEST_OPEN_AS_NOBODY";

#[test]
fn another_users_semaphore_is_refused_naming_owner_and_mode() {
    if let Ok(name) = std::env::var(OPEN_AS_NOBODY) {
        // The child, as nobody: report what `open` and `open_wait` said, on
        // lines of their own (the harness has begun one: "test … ...").
        println!();
        let report = |what: &str, result: nodeipc_sem::Result<NamedSemaphore>| match result {
            Err(Error::Untrusted {
                owner,
                mode,
                expected_owner,
                ..
            }) => println!(
                "child {what}: Untrusted owner={owner} mode={mode:04o} expected={expected_owner}"
            ),
            Err(other) => println!("child {what}: other error {other:?}"),
            Ok(_) => println!("child {what}: opened"),
        };
        let result = NamedSemaphore::open(&name);
        if let Err(err) = &result {
            println!("child message: {err}");
        }
        report("open", result);
        let start = Instant::now();
        let result = NamedSemaphore::open_wait(&name, Duration::from_secs(30));
        println!("child open_wait took {} ms", start.elapsed().as_millis());
        report("open_wait", result);
        return;
    }
    let _dog = Watchdog::new("sem of another uid", Duration::from_secs(60));
    if !is_root() {
        skip(
            "another_users_semaphore_is_refused_naming_owner_and_mode",
            "needs root to drop privileges",
        );
        return;
    }
    let name = unique_name("sem-foreign");
    let _guard = RemoveOnDrop(name.clone());
    let sem = NamedSemaphore::create(&name, 0).unwrap();
    let out = spawn_child(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &nodeipc_testkit::test_path(
                    module_path!(),
                    "another_users_semaphore_is_refused_naming_owner_and_mode",
                ),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(OPEN_AS_NOBODY, &name)
            .uid(NOBODY.0)
            .gid(NOBODY.1)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed: {context}");
    let root = rustix::process::geteuid().as_raw();
    for what in ["open", "open_wait"] {
        let expected = format!(
            "child {what}: Untrusted owner={root} mode=0600 expected={}",
            NOBODY.0
        );
        assert!(
            stdout.lines().any(|l| l == expected),
            "expected `{expected}`: {context}"
        );
    }
    let message = stdout
        .lines()
        .find_map(|l| l.strip_prefix("child message: "))
        .unwrap_or_else(|| panic!("no message from the child: {context}"));
    for fragment in [name.as_str(), &format!("owner uid {root}"), "mode 0600"] {
        assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
    }
    let waited: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("child open_wait took ")?.strip_suffix(" ms"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no open_wait time from the child: {context}"));
    // Refused at once, not after its 30 s wait.
    assert!(waited < 10_000, "open_wait waited {waited} ms on a refusal");
    drop(sem);
    assert!(shm_leftovers(&name).is_empty());
}

const UMASK_CHILD: &str = "NODEIPC_SEM_TEST_UMASK_CHILD";

/// In a child of its own: the umask is the process's, and another test of
/// this binary creating a file (or forking a child, which inherits it)
/// while it is 0277 would get a file its owner cannot write.
#[test]
fn create_is_exclusive_forces_0600_and_removes_its_name() {
    const TEST: &str = "create_is_exclusive_forces_0600_and_removes_its_name";
    let Ok(name) = std::env::var(UMASK_CHILD) else {
        let _dog = nodeipc_testkit::Watchdog::new(TEST, Duration::from_secs(30));
        let name = unique_name("sem-excl");
        nodeipc_testkit::passes_in_a_child(
            module_path!(),
            TEST,
            (UMASK_CHILD, &name),
            "child: 0600 under umask 0277",
            Duration::from_secs(20),
        );
        assert!(shm_leftovers(&name).is_empty());
        return;
    };
    println!();
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o277));
    let sem = NamedSemaphore::create(&name, 1).unwrap();
    let mode = std::fs::metadata(sem_file(&name))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert!(matches!(
        NamedSemaphore::create(&name, 1),
        Err(Error::AlreadyExists { .. })
    ));
    drop(sem);
    assert!(shm_leftovers(&name).is_empty());
    println!("child: 0600 under umask 0277");
}

#[test]
fn a_value_above_the_maximum_is_refused() {
    let name = unique_name("sem-max");
    let err = NamedSemaphore::create(&name, SEM_VALUE_MAX + 1).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidValue {
                max: SEM_VALUE_MAX,
                ..
            }
        ),
        "{err}"
    );
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn open_refuses_a_loose_mode_and_a_missing_name() {
    let name = unique_name("sem-loose");
    assert!(matches!(
        NamedSemaphore::open(&name),
        Err(Error::NotFound { .. })
    ));
    let sem = NamedSemaphore::create(&name, 0).unwrap();
    std::fs::set_permissions(sem_file(&name), PermissionsExt::from_mode(0o666)).unwrap();
    match NamedSemaphore::open(&name) {
        Err(Error::Untrusted { mode: 0o666, .. }) => {}
        other => panic!("expected Untrusted with mode 0666, got {other:?}"),
    }
    // Waiting does not turn a refusal into a wait.
    let start = Instant::now();
    assert!(matches!(
        NamedSemaphore::open_wait(&name, Duration::from_secs(30)),
        Err(Error::Untrusted { .. })
    ));
    assert!(start.elapsed() < Duration::from_secs(10));
    drop(sem);
}

#[test]
fn open_wait_times_out_on_a_missing_name_and_finds_a_late_one() {
    let name = unique_name("sem-late");
    let start = Instant::now();
    let err = NamedSemaphore::open_wait(&name, Duration::from_millis(100)).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(100));

    let creator = {
        let name = name.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let sem = NamedSemaphore::create(&name, 2).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(sem);
        })
    };
    let opened = NamedSemaphore::open_wait(&name, Duration::from_secs(5)).unwrap();
    assert_eq!(opened.value().unwrap(), 2);
    creator.join().unwrap();
}

#[test]
fn persist_keeps_the_name_and_unlink_now_removes_it() {
    let name = unique_name("sem-persist");
    let sem = NamedSemaphore::create(&name, 0).unwrap();
    sem.persist();
    drop(sem);
    let reopened = NamedSemaphore::open(&name).unwrap();
    reopened.unlink_now().unwrap();
    assert!(shm_leftovers(&name).is_empty());
    reopened.post().unwrap(); // the handle outlives the name
    assert_eq!(reopened.value().unwrap(), 1);
}

#[test]
fn regression_drop_never_removes_a_later_semaphore_of_the_same_name() {
    let name = unique_name("sem-reuse");
    let first = NamedSemaphore::create(&name, 0).unwrap();
    std::fs::remove_file(sem_file(&name)).unwrap();
    let second = NamedSemaphore::create(&name, 0).unwrap();
    drop(first);
    assert_eq!(shm_leftovers(&name).len(), 1);
    drop(second);
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_symlink_in_place_of_the_semaphore_is_refused() {
    let name = unique_name("sem-link");
    let target = unique_name("sem-target");
    let real = NamedSemaphore::create(&target, 0).unwrap();
    std::os::unix::fs::symlink(sem_file(&target), sem_file(&name)).unwrap();
    let result = NamedSemaphore::open(&name);
    std::fs::remove_file(sem_file(&name)).unwrap();
    assert!(result.is_err(), "a symlinked semaphore was opened");
    drop(real);
}

/// Set in the child of [`create_needs_no_privilege`]: the name it creates as `nobody`.
const CREATE_AS_NOBODY: &str = "NODEIPC_SEM_TEST_CREATE_AS_NOBODY";

#[test]
fn create_needs_no_privilege() {
    // Linking the unnamed file into place goes through /proc/self/fd with
    // AT_SYMLINK_FOLLOW; AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH.
    let create_post_open = |name: &str| {
        let sem = NamedSemaphore::create(name, 2).expect("create without privilege");
        sem.post().unwrap();
        assert_eq!(NamedSemaphore::open(name).unwrap().value().unwrap(), 3);
    };
    if let Ok(name) = std::env::var(CREATE_AS_NOBODY) {
        create_post_open(&name);
        return;
    }
    let _dog = Watchdog::new("create as nobody", Duration::from_secs(60));
    let name = unique_name("sem-nobody");
    let _guard = RemoveOnDrop(name.clone());
    if !is_root() {
        // Already unprivileged.
        create_post_open(&name);
        assert!(shm_leftovers(&name).is_empty());
        return;
    }
    let out = spawn_child(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &nodeipc_testkit::test_path(module_path!(), "create_needs_no_privilege"),
                "--test-threads=1",
            ])
            .env(CREATE_AS_NOBODY, &name)
            .uid(NOBODY.0)
            .gid(NOBODY.1)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shm_leftovers(&name).is_empty());
}
