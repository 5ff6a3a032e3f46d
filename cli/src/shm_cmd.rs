//! `nodeipc shm create|write|read|unlink`.

use std::io::{Read, Write};

use clap::Subcommand;
use nodeipc_shm::{OpenOptions, Region};

use crate::{CmdResult, Failure};

#[derive(Subcommand)]
pub(crate) enum ShmCommand {
    /// Create a region of SIZE bytes (mode 0600); it stays until `shm unlink`.
    Create {
        /// Region name, such as /nodeipc-scratch.
        name: String,
        /// Size in bytes.
        #[arg(long)]
        size: usize,
    },
    /// Copy standard input into the region.
    Write {
        /// Region name.
        name: String,
        /// Where to start writing.
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Copy bytes of the region to standard output.
    Read {
        /// Region name.
        name: String,
        /// Where to start reading.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// How many bytes (default: to the end).
        #[arg(long)]
        len: Option<usize>,
    },
    /// Remove the region's name.
    Unlink {
        /// Region name.
        name: String,
    },
}

pub(crate) fn run(command: ShmCommand) -> CmdResult {
    match command {
        ShmCommand::Create { name, size } => {
            Region::create(&name, size)?.persist();
        }
        ShmCommand::Write { name, offset } => {
            let region = Region::open(&name, OpenOptions::default())?;
            let mut data = Vec::new();
            std::io::stdin().read_to_end(&mut data)?;
            region.write_at(offset, &data)?;
        }
        ShmCommand::Read { name, offset, len } => {
            let region = Region::open(&name, OpenOptions::default())?;
            let len = match len {
                Some(len) => len,
                None => region.len().checked_sub(offset).ok_or_else(|| {
                    Failure::Error(format!(
                        "offset {offset} is past the end of {name} ({} bytes)",
                        region.len()
                    ))
                })?,
            };
            let mut data = vec![0; len];
            region.read_at(offset, &mut data)?;
            std::io::stdout().write_all(&data)?;
        }
        ShmCommand::Unlink { name } => nodeipc_shm::unlink(&name)?,
    }
    Ok(())
}
