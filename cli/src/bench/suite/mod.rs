//! The side-by-side suite `nodeipc bench` prints: every layer against its
//! baselines, measured in the same run as repeated batches (median and p99
//! of the per-operation time over the batches).

use std::io;
use std::time::Duration;

use crate::bench::Summary;

mod kittens_row;
mod layers;
mod loan_row;
mod open_loop_rows;
mod queue_rows;
mod table;

pub use kittens_row::kittens;
pub use layers::{barrier, channel, channel_contender, fdpass, monitor, sem};
pub use loan_row::loan as channel_loan;
pub use open_loop_rows::{Offered, open_loop_row};
pub use queue_rows::queue;
pub use table::{table, table_header, table_row};

/// How long to measure, and who hears of the progress.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// Fewer and shorter batches: the whole suite in well under a minute.
    pub quick: bool,
    /// Told of each round as it starts and of each row once it is final, so
    /// a run that fails late keeps what it measured.
    pub report: Option<&'a dyn Report>,
}

impl std::fmt::Debug for Options<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("quick", &self.quick)
            .field("report", &self.report.is_some())
            .finish()
    }
}

/// Hears how far a run got: each round as it starts, each row once it is
/// final (every layer function also returns its rows at its end).
pub trait Report {
    /// Round `round` (from 1) of `rounds` of the row `what` starts.
    fn round(&self, what: &str, round: usize, rounds: usize);
    /// `row` is measured and final.
    fn row(&self, row: &Row);
}

impl Options<'_> {
    /// Measures `contenders` for the row `what` (see [`interleave`]),
    /// telling the report of each round: ours and the baselines.
    fn measure(
        self,
        what: &str,
        contenders: Vec<Contender<'_>>,
    ) -> io::Result<(Measured, Vec<Measured>)> {
        let rounds = self.batches();
        let measured = interleave_with(rounds, contenders, |round| {
            if let Some(report) = self.report {
                report.round(what, round, rounds);
            }
        })?;
        Ok(split(measured))
    }

    /// Hands `row`, now final, to the report.
    fn done(self, row: Row) -> Row {
        if let Some(report) = self.report {
            report.row(&row);
        }
        row
    }

    /// Interleaved rounds: each measures one batch of every contender.
    fn batches(self) -> usize {
        if self.quick { 7 } else { 21 }
    }

    /// Operations per batch, scaled from the full size.
    fn ops(self, full: u64) -> u64 {
        if self.quick { (full / 3).max(2) } else { full }
    }
}

/// One implementation's time per operation.
#[derive(Clone, Debug)]
pub struct Measured {
    /// What was measured.
    pub name: String,
    /// Nanoseconds per operation over the batches.
    pub ns: Summary,
}

/// One comparison: ours beside its baselines.
#[derive(Clone, Debug)]
pub struct Row {
    /// The benchmark's key (`sem`, `barrier`, `channel`, …).
    pub bench: &'static str,
    /// A human description of the operation.
    pub what: String,
    /// Parameters, as `(key, value)`.
    pub params: Vec<(&'static str, u64)>,
    /// nodeipc.
    pub ours: Measured,
    /// What it is compared with.
    pub baselines: Vec<Measured>,
    /// A remark printed under the row (bandwidth, say).
    pub note: Option<String>,
}

impl Row {
    /// Ours ÷ the baseline's median time: below 1, ours is faster.
    pub fn ratio(&self, baseline: &Measured) -> f64 {
        self.ours.ns.median / baseline.ns.median
    }

