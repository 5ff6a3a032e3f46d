//! A thread with a working directory or descriptor table of its own
//! (`unshare(CLONE_FS | CLONE_FILES)`) holds what its process's
//! `/proc/<pid>/cwd` and `/proc/<pid>/fd` do not show: the scan looks at
//! such threads too, and names the process as a user.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_shm::ProcessScan;
use nodeipc_testkit::{TempDir, Watchdog, spawn_child};

/// Set in the child: the directory its thread works in.
const CHILD: &str = "NODEIPC_SHM_TEST_LIST_THREADS_CHILD";
const TEST: &str = "regression_a_thread_with_its_own_cwd_and_table_is_seen";

fn child(dir: &str) {
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        // SAFETY: this thread then uses only descriptors it opens itself and
        // the standard streams it inherited a copy of.
        let unshared = unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_FILES) };
        assert_eq!(unshared, 0, "unshare: {}", std::io::Error::last_os_error());
        std::env::set_current_dir(&dir).unwrap();
        let _held = std::fs::File::create("held").unwrap();
        println!("\nready");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    })
    .join()
    .unwrap();
}

#[test]
fn regression_a_thread_with_its_own_cwd_and_table_is_seen() {
    if let Ok(dir) = std::env::var(CHILD) {
        return child(&dir);
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(30));
    let dir = TempDir::new("thread-cwd");
    let mut user = spawn_child(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &nodeipc_testkit::test_path(module_path!(), TEST),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdout = BufReader::new(user.child().stdout.take().unwrap());
    let mut line = String::new();
    while line.trim_end() != "ready" {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the child died");
    }
    let pid = user.id();
    // Not the process's own: only its thread's.
    let cwd = std::fs::metadata(format!("/proc/{pid}/cwd")).unwrap();
    let here = std::fs::metadata(dir.path()).unwrap();
    assert_ne!((cwd.dev(), cwd.ino()), (here.dev(), here.ino()));
    let held = std::fs::metadata(dir.join("held")).unwrap();

    let scan = ProcessScan::run();
    assert!(
        scan.users_of(here.dev(), here.ino()).contains(&pid),
        "the thread's working directory went unseen: {:?}",
        scan.users_of(here.dev(), here.ino())
    );
    assert!(
        scan.users_of(held.dev(), held.ino()).contains(&pid),
        "the thread's descriptor went unseen"
    );
    drop(user.child().stdin.take());
    user.wait_timeout(Duration::from_secs(10));
}
