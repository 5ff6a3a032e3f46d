//! Where a rank's stdout and stderr go, as torchrun's `--log-dir`,
//! `--redirects`, `--tee` and `--local-ranks-filter` say: inherited (the
//! default), into files under a log directory, or both (tee), the console
//! copy of each line prefixed with the rank (`[rank3]:`, and the node across
//! nodes: `[node1/rank3]:`).
//!
//! Files: `<log dir>/<run id>_<random>/attempt_<restart>/<local rank>/`
//! `stdout.log` and `stderr.log`, made with `nodeipc-fs` (no link followed,
//! nothing planted taken); `--log-dir /dev/null` keeps no files.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_fs::Existing;

use crate::{Error, Result};

/// The longest piece of a line copied at once: a rank that writes without
/// newlines gets its output cut into pieces this long, each prefixed.
const MAX_LINE: usize = 64 * 1024;

/// How long the end of a round waits for a tee'd stream's last lines.
const TEE_DRAIN: Duration = Duration::from_secs(2);

/// Which of a rank's standard streams a setting applies to (torchrun's
/// `Std`: 0 none, 1 stdout, 2 stderr, 3 both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Streams {
    /// Neither.
    #[default]
    None,
    /// Stdout.
    Out,
    /// Stderr.
    Err,
    /// Both.
    All,
}

impl Streams {
    fn from_digit(digit: u8) -> Option<Streams> {
        Some(match digit {
            b'0' => Streams::None,
            b'1' => Streams::Out,
            b'2' => Streams::Err,
            b'3' => Streams::All,
            _ => return None,
        })
    }

    fn has(self, stream: Stream) -> bool {
        matches!(
            (self, stream),
            (Streams::All, _) | (Streams::Out, Stream::Out) | (Streams::Err, Stream::Err)
        )
    }
}

/// torchrun's `-r`/`-t` value: one digit for every local rank, or
/// `LOCAL_RANK:DIGIT,...` (other ranks: none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamChoice {
    every: Streams,
    per_rank: Vec<(u32, Streams)>,
}

impl StreamChoice {
    /// Parses `0`..`3` or `0:1,3:2` (torchrun's grammar, any local rank).
    ///
    /// # Errors
    /// A message naming the value and the grammar.
    pub fn parse(text: &str) -> std::result::Result<StreamChoice, String> {
        let refused = || {
            format!(
                "{:?} is not 0, 1, 2 or 3 (none, stdout, stderr, both), nor LOCAL_RANK:DIGIT,... (0:1,1:3)",
                nodeipc_text::Printable(text).to_string()
            )
        };
        if let [digit] = text.as_bytes() {
            return Streams::from_digit(*digit)
                .map(|every| StreamChoice {
                    every,
                    per_rank: Vec::new(),
                })
                .ok_or_else(refused);
        }
        let mut per_rank = Vec::new();
        for item in text.split(',') {
            let (rank, digit) = item.split_once(':').ok_or_else(refused)?;
            let rank: u32 = rank.parse().map_err(|_| refused())?;
            let streams = match digit.as_bytes() {
                [d] => Streams::from_digit(*d).ok_or_else(refused)?,
                _ => return Err(refused()),
            };
            if rank >= crate::MAX_NPROC {
                return Err(refused());
            }
            per_rank.push((rank, streams));
        }
        Ok(StreamChoice {
            every: Streams::None,
            per_rank,
        })
    }

    fn for_rank(&self, local_rank: u32) -> Streams {
        self.per_rank
            .iter()
            .rev()
            .find(|(rank, _)| *rank == local_rank)
            .map_or(self.every, |(_, streams)| *streams)
    }

    fn is_none(&self) -> bool {
        self.every == Streams::None && self.per_rank.iter().all(|(_, s)| *s == Streams::None)
    }
}

/// Where ranks' output goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputOptions {
    /// The base directory of the log files (default: a new private
    /// directory under the temporary directory, when any stream goes to a
    /// file); `/dev/null` keeps no files.
    pub log_dir: Option<PathBuf>,
    /// Streams written to files only.
    pub redirects: StreamChoice,
    /// Streams written to files and copied to the console, prefixed.
    pub tee: StreamChoice,
    /// The local ranks whose output reaches the console; `None`: all.
    pub local_ranks_filter: Option<Vec<u32>>,
}

