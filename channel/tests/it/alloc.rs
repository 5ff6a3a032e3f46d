//! `send` encodes straight into the region, and a worker reads a request in
//! place and encodes its answer straight into its slot: in steady state none
//! of them allocates. A counting allocator counts the allocations a thread
//! makes while its window is open (each thread its own count).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use nodeipc_channel::{All, Channel};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, execute_request,
};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Runs `f` with this thread's counting on.
fn counted<T>(f: impl FnOnce() -> T) -> T {
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    out
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counting touches only an atomic and a thread-local flag, which allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn send_allocates_nothing_in_steady_state() {
    let name = nodeipc_testkit::unique_name("alloc");
    let channel = Channel::builder(&name)
        .workers(1)
        .depth(4)
        .timeout(Duration::from_secs(10));
    let coordinator = channel.create().unwrap();
    let worker = std::thread::spawn(move || {
        let mut worker = channel.join(0).unwrap();
        let mut request = ExecuteRequest::default();
        for _ in 0..2_000 {
            worker.recv_into(&mut request).unwrap();
            worker
                .respond(&ExecuteResponse {
                    sequence: request.sequence,
                    ..Default::default()
                })
                .unwrap();
        }
    });
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    let mut request = ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence: 0,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![1, 2, 3],
            input: (vec![7; 4096]).into(),
        })),
    };
    let mut counted = 0;
    for sequence in 0..2_000u64 {
        request.sequence = sequence;
        let steady = sequence >= 100;
        COUNTING.with(|c| c.set(steady));
        coordinator.send(&request).unwrap();
        COUNTING.with(|c| c.set(false));
        counted += u64::from(steady);
        assert_eq!(coordinator.recv(All).unwrap()[0].sequence, sequence);
    }
    worker.join().unwrap();
    assert_eq!(counted, 1_900);
    assert_eq!(allocations(), 0, "send allocated in steady state");
    // The counter does count: an allocation inside the window is seen.
    COUNTING.with(|c| c.set(true));
    let probe = std::hint::black_box(vec![0u8; 64]);
    COUNTING.with(|c| c.set(false));
    drop(probe);
    assert_eq!(allocations(), 1);
}

#[test]
fn a_worker_reads_in_place_and_responds_without_allocating_in_steady_state() {
    let name = nodeipc_testkit::unique_name("alloc-worker");
    let channel = Channel::builder(&name)
        .workers(1)
        .depth(4)
        .timeout(Duration::from_secs(10));
    let coordinator = channel.create().unwrap();
    const ROUNDS: u64 = 2_000;
    const STEADY: u64 = 100;
    let worker = std::thread::spawn(move || {
        let mut worker = channel.join(0).unwrap();
        let mut response = ExecuteResponse::default();
        let mut request = ExecuteRequest::default();
        // Half the rounds in place, half through recv_into, counted apart.
        let (mut in_place, mut into) = (0, 0);
        for round in 0..ROUNDS {
            let steady = round >= STEADY;
            if round % 2 == 0 {
                let before = allocations();
                counted(|| {
                    let guard = worker.recv_in_place().unwrap();
                    response.sequence = guard.bytes().len() as u64;
                    guard.respond(&response).unwrap();
                });
                if steady {
                    in_place += allocations() - before;
                }
            } else {
                let before = allocations();
                counted(|| {
                    worker.recv_into(&mut request).unwrap();
                    worker.respond(&response).unwrap();
                });
                if steady {
                    into += allocations() - before;
                }
            }
        }
        (in_place, into)
    });
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    let mut request = ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence: 0,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![1, 2, 3],
            input: (vec![7; 4096]).into(),
        })),
    };
    for sequence in 0..ROUNDS {
        request.sequence = sequence;
        coordinator.send(&request).unwrap();
        coordinator.recv(All).unwrap();
    }
    let (in_place, into) = worker.join().unwrap();
    let per_request = into as f64 / ((ROUNDS - STEADY) / 2) as f64;
    println!("recv_into + respond of a 4 KiB forward request: {per_request:.2} allocations each");
    assert_eq!(
        in_place, 0,
        "recv_in_place + respond allocated in steady state"
    );
    // recv_into decodes into the message: prost rebuilds the cleared oneof
    // variant and copies the `bytes` payload out of the small-frame buffer.
    // Counted here so a change is seen; the in-place path is the one that
    // allocates nothing.
    assert!(
        per_request <= 3.0,
        "recv_into allocated {per_request} times a request"
    );
}
