//! A peer that writes lengths, offsets and counters past what the layout
//! allows — into its response or init slot, a request frame, its worker
//! entry, the request header — gets the other side an error naming the
//! slot, never a panic and never a read outside the region. A worker that
//! names another process as itself cannot get that process touched.
//!
//! The hostile side is played in this process, through a second mapping
//! of the channel's regions.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nodeipc_channel::{All, Channel, Coordinator, Direction, Error, Init, Role, Worker};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse};
use nodeipc_sem::{Semaphore, ShmSemaphore};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, spawn_child, unique_name};

const SLOT: usize = 128;

fn remap(fd: BorrowedFd<'_>) -> Region {
    Region::from_fd(fd.try_clone_to_owned().unwrap()).unwrap()
}

fn join(coordinator: &Coordinator, timeout: Duration) -> nodeipc_channel::Result<Worker> {
    Worker::from_fds(
        &coordinator.config().name,
        0,
        coordinator.request_fd().try_clone_to_owned().unwrap(),
        coordinator.response_fd().try_clone_to_owned().unwrap(),
        timeout,
    )
}

/// A coordinator, an honest worker that has joined, and the hostile
/// process's own mappings of the two regions.
fn channel(tag: &str) -> (Coordinator, Worker, Region, Region) {
    let channel = Channel::anonymous(unique_name(tag))
        .workers(1)
        .request_capacity(SLOT)
        .response_slot_size(SLOT)
        .init_slot_size(SLOT)
        .timeout(Duration::from_millis(500));
    let coordinator = channel.create().unwrap();
    let worker = join(&coordinator, Duration::from_millis(500)).unwrap();
    coordinator
        .wait_for_workers(Duration::from_secs(5))
        .unwrap();
    let (request, response) = (
        remap(coordinator.request_fd()),
        remap(coordinator.response_fd()),
    );
    (coordinator, worker, request, response)
}

/// What a hostile worker does instead of `respond`: writes `bytes` into
/// its slot and posts the coordinator. The channel has depth 1: every
/// answer goes to the ring's one slot.
fn hostile_answer(coordinator: &Coordinator, response: &Region, init: bool, bytes: &[u8]) {
    let layout = coordinator.config().layout();
    let at = if init {
        layout.init_slot(0, 0)
    } else {
        layout.response_slot(0, 0)
    };
    response.write_at(at, bytes).unwrap();
    let consume: &ShmSemaphore = response
        .view(layout.semaphore(Direction::Response, Role::Consume, 0))
        .unwrap();
    consume.post().unwrap();
}

