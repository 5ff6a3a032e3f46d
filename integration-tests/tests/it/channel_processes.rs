//! The execute channel between real processes: 1, 2 and 8 workers, 10 000
//! requests each checked by sequence, both semaphore kinds, depth 1 and 4,
//! every gather mode, payload edges, a C worker (and the lengths it refuses),
//! a worker killed mid-request, garbage in a response slot, and a
//! coordinator that dies.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nodeipc_channel::{
    Aggregated, All, Channel, ChannelBuilder, Coordinator, Direction, Error, First, Init, Role,
    SemKind,
};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, execute_request, execute_response,
};
use nodeipc_shm::Region;
use nodeipc_testkit::{
    ChildGuard, TempDir, Watchdog, shm_leftovers, skip, spawn_child, unique_name,
};
use prost::Message;

const CAPACITY: usize = 8192;

fn worker(args: &[&str]) -> ChildGuard {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_worker"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

fn config(name: &str, workers: u32, sems: SemKind, depth: u32) -> ChannelBuilder {
    Channel::builder(name)
        .workers(workers)
        .sems(sems)
        .depth(depth)
        .request_capacity(CAPACITY)
        .timeout(Duration::from_secs(20))
}

fn forward(sequence: u64, payload: Vec<u8>) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![],
            input: payload.into(),
        })),
    }
}

/// What the `worker` binary answers (see its `answer`): length and first
/// byte of the payload, then its rank.
fn check(response: &ExecuteResponse, rank: usize, sequence: u64, payload: &[u8]) {
    assert_eq!(
        response.sequence, sequence,
        "worker {rank} answered the wrong request"
    );
    let Some(execute_response::Result::Forward(f)) = &response.result else {
        panic!("worker {rank}: not a forward response: {response:?}")
    };
    let mut expected = (payload.len() as u32).to_le_bytes().to_vec();
    expected.extend([payload.first().copied().unwrap_or(0), rank as u8]);
    assert_eq!(f.output, expected, "worker {rank}, request {sequence}");
}

fn spawn_workers(name: &str, workers: u32, sems: &str, depth: u32, count: u64) -> Vec<ChildGuard> {
    (0..workers)
        .map(|rank| {
            worker(&[
                "serve",
                name,
                &workers.to_string(),
                sems,
                &depth.to_string(),
                &rank.to_string(),
                &count.to_string(),
            ])
        })
        .collect()
}

