//! Progress tracking across restarts, as nvidia-resiliency-ext's launcher
//! does it: a job that keeps failing without its checkpointed iteration
//! moving is not restarted again, and the launcher exits with the
//! no-restart code (93 unless told otherwise).
//!
//! The iteration is read from the file the job writes at each checkpoint
//! (`checkpoint_iteration_file`: one integer). A missing, empty or
//! unreadable file is "unknown": the cycle is not counted either way.

use std::path::{Path, PathBuf};

use nodeipc_fs::ModeRule;

/// nvidia-resiliency-ext's exit code for "decided not to restart".
pub const NO_RESTART_EXIT_CODE: i32 = 93;

/// The largest checkpoint iteration file read: one integer and white space.
const MAX_ITERATION_FILE: u64 = 4096;

/// When the launcher stops restarting a job that makes no progress. The
/// default is nvidia-resiliency-ext's (3 cycles, 1 iteration, exit 93);
/// [`ProgressOptions::off`] is a launch's without its settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressOptions {
    /// Consecutive cycles without progress after which no restart follows;
    /// 0 or less turns tracking off (nvidia-resiliency-ext's default: 3).
    pub max_no_progress_cycles: i64,
    /// Iterations a cycle must add to count as progress (default 1).
    pub min_progress_iterations: i64,
    /// The file holding the latest checkpointed iteration; without one,
    /// tracking never stops a job.
    pub checkpoint_iteration_file: Option<PathBuf>,
    /// The launcher's exit code when it decides not to restart (default 93).
    pub no_restart_exit_code: i32,
}

impl Default for ProgressOptions {
    fn default() -> Self {
        ProgressOptions {
            max_no_progress_cycles: 3,
            min_progress_iterations: 1,
            checkpoint_iteration_file: None,
            no_restart_exit_code: NO_RESTART_EXIT_CODE,
        }
    }
}

/// What one read of the iteration file gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Iteration {
    Known(i64),
    /// Not written yet (no file, or an empty one): normal before the first
    /// checkpoint.
    NotYet,
    /// Unreadable or not an integer: the reason, for a warning.
    Unreadable(String),
}

/// Reads the checkpointed iteration: the whole file, trimmed, one integer.
/// The file is opened without following a link or blocking on a FIFO, and
/// must be a regular file of ours that nobody else can write.
pub(crate) fn read_iteration(path: &Path) -> Iteration {
    let bytes =
        match nodeipc_fs::read_capped(path, ModeRule::NotWritableByOthers, MAX_ITERATION_FILE) {
            Ok(bytes) => bytes,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOENT.raw_os_error()) => {
                return Iteration::NotYet;
            }
            Err(e) => return Iteration::Unreadable(e.to_string()),
        };
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text.trim(),
        Err(_) => {
            return Iteration::Unreadable(format!("{}: not UTF-8 text", path.display()));
        }
    };
    if text.is_empty() {
        return Iteration::NotYet;
    }
    match text.parse::<i64>() {
        Ok(n) => Iteration::Known(n),
        Err(_) => Iteration::Unreadable(format!(
            "{}: {:?} is not an iteration number",
            path.display(),
            nodeipc_text::Printable(&text.chars().take(40).collect::<String>()).to_string()
        )),
    }
}

/// The tracker's verdict on the cycle that just failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Restart as usual (if restarts remain).
    Restart,
    /// Stop: this many cycles in a row made no progress.
    Stop { cycles: i64 },
}

/// Counts consecutive cycles that made no progress.
#[derive(Debug)]
pub(crate) struct ProgressTracker {
    options: ProgressOptions,
    /// The iteration at the start of the cycle now running.
    baseline: Option<i64>,
    no_progress: i64,
}

