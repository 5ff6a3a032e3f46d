//! The queue's rows: a 64-byte round trip between two processes beside the
//! cache-line floor and a Unix socket, and a one-way stream of 64-byte
//! messages in batches of 64 beside the same stream over a Unix socket.

use std::io;

use super::layers::ring;
use super::{Contender, Options, Row, floor_note};
use crate::bench::Handoff;
use crate::bench::queue::{self, BATCH, Transport};

fn contender(which: Transport, stream: bool, ops: u64) -> Contender<'static> {
    Contender::new(which.name(), ops, move |n| {
        if stream {
            queue::stream(which, n)
        } else {
            queue::round_trip(which, n)
        }
    })
}

/// The queue between two processes, pinned one per core where there are two.
///
/// # Errors
/// A peer that failed, or a message that arrived corrupted.
pub fn queue(options: Options) -> io::Result<Vec<Row>> {
    let laps = options.ops(8_000);
    let contenders = vec![
        contender(Transport::Queue, false, laps),
        ring(Handoff::CacheLine, 2, laps),
        contender(Transport::UnixSocket, false, laps / 8),
    ];
    let what = "queue round trip, 64-byte message, 2 processes";
    let (ours, baselines) = options.measure(what, contenders)?;
    let note = floor_note(&ours, &baselines);
    let round_trip = options.done(Row {
        bench: "queue",
        what: what.into(),
        params: vec![("payload", 64), ("processes", 2)],
        ours,
        baselines,
        note,
    });
    let messages = options.ops(64 * 10_000);
    let contenders = vec![
        contender(Transport::Queue, true, messages),
        contender(Transport::UnixSocket, true, messages / 8),
    ];
    let what = "queue stream, 64-byte messages in batches of 64, per message";
    let (ours, baselines) = options.measure(what, contenders)?;
    let note = format!(
        "{:.1} M messages/s one way ({:.1} M/s over the socket)",
        1e3 / ours.ns.median,
        1e3 / baselines[0].ns.median
    );
    let stream = options.done(Row {
        bench: "queue",
        what: what.into(),
        params: vec![("payload", 64), ("batch", BATCH as u64)],
        ours,
        baselines,
        note: Some(note),
    });
    Ok(vec![round_trip, stream])
}
