//! Standard output for every subcommand, written so that a reader that goes
//! away (`nodeipc ls | head -1`) ends the output, never the work.
//!
//! `println!` panics when standard output is a pipe whose reader has left
//! (exit 101, "failed printing to stdout: Broken pipe"), and a panic in the
//! middle of `clean` stops it between two removals. Everything the commands
//! print goes through here instead: a closed pipe (`EPIPE`) is remembered and
//! later output is dropped quietly, as Unix tools do; any other write error
//! (a full disk, say) is remembered too and reported once the work is done,
//! by [`finish`].

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;

use crate::Failure;

/// What became of standard output so far.
enum State {
    Open,
    /// The reader left: nothing more is written, nothing is reported.
    Closed,
    /// Another error: nothing more is written; [`finish`] reports it.
    Failed(io::Error),
}

static STATE: Mutex<State> = Mutex::new(State::Open);

/// Prints a line on standard output (see the module's documentation):
/// `outln!("{removed} removed")`, a drop-in for `println!`. Callers that
/// want to know whether the reader is still there call [`line`].
macro_rules! outln {
    ($($arg:tt)*) => {{
        $crate::output::line(format_args!($($arg)*));
    }};
}

/// Writes `args` and a newline to standard output. Returns `false` once
/// standard output is gone (closed by its reader, or failing), so a caller
/// with much to write can stop producing it; callers with work to finish
/// ignore it and carry on.
pub(crate) fn line(args: fmt::Arguments<'_>) -> bool {
    write_with(|out| {
        out.write_fmt(args)?;
        out.write_all(b"\n")
    })
}

/// Writes text without adding a newline, as [`line`] does.
pub(crate) fn text(text: &str) -> bool {
    write_with(|out| out.write_all(text.as_bytes()))
}

/// Writes raw bytes, as [`line`] does.
pub(crate) fn bytes(data: &[u8]) -> bool {
    write_with(|out| out.write_all(data))
}

fn write_with(write: impl FnOnce(&mut io::StdoutLock<'static>) -> io::Result<()>) -> bool {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!(*state, State::Open) {
        return false;
    }
    match write(&mut io::stdout().lock()) {
        Ok(()) => true,
        Err(e) => {
            *state = failed(e);
            false
        }
    }
}

fn failed(error: io::Error) -> State {
    if error.kind() == io::ErrorKind::BrokenPipe {
        State::Closed
    } else {
        State::Failed(error)
    }
}

/// Flushes standard output; called once, when the command's work is done.
///
/// # Errors
/// A write error other than a closed pipe, naming standard output.
pub(crate) fn finish() -> Result<(), Failure> {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(*state, State::Open)
        && let Err(e) = io::stdout().lock().flush()
    {
        *state = failed(e);
    }
    match std::mem::replace(&mut *state, State::Closed) {
        State::Open | State::Closed => Ok(()),
        State::Failed(e) => Err(Failure::Error(format!("writing to standard output: {e}"))),
    }
}
