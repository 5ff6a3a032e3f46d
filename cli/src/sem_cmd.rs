//! `nodeipc sem create|post|wait|value|unlink`.

use std::time::Duration;

use clap::Subcommand;
use nodeipc_sem::{NamedSemaphore, Semaphore};

use crate::CmdResult;
use crate::limits::{u32_in, u64_in};

#[derive(Subcommand)]
pub(crate) enum SemCommand {
    /// Create a named semaphore (mode 0600); it stays until `sem unlink`.
    Create {
        /// Semaphore name, such as /nodeipc-ready.
        name: String,
        /// Initial count, 0 to 2147483647 (SEM_VALUE_MAX).
        #[arg(long, default_value_t = 0, value_parser = u32_in(0, nodeipc_sem::SEM_VALUE_MAX))]
        value: u32,
    },
    /// Increment the count.
    Post {
        /// Semaphore name.
        name: String,
    },
    /// Take one from the count, waiting for it; exits 3 on timeout.
    Wait {
        /// Semaphore name.
        name: String,
        /// Give up after this many milliseconds (default: wait forever).
        #[arg(long, value_parser = u64_in(0, u64::MAX))]
        timeout_ms: Option<u64>,
    },
    /// Print the current count.
    Value {
        /// Semaphore name.
        name: String,
    },
    /// Remove the semaphore's name.
    Unlink {
        /// Semaphore name.
        name: String,
    },
}

pub(crate) fn run(command: SemCommand) -> CmdResult {
    match command {
        SemCommand::Create { name, value } => NamedSemaphore::create(&name, value)?.persist(),
        SemCommand::Post { name } => NamedSemaphore::open(&name)?.post()?,
        SemCommand::Wait { name, timeout_ms } => {
            let sem = NamedSemaphore::open(&name)?;
            // A timeout exits 3 (crate::errors).
            match timeout_ms {
                Some(ms) => sem.wait_timeout(Duration::from_millis(ms))?,
                None => sem.wait()?,
            }
        }
        SemCommand::Value { name } => outln!("{}", NamedSemaphore::open(&name)?.value()?),
        SemCommand::Unlink { name } => NamedSemaphore::unlink(&name)?,
    }
    Ok(())
}
