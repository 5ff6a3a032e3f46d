//! The response thread's policy after an error that breaks a gather: stop
//! (the default), or log it and carry on (MindIE's behaviour). The handler
//! hears of the error either way.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nodeipc_channel::{Channel, Error, ThreadPolicy};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_testkit::{Watchdog, unique_name};

/// One worker that answers request 0 only after `late`, with a channel
/// timeout well under it: the first gather times out.
fn late_answer(policy: ThreadPolicy) -> (Vec<Result<u64, String>>, bool) {
    let channel = Channel::builder(unique_name("policy"))
        .workers(1)
        .timeout(Duration::from_millis(300));
    let mut coordinator = channel.create().unwrap();
    let (tx, rx) = mpsc::channel();
    coordinator
        .on_response(move |response: nodeipc_channel::Result<ExecuteResponse>| {
            let _ = tx.send(response.map(|r| r.sequence).map_err(|e| match e {
                Error::Timeout { .. } => "timeout".to_owned(),
                e => e.to_string(),
            }));
        })
        .unwrap();
    let worker = thread::spawn(move || {
        let mut worker = channel.join(0).unwrap();
        let request = worker.recv().unwrap();
        thread::sleep(Duration::from_millis(900));
        // Under StopOnError nobody gathers this; the slot takes it anyway.
        worker
            .respond(&ExecuteResponse {
                sequence: request.sequence,
                ..Default::default()
            })
            .unwrap();
    });
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    coordinator.start_response_thread_with(policy).unwrap();
    coordinator
        .send(&ExecuteRequest {
            sequence: 41,
            ..Default::default()
        })
        .unwrap();
    let mut heard = vec![
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the timeout is heard"),
    ];
    // Until the answer, or 2 s of silence.
    while heard.last().is_some_and(Result::is_err) {
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok(more) => heard.push(more),
            Err(_) => break,
        }
    }
    let running = coordinator.response_thread_running();
    worker.join().unwrap();
    (heard, running)
}

#[test]
fn log_and_continue_reports_the_timeout_and_then_delivers_the_late_answer() {
    let _dog = Watchdog::new("log_and_continue", Duration::from_secs(60));
    let (heard, running) = late_answer(ThreadPolicy::LogAndContinue);
    // A timeout every 300 ms (and a 50 ms pause) until the answer at 900 ms.
    let (answer, timeouts) = heard.split_last().unwrap();
    assert_eq!(answer, &Ok(41), "{heard:?}");
    assert!(
        !timeouts.is_empty() && timeouts.iter().all(|t| t == &Err("timeout".to_owned())),
        "{heard:?}"
    );
    assert!(running, "the thread should go on");
}

#[test]
fn stop_on_error_reports_the_timeout_and_ends_the_thread() {
    let _dog = Watchdog::new("stop_on_error", Duration::from_secs(60));
    let (heard, running) = late_answer(ThreadPolicy::StopOnError);
    assert_eq!(heard, [Err("timeout".to_owned())]);
    assert!(!running, "the thread should have ended");
}
