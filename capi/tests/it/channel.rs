//! The execute channel from C and C++: a coordinator and workers written in
//! C against nodeipc.h, C workers beside a Rust worker in one channel, and a
//! C++ execute worker decoding our execute.proto with the C++ protobuf
//! runtime beside a Rust worker.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use nodeipc_channel::{
    All, Channel, ChannelServer, Coordinator, HandshakeOptions, Payload, Raw, Worker, connect,
    worker_logon,
};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteType, ForwardRequest, execute_request, execute_response,
};
use nodeipc_testkit::{TempDir, Watchdog, spawn_child, unique_name};

fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn private_dir(tag: &str) -> TempDir {
    TempDir::new(tag)
}

/// Serves `coordinator`'s handshake at `dir/logon.sock`.
fn serve<Req: Payload, Resp: Payload>(
    coordinator: &Coordinator<Req, Resp>,
    dir: &TempDir,
) -> ChannelServer {
    let offer = coordinator.offer().unwrap();
    ChannelServer::bind(dir.join("logon.sock"), HandshakeOptions::default(), offer).unwrap()
}

fn run(program: &Path, args: &[&str]) -> nodeipc_testkit::ChildGuard {
    spawn_child(
        Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

fn expect_success(child: nodeipc_testkit::ChildGuard, what: &str, says: &str) {
    let out = child.output_timeout(Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains(says), "{what}: {stdout}\n{stderr}");
}

#[test]
fn a_c_coordinator_serves_c_workers_through_every_gather() {
    let _dog = Watchdog::new("c_coordinator", Duration::from_secs(120));
    let dir = private_dir("capi-chan-c");
    let (Some(coordinator), Some(worker)) = (
        common::compile("channel_coordinator.c", &dir),
        common::compile("channel_worker.c", &dir),
    ) else {
        return;
    };
    let socket = dir.join("logon.sock");
    let child = run(
        &coordinator,
        &[
            socket.to_str().unwrap(),
            worker.to_str().unwrap(),
            "3",
            "30",
        ],
    );
    expect_success(
        child,
        "the C coordinator",
        "c coordinator: 30 requests through 3 workers, 10 aggregations",
    );
}

#[test]
fn a_c_coordinator_takes_one_sending_and_one_gathering_thread() {
    let _dog = Watchdog::new("c_coordinator_threads", Duration::from_secs(120));
    let dir = private_dir("capi-chan-threads");
    let Some(program) = common::compile("coordinator_threads.c", &dir) else {
        return;
    };
    let name = unique_name("capi-threads");
    let out = run(&program, &[&name]).output_timeout(Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let checks: u32 = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("0 of "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(checks > 400, "{stdout}");
}

/// Runs `program NAME` to its end: its last line says "0 of N checks
/// failed"; N, after asserting that it exited well.
fn checks_of(program: &Path, name: &str) -> u32 {
    let out = run(program, &[name]).output_timeout(Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("0 of "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_c_request_loan_is_built_in_the_frame_and_an_abort_sends_nothing() {
    let _dog = Watchdog::new("c_request_loan", Duration::from_secs(120));
    let dir = private_dir("capi-chan-loan");
    let Some(program) = common::compile("channel_loan.c", &dir) else {
        return;
    };
    let name = unique_name("capi-loan");
    assert!(checks_of(&program, &name) > 40);
}

#[test]
fn a_cpp_request_loan_commits_once_and_sends_nothing_when_dropped() {
    let _dog = Watchdog::new("cpp_request_loan", Duration::from_secs(120));
    let dir = private_dir("capi-cpp-loan");
    let Some(program) = common::compile("request_loan.cpp", &dir) else {
        return;
    };
    let name = unique_name("capi-cpp-loan");
    assert!(checks_of(&program, &name) > 15);
}

#[test]
fn a_c_response_thread_replies_in_send_order_and_refuses_what_it_rules_out() {
    let _dog = Watchdog::new("c_response_thread", Duration::from_secs(120));
    let dir = private_dir("capi-chan-thread");
    let Some(program) = common::compile("response_thread.c", &dir) else {
        return;
    };
    let name = unique_name("capi-thread");
    let out = run(&program, &[&name]).output_timeout(Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = stdout.lines().last().unwrap_or_default();
    let checks: u32 = summary
        .strip_prefix("0 of ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(checks > 50, "{stdout}");
    assert!(stdout.contains("dead worker heard"), "{stdout}");
}

#[test]
fn c_workers_and_a_rust_worker_share_one_channel() {
    let _dog = Watchdog::new("c_and_rust_workers", Duration::from_secs(120));
    let dir = private_dir("capi-chan-mixed");
    let Some(worker) = common::compile("channel_worker.c", &dir) else {
        return;
    };
    let coordinator = Channel::anonymous(unique_name("capi-chan"))
        .workers(3)
        .request_capacity(8 << 10)
        .timeout(Duration::from_secs(20))
        .raw()
        .create()
        .unwrap();
    let server = serve(&coordinator, &dir);
    let socket = server.path().to_owned();
    let rounds = 20u64;
    let c_workers: Vec<_> = [1u32, 2]
        .iter()
        .map(|rank| {
            run(
                &worker,
                &[
                    socket.to_str().unwrap(),
                    &rank.to_string(),
                    &rounds.to_string(),
                ],
            )
        })
        .collect();
    let rust_worker = {
        let socket = socket.clone();
        thread::spawn(move || {
            let timeout = Duration::from_secs(20);
            let mut worker: Worker<Raw, Raw> = connect(&socket, &worker_logon(0), timeout)
                .unwrap()
                .into_worker(0, timeout)
                .unwrap();
            for _ in 0..rounds {
                let request = worker.recv_in_place().unwrap();
                let mut answer = digest(request.bytes()).to_le_bytes().to_vec();
                answer.push(0);
                request.respond(&answer).unwrap();
            }
        })
    };
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    for round in 0..rounds {
        let request: Vec<u8> = (0..2 + round as usize * 211)
            .map(|i| (i as u64 * 7 + round) as u8)
            .collect();
        coordinator.send(&request).unwrap();
        let gathered = coordinator.recv(All).unwrap();
        for (rank, answer) in gathered.iter() {
            assert_eq!(answer.len(), 9, "worker {rank}");
            assert_eq!(answer[..8], digest(&request).to_le_bytes(), "worker {rank}");
            assert_eq!(answer[8], rank as u8);
        }
    }
    rust_worker.join().unwrap();
    for (i, child) in c_workers.into_iter().enumerate() {
        expect_success(child, "a C worker", &format!("c worker {} answered", i + 1));
    }
}

/// `execute.pb.cc` and `.h` generated by `protoc` into `dir`; `None` (a
/// failure under CI) without protoc.
fn generate_execute_pb(dir: &TempDir) -> Option<PathBuf> {
    let proto_dir = common::crate_dir().join("../proto/proto");
    generate_pb(
        dir,
        &proto_dir,
        "execute",
        "a_cpp_execute_worker_and_a_rust_worker_answer_execute_requests",
    )
}

/// `<name>.pb.cc` and `.h` of `proto_dir/<name>.proto` generated by
/// `protoc` into `dir`; `None` (a failure under CI) without protoc.
fn generate_pb(dir: &TempDir, proto_dir: &Path, name: &str, test: &str) -> Option<PathBuf> {
    let out = Command::new("protoc")
        .arg(format!("--proto_path={}", proto_dir.display()))
        .arg(format!("--cpp_out={}", dir.path().display()))
        .arg(proto_dir.join(format!("{name}.proto")))
        .output();
    match out {
        Ok(o) if o.status.success() => Some(dir.join(&format!("{name}.pb.cc"))),
        Ok(o) => panic!("protoc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            nodeipc_testkit::skip(
                test,
                &format!("no protoc ({e}); install protobuf-compiler and libprotobuf-dev"),
            );
            None
        }
    }
}

/// `tests/c/<source>` built with `pb` (generated into `dir`) against the
/// static library and libprotobuf; `None` (a failure under CI) without a
/// C++ compiler.
fn compile_with_pb(source: &str, pb: &Path, dir: &TempDir) -> Option<PathBuf> {
    let program = dir.join(source.split('.').next().expect("a file name"));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "g++".to_owned());
    let built = Command::new(&compiler)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-o"])
        .arg(&program)
        .arg("-I")
        .arg(common::crate_dir().join("include"))
        .arg("-I")
        .arg(dir.path())
        .arg(common::crate_dir().join("tests/c").join(source))
        .arg(pb)
        .arg(common::static_lib())
        .arg("-lprotobuf")
        .args(common::LINK_LIBS)
        .output();
    match built {
        Ok(o) if o.status.success() => Some(program),
        Ok(o) => panic!("{compiler}: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            nodeipc_testkit::skip(source, &format!("no {compiler}: {e}"));
            None
        }
    }
}

#[test]
fn the_grid_from_cpp_on_the_users_own_schema() {
    let _dog = Watchdog::new("cpp_grid", Duration::from_secs(180));
    let dir = private_dir("capi-chan-grid");
    let examples = common::crate_dir().join("examples");
    let Some(pb) = generate_pb(
        &dir,
        &examples,
        "model",
        "the_grid_from_cpp_on_the_users_own_schema",
    ) else {
        return;
    };
    let Some(program) = compile_with_pb("grid.cpp", &pb, &dir) else {
        return;
    };
    let socket = dir.join("logon.sock");
    let out = run(&program, &[socket.to_str().unwrap()]).output_timeout(Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let checks: u32 = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("0 of "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(checks >= 25, "{stdout}");
}

#[test]
fn a_cpp_execute_worker_and_a_rust_worker_answer_execute_requests() {
    let _dog = Watchdog::new("cpp_execute_worker", Duration::from_secs(180));
    let dir = private_dir("capi-chan-cpp");
    let Some(pb) = generate_execute_pb(&dir) else {
        return;
    };
    let program = dir.join("execute_worker");
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "g++".to_owned());
    let built = Command::new(&compiler)
        .args(["-std=c++17", "-O1", "-Wall", "-o"])
        .arg(&program)
        .arg("-I")
        .arg(common::crate_dir().join("include"))
        .arg("-I")
        .arg(dir.path())
        .arg(common::crate_dir().join("tests/c/execute_worker.cpp"))
        .arg(&pb)
        .arg(common::static_lib())
        .arg("-lprotobuf")
        .args(common::LINK_LIBS)
        .output();
    match built {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("{compiler}: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            nodeipc_testkit::skip("cpp_execute_worker", &format!("no {compiler}: {e}"));
            return;
        }
    }
    let coordinator = Channel::anonymous(unique_name("capi-exec"))
        .workers(2)
        .request_capacity(64 << 10)
        .depth(2)
        .timeout(Duration::from_secs(20))
        .create()
        .unwrap();
    let server = serve(&coordinator, &dir);
    let socket = server.path().to_owned();
    let rounds = 25u64;
    let cpp = run(
        &program,
        &[socket.to_str().unwrap(), "1", &rounds.to_string()],
    );
    let rust_worker = {
        let socket = socket.clone();
        thread::spawn(move || {
            let timeout = Duration::from_secs(20);
            let mut worker: Worker = connect(&socket, &worker_logon(0), timeout)
                .unwrap()
                .into_worker(0, timeout)
                .unwrap();
            let mut request = ExecuteRequest::default();
            for _ in 0..rounds {
                worker.recv_into(&mut request).unwrap();
                let input = match &request.payload {
                    Some(execute_request::Payload::Forward(f)) => f.input.clone(),
                    _ => panic!("not a forward request"),
                };
                let first = input
                    .first()
                    .map_or("-".to_owned(), |b| (*b as char).to_string());
                worker
                    .respond(&nodeipc_proto::execute::ExecuteResponse {
                        msg_type: request.execute_type,
                        sequence: request.sequence,
                        result: Some(execute_response::Result::Forward(
                            nodeipc_proto::execute::ForwardResponse {
                                output: format!("{}:{first}:0", input.len()).into_bytes().into(),
                            },
                        )),
                        ..Default::default()
                    })
                    .unwrap();
            }
        })
    };
    coordinator
        .wait_for_workers(Duration::from_secs(20))
        .unwrap();
    for sequence in 0..rounds {
        let len = (sequence as usize * 1237) % 40_000;
        let input: Vec<u8> = (0..len)
            .map(|i| b'a' + ((i as u64 + sequence) % 26) as u8)
            .collect();
        let first = input
            .first()
            .map_or("-".to_owned(), |b| (*b as char).to_string());
        coordinator
            .send(&ExecuteRequest {
                execute_type: ExecuteType::Execute as i32,
                sequence,
                payload: Some(execute_request::Payload::Forward(ForwardRequest {
                    request_ids: vec![sequence],
                    input: input.into(),
                })),
            })
            .unwrap();
        let responses = coordinator.recv(All).unwrap();
        for (rank, response) in responses.iter().enumerate() {
            assert_eq!(response.sequence, sequence, "worker {rank}");
            let Some(execute_response::Result::Forward(forward)) = &response.result else {
                panic!("worker {rank}: not a forward response");
            };
            assert_eq!(
                String::from_utf8_lossy(&forward.output),
                format!("{len}:{first}:{rank}"),
                "worker {rank}"
            );
        }
    }
    rust_worker.join().unwrap();
    expect_success(
        cpp,
        "the C++ execute worker",
        "c++ execute worker 1 answered 25",
    );
}