    /// One JSON object: `bench`, the parameters, `ns_per_op` (ours),
    /// `p99_ns_per_op`, per baseline its `ns_per_op` and the `ratio`, the
    /// row's `note` if it has one, and the `machine` it ran on. A time that
    /// is not a finite number (a batch that measured nothing) is `null`:
    /// JSON has no NaN.
    pub fn to_json(&self) -> String {
        let mut row = serde_json::Map::new();
        row.insert("bench".into(), self.bench.into());
        row.insert("what".into(), self.what.as_str().into());
        for (key, value) in &self.params {
            row.insert((*key).into(), (*value).into());
        }
        row.insert("impl".into(), self.ours.name.as_str().into());
        row.insert("ns_per_op".into(), rounded(self.ours.ns.median, 1));
        row.insert("p99_ns_per_op".into(), rounded(self.ours.ns.p99, 1));
        let baselines = self.baselines.iter().map(|b| {
            let times = serde_json::json!({
                "ns_per_op": rounded(b.ns.median, 1),
                "p99_ns_per_op": rounded(b.ns.p99, 1),
            });
            (b.name.clone(), times)
        });
        row.insert("baselines".into(), baselines.collect());
        let ratios = self
            .baselines
            .iter()
            .map(|b| (b.name.clone(), rounded(self.ratio(b), 4)));
        row.insert("ratio".into(), ratios.collect());
        if let Some(note) = &self.note {
            row.insert("note".into(), note.as_str().into());
        }
        row.insert("machine".into(), crate::bench::machine::describe().into());
        serde_json::Value::Object(row).to_string()
    }
}

/// `value` to `digits` decimals, as a JSON number, or `null` if not finite.
fn rounded(value: f64, digits: i32) -> serde_json::Value {
    let scale = 10f64.powi(digits);
    serde_json::Number::from_f64((value * scale).round() / scale)
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// One implementation in a comparison: how many operations a batch holds,
/// and how to run a batch (set-up and tear-down excluded from its time).
pub struct Contender<'a> {
    name: String,
    ops: u64,
    /// Multiplies the per-operation time (per descriptor, say).
    scale: f64,
    run: Box<dyn FnMut(u64) -> io::Result<Duration> + 'a>,
}

impl<'a> Contender<'a> {
    /// `run(ops)` runs one batch of `ops` operations and returns their time.
    pub fn new(
        name: impl Into<String>,
        ops: u64,
        run: impl FnMut(u64) -> io::Result<Duration> + 'a,
    ) -> Self {
        Contender {
            name: name.into(),
            ops: ops.max(2),
            scale: 1.0,
            run: Box::new(run),
        }
    }

    fn scaled(mut self, scale: f64) -> Self {
        self.scale = scale;
        self
    }

    /// The same contender under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

/// Measures the contenders in interleaved rounds — one batch of each per
/// round — so ours and its baselines see the same conditions (on a VM the
/// cost of a cache-line transfer changes as the host moves its vCPUs).
///
/// # Errors
/// The first batch that failed.
pub fn interleave(rounds: usize, contenders: Vec<Contender<'_>>) -> io::Result<Vec<Measured>> {
    interleave_with(rounds, contenders, |_| {})
}

/// [`interleave`], calling `starting(round)` (from 1) before each round.
fn interleave_with(
    rounds: usize,
    mut contenders: Vec<Contender<'_>>,
    mut starting: impl FnMut(usize),
) -> io::Result<Vec<Measured>> {
    let mut samples: Vec<Vec<f64>> = contenders
        .iter()
        .map(|_| Vec::with_capacity(rounds))
        .collect();
    for round in 1..=rounds {
        starting(round);
        for (contender, samples) in contenders.iter_mut().zip(&mut samples) {
            let elapsed = (contender.run)(contender.ops)?;
            samples.push(elapsed.as_nanos() as f64 / contender.ops as f64 * contender.scale);
        }
    }
    Ok(contenders
        .into_iter()
        .zip(samples)
        .map(|(c, s)| measured(c.name, Summary::of(&s).expect("at least one round")))
        .collect())
}

/// "N.Nx the cache-line floor": ours beside the first baseline, where a
/// row's first baseline is the cache-line round trip.
fn floor_note(ours: &Measured, baselines: &[Measured]) -> Option<String> {
    baselines.first().map(|floor| {
        format!(
            "{:.1}x the cache-line floor",
            ours.ns.median / floor.ns.median
        )
    })
}

/// Splits measured contenders into ours (the first) and the baselines.
fn split(mut all: Vec<Measured>) -> (Measured, Vec<Measured>) {
    let ours = all.remove(0);
    (ours, all)
}

fn measured(name: impl Into<String>, ns: Summary) -> Measured {
    Measured {
        name: name.into(),
        ns,
    }
}

/// Everything, in layer order.
///
/// # Errors
/// The first layer that fails.
pub fn all(options: Options) -> io::Result<Vec<Row>> {
    let mut rows = sem(options)?;
    rows.extend(fdpass(options, None)?);
    rows.extend(barrier(options, None, None)?);
    rows.extend(kittens(options)?);
    rows.extend(channel(options, None, 1, false, None)?);
    rows.extend(monitor(options)?);
    rows.extend(queue(options)?);
    Ok(rows)
}