impl OutputOptions {
    /// Parses `--local-ranks-filter`: comma-separated local ranks.
    ///
    /// # Errors
    /// A message naming the value.
    pub fn parse_filter(text: &str) -> std::result::Result<Vec<u32>, String> {
        text.split(',')
            .map(|item| item.trim().parse::<u32>().ok().filter(|r| *r < crate::MAX_NPROC))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                format!(
                    "--local-ranks-filter {:?} is not a comma-separated list of local ranks (0,1,2)",
                    nodeipc_text::Printable(text).to_string()
                )
            })
    }

    fn shown(&self, local_rank: u32) -> bool {
        self.local_ranks_filter
            .as_ref()
            .is_none_or(|ranks| ranks.contains(&local_rank))
    }

    fn any_file(&self) -> bool {
        !(self.redirects.is_none() && self.tee.is_none())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Out,
    Err,
}

impl Stream {
    fn file_name(self) -> &'static str {
        match self {
            Stream::Out => "stdout.log",
            Stream::Err => "stderr.log",
        }
    }
}

/// The launcher's log directory for this run, made once.
#[derive(Debug)]
pub(crate) struct Logs {
    /// `None`: no files (`/dev/null`, or nothing redirected).
    run: Option<PathBuf>,
}

impl Logs {
    /// Makes `<log dir>/<run id>_<random>` when a stream goes to a file.
    pub(crate) fn create(options: &OutputOptions, run_id: &str) -> Result<Logs> {
        if !options.any_file() {
            return Ok(Logs { run: None });
        }
        let base = match &options.log_dir {
            Some(dir) if dir == Path::new("/dev/null") => return Ok(Logs { run: None }),
            Some(dir) => dir.clone(),
            None => std::env::temp_dir(),
        };
        // Made when missing, as torchrun does (private, as every directory
        // we make).
        if options.log_dir.is_some() && !base.exists() {
            make_dir(&base)?;
        }
        nodeipc_fs::check_dir(&base, nodeipc_fs::ModeRule::NotWritableByOthers)
            .map_err(|e| Error::options(format!("--log-dir: {e}")))?;
        let run = nodeipc_fs::create_unique_private_dir(&base, &format!("{run_id}_"))
            .map_err(|e| Error::options(format!("--log-dir: {e}")))?;
        Ok(Logs { run: Some(run) })
    }

    /// Where the files are, for the launcher's first line.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.run.as_deref()
    }

    /// The streams of `local_rank` in round `restart`, ready for spawning.
    pub(crate) fn rank_streams(
        &self,
        options: &OutputOptions,
        restart: u32,
        local_rank: u32,
        prefix: String,
    ) -> Result<RankStreams> {
        let dir = match &self.run {
            Some(run) => {
                let attempt = run.join(format!("attempt_{restart}"));
                make_dir(&attempt)?;
                let dir = attempt.join(local_rank.to_string());
                make_dir(&dir)?;
                Some(dir)
            }
            None => None,
        };
        let shown = options.shown(local_rank);
        let mut streams = RankStreams {
            stdout: Stdio::inherit(),
            stderr: Stdio::inherit(),
            tees: Vec::new(),
            error_file: dir.as_ref().map(|d| d.join("error.json")),
        };
        for stream in [Stream::Out, Stream::Err] {
            let tee = options.tee.for_rank(local_rank).has(stream);
            let redirect = tee || options.redirects.for_rank(local_rank).has(stream);
            let file = match (&dir, redirect) {
                (Some(dir), true) => Some(open_log(&dir.join(stream.file_name()))?),
                _ => None,
            };
            let stdio = if tee && shown {
                let (reader, writer) =
                    std::io::pipe().map_err(|e| Error::io("pipe for a rank's tee'd output", e))?;
                streams
                    .tees
                    .push(Tee::start(reader, file, stream, prefix.clone())?);
                Stdio::from(writer)
            } else if let Some(file) = file {
                Stdio::from(file)
            } else if redirect || !shown {
                Stdio::null()
            } else {
                Stdio::inherit()
            };
            match stream {
                Stream::Out => streams.stdout = stdio,
                Stream::Err => streams.stderr = stdio,
            }
        }
        Ok(streams)
    }
}

/// A rank's stdout and stderr, and the threads copying its tee'd lines.
pub(crate) struct RankStreams {
    pub(crate) stdout: Stdio,
    pub(crate) stderr: Stdio,
    pub(crate) tees: Vec<Tee>,
    /// torchrun's `TORCHELASTIC_ERROR_FILE`, when files are kept.
    pub(crate) error_file: Option<PathBuf>,
}

fn make_dir(path: &Path) -> Result<()> {
    match nodeipc_fs::create_private_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) => {
            nodeipc_fs::check_private_dir(path)
                .map_err(|e| Error::options(format!("--log-dir: {e}")))
        }
        Err(e) => Err(Error::options(format!("--log-dir: {e}"))),
    }
}