impl ProgressTracker {
    /// A tracker whose baseline is the file as it is now; the warning to
    /// print when tracking is asked for but cannot work.
    pub(crate) fn start(options: &ProgressOptions) -> (ProgressTracker, Option<String>) {
        let mut warning = None;
        let baseline = match (&options.checkpoint_iteration_file, options.enabled()) {
            (Some(path), true) => match read_iteration(path) {
                Iteration::Known(n) => Some(n),
                Iteration::NotYet => None,
                Iteration::Unreadable(why) => {
                    warning = Some(format!("progress tracking: {why}; taken as unknown"));
                    None
                }
            },
            (None, true) => {
                warning = Some(
                    "progress tracking: no checkpoint iteration file given \
                     (--ft-checkpoint-iteration-file): a job is never stopped for lack of progress"
                        .into(),
                );
                None
            }
            (_, false) => None,
        };
        let tracker = ProgressTracker {
            options: options.clone(),
            baseline,
            no_progress: 0,
        };
        (tracker, warning)
    }

    /// Called when a cycle failed, before restarts left are counted: reads
    /// the iteration and says whether to restart. The second value is a
    /// warning to print (an unreadable file).
    pub(crate) fn cycle_failed(&mut self) -> (Verdict, Option<String>) {
        let Some(path) = self
            .options
            .checkpoint_iteration_file
            .as_deref()
            .filter(|_| self.options.enabled())
        else {
            return (Verdict::Restart, None);
        };
        let (now, warning) = match read_iteration(path) {
            Iteration::Known(n) => (Some(n), None),
            Iteration::NotYet => (None, None),
            Iteration::Unreadable(why) => (
                None,
                Some(format!("progress tracking: {why}; cycle not counted")),
            ),
        };
        self.record(now);
        let verdict = if self.no_progress >= self.options.max_no_progress_cycles {
            Verdict::Stop {
                cycles: self.no_progress,
            }
        } else {
            Verdict::Restart
        };
        (verdict, warning)
    }

    /// One cycle's reading: unknown is skipped; both ends 0 is "iterations
    /// not reported" and skipped too.
    fn record(&mut self, now: Option<i64>) {
        let Some(now) = now else { return };
        let before = self.baseline.unwrap_or(0);
        if !(before == 0 && now == 0) {
            if now.saturating_sub(before) >= self.options.min_progress_iterations {
                self.no_progress = 0;
            } else {
                self.no_progress = self.no_progress.saturating_add(1);
            }
        }
        self.baseline = Some(now);
    }
}

impl ProgressOptions {
    /// No tracking: what a launch without nvidia-resiliency-ext's settings
    /// gets.
    pub fn off() -> ProgressOptions {
        ProgressOptions {
            max_no_progress_cycles: 0,
            ..ProgressOptions::default()
        }
    }

    /// Whether tracking is on (`max_no_progress_cycles` above 0).
    pub fn enabled(&self) -> bool {
        self.max_no_progress_cycles > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(max: i64, min: i64) -> ProgressTracker {
        ProgressTracker {
            options: ProgressOptions {
                max_no_progress_cycles: max,
                min_progress_iterations: min,
                checkpoint_iteration_file: Some("/nonexistent".into()),
                no_restart_exit_code: 93,
            },
            baseline: None,
            no_progress: 0,
        }
    }

    #[test]
    fn three_cycles_without_progress_stop_and_progress_resets_the_count() {
        let mut t = tracker(3, 1);
        t.baseline = Some(10);
        t.record(Some(10));
        t.record(Some(10));
        assert_eq!(t.no_progress, 2);
        t.record(Some(11));
        assert_eq!(t.no_progress, 0, "one iteration is progress");
        for _ in 0..3 {
            t.record(Some(11));
        }
        assert_eq!(t.no_progress, 3);
    }

    #[test]
    fn unknown_and_zero_to_zero_cycles_are_not_counted() {
        let mut t = tracker(3, 1);
        t.record(None);
        t.record(Some(0));
        t.record(Some(0));
        assert_eq!(t.no_progress, 0);
        t.record(Some(5));
        t.record(Some(5));
        assert_eq!(t.no_progress, 1, "5 to 5 is no progress");
    }

    #[test]
    fn min_progress_iterations_is_the_bar() {
        let mut t = tracker(3, 100);
        t.baseline = Some(1000);
        t.record(Some(1050));
        assert_eq!(t.no_progress, 1, "50 iterations are below the bar of 100");
        t.record(Some(1150));
        assert_eq!(t.no_progress, 0);
    }
}
