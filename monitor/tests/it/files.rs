//! The files a monitor reads and writes are trusted only as far as `ssh`
//! trusts its own: the configuration must be a regular file of ours that
//! nobody else may write, at most 1 MiB, read without ever blocking; the log
//! file is created exclusively and never through a link planted at its path.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::helper;
use nodeipc_monitor::MonitorConfig;
use nodeipc_monitor_host::Error;
use nodeipc_monitor_host::SpawnOptions;
use nodeipc_testkit::{NOBODY, TempDir, Watchdog, is_root};

fn write_mode(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn spawn_with_log(
    dir: &TempDir,
    log: PathBuf,
) -> nodeipc_monitor_host::Result<nodeipc_monitor_host::MonitorHandle> {
    let options = SpawnOptions {
        program: Some(helper()),
        log_file: Some(log),
        ready_timeout: Duration::from_secs(10),
        ..SpawnOptions::default()
    };
    nodeipc_monitor_host::spawn_monitor_with(
        &MonitorConfig::default(),
        dir.join("rank.sock"),
        options,
    )
}

#[test]
fn regression_a_symlink_planted_at_the_log_path_is_not_followed() {
    let _dog = Watchdog::new("log_symlink", Duration::from_secs(60));
    let dir = TempDir::new("mon-log-link");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let log = dir.join("monitor-0.log");
    symlink(&victim, &log).unwrap();
    match spawn_with_log(&dir, log.clone()) {
        Err(Error::File {
            what: "log file",
            source,
        }) => {
            assert!(source.to_string().contains("found a symlink"), "{source}");
        }
        other => panic!("expected the log file refused, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // Nothing was left behind: no socket, no configuration file.
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["monitor-0.log", "victim"]);
    // A FIFO there is refused too (before the fix: open(2) blocked forever).
    std::fs::remove_file(&log).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &log,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let e = spawn_with_log(&dir, log.clone()).unwrap_err();
    assert!(e.to_string().contains("found a FIFO"), "{e}");
    if is_root() {
        // Someone else's file is not written to either.
        std::fs::remove_file(&log).unwrap();
        write_mode(&log, "theirs\n", 0o644);
        std::os::unix::fs::chown(&log, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
        let e = spawn_with_log(&dir, log.clone()).unwrap_err();
        assert!(e.to_string().contains("owner uid 65534"), "{e}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "theirs\n");
    }
}

#[test]
fn the_log_file_is_created_0600_or_appended_to_when_it_is_ours() {
    let _dog = Watchdog::new("log_append", Duration::from_secs(60));
    let dir = TempDir::new("mon-log-new");
    let log = dir.join("monitor.log");
    spawn_with_log(&dir, log.clone()).unwrap().stop().unwrap();
    let meta = std::fs::symlink_metadata(&log).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    let first = std::fs::read_to_string(&log).unwrap();
    assert!(first.contains("serving on"), "{first}");
    spawn_with_log(&dir, log.clone()).unwrap().stop().unwrap();
    let second = std::fs::read_to_string(&log).unwrap();
    assert!(
        second.starts_with(&first) && second.len() > first.len(),
        "{second}"
    );
}

/// `MonitorConfig::load`: what reading the file trusts.
mod config_file {
    use std::os::unix::fs::symlink;
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    use nodeipc_monitor::MonitorConfig;
    use nodeipc_monitor_host::Error;
    use nodeipc_monitor_host::{MAX_CONFIG_FILE, MonitorConfigFile};
    use nodeipc_testkit::{NOBODY, TempDir, Watchdog, is_root, spawn_child};

    use super::{helper, write_mode};

    /// `MonitorConfig::load` on a thread, bounded: a load that blocks (a FIFO)
    /// or reads forever (`/dev/zero`) fails the test instead of hanging it.
    fn load_bounded(path: &Path) -> nodeipc_monitor_host::Result<MonitorConfig> {
        let (tx, rx) = mpsc::channel();
        let path = path.to_owned();
        std::thread::spawn(move || {
            let _ = tx.send(MonitorConfig::load(&path));
        });
        rx.recv_timeout(Duration::from_secs(2))
            .expect("MonitorConfig::load did not return within 2 s")
    }

    /// The refusal `load` must give: `Error::File` whose message holds every fragment.
    fn refused(path: &Path, fragments: &[&str]) -> nodeipc_fs::Error {
        match load_bounded(path) {
            Err(Error::File { what, source }) => {
                assert_eq!(what, "configuration file");
                let text = source.to_string();
                for fragment in fragments {
                    assert!(text.contains(fragment), "{text:?} lacks {fragment:?}");
                }
                source
            }
            other => panic!("{}: expected a refusal, got {other:?}", path.display()),
        }
    }

    #[test]
    fn regression_a_fifo_or_a_device_as_configuration_is_refused_at_once() {
        let _dog = Watchdog::new("config_fifo", Duration::from_secs(30));
        let dir = TempDir::new("mon-cfg-fifo");
        let fifo = dir.join("monitor.json");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Before the fix: blocked forever in open(2), waiting for a writer.
        refused(
            &fifo,
            &["monitor.json", "found a FIFO", "expected a regular file"],
        );
        // Before the fix: read for ever (5.5 GB in 6 s).
        refused(Path::new("/dev/zero"), &["/dev/zero", "a character device"]);
        // A symlink is not followed, even to a good file.
        let good = dir.join("good.json");
        write_mode(&good, "{}", 0o600);
        let link = dir.join("link.json");
        symlink(&good, &link).unwrap();
        refused(&link, &["found a symlink"]);
        assert!(MonitorConfig::load(&good).is_ok());
    }

    #[test]
    fn regression_a_configuration_others_may_write_is_refused_naming_owner_and_mode() {
        let dir = TempDir::new("mon-cfg-mode");
        let path = dir.join("monitor.json");
        let hostile = r#"{"initial_heartbeat_timeout_ms": 1, "check_interval_ms": 1}"#;
        for mode in [0o666, 0o620, 0o602] {
            write_mode(&path, hostile, mode);
            let e = refused(
                &path,
                &[
                    &format!("mode {mode:04o}"),
                    "no write permission for group or others",
                ],
            );
            assert!(matches!(e, nodeipc_fs::Error::Untrusted { .. }), "{e:?}");
        }
        // Readable by others is fine (as ssh); writable only by us.
        write_mode(&path, hostile, 0o644);
        assert_eq!(
            MonitorConfig::load(&path).unwrap().check_interval,
            Duration::from_millis(1)
        );
        if !is_root() {
            // The rest needs a file owned by someone else.
            nodeipc_testkit::skip("config_owned_by_another_uid", "needs root to chown");
            return;
        }
        // Another user's file, even one only they may write: refused by root's
        // monitor. Before the fix, root's monitor took these timeouts and
        // SIGKILLed its rank 1 ms after Init.
        for mode in [0o666, 0o644] {
            write_mode(&path, hostile, mode);
            std::os::unix::fs::chown(&path, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
            refused(
                &path,
                &[
                    &format!("owner uid {}", NOBODY.0),
                    &format!("mode {mode:04o}"),
                ],
            );
        }
        // The same through the command line (`monitor serve --config`): it
        // exits at once, saying why, and binds nothing.
        let socket = dir.join("rank.sock");
        let out = spawn_child(
            Command::new(helper())
                .args(["monitor", "serve", "--socket"])
                .arg(&socket)
                .arg("--config")
                .arg(&path)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .output_timeout(Duration::from_secs(10));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("owner uid 65534, mode 0644"), "{stderr}");
        assert!(!socket.exists());
    }

    #[test]
    fn regression_a_configuration_over_one_mib_is_refused_before_it_is_read() {
        let dir = TempDir::new("mon-cfg-size");
        let path = dir.join("monitor.json");
        let mut text = " ".repeat(MAX_CONFIG_FILE as usize);
        text.push_str("{}");
        write_mode(&path, &text, 0o600);
        let e = refused(
            &path,
            &[
                &format!("holds {} bytes", text.len()),
                &format!("more than the {MAX_CONFIG_FILE}"),
            ],
        );
        assert!(matches!(e, nodeipc_fs::Error::TooLarge { .. }), "{e:?}");
        // Right at the cap: read.
        write_mode(&path, &text[2..], 0o600);
        assert_eq!(
            MonitorConfig::load(&path).unwrap(),
            MonitorConfig::default()
        );
    }
}
