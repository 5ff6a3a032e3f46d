//! nodeipc's channel beside iceoryx2's request-response, one row per payload
//! size, both measured in the same run in interleaved rounds.
//!
//! ```sh
//! cargo run --release -p nodeipc-benches --features rivals --bin versus-iceoryx2 -- --json
//! ```
//!
//! Each side: one coordinator (client) pinned to core 0 and one worker
//! (server) process pinned to core 1, both polling (iceoryx2's client and
//! server loop on `receive`; nodeipc's sides poll before they sleep,
//! `ChannelConfig::poll`); the request is `payload` bytes, the worker reads every byte in
//! place (nodeipc: `recv_in_place` in the read-only ring; iceoryx2: the
//! loaned sample) and answers an 8-byte digest the coordinator checks.
//! A round runs one session of each (their order alternating from round to
//! round), each long enough to take about `--sample-ms`; a row gives the
//! medians over `--rounds` rounds, the spread (smallest and largest) of
//! each side, and `ratio` = nodeipc ÷ iceoryx2 (below 1: nodeipc faster).
//! `nodeipc_sleeping_ns` is nodeipc with its default waits (a short spin,
//! then a futex sleep: no core burnt while the peer works), for reference.
//!
//! A last row, `built in the loan`, has both coordinators build each
//! round's 1 MiB request where it travels (nodeipc: `send_with` in the
//! request frame; iceoryx2: in the loaned request), the same bytes every
//! round (`nodeipc_cli::bench::channel_loan::build`); `nodeipc_copy_ns`
//! beside it is nodeipc building the request privately and copying it
//! with `send`, and `loan_vs_copy` = nodeipc ÷ that.

use nodeipc_benches::iceoryx;

use std::process::ExitCode;
use std::time::Duration;

use nodeipc_cli::bench::channel::{ChannelImpl, ChannelSession};
use nodeipc_cli::bench::channel_loan::{Build, LoanSession};

const PAYLOADS: [usize; 4] = [64, 4 << 10, 64 << 10, 1 << 20];
const WARM_UP: u64 = 200;

struct Options {
    json: bool,
    rounds: usize,
    sample: Duration,
}