fn finish(children: Vec<ChildGuard>) {
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.output_timeout(Duration::from_secs(30));
        assert!(
            out.status.success(),
            "worker {rank}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `count` requests through `workers` processes, gathered in `mode`, with
/// `depth` requests kept in flight.
fn run(workers: u32, sems: SemKind, depth: u32, count: u64, mode: &str) {
    let name = unique_name("chan");
    let sems_arg = if sems == SemKind::Named {
        "named"
    } else {
        "in-region"
    };
    let mut coordinator = config(&name, workers, sems, depth).create().unwrap();
    let children = spawn_workers(&name, workers, sems_arg, depth, count);
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    assert!(
        shm_leftovers(&name).is_empty(),
        "names outlived the join: {:?}",
        shm_leftovers(&name)
    );
    let payload = |sequence: u64| vec![(sequence % 251) as u8; (sequence % 300) as usize];
    let mut gathered = 0;
    let gather = |coordinator: &mut Coordinator, sequence: u64| match mode {
        "all" => {
            let responses = coordinator.recv(All).unwrap();
            assert_eq!(responses.len(), workers as usize);
            for (rank, response) in responses.iter().enumerate() {
                check(response, rank, sequence, &payload(sequence));
            }
        }
        "aggregated" => check(
            &coordinator.recv(Aggregated).unwrap(),
            0,
            sequence,
            &payload(sequence),
        ),
        "first" => {
            let (rank, response) = coordinator
                .recv(First)
                .unwrap_or_else(|e| panic!("recv(First) of request {sequence}: {e}"));
            check(&response, rank as usize, sequence, &payload(sequence));
        }
        _ => unreachable!(),
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for sequence in 0..count {
            coordinator
                .send(&forward(sequence, payload(sequence)))
                .unwrap_or_else(|e| panic!("send {sequence} (gathered {gathered}): {e}"));
            if sequence + 1 - gathered >= u64::from(depth) {
                gather(&mut coordinator, gathered);
                gathered += 1;
            }
        }
        while gathered < count {
            gather(&mut coordinator, gathered);
            gathered += 1;
        }
        // `recv(First)` leaves the slower workers' answers: take them so every
        // worker finishes its last one.
        coordinator.drain().unwrap();
    }));
    drop(coordinator); // closes: the workers see Closed and exit 0
    if let Err(panic) = outcome {
        for (rank, child) in children.into_iter().enumerate() {
            let out = child.output_timeout(Duration::from_secs(30));
            eprintln!(
                "worker {rank}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::panic::resume_unwind(panic);
    }
    finish(children);
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn one_worker_10000_requests_each_mode_and_depth() {
    let _dog = Watchdog::new("one worker", Duration::from_secs(300));
    run(1, SemKind::InRegion, 1, 10_000, "all");
    run(1, SemKind::InRegion, 4, 10_000, "first");
    run(1, SemKind::Named, 1, 10_000, "aggregated");
}

#[test]
fn two_workers_10000_requests_each_mode_and_depth() {
    let _dog = Watchdog::new("two workers", Duration::from_secs(300));
    run(2, SemKind::InRegion, 1, 10_000, "all");
    run(2, SemKind::InRegion, 4, 10_000, "aggregated");
    run(2, SemKind::Named, 4, 10_000, "first");
    run(2, SemKind::InRegion, 4, 10_000, "first");
}

#[test]
fn eight_workers_10000_requests() {
    let _dog = Watchdog::new("eight workers", Duration::from_secs(400));
    run(8, SemKind::InRegion, 1, 10_000, "all");
    run(8, SemKind::InRegion, 4, 10_000, "first");
    run(8, SemKind::Named, 1, 2_000, "aggregated");
}

/// The payload length whose request frame is exactly `capacity` bytes.
fn payload_filling(capacity: usize) -> usize {
    (0..capacity)
        .rev()
        .find(|&n| forward(2, vec![7; n]).encoded_len() + 4 == capacity)
        .expect("some payload fills the frame exactly")
}

#[test]
fn payloads_of_0_1_capacity_and_capacity_plus_one() {
    let _dog = Watchdog::new("payload edges", Duration::from_secs(60));
    let name = unique_name("edges");
    let coordinator = config(&name, 1, SemKind::InRegion, 1).create().unwrap();
    let children = spawn_workers(&name, 1, "in-region", 1, 4);
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    let exact = payload_filling(CAPACITY);
    for (sequence, len) in [(0u64, 0usize), (1, 1), (2, exact)] {
        let payload = vec![7u8; len];
        coordinator
            .send(&forward(sequence, payload.clone()))
            .unwrap();
        check(&coordinator.recv(All).unwrap()[0], 0, sequence, &payload);
    }
    // One byte more than fits: refused before anything is written.
    match coordinator.send(&forward(3, vec![7; exact + 1])) {
        Err(Error::TooLarge { size, max, .. }) => assert_eq!((size, max), (CAPACITY + 1, CAPACITY)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // The worker sees the next request that fits, as request 3.
    coordinator.send(&forward(3, vec![9; 10])).unwrap();
    check(&coordinator.recv(All).unwrap()[0], 0, 3, &[9; 10]);
    drop(coordinator);
    finish(children);
}

#[test]
fn init_gather_reads_the_init_slots() {
    let _dog = Watchdog::new("init gather", Duration::from_secs(60));
    let name = unique_name("init");
    let coordinator = config(&name, 3, SemKind::InRegion, 1).create().unwrap();
    let children = spawn_workers(&name, 3, "in-region", 1, 2);
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    coordinator
        .send(&ExecuteRequest {
            execute_type: ExecuteType::ModelInit as i32,
            sequence: 0,
            ..Default::default()
        })
        .unwrap();
    let inits = coordinator.recv(Init).unwrap();
    assert_eq!(inits.len(), 3);
    assert!(
        inits
            .iter()
            .all(|r| r.msg_type == ExecuteType::ModelInit as i32 && r.sequence == 0)
    );
    coordinator.send(&forward(1, vec![1])).unwrap();
    check(&coordinator.recv(All).unwrap()[2], 2, 1, &[1]);
    drop(coordinator);
    finish(children);
}

/// Compiles `c/channel_worker.c` into `dir`; `None` without a C compiler.
fn c_worker_program(dir: &TempDir) -> Option<std::path::PathBuf> {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("c/channel_worker.c");
    nodeipc_testkit::compile_c(&source, &dir.join("channel_worker"), &["-pthread"])
}

#[test]
fn a_c_worker_takes_rank_0_with_named_semaphores() {
    let _dog = Watchdog::new("C worker", Duration::from_secs(120));
    let dir = TempDir::new("cworker");
    let Some(program) = c_worker_program(&dir) else {
        skip("a_c_worker_takes_rank_0", "no C compiler");
        return;
    };
    let name = unique_name("cchan");
    let workers = 2u32;
    let depth = 2u32;
    let config = config(&name, workers, SemKind::Named, depth);
    let coordinator = config.create().unwrap();
    let count = 2_000u64;
    let c_worker = spawn_child(
        Command::new(&program)
            .args([&name, "2", &depth.to_string(), &CAPACITY.to_string()])
            .arg(config.config().response_slot_size.to_string())
            .args(["0", &count.to_string()]),
    );
    let rust_worker = worker(&[
        "serve",
        &name,
        "2",
        "named",
        &depth.to_string(),
        "1",
        &count.to_string(),
    ]);
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    for sequence in 0..count {
        coordinator.send(&forward(sequence, vec![5; 100])).unwrap();
        let responses = coordinator.recv(All).unwrap();
        assert_eq!(responses[0].sequence, sequence, "the C worker");
        assert_eq!(responses[0].msg_type, ExecuteType::Execute as i32);
        check(&responses[1], 1, sequence, &[5; 100]);
    }
    let mut c_worker = c_worker;
    assert!(
        c_worker.wait_timeout(Duration::from_secs(10)).success(),
        "the C worker failed"
    );
    drop(coordinator);
    finish(vec![rust_worker]);
    assert!(shm_leftovers(&name).is_empty());
}

/// The C worker reads lengths a hostile peer may have written: a frame
/// length near `u32::MAX` (which wraps when 4 is added in 32 bits) or a
/// field length past the frame (which wraps a pointer) must be refused with
/// exit 1 and a message, never read past the frame.
#[test]
fn a_c_worker_refuses_frame_and_field_lengths_past_its_frame() {
    let _dog = Watchdog::new("C worker lengths", Duration::from_secs(120));
    let dir = TempDir::new("cworker-len");
    let Some(program) = c_worker_program(&dir) else {
        skip(
            "a_c_worker_refuses_frame_and_field_lengths",
            "no C compiler",
        );
        return;
    };
    let varint = |mut v: u64| {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    };
    let framed = |body: &[u8]| {
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(body);
        frame
    };
    // execute_type = 2, then field 3 (length-delimited) claiming `len` bytes.
    let field_claiming = |len: u64| {
        let mut body = vec![0x08, 0x02, 0x1a];
        body.extend(varint(len));
        framed(&body)
    };
    let capacity = CAPACITY as u32;
    let cases: Vec<(Vec<u8>, String)> = vec![
        (
            u32::MAX.to_le_bytes().to_vec(),
            format!("frame length {} past the frame", u32::MAX),
        ),
        (
            (u32::MAX - 3).to_le_bytes().to_vec(),
            format!("frame length {} past the frame", u32::MAX - 3),
        ),
        (
            (capacity - 3).to_le_bytes().to_vec(),
            format!("frame length {} past the frame", capacity - 3),
        ),
        (
            field_claiming(1),
            "field length 1 past the frame".to_owned(),
        ),
        (
            field_claiming(u64::MAX),
            format!("field length {} past the frame", u64::MAX),
        ),
    ];
    for (frame, expected) in cases {
        let name = unique_name("cframe");
        let config = config(&name, 1, SemKind::Named, 1);
        let coordinator = config.create().unwrap();
        // Opened while the names exist: they go once the worker has joined.
        let consume = nodeipc_sem::NamedSemaphore::open(&config.config().semaphore_name(
            Direction::Request,
            Role::Consume,
            0,
        ))
        .unwrap();
        let c_worker = spawn_child(
            Command::new(&program)
                .args([&name, "1", "1", &CAPACITY.to_string()])
                .arg(config.config().response_slot_size.to_string())
                .args(["0", "1"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        coordinator
            .wait_for_workers(Duration::from_secs(20))
            .unwrap();
        // Play a hostile coordinator: the frame written by hand, the worker woken.
        let request =
            Region::from_fd(coordinator.request_fd().try_clone_to_owned().unwrap()).unwrap();
        request
            .write_at(config.config().layout().frame(0), &frame)
            .unwrap();
        nodeipc_sem::Semaphore::post(&consume).unwrap();
        let out = c_worker.output_timeout(Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{expected}: the C worker ended with {}: {stderr}",
            out.status
        );
        assert!(stderr.contains(&expected), "{expected:?} not in {stderr:?}");
        drop((request, consume, coordinator));
        assert!(
            shm_leftovers(&name).is_empty(),
            "{:?}",
            shm_leftovers(&name)
        );
    }
}

#[test]
fn a_worker_killed_mid_request_is_reported_dead_within_a_second() {
    let _dog = Watchdog::new("worker killed", Duration::from_secs(60));
    for sems in [SemKind::InRegion, SemKind::Named] {
        let name = unique_name("killw");
        let sems_arg = if sems == SemKind::Named {
            "named"
        } else {
            "in-region"
        };
        let coordinator = config(&name, 2, sems, 1).create().unwrap();
        let honest = worker(&["serve", &name, "2", sems_arg, "1", "0", "1"]);
        let mut victim = worker(&["hang", &name, "2", sems_arg, "1", "1"]);
        coordinator
            .wait_for_workers(Duration::from_secs(20))
            .unwrap();
        coordinator.send(&forward(0, vec![1])).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let victim_pid = victim.id();
        victim.kill();
        let killed = Instant::now();
        match coordinator.recv(All) {
            Err(Error::WorkerDied { rank, pid, .. }) => assert_eq!((rank, pid), (1, victim_pid)),
            other => panic!("expected WorkerDied, got {other:?}"),
        }
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "took {:?}",
            killed.elapsed()
        );
        drop(coordinator);
        drop(honest);
        assert!(
            shm_leftovers(&name).is_empty(),
            "{:?}",
            shm_leftovers(&name)
        );
    }
}

#[test]
fn garbage_in_a_response_slot_is_corrupt_not_a_panic() {
    let _dog = Watchdog::new("garbage slot", Duration::from_secs(60));
    let name = unique_name("garbage");
    let coordinator = config(&name, 1, SemKind::Named, 1).create().unwrap();
    let hostile = worker(&["garbage", &name, "1", "0"]);
    // The hostile worker maps the region by name before it joins; the names go at the join.
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    coordinator.send(&forward(0, vec![1])).unwrap();
    match coordinator.recv(All) {
        Err(Error::Corrupt {
            rank,
            len,
            slot_size,
            ..
        }) => {
            assert_eq!(rank, 0);
            assert!(len > slot_size as u64, "{len} vs {slot_size}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    drop(coordinator);
    drop(hostile);
}

#[test]
fn a_dead_coordinator_is_reported_to_its_workers() {
    let _dog = Watchdog::new("coordinator killed", Duration::from_secs(60));
    let name = unique_name("killc");
    let ready = Region::create(&format!("{name}-ready"), 64).unwrap();
    let mut coordinator = worker(&["coordinator", &name, "1", "in-region", "5"]);
    let victim_waiter = worker(&["serve", &name, "1", "in-region", "1", "0", "1000"]);
    let flag = ready.view::<AtomicU32>(0).unwrap();
    let start = Instant::now();
    while flag.load(Ordering::Acquire) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the coordinator never got going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    coordinator.kill();
    let killed = Instant::now();
    let out = victim_waiter.output_timeout(Duration::from_secs(10));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("CoordinatorDied"), "{stdout}");
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        killed.elapsed()
    );
    assert!(
        shm_leftovers(&name).iter().all(|n| n.ends_with("-ready")),
        "{:?}",
        shm_leftovers(&name)
    );
}