fn framed(len: u32, body: &[u8]) -> Vec<u8> {
    let mut bytes = len.to_le_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

#[test]
fn a_response_length_past_the_slot_is_corrupt_naming_slot_and_size() {
    let _dog = Watchdog::new("length past slot", Duration::from_secs(60));
    for (len, init) in [
        (SLOT as u32 - 3, false),
        (SLOT as u32, false),
        (u32::MAX, false),
        (SLOT as u32 - 3, true),
        (u32::MAX, true),
    ] {
        let (coordinator, mut worker, _, response) = channel("hostile-len");
        coordinator.send(&ExecuteRequest::default()).unwrap();
        worker.recv().unwrap();
        hostile_answer(&coordinator, &response, init, &framed(len, b"\x08\x01"));
        let gathered = if init {
            coordinator.recv(Init)
        } else {
            coordinator.recv(All)
        };
        match gathered {
            Err(Error::Corrupt {
                rank: 0,
                slot,
                len: claimed,
                slot_size,
                ..
            }) => {
                assert_eq!(slot, if init { "init slot" } else { "response slot" });
                assert_eq!(claimed, u64::from(len) + 4);
                assert_eq!(slot_size, SLOT);
            }
            other => panic!("length {len}: expected Corrupt, got {other:?}"),
        }
        // The slot was consumed all the same: the channel stays in step, and
        // the very slot the hostile length was in carries the next answer.
        let next = ExecuteRequest {
            sequence: 1,
            ..Default::default()
        };
        coordinator.send(&next).unwrap();
        assert_eq!(worker.recv().unwrap().sequence, 1);
        let honest = ExecuteResponse {
            sequence: 1,
            ..Default::default()
        };
        let gathered = if init {
            worker.respond_init(&honest).unwrap();
            coordinator.recv(Init)
        } else {
            worker.respond(&honest).unwrap();
            coordinator.recv(All)
        };
        match gathered {
            Ok(responses) => assert_eq!(
                responses.iter().map(|r| r.sequence).collect::<Vec<_>>(),
                [1],
                "length {len}, init {init}"
            ),
            Err(e) => panic!("length {len}, init {init}: the next answer: {e}"),
        }
    }
}

#[test]
fn garbage_inside_the_slot_is_a_decode_error_naming_the_slot() {
    let _dog = Watchdog::new("garbage in slot", Duration::from_secs(60));
    let (coordinator, mut worker, _, response) = channel("hostile-body");
    coordinator.send(&ExecuteRequest::default()).unwrap();
    worker.recv().unwrap();
    // A field of wire type 7, which does not exist.
    hostile_answer(&coordinator, &response, false, &framed(2, &[0x0f, 0x00]));
    match coordinator.recv(All) {
        Err(Error::Decode { rank: 0, slot, .. }) => assert_eq!(slot, "response slot"),
        other => panic!("expected Decode, got {other:?}"),
    }
}

#[test]
fn a_request_frame_length_past_the_frame_is_corrupt_for_the_worker() {
    let _dog = Watchdog::new("frame past capacity", Duration::from_secs(60));
    let (coordinator, mut worker, request, _) = channel("hostile-frame");
    let index = coordinator.send(&ExecuteRequest::default()).unwrap();
    let at = coordinator.config().layout().frame(index);
    request.write_at(at, &(SLOT as u32).to_le_bytes()).unwrap();
    match worker.recv() {
        Err(Error::Corrupt {
            slot,
            len,
            slot_size,
            ..
        }) => {
            assert_eq!(slot, "request frame");
            assert_eq!(len, SLOT as u64 + 4);
            assert_eq!(slot_size, SLOT);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_hostile_requests_sent_counter_does_not_mislead_the_coordinator() {
    let _dog = Watchdog::new("hostile sent", Duration::from_secs(60));
    // Where the request header keeps `sent` (README: at 64, the coordinator's
    // start time, then requests sent).
    const SENT: usize = 72;
    for hostile in [u64::MAX, u64::MAX - 1, 0] {
        let (coordinator, mut worker, request, _) = channel("hostile-sent");
        coordinator.send(&ExecuteRequest::default()).unwrap();
        worker.recv().unwrap();
        worker.respond(&ExecuteResponse::default()).unwrap();
        // A worker (it maps the request region too) rewrites the counter
        // only the coordinator should write.
        request.write_at(SENT, &hostile.to_le_bytes()).unwrap();
        // The coordinator counts what it sent itself: request 0 was sent and
        // answered, whatever the header now says, and the next is request 1.
        match coordinator.recv(All) {
            Ok(responses) => assert_eq!(responses.len(), 1),
            Err(e) => panic!("sent = {hostile}: {e}"),
        }
        match coordinator.send(&ExecuteRequest::default()) {
            Ok(index) => assert_eq!(index, 1, "sent = {hostile}: the next request's index"),
            Err(e) => panic!("sent = {hostile}: the next send: {e}"),
        }
    }
}

#[test]
fn regression_a_hostile_resume_point_does_not_panic_a_rejoining_worker() {
    let _dog = Watchdog::new("hostile resume point", Duration::from_secs(60));
    let (coordinator, worker, _, response) = channel("hostile-received");
    let name = coordinator.config().name.clone();
    let entry = coordinator.config().layout().worker_entry(0);
    drop(worker);
    // Whoever held the rank before left a resume point at the end of time.
    response
        .write_at(entry + 16, &u64::MAX.to_le_bytes())
        .unwrap();
    let mut again = join(&coordinator, Duration::from_millis(500)).unwrap();
    let sent = ExecuteRequest {
        sequence: 5,
        ..Default::default()
    };
    coordinator.send(&sent).unwrap();
    // With depth 1 every request is in frame 0, wherever the worker thinks
    // it is: the one request sent is received, and the count wraps.
    match again.recv() {
        Ok(received) => assert_eq!(received.sequence, 5),
        Err(e) => panic!("the request sent: {e}"),
    }
    let mut resume = [0u8; 8];
    response.read_at(entry + 16, &mut resume).unwrap();
    assert_eq!(u64::from_le_bytes(resume), 0, "the resume point wrapped");
    // Nothing more was sent: the next receive waits, bounded.
    match again.recv() {
        Err(Error::Timeout { channel, .. }) => assert_eq!(channel, name),
        other => panic!("expected Timeout, got {other:?}"),
    }
}

#[test]
fn a_worker_claiming_another_process_gets_it_left_alone_and_the_wait_bounded() {
    let _dog = Watchdog::new("worker claims another pid", Duration::from_secs(60));
    let (coordinator, mut worker, _, response) = channel("hostile-pid");
    // A bystander of the same user, and the worker's entry rewritten to name it.
    let mut bystander = spawn_child(std::process::Command::new("sleep").arg("30"));
    let pid = bystander.id();
    let start = nodeipc_fdpass::process_start_time(pid).unwrap();
    let entry = coordinator.config().layout().worker_entry(0);
    response.write_at(entry, &pid.to_le_bytes()).unwrap();
    response.write_at(entry + 8, &start.to_le_bytes()).unwrap();
    coordinator.send(&ExecuteRequest::default()).unwrap();
    worker.recv().unwrap();
    // The worker goes silent: the coordinator cannot tell it died (the
    // bystander lives), but its wait ends with the configured timeout.
    std::mem::forget(worker);
    let waited = Instant::now();
    match coordinator.recv(All) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    // The 500 ms timeout, and no hang.
    assert!(
        waited.elapsed() < Duration::from_secs(5),
        "{:?}",
        waited.elapsed()
    );
    assert!(
        bystander.child().try_wait().unwrap().is_none(),
        "the process the worker named was touched"
    );
    bystander.kill();
    // Naming a process that is gone (or a pid reused since) reads as death.
    response
        .write_at(entry + 8, &(start + 1).to_le_bytes())
        .unwrap();
    match coordinator.recv(All) {
        Err(Error::WorkerDied {
            rank: 0,
            pid: named,
            ..
        }) => assert_eq!(named, pid),
        other => panic!("expected WorkerDied, got {other:?}"),
    }
}