fn parse(args: impl Iterator<Item = String>) -> std::result::Result<Options, String> {
    let mut options = Options {
        json: false,
        rounds: 21,
        sample: Duration::from_millis(150),
    };
    let mut args = args.skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .ok_or_else(|| format!("{arg} needs {what}"))
                .and_then(|v| v.parse::<u64>().map_err(|e| format!("{arg} {v:?}: {e}")))
        };
        match arg.as_str() {
            "--json" => options.json = true,
            "--rounds" => {
                options.rounds = match value("a count")? {
                    n @ 1..=1000 => n as usize,
                    n => return Err(format!("--rounds {n} is not in 1..=1000")),
                }
            }
            "--sample-ms" => {
                options.sample = match value("milliseconds")? {
                    n @ 1..=10_000 => Duration::from_millis(n),
                    n => return Err(format!("--sample-ms {n} is not in 1..=10000")),
                }
            }
            "--quick" => {
                options.rounds = 3;
                options.sample = Duration::from_millis(20);
            }
            "-h" | "--help" => {
                return Err(
                    "usage: versus-iceoryx2 [--json] [--rounds N (21)] [--sample-ms MS (150)] [--quick]"
                        .to_owned(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(options)
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Nanoseconds per round trip of `rounds` nodeipc round trips, polling.
fn nodeipc(payload: usize, rounds: u64) -> Result<f64> {
    nodeipc_as(ChannelImpl::NodeipcInPlacePoll, payload, rounds)
}

fn nodeipc_as(which: ChannelImpl, payload: usize, rounds: u64) -> Result<f64> {
    let mut session = ChannelSession::start(which, 1, payload, rounds + WARM_UP)?;
    session.run(WARM_UP)?;
    let took = session.run(rounds)?;
    session.finish()?;
    Ok(took.as_nanos() as f64 / rounds as f64)
}

/// Nanoseconds per round trip of `rounds` iceoryx2 round trips.
fn iceoryx2(payload: usize, rounds: u64) -> Result<f64> {
    let mut session = iceoryx::IceoryxSession::start(payload, rounds + WARM_UP)?;
    session.run(WARM_UP)?;
    let took = session.run(rounds)?;
    session.finish()?;
    Ok(took.as_nanos() as f64 / rounds as f64)
}

/// How many round trips make a sample of about `sample`, from a short probe.
fn rounds_for(payload: usize, sample: Duration) -> Result<u64> {
    let probe = nodeipc(payload, 200)?.max(iceoryx2(payload, 200)?);
    Ok(((sample.as_nanos() as f64 / probe) as u64).clamp(100, 1_000_000))
}

/// Nanoseconds per round trip of a 1 MiB request built by `build`, polling.
fn nodeipc_built(build: Build, payload: usize, rounds: u64) -> Result<f64> {
    let mut session = LoanSession::start(build, payload, true, rounds + WARM_UP)?;
    session.run(WARM_UP)?;
    let took = session.run(rounds)?;
    session.finish()?;
    Ok(took.as_nanos() as f64 / rounds as f64)
}

/// Nanoseconds per round trip of iceoryx2 with the request built in its loan.
fn iceoryx2_built(payload: usize, rounds: u64) -> Result<f64> {
    let mut session = iceoryx::IceoryxSession::start(payload, rounds + WARM_UP)?;
    session.run_built(0, WARM_UP)?;
    let took = session.run_built(WARM_UP, rounds)?;
    session.finish()?;
    Ok(took.as_nanos() as f64 / rounds as f64)
}

fn spread(s: &[f64]) -> [f64; 2] {
    let (min, max) = s
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    [min.round(), max.round()]
}

/// The row of requests built in the loan, interleaved as [`row`]'s.
fn built_row(payload: usize, options: &Options) -> Result<String> {
    let probe = nodeipc_built(Build::InLoan, payload, 200)?.max(iceoryx2_built(payload, 200)?);
    let rounds = ((options.sample.as_nanos() as f64 / probe) as u64).clamp(100, 1_000_000);
    let (mut ours, mut theirs, mut copy) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..options.rounds {
        if round % 2 == 0 {
            ours.push(nodeipc_built(Build::InLoan, payload, rounds)?);
            theirs.push(iceoryx2_built(payload, rounds)?);
            copy.push(nodeipc_built(Build::ThenCopy, payload, rounds)?);
        } else {
            copy.push(nodeipc_built(Build::ThenCopy, payload, rounds)?);
            theirs.push(iceoryx2_built(payload, rounds)?);
            ours.push(nodeipc_built(Build::InLoan, payload, rounds)?);
        }
    }
    let (ours_spread, theirs_spread, copy_spread) = (spread(&ours), spread(&theirs), spread(&copy));
    let (ours, theirs, copy) = (median(&mut ours), median(&mut theirs), median(&mut copy));
    let (ratio, versus_copy) = (ours / theirs, ours / copy);
    Ok(if options.json {
        serde_json::json!({
            "payload": payload,
            "built_in_the_loan": true,
            "nodeipc_ns": ours.round(),
            "iceoryx2_ns": theirs.round(),
            "ratio": (ratio * 1000.0).round() / 1000.0,
            "nodeipc_copy_ns": copy.round(),
            "loan_vs_copy": (versus_copy * 1000.0).round() / 1000.0,
            "nodeipc_spread_ns": ours_spread,
            "iceoryx2_spread_ns": theirs_spread,
            "nodeipc_copy_spread_ns": copy_spread,
            "rounds": options.rounds,
            "round_trips_per_round": rounds,
        })
        .to_string()
    } else {
        format!(
            "{payload:>8} B  built in the loan: nodeipc {ours:>10.0} ns [{:.0}–{:.0}]  iceoryx2 {theirs:>10.0} ns [{:.0}–{:.0}]  ratio {ratio:.3}  (nodeipc built then copied {copy:.0} ns [{:.0}–{:.0}], loan/copy {versus_copy:.3})",
            ours_spread[0],
            ours_spread[1],
            theirs_spread[0],
            theirs_spread[1],
            copy_spread[0],
            copy_spread[1]
        )
    })
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn row(payload: usize, options: &Options) -> Result<String> {
    let rounds = rounds_for(payload, options.sample)?;
    let (mut ours, mut theirs, mut sleeping) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..options.rounds {
        if round % 2 == 0 {
            ours.push(nodeipc(payload, rounds)?);
            theirs.push(iceoryx2(payload, rounds)?);
        } else {
            theirs.push(iceoryx2(payload, rounds)?);
            ours.push(nodeipc(payload, rounds)?);
        }
        sleeping.push(nodeipc_as(ChannelImpl::NodeipcInPlace, payload, rounds)?);
    }
    let (ours_spread, theirs_spread) = (spread(&ours), spread(&theirs));
    let (ours, theirs) = (median(&mut ours), median(&mut theirs));
    let sleeping = median(&mut sleeping);
    let ratio = ours / theirs;
    Ok(if options.json {
        serde_json::json!({
            "payload": payload,
            "nodeipc_ns": ours.round(),
            "iceoryx2_ns": theirs.round(),
            "ratio": (ratio * 1000.0).round() / 1000.0,
            "nodeipc_spread_ns": ours_spread,
            "iceoryx2_spread_ns": theirs_spread,
            "nodeipc_sleeping_ns": sleeping.round(),
            "rounds": options.rounds,
            "round_trips_per_round": rounds,
        })
        .to_string()
    } else {
        format!(
            "{payload:>8} B  nodeipc {ours:>10.0} ns [{:.0}–{:.0}]  iceoryx2 {theirs:>10.0} ns [{:.0}–{:.0}]  ratio {ratio:.3}  (nodeipc sleeping {sleeping:.0} ns)",
            ours_spread[0], ours_spread[1], theirs_spread[0], theirs_spread[1]
        )
    })
}

fn main() -> ExitCode {
    iceoryx::run_if_server();
    nodeipc_cli::bench::run_if_peer();
    let options = match parse(std::env::args()) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if nodeipc_cli::bench::machine::cores() < 2 {
        eprintln!("versus-iceoryx2: fewer than 2 cores; both sides run unpinned");
    }
    for payload in PAYLOADS {
        match row(payload, &options) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("versus-iceoryx2: {payload} B: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match built_row(1 << 20, &options) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("versus-iceoryx2: 1 MiB built in the loan: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
