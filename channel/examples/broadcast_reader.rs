//! A broadcast ring's reader in Rust, for rings a Python
//! `nodeipc.broadcast.MessageQueue` (or any writer) made:
//!
//! ```text
//! broadcast_reader NAME READERS CHUNK_BYTES CHUNKS RANK COUNT
//! ```
//!
//! Joins as reader RANK, reads COUNT messages and prints one line per
//! message: its length and its FNV-1a hash (64-bit), in hex.

use std::time::Duration;

use nodeipc_channel::broadcast::Broadcast;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 6 {
        return Err("usage: broadcast_reader NAME READERS CHUNK_BYTES CHUNKS RANK COUNT".into());
    }
    let ring = Broadcast::builder(&args[0])
        .readers(args[1].parse()?)
        .chunk_bytes(args[2].parse()?)
        .chunks(args[3].parse()?)
        .timeout(Some(Duration::from_secs(60)));
    let mut reader = ring.join(args[4].parse()?)?;
    reader.wait_until_ready(Duration::from_secs(60))?;
    let count: u64 = args[5].parse()?;
    for _ in 0..count {
        let message = reader.recv()?;
        println!("{} {:016x}", message.len(), fnv1a(&message));
    }
    Ok(())
}
