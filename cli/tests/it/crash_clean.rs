//! `nodeipc clean` after a run killed from outside: `nodeipc demo` in a
//! process group of its own is killed whole with SIGKILL (coordinator,
//! workers and monitors at once) at a random moment. What it left — its
//! socket directory with sockets and logs, a rank group vault caught before
//! its name went — is listed by `nodeipc ls` and removed by `nodeipc clean`,
//! which refuses, while the demo still runs, to touch anything it uses.
//!
//! A directory is removed only when `clean` saw every process: where some
//! process's `/proc` entries are refused to us (another user's, or one a
//! security module protects), the directory is kept, naming that, unless
//! `--ignore-unreadable` is given. These tests check the first and then use
//! the flag; and `--min-age 0`, since what they remove was left a moment ago.

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nodeipc_shm::Region;
use nodeipc_testkit::{NOBODY, Watchdog, is_root, shm_leftovers, skip, spawn_child};

fn nodeipc(args: &[&str]) -> Output {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60))
}

fn ok(args: &[&str]) -> String {
    let out = nodeipc(args);
    assert!(
        out.status.success(),
        "nodeipc {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The demo's socket directory: `nodeipc-demo-<pid>-<nonce>`, or, named
/// `nodeipc-demo-<random>`, one that was not there before the demo started
/// (`before`); no other test of this file makes directories named so.
fn demo_dir(pid: u32, before: &[PathBuf]) -> Option<PathBuf> {
    let named = format!("nodeipc-demo-{pid}-");
    let dirs: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    let name = |p: &PathBuf| p.file_name().unwrap().to_string_lossy().into_owned();
    dirs.iter()
        .find(|p| name(p).starts_with(&named))
        .cloned()
        .or_else(|| {
            dirs.into_iter().find(|p| {
                let name = name(p);
                name.strip_prefix("nodeipc-demo-").is_some_and(|rest| {
                    !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit())
                }) && !before.contains(p)
            })
        })
}

/// Every directory in the temporary directory now.
fn temp_entries() -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// A process whose `/proc` entries are refused to us, if there is one.
fn unreadable_process() -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let refused = std::fs::read_link(e.path().join("cwd"))
            .is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::PermissionDenied));
        refused.then_some(pid)
    })
}

/// The flags that let `clean` remove a directory left a moment ago, here:
/// `--min-age 0`, and `--ignore-unreadable` where some process is
/// unreadable. In that case, first checks that without it `clean` keeps
/// `dir` and says why.
fn removal_flags(prefix: &str, dir: &std::path::Path) -> Vec<&'static str> {
    let Some(pid) = unreadable_process() else {
        return vec!["--min-age", "0"];
    };
    let plan = ok(&["clean", "--prefix", prefix, "--dry-run", "--min-age", "0"]);
    assert!(
        plan.contains(&format!(
            "kept directory {} (in use or unknown: may not read /proc/",
            dir.display()
        )),
        "pid {pid} is unreadable, yet: {plan}"
    );
    vec!["--min-age", "0", "--ignore-unreadable"]
}

/// Every process of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    common::live_processes_with(common::STAT_PGRP, pgid)
}

fn pid(raw: u32) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(raw as i32).expect("pid")
}

/// xorshift64*, seeded from the clock and printed.
fn delays(count: usize) -> Vec<Duration> {
    let mut x = std::env::var("NODEIPC_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        .max(1);
    println!("kill delays seeded with {x} (NODEIPC_CRASH_SEED)");
    (0..count)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            Duration::from_millis(x.wrapping_mul(0x2545_f491_4f6c_dd1d) % 400)
        })
        .collect()
}

