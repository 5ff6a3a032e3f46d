//! Stopping the response thread while it waits in the middle of a gather:
//! the stop is prompt (a wait slice, not the channel's timeout), the handler
//! hears nothing, and what was gathered stays for the next gather.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_channel::{All, Channel};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse, ExecuteType};
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

fn answer(request: &ExecuteRequest) -> ExecuteResponse {
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        ..ExecuteResponse::default()
    }
}

#[test]
fn stopping_the_thread_mid_gather_is_prompt_and_loses_no_response() {
    let _dog = Watchdog::new("response thread stop", Duration::from_secs(60));
    let timeout = Duration::from_secs(20);
    let name = unique_name("stop");
    let channel = Channel::builder(&name).workers(2).timeout(timeout);
    let mut coordinator = channel.create().unwrap();

    // Worker 0 answers at once; worker 1 holds its answer until told.
    let prompt = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut worker = channel.join(0).unwrap();
            let request = worker.recv().unwrap();
            worker.respond(&answer(&request)).unwrap();
        })
    };
    let (release, held) = mpsc::channel::<()>();
    let slow = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut worker = channel.join(1).unwrap();
            let request = worker.recv().unwrap();
            held.recv().unwrap();
            worker.respond(&answer(&request)).unwrap();
        })
    };
    coordinator.wait_for_workers(timeout).unwrap();

    let (tx, rx) = mpsc::channel();
    coordinator
        .on_response(move |response| tx.send(response.map(|r| r.sequence)).unwrap())
        .unwrap();
    coordinator.start_response_thread().unwrap();
    coordinator
        .send(&ExecuteRequest {
            execute_type: ExecuteType::Execute as i32,
            sequence: 7,
            ..ExecuteRequest::default()
        })
        .unwrap();
    prompt.join().unwrap();
    // Let the thread take worker 0's answer and settle into waiting for
    // worker 1's, several wait slices long.
    thread::sleep(Duration::from_millis(300));

    let start = Instant::now();
    coordinator.stop_response_thread().unwrap();
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "stopping took {took:?} (the channel's timeout is {timeout:?})"
    );
    assert!(
        rx.try_recv().is_err(),
        "the handler heard of a gather that did not finish"
    );

    release.send(()).unwrap();
    slow.join().unwrap();
    let responses = coordinator.recv(All).unwrap();
    let sequences: Vec<u64> = responses.iter().map(|r| r.sequence).collect();
    assert_eq!(
        sequences,
        vec![7, 7],
        "worker 0's answer, taken before the stop, and worker 1's"
    );
    drop(coordinator);
    let left = shm_leftovers(&name);
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}
