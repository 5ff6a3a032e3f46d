//! A channel's handles copied into a forked child: dropping them there
//! joins no thread, takes no lock another thread of the parent holds, and
//! tells the peers nothing — the channel, the rank and the frame a request
//! holds stay the parent's.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nodeipc_channel::{All, Channel, Coordinator, Error, Worker};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse, ExecuteType};
use nodeipc_testkit::{Watchdog, fork_child, shm_leftovers, unique_name};

fn request(sequence: u64) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        ..ExecuteRequest::default()
    }
}

fn answer(request: &ExecuteRequest) -> ExecuteResponse {
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        ..ExecuteResponse::default()
    }
}

#[test]
fn regression_a_coordinator_dropped_in_a_forked_child_mid_gather_leaves_the_channel_open() {
    let _dog = Watchdog::new(
        "coordinator dropped in a forked child",
        Duration::from_secs(60),
    );
    let timeout = Duration::from_secs(20);
    let name = unique_name("fork-coord");
    let channel = Channel::builder(&name).workers(1).timeout(timeout);
    let mut coordinator = Some(channel.create().unwrap());

    // The worker takes the request and answers only when told.
    let (release, held) = mpsc::channel::<()>();
    let (after, told) = mpsc::channel();
    let worker = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut worker = channel.join(0).unwrap();
            let first = worker.recv().unwrap();
            held.recv().unwrap();
            worker.respond(&answer(&first)).unwrap();
            // The channel is still open: no request, no "closed".
            after
                .send(worker.recv_timeout(Duration::from_millis(300)))
                .unwrap();
            held.recv().unwrap();
            worker.recv_timeout(timeout)
        })
    };
    let c = coordinator.as_mut().unwrap();
    c.wait_for_workers(timeout).unwrap();
    let (tx, rx) = mpsc::channel();
    c.on_response(move |response| tx.send(response.map(|r| r.sequence)).unwrap())
        .unwrap();
    c.start_response_thread().unwrap();
    c.send(&request(7)).unwrap();
    // The response thread is in the gather now, holding the gatherer's
    // lock while it waits for the worker's answer.
    thread::sleep(Duration::from_millis(200));

    let code = fork_child("coordinator", Duration::from_secs(20), || {
        drop(coordinator.take());
        0
    });
    assert_eq!(code, 0);

    release.send(()).unwrap();
    assert_eq!(rx.recv_timeout(timeout).unwrap().unwrap(), 7);
    match told.recv_timeout(timeout).unwrap() {
        Err(Error::Timeout { .. }) => {}
        other => panic!("the child's drop closed the parent's channel: {other:?}"),
    }
    // The parent's own drop still stops the thread and closes the channel.
    drop(coordinator);
    release.send(()).unwrap();
    assert!(matches!(worker.join().unwrap(), Err(Error::Closed { .. })));
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn regression_a_worker_dropped_in_a_forked_child_keeps_its_rank_and_its_frame() {
    let _dog = Watchdog::new("worker dropped in a forked child", Duration::from_secs(60));
    let timeout = Duration::from_secs(20);
    let name = unique_name("fork-worker");
    let channel = Channel::anonymous(&name).workers(1).timeout(timeout);
    let coordinator = channel.create().unwrap();
    let join = |coordinator: &Coordinator| -> Result<Worker, Error> {
        Worker::from_fds(
            &name,
            0,
            coordinator.request_fd_read_only().unwrap(),
            coordinator.response_fd().try_clone_to_owned().unwrap(),
            timeout,
        )
    };
    let mut worker = Some(join(&coordinator).unwrap());
    coordinator.wait_for_workers(timeout).unwrap();
    coordinator.send(&request(1)).unwrap();

    {
        // A request held in place: the child's copy of the guard must not
        // give the parent's frame back.
        let mut held = Some(worker.as_mut().unwrap().recv_in_place().unwrap());
        let code = fork_child("request held in place", Duration::from_secs(20), || {
            drop(held.take());
            0
        });
        assert_eq!(code, 0);
        match coordinator.send_timeout(&request(2), Duration::from_millis(300)) {
            Err(Error::Timeout { .. }) => {}
            other => panic!("the child's drop released the parent's frame: {other:?}"),
        }
        held.take().unwrap().respond(&answer(&request(1))).unwrap();
    }
    assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 1);

    let code = fork_child("worker", Duration::from_secs(20), || {
        drop(worker.take());
        0
    });
    assert_eq!(code, 0);
    // Rank 0 is still the parent worker's: no one else may take it.
    match join(&coordinator) {
        Err(Error::RankTaken { .. }) => {}
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("the child's drop gave the parent's rank away"),
    }
    drop(worker);
    drop(coordinator);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
