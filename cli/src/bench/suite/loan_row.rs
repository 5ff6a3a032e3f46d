//! The channel's loan row: a 1 MiB request built in the request frame
//! (`send_with`) against the same request built in a private buffer and
//! copied by `send`, each answered by a worker reading it in place.

use std::io;

use super::{Contender, Options, Row};
use crate::bench::channel_loan::{Build, LoanSession};

/// A session of `build` as a contender: each batch a fresh channel and
/// worker, warmed up for a quarter of the batch.
fn contender(build: Build, payload: usize, iters: u64) -> Contender<'static> {
    Contender::new(build.name(), iters, move |iters| {
        let warm_up = (iters / 4).max(2);
        let mut session = LoanSession::start(build, payload, false, iters + warm_up)?;
        session.run(warm_up)?;
        let elapsed = session.run(iters)?;
        session.finish()?;
        Ok(elapsed)
    })
}

/// The row: ours is the request built in the loan.
///
/// # Errors
/// A session that failed.
pub fn loan(options: Options) -> io::Result<Row> {
    let payload = 1 << 20;
    let iters = options.ops(160);
    let contenders = vec![
        contender(Build::InLoan, payload, iters),
        contender(Build::ThenCopy, payload, iters),
    ];
    let what = "1 MiB request built per round, 1 worker reading it in place";
    let (ours, baselines) = options.measure(what, contenders)?;
    let note = Some(format!(
        "built in the loan = {:.2}x built-then-copied",
        ours.ns.median / baselines[0].ns.median
    ));
    Ok(options.done(Row {
        bench: "channel",
        what: what.to_owned(),
        params: vec![("workers", 1), ("payload", payload as u64), ("depth", 1)],
        ours,
        baselines,
        note,
    }))
}