#[test]
fn clean_removes_what_a_demo_killed_whole_left_and_nothing_while_it_runs() {
    let _dog = Watchdog::new("clean after kill -9", Duration::from_secs(300));
    // Orphaned workers and monitors come to us, to be reaped (pid 1 may not).
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
    let mut vaults_removed = 0;
    for (round, delay) in delays(6).into_iter().enumerate() {
        let before = temp_entries();
        let mut demo = spawn_child(
            Command::new(env!("CARGO_BIN_EXE_nodeipc"))
                .args(["demo", "--workers", "2", "--requests", "100000000"])
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let demo_pid = demo.id();
        let started = Instant::now();
        // Rounds kill at different moments: as soon as the directory is
        // there, once the monitors listen (plus a random delay), or the
        // moment the rank group's vault has a name.
        let mut found: Option<(PathBuf, String)> = None;
        let (dir, prefix) = loop {
            if found.is_none() {
                // The demo's names under /dev/shm start like its directory's.
                found = demo_dir(demo_pid, &before).map(|dir| {
                    let prefix = format!("/{}", dir.file_name().unwrap().to_string_lossy());
                    (dir, prefix)
                });
            }
            if let Some((dir, prefix)) = &found {
                let ready = match round % 3 {
                    0 => dir.join("monitor-1.sock").exists(),
                    1 => true,
                    // The vault has a name for a few milliseconds only; a
                    // busy machine may not let us see them, then this
                    // round kills mid-run.
                    _ => {
                        !shm_leftovers(prefix).is_empty()
                            || started.elapsed() > Duration::from_secs(5)
                    }
                };
                if ready {
                    break found.take().unwrap();
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the demo never got that far"
            );
            if round % 3 != 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        if round % 3 == 0 {
            std::thread::sleep(delay);
        }

        if round == 0 {
            // While it runs, nothing of it goes.
            let listing = ok(&["ls", "--prefix", &prefix]);
            assert!(listing.contains(&dir.display().to_string()), "{listing}");
            assert!(listing.contains(&demo_pid.to_string()), "{listing}");
            let report = ok(&["clean", "--prefix", &prefix]);
            assert!(
                report.contains(&format!("kept directory {} (in use by pid", dir.display())),
                "{report}"
            );
            assert!(
                report
                    .lines()
                    .last()
                    .is_some_and(|l| l.starts_with("0 removed")),
                "{report}"
            );
            assert!(dir.exists(), "clean removed the directory of a live demo");
        }

        // The whole run, killed from outside.
        let members = group_members(demo_pid);
        rustix::process::kill_process_group(pid(demo_pid), rustix::process::Signal::KILL).unwrap();
        demo.kill();
        for member in members.into_iter().filter(|&m| m != demo_pid) {
            let _ =
                rustix::process::waitpid(Some(pid(member)), rustix::process::WaitOptions::empty());
        }
        // SIGKILL is delivered at once but a process takes a moment to
        // exit, one forked after the list above included: wait, bounded.
        let killed = Instant::now();
        while !group_members(demo_pid).is_empty() && killed.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            group_members(demo_pid).is_empty(),
            "a process of the demo survived SIGKILL for 10 s: {:?}",
            group_members(demo_pid)
        );
        assert!(
            dir.exists(),
            "round {round}: a demo killed whole cannot remove its directory"
        );

        let listing = ok(&["ls", "--prefix", &prefix]);
        assert!(listing.contains(&dir.display().to_string()), "{listing}");
        let flags = removal_flags(&prefix, &dir);
        let plan = ok(&[&["clean", "--prefix", &prefix, "--dry-run"], &flags[..]].concat());
        assert!(
            plan.contains(&format!("would remove directory {}", dir.display())),
            "{plan}"
        );
        assert!(dir.exists(), "a dry run removed the directory");
        let report = ok(&[&["clean", "--prefix", &prefix], &flags[..]].concat());
        assert!(
            report.contains(&format!("removed directory {}", dir.display())),
            "{report}"
        );
        assert!(report.trim_end().ends_with(", 0 kept"), "{report}");
        assert!(!dir.exists(), "round {round}: {report}");
        assert!(
            shm_leftovers(&prefix).is_empty(),
            "round {round}: {:?}",
            shm_leftovers(&prefix)
        );
        vaults_removed += usize::from(report.contains("removed region"));
        println!(
            "round {round}: clean said: {}",
            report.trim_end().replace('\n', "; ")
        );
    }
    println!("{vaults_removed} rank group vault(s) caught with a name and removed by clean");
}

/// A directory of ours, named like a demo's whose creator is gone.
fn stale_demo_dir() -> PathBuf {
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let dir = std::env::temp_dir().join(format!(
        "nodeipc-demo-{dead}-{:x}",
        std::process::id() as u64 * 1000
            + u64::from(Instant::now().elapsed().subsec_nanos() % 1000)
    ));
    std::fs::create_dir(&dir).unwrap();
    dir
}

#[test]
fn clean_keeps_a_directory_a_live_process_uses_and_a_region_it_maps() {
    let _dog = Watchdog::new("clean keeps what is used", Duration::from_secs(120));
    let dir = stale_demo_dir();
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let prefix = format!("/{name}");
    // A socket bound there by a live process (this one), and a region of the
    // same prefix it maps.
    let listener = std::os::unix::net::UnixListener::bind(dir.join("logon.sock")).unwrap();
    let region = Region::create(&format!("{prefix}-group"), 4096).unwrap();
    let report = ok(&["clean", "--prefix", &prefix]);
    assert!(
        report.contains("kept directory") && report.contains("kept region"),
        "{report}"
    );
    assert!(report.contains(&std::process::id().to_string()), "{report}");
    assert!(dir.exists() && !shm_leftovers(&prefix).is_empty());

    // A process working in it.
    drop(listener);
    let mut worker = spawn_child(Command::new("sleep").arg("30").current_dir(&dir));
    let report = ok(&["clean", "--prefix", &prefix, "--dry-run"]);
    assert!(
        report.contains(&format!(
            "kept directory {} (in use by pid {})",
            dir.display(),
            worker.id()
        )),
        "{report}"
    );
    worker.kill();

    // Nothing uses either any more: both go.
    region.persist();
    drop(region);
    let flags = removal_flags(&prefix, &dir);
    let report = ok(&[&["clean", "--prefix", &prefix], &flags[..]].concat());
    assert!(report.contains("2 removed, 0 kept"), "{report}");
    assert!(!dir.exists());
    assert!(shm_leftovers(&prefix).is_empty());
}

#[test]
fn clean_leaves_another_users_directory_links_and_names_not_ours() {
    let _dog = Watchdog::new("clean and strangers", Duration::from_secs(120));
    let dir = stale_demo_dir();
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let prefix = format!("/{name}");
    // Named like ours but not quite, and a symlink named exactly like ours.
    let unrelated = std::env::temp_dir().join(format!("{name}-not-ours"));
    std::fs::create_dir(&unrelated).unwrap();
    let link = std::env::temp_dir().join(format!("{name}0"));
    std::os::unix::fs::symlink(&unrelated, &link).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&dir, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
        let report = ok(&["clean", "--prefix", &prefix]);
        assert!(
            report.contains(&format!(
                "kept directory {} (owned by uid {})",
                dir.display(),
                NOBODY.0
            )),
            "{report}"
        );
        assert!(report.ends_with("0 removed, 1 kept\n"), "{report}");
        assert!(dir.exists());
    } else {
        skip(
            "clean_leaves_another_users_directory_links_and_names_not_ours",
            "needs root to chown",
        );
        let flags = removal_flags(&prefix, &dir);
        let report = ok(&[&["clean", "--prefix", &prefix], &flags[..]].concat());
        assert!(report.ends_with("1 removed, 0 kept\n"), "{report}");
    }
    assert!(
        unrelated.exists(),
        "a directory not named like ours was removed"
    );
    assert!(
        link.symlink_metadata().is_ok(),
        "a symlink was followed or removed"
    );
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir(&unrelated).unwrap();
    let _ = std::fs::remove_dir(&dir);
}
