//! The KittensBroker row: `sync()` of ours against the seed's algorithm and
//! against the Rust barrier it is built on (what the C ABI and the C++
//! header add), at 2 and 8 ranks.

use std::io;

use super::{Contender, Measured, Options, Row};
use crate::bench::Summary;
use crate::bench::barrier::{self, BarrierKind};
use crate::bench::kittens::{self, Broker};

/// The rows, or one row saying why they cannot be measured here.
///
/// # Errors
/// A peer or broker that failed.
pub fn kittens(options: Options) -> io::Result<Vec<Row>> {
    if let Some(why) = kittens::unavailable() {
        let nothing = |name: &str| Measured {
            name: name.to_owned(),
            ns: Summary {
                median: f64::NAN,
                p99: f64::NAN,
                min: f64::NAN,
                samples: 0,
            },
        };
        return Ok(vec![options.done(Row {
            bench: "kittens",
            what: "KittensBroker::sync()".into(),
            params: vec![],
            ours: nothing(Broker::Ours.name()),
            baselines: vec![nothing(Broker::Seed.name())],
            note: Some(format!(
                "not measured: this build had no C++ compiler ({why})"
            )),
        })]);
    }
    let mut rows = Vec::new();
    for ranks in [2u32, 8] {
        let iters = options.ops(if ranks > 2 { 1_000 } else { 4_000 });
        // The seed sleeps at every poll: a tenth of the syncs take longer already.
        let slow = (iters / 10).max(2);
        let broker =
            |b: Broker, ops| Contender::new(b.name(), ops, move |i| kittens::syncs(b, ranks, i));
        let contenders = vec![
            broker(Broker::Ours, iters),
            broker(Broker::Seed, slow),
            Contender::new("Rust Group::barrier", iters, move |i| {
                barrier::barriers(BarrierKind::Nodeipc, ranks, i)
            }),
        ];
        let what = format!("KittensBroker::sync(), {ranks} processes");
        let (ours, baselines) = options.measure(&what, contenders)?;
        rows.push(options.done(Row {
            bench: "kittens",
            what,
            params: vec![("ranks", u64::from(ranks)), ("iters", iters)],
            ours,
            baselines,
            note: None,
        }));
    }
    Ok(rows)
}
