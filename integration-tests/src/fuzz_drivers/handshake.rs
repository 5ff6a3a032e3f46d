//! The handshake: the logon a server reads, the reply a client reads.

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Duration;

use nodeipc_channel::{Channel, ChannelOffer, HandshakeError, Worker, connect, worker_logon};
use nodeipc_proto::{Error as ProtoError, decode_message, handshake, read_frame};
use nodeipc_shm::Region;
use nodeipc_testkit::TempDir;

use super::channel::check_channel_error;
use super::decode::check_decode_error;
use super::{Script, us};

fn offer() -> &'static ChannelOffer {
    static OFFER: OnceLock<ChannelOffer> = OnceLock::new();
    OFFER.get_or_init(|| {
        // Anonymous regions: nothing named, nothing to leak.
        let coordinator = Channel::anonymous("/nodeipc-fuzz-logon")
            .workers(4)
            .create()
            .expect("coordinator");
        coordinator.offer().expect("offer")
    })
}

/// The logon a handshake server reads from a client: a frame of at most
/// 4 KiB, then the coordinator's decision on it.
pub fn logon(data: &[u8]) {
    let mut stream = data;
    let mut scratch = Vec::new();
    let logon = match read_frame::<handshake::Logon>(&mut stream, 4096, &mut scratch) {
        Ok(logon) => logon,
        Err(ProtoError::TooLarge { .. } | ProtoError::Truncated { .. } | ProtoError::Closed) => {
            // Not even a frame: the bare message, as a server would see a
            // well-framed one.
            match decode_message::<handshake::Logon>(data) {
                Ok(logon) => logon,
                Err(ProtoError::Decode(e)) => {
                    check_decode_error::<handshake::Logon>(&e, data);
                    return;
                }
                Err(other) => panic!("unexpected error {other}"),
            }
        }
        Err(ProtoError::Decode(e)) => {
            // The frame's bytes were read into `scratch`.
            check_decode_error::<handshake::Logon>(&e, &scratch);
            return;
        }
        Err(other) => panic!("unexpected error {other}"),
    };
    match offer().decide(&logon, &us()) {
        Ok(offer) => {
            assert_eq!(offer.accept.fds.len(), offer.descriptors.len());
            assert!(offer.accept.geometry.is_some());
            assert!(logon.worker_rank < 4);
        }
        Err(reject) => {
            assert!(!reject.reason.is_empty(), "a rejection without a reason");
            assert!(
                handshake::RejectCode::try_from(reject.code).is_ok(),
                "a rejection with an unknown code {}",
                reject.code
            );
        }
    }
}

/// A fake handshake server: for each connection it reads the logon and
/// answers with the next script it was given (bytes, and regions filled with
/// bytes attached to the first byte).
pub struct FakeServer {
    path: PathBuf,
    scripts: Mutex<mpsc::Sender<(Vec<u8>, Vec<Region>)>>,
    _dir: TempDir,
}

impl FakeServer {
    /// Listens on a socket in a new private directory under `/tmp`, removed
    /// on drop.
    pub fn start() -> FakeServer {
        let dir = TempDir::new("fuzz-hs");
        let path = dir.join("logon.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let (tx, rx) = mpsc::channel::<(Vec<u8>, Vec<Region>)>();
        std::thread::spawn(move || {
            for (reply, regions) in rx {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut scratch = Vec::new();
                let _ = read_frame::<handshake::Logon>(&mut stream, 4096, &mut scratch);
                let fds: Vec<_> = regions.iter().map(Region::as_fd).collect();
                if let Some((first, rest)) = reply.split_first()
                    && nodeipc_fdpass::send_fds(&stream, &[*first], &fds).is_ok()
                {
                    let _ = stream.write_all(rest);
                }
            }
        });
        FakeServer {
            path,
            scripts: Mutex::new(tx),
            _dir: dir,
        }
    }

    /// The socket a client logs on at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers the next connection with `reply` (its first byte carrying
    /// `regions`' descriptors).
    pub fn answer(&self, reply: Vec<u8>, regions: Vec<Region>) {
        self.scripts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((reply, regions))
            .expect("fake server alive");
    }
}

/// A client logs on to a server (same uid, but not honest) that answers with
/// arbitrary bytes and regions full of arbitrary bytes: `connect` and
/// `Session::into_worker` return a session, a worker or an error.
pub fn logon_reply(server: &FakeServer, data: &[u8]) {
    let mut script = Script::new(data);
    let regions: Vec<Region> = (0..script.byte() % 4)
        .map(|_| {
            let size = 64 + usize::from(script.u16() % 4096);
            let region = Region::anonymous(size).expect("memfd");
            let fill = script.bytes(size);
            region.write_at(0, fill).expect("fill");
            region
        })
        .collect();
    let reply = script.rest().to_vec();
    if reply.is_empty() {
        return;
    }
    server.answer(reply, regions);
    match connect(server.path(), &worker_logon(0), Duration::from_millis(500)) {
        Ok(session) => {
            assert_eq!(session.fds.len(), session.accept.fds.len());
            let name = session.channel_name().unwrap_or("").to_owned();
            let joined: nodeipc_channel::Result<Worker> =
                session.into_worker(0, Duration::from_millis(3));
            match joined {
                Ok(_) => {}
                Err(nodeipc_channel::Error::Handshake(HandshakeError::Handshake {
                    reason,
                    ..
                })) => {
                    assert!(reason.contains("no "), "{reason}")
                }
                Err(e) if !name.is_empty() => check_channel_error(&name, Some(e)),
                Err(_) => {}
            }
        }
        // The handshake layer's own error, whole: a rejection, a broken
        // protocol, a timeout, framing, descriptors, a system call.
        Err(nodeipc_channel::Error::Handshake(_)) => {}
        Err(other) => panic!("unexpected error: {other}"),
    }
}
