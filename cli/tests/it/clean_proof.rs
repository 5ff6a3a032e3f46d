//! `nodeipc clean` removes only what it can prove abandoned. What it cannot
//! see — a holder of a region while it is short of descriptors, processes
//! outside its pid namespace, processes whose `/proc` it may not read, a
//! socket bound from another network namespace — keeps the object or
//! directory, listed as "in use or unknown" with the reason. It lists and
//! cleans the directories of `nodeipc bench`'s monitor and the demo's
//! randomly named ones, and it finishes its work when its output is gone.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use nodeipc_shm::Region;
use nodeipc_testkit::{NOBODY, Watchdog, is_root, shm_leftovers, skip, spawn_child, unique_name};

const BIN: &str = env!("CARGO_BIN_EXE_nodeipc");

/// Set in a child that binds a socket and waits: the socket's path.
const BINDER: &str = "NODEIPC_CLI_TEST_CLEAN_PROOF_BINDER";

fn run(command: &mut Command) -> Output {
    spawn_child(command.stdout(Stdio::piped()).stderr(Stdio::piped()))
        .output_timeout(Duration::from_secs(60))
}

/// `nodeipc args…`; stdout, after checking it succeeded quietly.
fn ok(command: &mut Command) -> String {
    let out = run(command);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{:?}: {}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn nodeipc(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args);
    command
}

/// Eight hex digits no other test run uses: the random part of names like
/// `nodeipc-demo-<random>`.
fn tag() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:08x}",
        (std::process::id() << 12) ^ (n << 28) ^ (nanos >> 4)
    )
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    pid
}

