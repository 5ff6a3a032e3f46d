//! `send` encodes straight into the region: in steady state it allocates
//! nothing. A counting allocator counts the allocations this thread makes
//! while inside `send` (the worker thread and the gathers are not counted).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nodeipc_channel::{ChannelConfig, Coordinator, Worker};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, execute_request,
};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counting touches only an atomic and a thread-local flag, which allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
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
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
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
    let config = ChannelConfig::new(&name, 1)
        .depth(4)
        .timeout(Duration::from_secs(10));
    let mut coordinator = Coordinator::create(config.clone()).unwrap();
    let worker = std::thread::spawn(move || {
        let mut worker = Worker::join(config, 0).unwrap();
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
        assert_eq!(coordinator.recv_all().unwrap()[0].sequence, sequence);
    }
    worker.join().unwrap();
    assert_eq!(counted, 1_900);
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed),
        0,
        "send allocated in steady state"
    );
    // The counter does count: an allocation inside the window is seen.
    COUNTING.with(|c| c.set(true));
    let probe = std::hint::black_box(vec![0u8; 64]);
    COUNTING.with(|c| c.set(false));
    drop(probe);
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 1);
}
