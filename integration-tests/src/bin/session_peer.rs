//! A peer of the scheduler session (`tests/it/scheduler_session.rs`):
//! `session_peer worker SOCKET W`, `session_peer checker SOCKET C` or
//! `session_peer scheduler SOCKET WORKERS HANDLES [BUFFER]`.

use std::path::Path;
use std::process::ExitCode;

use nodeipc_integration_tests::scheduler_session::{run_checker, run_scheduler, run_worker};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| args.get(i).and_then(|a| a.parse::<u32>().ok());
    let result = match (args.first().map(String::as_str), args.get(1)) {
        (Some("worker"), Some(socket)) => match number(2) {
            Some(w) => run_worker(Path::new(socket), w),
            None => Err("worker: W missing".into()),
        },
        (Some("checker"), Some(socket)) => match number(2) {
            Some(c) => run_checker(Path::new(socket), c),
            None => Err("checker: C missing".into()),
        },
        (Some("scheduler"), Some(socket)) => match (number(2), number(3)) {
            (Some(workers), Some(handles)) => {
                let buffer = number(4).unwrap_or(0) as usize;
                run_scheduler(Path::new(socket), workers, handles, buffer)
            }
            _ => Err("scheduler: WORKERS HANDLES missing".into()),
        },
        _ => Err(
            "usage: session_peer worker SOCKET W | checker SOCKET C | scheduler SOCKET WORKERS HANDLES [BUFFER]"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("session_peer: {e}");
            eprintln!("session_peer: {e}");
            ExitCode::FAILURE
        }
    }
}