fn open_log(path: &Path) -> Result<OwnedFd> {
    nodeipc_fs::create_output(path, 0o600, Existing::Truncate)
        .map_err(|e| Error::options(format!("--log-dir: {e}")))
}

/// One tee'd stream: a thread copying lines from the rank's pipe to its
/// file and, prefixed, to the launcher's console.
pub(crate) struct Tee {
    done: mpsc::Receiver<()>,
}

impl Tee {
    fn start(
        reader: std::io::PipeReader,
        file: Option<OwnedFd>,
        stream: Stream,
        prefix: String,
    ) -> Result<Tee> {
        let (tx, done) = mpsc::channel();
        thread::Builder::new()
            .name("nodeipc-tee".into())
            .spawn(move || {
                copy_lines(reader, file.map(File::from), stream, &prefix);
                let _ = tx.send(());
            })
            .map_err(|e| Error::io("starting a thread for a rank's tee'd output", e))?;
        Ok(Tee { done })
    }

    /// Waits until `deadline` for the last lines (the pipe's writers are
    /// gone once the round is stopped; something the rank left running may
    /// keep it open, and is not waited for past the deadline).
    pub(crate) fn drain(self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = self.done.recv_timeout(left);
    }
}

/// The deadline for draining a stopped round's tee'd streams.
pub(crate) fn drain_deadline() -> Instant {
    Instant::now() + TEE_DRAIN
}

/// Copies until end of file: the raw bytes to the file as they come, each
/// whole line with its prefix to the console (a line longer than
/// [`MAX_LINE`] in pieces; what is left at the end as a last line). A
/// failed write to the file or the console stops that copy, not the rank.
fn copy_lines(reader: std::io::PipeReader, mut file: Option<File>, stream: Stream, prefix: &str) {
    let mut reader = BufReader::with_capacity(MAX_LINE, reader);
    let mut pending: Vec<u8> = Vec::new();
    let mut console_ok = true;
    let show = |line: &[u8], console_ok: &mut bool| {
        if !*console_ok {
            return;
        }
        let mut out = Vec::with_capacity(prefix.len() + line.len() + 1);
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            out.push(b'\n');
        }
        // One write a line, under the stream's lock: ranks' lines never
        // interleave mid-line.
        *console_ok = match stream {
            Stream::Out => std::io::stdout().lock().write_all(&out).is_ok(),
            Stream::Err => std::io::stderr().lock().write_all(&out).is_ok(),
        };
    };
    loop {
        let used = match reader.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => {
                if let Some(f) = &mut file
                    && f.write_all(chunk).is_err()
                {
                    file = None;
                }
                pending.extend_from_slice(chunk);
                chunk.len()
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        reader.consume(used);
        let mut start = 0;
        while let Some(newline) = pending[start..].iter().position(|b| *b == b'\n') {
            let end = start + newline + 1;
            show(&pending[start..end], &mut console_ok);
            start = end;
        }
        while pending.len() - start >= MAX_LINE {
            show(&pending[start..start + MAX_LINE], &mut console_ok);
            start += MAX_LINE;
        }
        pending.drain(..start);
    }
    if !pending.is_empty() {
        show(&pending, &mut console_ok);
    }
}

/// The console prefix of a rank's tee'd lines: `[rank3]:`, or with the node
/// when the job spans nodes, `[node1/rank3]:`.
pub(crate) fn prefix(global_rank: u32, node: Option<u32>) -> String {
    match node {
        Some(node) => format!("[node{node}/rank{global_rank}]: "),
        None => format!("[rank{global_rank}]: "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_choices_parse_as_torchrun_writes_them() {
        let all = StreamChoice::parse("3").unwrap();
        assert_eq!(all.for_rank(7), Streams::All);
        let mixed = StreamChoice::parse("0:1,1:2").unwrap();
        assert_eq!(mixed.for_rank(0), Streams::Out);
        assert_eq!(mixed.for_rank(1), Streams::Err);
        assert_eq!(mixed.for_rank(2), Streams::None);
        for bad in ["4", "", "0:4", "x:1", "0:", "0:12", "1,2"] {
            let error = StreamChoice::parse(bad).unwrap_err();
            assert!(error.contains("is not 0, 1, 2 or 3"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_filter_is_a_list_of_local_ranks() {
        assert_eq!(OutputOptions::parse_filter("0, 2").unwrap(), vec![0, 2]);
        assert!(OutputOptions::parse_filter("0,a").is_err());
        assert!(OutputOptions::parse_filter("").is_err());
    }

    #[test]
    fn prefixes_name_the_rank_and_the_node_across_nodes() {
        assert_eq!(prefix(3, None), "[rank3]: ");
        assert_eq!(prefix(3, Some(1)), "[node1/rank3]: ");
    }
}
