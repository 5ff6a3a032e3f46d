//! A channel on named semaphores whose worker writes garbage into one of
//! them: the coordinator gets an error, not an abort (glibc's `sem_post` and
//! `sem_wait` used to abort it), and nothing is left under `/dev/shm`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_channel::{All, Channel, ChannelBuilder, Direction, Error, Role, SemKind};
use nodeipc_proto::execute::{ExecuteRequest, ExecuteType};
use nodeipc_testkit::{Watchdog, shm_leftovers, spawn_child, unique_name};

/// Set in the child of [`regression_a_worker_corrupting_a_named_semaphore_fails_the_coordinator_cleanly`]:
/// `<channel name>:<request|response>`, the consume semaphore to corrupt.
const CORRUPT_AS_WORKER: &str = "NODEIPC_SEM_TEST_CORRUPT_AS_WORKER";

const TEST: &str = "regression_a_worker_corrupting_a_named_semaphore_fails_the_coordinator_cleanly";

fn config(name: &str) -> ChannelBuilder {
    Channel::builder(name)
        .workers(1)
        .sems(SemKind::Named)
        .depth(1)
        .request_capacity(4096)
        .timeout(Duration::from_secs(10))
}

/// The words of the report: value 0, one waiter, `private` 0x1234 (glibc's
/// `struct new_sem`, 64-bit little-endian), the rest of the `sem_t` zero.
fn garbage() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    bytes[8..12].copy_from_slice(&0x1234i32.to_le_bytes());
    bytes
}

/// The hostile worker: keeps a descriptor of one of its semaphores' files
/// (before the coordinator removes the names), joins honestly, then writes
/// garbage into that semaphore and stays until its stdin closes.
fn hostile_worker(spec: &str) {
    let (name, which) = spec.rsplit_once(':').expect("name:which");
    let direction = match which {
        "request" => Direction::Request,
        _ => Direction::Response,
    };
    let config = config(name);
    let sem_name = config.config().semaphore_name(direction, Role::Consume, 0);
    let path = format!("/dev/shm/sem.{}", &sem_name[1..]);
    let mut file = None;
    for _ in 0..1000 {
        if let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            file = Some(f);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let file = file.expect("the coordinator's semaphore appears");
    let worker = config.join(0).expect("join");
    file.write_all_at(&garbage(), 0).expect("write garbage");
    println!("\ncorrupted");
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
    drop(worker);
}

#[test]
fn regression_a_worker_corrupting_a_named_semaphore_fails_the_coordinator_cleanly() {
    if let Ok(spec) = std::env::var(CORRUPT_AS_WORKER) {
        hostile_worker(&spec);
        return;
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    // The request-consume semaphore is what `send` posts; the
    // response-consume one is what `recv(All)` waits on.
    for which in ["request", "response"] {
        let name = unique_name("sem-corrupt-chan");
        let coordinator = config(&name).create().unwrap();
        let mut child = spawn_child(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    &nodeipc_testkit::test_path(module_path!(), TEST),
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CORRUPT_AS_WORKER, format!("{name}:{which}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        coordinator
            .wait_for_workers(Duration::from_secs(20))
            .unwrap();
        let stdout = child.child().stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let corrupted = lines.by_ref().any(|line| line == "corrupted");
        assert!(corrupted, "{which}: the hostile worker never got to write");
        let request = ExecuteRequest {
            execute_type: ExecuteType::Execute as i32,
            sequence: 0,
            payload: None,
        };
        let result = match which {
            "request" => coordinator.send(&request).map(drop),
            _ => {
                coordinator.send(&request).unwrap();
                coordinator.recv(All).map(drop)
            }
        };
        match result {
            Err(Error::Sem {
                source: nodeipc_sem::Error::Corrupt { ref what, .. },
                ..
            }) => assert!(what.contains("`private` word is 0x1234"), "{which}: {what}"),
            other => panic!("{which}: expected a corrupt semaphore, got {other:?}"),
        }
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains(&name) && message.contains("corrupt"),
            "{which}: {message}"
        );
        drop(coordinator);
        drop(child.child().stdin.take());
        // Read the child's report to its end: a closed pipe would fail its harness.
        let rest: Vec<String> = lines.collect();
        assert!(
            child.wait_timeout(Duration::from_secs(10)).success(),
            "{which}: the hostile worker failed: {rest:?}"
        );
        assert!(
            shm_leftovers(&name).is_empty(),
            "{which}: left {:?}",
            shm_leftovers(&name)
        );
    }
}
