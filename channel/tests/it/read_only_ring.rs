//! Workers map the request ring read-only: a worker that tries to write a
//! request faults instead of corrupting what the other workers read, and
//! the descriptor the handshake hands a worker cannot be mapped writable.

use std::os::unix::process::ExitStatusExt;
use std::thread;
use std::time::Duration;

use nodeipc_channel::{
    All, Channel, ChannelServer, Error, HandshakeOptions, connect, worker_logon,
};
use nodeipc_proto::handshake::FdKind;
use nodeipc_shm::Region;
use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

const TEST: &str = "a_worker_writing_a_request_faults_and_the_other_workers_read_it_intact";
const CHILD: &str = "NODEIPC_TEST_RO_RING_CHILD";

#[test]
fn a_worker_writing_a_request_faults_and_the_other_workers_read_it_intact() {
    if let Ok(name) = std::env::var(CHILD) {
        let channel = Channel::builder(name)
            .workers(2)
            .timeout(Duration::from_secs(10))
            .raw();
        let mut worker = channel.join(1).unwrap();
        let request = worker.recv_in_place().unwrap();
        println!("child: holding {} bytes", request.bytes().len());
        let at = request.bytes().as_ptr().cast_mut();
        // SAFETY: deliberately wrong — a worker scribbling over the request
        // it reads; the ring is mapped PROT_READ here, so the kernel stops it.
        unsafe { at.write_volatile(!at.read_volatile()) };
        println!("child: the write went through");
        return;
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let name = unique_name("ro-ring");
    let channel = Channel::builder(&name)
        .workers(2)
        .timeout(Duration::from_secs(10))
        .raw();
    let coordinator = channel.create().unwrap();
    let child = spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), TEST))
            .env(CHILD, &name),
    );
    let reader = thread::spawn(move || {
        let mut worker = channel.join(0).unwrap();
        let request = worker.recv_in_place().unwrap();
        let seen = request.bytes().to_vec();
        request.respond(b"ok").unwrap();
        seen
    });
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    let sent: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    coordinator.send(&sent).unwrap();
    let out = child.output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("child: holding 4096 bytes"), "{stdout}");
    assert!(!stdout.contains("went through"), "{stdout}");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{:?}", out.status);
    assert_eq!(
        reader.join().unwrap(),
        sent,
        "another worker's view changed"
    );
    let err = coordinator.recv(All).err().expect("worker 1 died");
    assert!(matches!(err, Error::WorkerDied { rank: 1, .. }), "{err}");
    drop(coordinator);
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn the_request_descriptor_a_worker_gets_cannot_be_mapped_writable() {
    let _dog = Watchdog::new("ro_fd", Duration::from_secs(30));
    let dir = TempDir::new("ro-ring-hs");
    let channel = Channel::anonymous(unique_name("ro-hs"))
        .workers(1)
        .timeout(Duration::from_secs(5));
    let coordinator = channel.create().unwrap();
    let offer = coordinator.offer().unwrap();
    let options = HandshakeOptions {
        logon_timeout: Duration::from_secs(2),
        ..HandshakeOptions::default()
    };
    let server = ChannelServer::bind(dir.join("logon.sock"), options, offer).unwrap();
    let mut session = connect(server.path(), &worker_logon(0), Duration::from_secs(5)).unwrap();
    let request = session.take(FdKind::RequestRegion).unwrap();
    let err = Region::from_fd(request.try_clone().unwrap()).unwrap_err();
    assert!(
        matches!(&err, nodeipc_shm::Error::Io { op: "mmap", source, .. } if source.raw_os_error() == Some(libc::EACCES)),
        "{err}"
    );
    assert!(rustix::fs::ftruncate(&request, 0).is_err());
    // And the coordinator's own accessor gives the same kind of descriptor.
    let direct = coordinator.request_fd_read_only().unwrap();
    assert!(Region::from_fd(direct).is_err());
    assert!(Region::from_fd_read_only(request).is_ok());
}
