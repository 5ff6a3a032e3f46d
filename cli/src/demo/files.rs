//! The demo's private directory and the files it makes there.
//!
//! The directory gets an unpredictable name and mode 0700 in the one call
//! that creates it (no moment in which another user could plant a link or a
//! FIFO in it, nor a name to prepare one at in advance); each file in it is
//! created with `O_CREAT | O_EXCL | O_NOFOLLOW`, so even a file that was
//! somehow there is refused, never followed or opened.

use std::path::{Path, PathBuf};

use nodeipc_fs::PrivateDir;

use crate::Failure;

/// The prefix of the demo's directory: `nodeipc-demo-<pid>-<16 hex digits>`,
/// the shape `nodeipc ls` and `nodeipc clean` recognise.
const PREFIX: &str = "nodeipc-demo-";

/// `$TMPDIR/nodeipc-demo-<pid>-<random>`, removed with everything in it on
/// drop.
pub(crate) struct DemoDir {
    dir: PrivateDir,
    tag: String,
}

impl DemoDir {
    /// Creates the directory in the temporary directory (`$TMPDIR`, else
    /// `/tmp`).
    ///
    /// # Errors
    /// The failed call and the path it was given.
    pub(crate) fn create() -> Result<DemoDir, Failure> {
        DemoDir::create_in(&std::env::temp_dir())
    }

    /// Creates the directory in `parent`.
    ///
    /// # Errors
    /// As [`create`](DemoDir::create).
    pub(crate) fn create_in(parent: &Path) -> Result<DemoDir, Failure> {
        let prefix = format!("{PREFIX}{}-", std::process::id());
        let dir = PrivateDir::create(parent, &prefix).map_err(|e| {
            Failure::Error(format!(
                "making the demo's private directory in {}: {e}",
                parent.display()
            ))
        })?;
        let tag = dir
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(PREFIX))
            .unwrap_or_default()
            .to_owned();
        Ok(DemoDir { dir, tag })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `<pid>-<random>`: what the demo's names under `/dev/shm` carry.
    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    /// Creates the empty log file of the monitor of `rank` (0600, exclusive,
    /// never through a link), for the monitor to append to.
    ///
    /// # Errors
    /// The path and the errno (`EEXIST` when anything is at the path).
    pub(crate) fn create_log(&self, rank: u32) -> Result<PathBuf, Failure> {
        let path = self.path().join(format!("monitor-{rank}.log"));
        nodeipc_fs::create_exclusive(&path, 0o600)
            .map_err(|e| Failure::Error(format!("making the log of monitor {rank}: {e}")))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    use std::time::Duration;

    use nodeipc_testkit::{TempDir, Watchdog};

    use super::DemoDir;
    use crate::Failure;

    const CHILD_ENV: &str = "NODEIPC_TEST_DEMO_FILES_CHILD";

    fn message(failure: Failure) -> String {
        match failure {
            Failure::Error(s)
            | Failure::Timeout(s)
            | Failure::Usage(s)
            | Failure::Signal(_, s)
            | Failure::Status(_, s) => s,
        }
    }

    /// In a child made for it: umask 000 and every chmod refused. Code that
    /// made the directory or a file open to all and tightened it afterwards
    /// fails here (the old `create_dir` then `set_permissions` did).
    #[test]
    fn regression_demo_dir_and_log_modes_are_set_by_the_creating_call() {
        const TEST: &str =
            "demo::files::tests::regression_demo_dir_and_log_modes_are_set_by_the_creating_call";
        if let Some(parent) = std::env::var_os(CHILD_ENV) {
            // SAFETY: umask only sets this process's file creation mask.
            unsafe { libc::umask(0) };
            nodeipc_testkit::deny_chmod();
            let dir = DemoDir::create_in(parent.as_ref())
                .map_err(message)
                .unwrap();
            let meta = std::fs::symlink_metadata(dir.path()).unwrap();
            assert!(meta.is_dir());
            assert_eq!(meta.mode() & 0o7777, 0o700, "{}", dir.path().display());
            let log = dir.create_log(3).map_err(message).unwrap();
            let meta = std::fs::symlink_metadata(&log).unwrap();
            assert!(meta.is_file());
            assert_eq!(meta.mode() & 0o7777, 0o600, "{}", log.display());
            // The filter is on: a chmod now fails.
            assert!(std::fs::set_permissions(&log, PermissionsExt::from_mode(0o600)).is_err());
            return;
        }
        let _dog = Watchdog::new(TEST, Duration::from_secs(60));
        let parent = TempDir::new("demo-files");
        nodeipc_testkit::spawn_child(
            nodeipc_testkit::this_test_in_a_child(TEST).env(CHILD_ENV, parent.path()),
        )
        .output_success(Duration::from_secs(30));
        let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
        assert!(left.is_empty(), "the directory was not removed: {left:?}");
    }

    #[test]
    fn regression_a_link_or_fifo_at_a_log_path_is_refused_not_followed() {
        let parent = TempDir::new("demo-plant");
        let dir = DemoDir::create_in(parent.path()).map_err(message).unwrap();
        let name = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with(&format!("nodeipc-demo-{}-", std::process::id())),
            "{name}"
        );
        assert_eq!(name.rsplit('-').next().unwrap().len(), 16, "{name}");

        // What an attacker would plant, were the name known in advance.
        let target = parent.join("chosen-by-someone-else");
        std::os::unix::fs::symlink(&target, dir.path().join("monitor-0.log")).unwrap();
        let refused = message(dir.create_log(0).unwrap_err());
        assert!(
            refused.contains("monitor-0.log") && refused.contains("File exists"),
            "{refused}"
        );
        assert!(!target.exists(), "the link was followed");

        let fifo = dir.path().join("monitor-1.log");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c_path` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let refused = message(dir.create_log(1).unwrap_err());
        assert!(refused.contains("monitor-1.log"), "{refused}");
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );

        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists(), "the directory was not removed");
    }

    #[test]
    fn a_missing_parent_is_named() {
        let refused = message(
            DemoDir::create_in("/nonexistent-nodeipc-parent".as_ref())
                .err()
                .unwrap(),
        );
        assert!(
            refused.contains("/nonexistent-nodeipc-parent/nodeipc-demo-")
                && refused.contains("No such file or directory"),
            "{refused}"
        );
    }
}
