//! What only named semaphores have: names, exclusivity, owner and mode checks.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use nodeipc_sem::{Error, NamedSemaphore, SEM_VALUE_MAX, Semaphore};
use nodeipc_testkit::{shm_leftovers, unique_name};

fn sem_file(name: &str) -> String {
    format!("/dev/shm/sem.{}", &name[1..])
}

#[test]
fn names_are_checked_before_sem_open() {
    let long = format!("/{}", "s".repeat(252));
    for name in ["", "plain", "/a/b", "/", long.as_str(), "/nul\0"] {
        match NamedSemaphore::create(name, 0) {
            Err(Error::InvalidName { .. }) => {}
            other => panic!("{name:?}: expected InvalidName, got {other:?}"),
        }
    }
    let longest = format!("/{}", "s".repeat(200));
    drop(NamedSemaphore::create(&longest, 0).unwrap());
}

#[test]
fn create_is_exclusive_forces_0600_and_removes_its_name() {
    let name = unique_name("sem-excl");
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o277));
    let sem = NamedSemaphore::create(&name, 1);
    rustix::process::umask(old);
    let sem = sem.unwrap();
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
        NamedSemaphore::open_wait(&name, Duration::from_secs(5)),
        Err(Error::Untrusted { .. })
    ));
    assert!(start.elapsed() < Duration::from_secs(1));
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