/// A private directory `name` in the temporary directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        Dir(path)
    }

    fn prefix(&self) -> String {
        format!("/{}", self.0.file_name().unwrap().to_string_lossy())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `unshare args… true` works here; says why not otherwise.
fn can_unshare(test: &str, args: &[&str]) -> bool {
    let out = Command::new("unshare")
        .args(args)
        .arg("true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Ok(out) if out.status.success() => true,
        Ok(out) => !skip(
            test,
            &format!(
                "unshare {args:?} refused: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ),
        Err(e) => !skip(test, &format!("no unshare (util-linux): {e}")),
    }
}

#[test]
fn regression_clean_short_of_descriptors_keeps_a_live_region_and_says_why() {
    let _dog = Watchdog::new("clean under ulimit -n 4", Duration::from_secs(60));
    let prefix = unique_name("clean-emfile");
    let live = Region::create(&format!("{prefix}-live"), 4096).unwrap();
    let stale = Region::create(&format!("{prefix}-stale"), 4096).unwrap();
    stale.persist();
    drop(stale);
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let mut command = nodeipc(&["clean", "--prefix", &prefix]);
    // SAFETY: between fork and exec only setrlimit runs, a system call that
    // touches no memory of the parent.
    unsafe {
        command.pre_exec(move || {
            rustix::process::setrlimit(
                rustix::process::Resource::Nofile,
                rustix::process::Rlimit {
                    current: Some(4),
                    maximum: limit.maximum,
                },
            )
            .map_err(std::io::Error::from)
        });
    }
    let report = ok(&mut command);
    let kept =
        format!("kept region {prefix}-live (in use or unknown: the kernel refused a write lease");
    assert!(report.contains(&kept), "{report}");
    assert!(report.contains("Too many open files"), "{report}");
    // What nobody holds is still proved abandoned, and goes.
    assert!(
        report.contains(&format!("removed region {prefix}-stale")),
        "{report}"
    );
    assert_eq!(
        shm_leftovers(&prefix),
        vec![format!("{}-live", &prefix[1..])]
    );
    drop(live);
    assert!(shm_leftovers(&prefix).is_empty());
}

#[test]
fn regression_clean_in_a_pid_namespace_keeps_what_processes_outside_use() {
    let test = "regression_clean_in_a_pid_namespace_keeps_what_processes_outside_use";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let namespace = ["--pid", "--fork", "--mount-proc"];
    if !can_unshare(test, &namespace) {
        return;
    }
    // A demo's directory, a process working in it, a region it maps: all
    // outside the namespace clean runs in.
    let dir = Dir::new(&format!("nodeipc-demo-{}00000001", tag()));
    let prefix = dir.prefix();
    let live = Region::create(&format!("{prefix}-group"), 4096).unwrap();
    let mut worker = spawn_child(Command::new("sleep").arg("30").current_dir(&dir.0));
    let report = ok(Command::new("unshare").args(namespace).args([
        BIN,
        "clean",
        "--prefix",
        &prefix,
        "--min-age",
        "0",
        "--ignore-unreadable",
    ]));
    for kept in [
        format!("kept region {prefix}-group (in use or unknown: "),
        format!("kept directory {} (in use or unknown: ", dir.0.display()),
    ] {
        let line = report
            .lines()
            .find(|l| l.starts_with(&kept))
            .unwrap_or_else(|| panic!("expected `{kept}…`: {report}"));
        assert!(line.contains("runs in pid namespace"), "{line}");
    }
    assert!(report.ends_with("0 removed, 2 kept\n"), "{report}");
    assert!(dir.0.exists() && !shm_leftovers(&prefix).is_empty());
    // Outside, the same clean names the users.
    let report = ok(&mut nodeipc(&[
        "clean",
        "--prefix",
        &prefix,
        "--min-age",
        "0",
    ]));
    assert!(
        report.contains(&format!(
            "kept directory {} (in use by pid {})",
            dir.0.display(),
            worker.id()
        )),
        "{report}"
    );
    worker.kill();
    drop(live);
}

#[test]
fn regression_ls_and_clean_handle_bench_monitor_and_random_demo_directories() {
    let _dog = Watchdog::new("bench monitor directories", Duration::from_secs(60));
    let t = tag();
    // Left by a killed `nodeipc bench` (both name forms) and a killed demo.
    let legacy = Dir::new(&format!("nodeipc-bench-monitor-{}-{t}", dead_pid()));
    let random = Dir::new(&format!("nodeipc-bench-monitor-{t}00000001"));
    std::fs::write(random.0.join("monitor.log"), b"killed\n").unwrap();
    // A live monitor's: its log open by a live process.
    let held = Dir::new(&format!("nodeipc-bench-monitor-{t}00000002"));
    let log = std::fs::File::create(held.0.join("monitor.log")).unwrap();
    let mut monitor = spawn_child(Command::new("sleep").arg("30").stdout(log));
    // A live demo's: a process works in it.
    let demo = Dir::new(&format!("nodeipc-demo-{t}00000003"));
    let mut worker = spawn_child(Command::new("sleep").arg("30").current_dir(&demo.0));

    let random_prefix = format!("/nodeipc-bench-monitor-{t}");
    for (prefix, dirs) in [
        (legacy.prefix(), vec![&legacy]),
        (random_prefix.clone(), vec![&random, &held]),
        (demo.prefix(), vec![&demo]),
    ] {
        let listing = ok(&mut nodeipc(&["ls", "--prefix", &prefix]));
        for dir in dirs {
            let line = listing
                .lines()
                .find(|l| l.ends_with(&dir.0.display().to_string()))
                .unwrap_or_else(|| panic!("{} not listed: {listing}", dir.0.display()));
            assert!(line.starts_with("directory "), "{line}");
        }
    }
    let flags = ["--min-age", "0", "--ignore-unreadable"];
    let report = ok(nodeipc(&["clean", "--prefix", &legacy.prefix()]).args(flags));
    assert!(
        report.contains(&format!("removed directory {}", legacy.0.display())),
        "{report}"
    );
    let report = ok(nodeipc(&["clean", "--prefix", &random_prefix]).args(flags));
    assert!(
        report.contains(&format!("removed directory {}", random.0.display())),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "kept directory {} (in use by pid {})",
            held.0.display(),
            monitor.id()
        )),
        "{report}"
    );
    let report = ok(nodeipc(&["clean", "--prefix", &demo.prefix()]).args(flags));
    assert!(
        report.contains(&format!(
            "kept directory {} (in use by pid {})",
            demo.0.display(),
            worker.id()
        )),
        "{report}"
    );
    assert!(!legacy.0.exists() && !random.0.exists());
    assert!(held.0.exists() && demo.0.exists());
    monitor.kill();
    worker.kill();
}

#[test]
fn regression_clean_finishes_its_work_when_its_output_is_closed() {
    let _dog = Watchdog::new("clean with stdout closed", Duration::from_secs(60));
    let dir = Dir::new(&format!("nodeipc-demo-{}-{}", dead_pid(), tag()));
    let prefix = dir.prefix();
    let region = Region::create(&format!("{prefix}-group"), 4096).unwrap();
    region.persist();
    drop(region);
    // Every write to stdout fails (EPIPE): nobody reads.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = spawn_child(
        nodeipc(&[
            "clean",
            "--prefix",
            &prefix,
            "--min-age",
            "0",
            "--ignore-unreadable",
        ])
        .stdout(writer)
        .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.0.exists(), "the directory was left behind");
    assert!(
        shm_leftovers(&prefix).is_empty(),
        "the region was left behind"
    );
}

/// The binder's part: bind a socket at `path`, say so, wait for stdin to close.
fn binder(path: &str) {
    let _listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    println!("\nready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn regression_a_socket_bound_from_another_network_namespace_keeps_the_directory() {
    let test = "regression_a_socket_bound_from_another_network_namespace_keeps_the_directory";
    if let Ok(path) = std::env::var(BINDER) {
        return binder(&path);
    }
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    if !can_unshare(test, &["--net"]) {
        return;
    }
    let dir = Dir::new(&format!("nodeipc-demo-{}-{}", dead_pid(), tag()));
    let socket = dir.0.join("logon.sock");
    // Bound by a process in a network namespace of its own: our
    // /proc/net/unix does not show it.
    let mut child = spawn_child(
        Command::new("unshare")
            .args(["--net", std::env::current_exe().unwrap().to_str().unwrap()])
            .args([
                "--exact",
                &nodeipc_testkit::test_path(module_path!(), test),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(BINDER, &socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdout = BufReader::new(child.child().stdout.take().unwrap());
    let mut line = String::new();
    while line.trim_end() != "ready" {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the binder died");
    }
    let report = ok(nodeipc(&["clean", "--prefix", &dir.prefix()]).args([
        "--min-age",
        "0",
        "--ignore-unreadable",
    ]));
    assert!(
        report.contains(&format!(
            "kept directory {} (in use or unknown: socket {} is bound",
            dir.0.display(),
            socket.display()
        )),
        "{report}"
    );
    assert!(socket.exists());
    drop(child.child().stdin.take());
    child.wait_timeout(Duration::from_secs(20));
}

#[test]
fn a_directory_changed_moments_ago_is_kept_until_it_is_old_enough() {
    let _dog = Watchdog::new("min age", Duration::from_secs(60));
    let dir = Dir::new(&format!("nodeipc-demo-{}00000005", tag()));
    let report = ok(&mut nodeipc(&[
        "clean",
        "--prefix",
        &dir.prefix(),
        "--ignore-unreadable",
    ]));
    assert!(
        report.contains(&format!("kept directory {} (changed ", dir.0.display()))
            && report.contains("less than --min-age 10 s: it may be being set up"),
        "{report}"
    );
    let report = ok(nodeipc(&["clean", "--prefix", &dir.prefix()]).args([
        "--min-age",
        "0",
        "--ignore-unreadable",
    ]));
    assert!(report.ends_with("1 removed, 0 kept\n"), "{report}");
}

#[test]
fn regression_clean_that_may_not_read_every_process_keeps_directories() {
    let test = "regression_clean_that_may_not_read_every_process_keeps_directories";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    if !is_root() {
        skip(test, "needs root to run clean as another user");
        return;
    }
    // Another user's leftover, cleaned by that user, who may not read
    // root's processes in /proc.
    let dir = Dir::new(&format!("nodeipc-demo-{}00000006", tag()));
    std::os::unix::fs::chown(&dir.0, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
    let as_nobody = |extra: &[&str]| {
        ok(
            nodeipc(&["clean", "--prefix", &dir.prefix(), "--min-age", "0"])
                .args(extra)
                .uid(NOBODY.0)
                .gid(NOBODY.1),
        )
    };
    let report = as_nobody(&[]);
    assert!(
        report.contains(&format!(
            "kept directory {} (in use or unknown: may not read /proc/",
            dir.0.display()
        )),
        "{report}"
    );
    assert!(dir.0.exists());
    // Told that unreadable processes use nothing of ours, it goes.
    let report = as_nobody(&["--ignore-unreadable"]);
    assert!(report.ends_with("1 removed, 0 kept\n"), "{report}");
    assert!(!dir.0.exists());
}
