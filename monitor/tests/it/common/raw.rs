//! Clients that misbehave on purpose, speaking raw bytes: squatters that
//! never send, floods that never read, and the CPU time a monitor process
//! used while they did.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use nodeipc_monitor::MAX_FRAME;
use nodeipc_proto::monitor as pb;
use nodeipc_proto::{encode_frame_to_vec, read_frame};
use rustix::event::{PollFd, PollFlags};

/// A blocking connection with a read timeout, that sends nothing yet.
pub fn connect(path: &Path) -> UnixStream {
    let stream = UnixStream::connect(path).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
}

/// A non-blocking connect: `None` when the listener's queue is full.
pub fn connect_nonblocking(path: &Path) -> Option<OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .expect("socket");
    let address = SocketAddrUnix::new(path).expect("address");
    rustix::net::connect(&socket, &address)
        .ok()
        .map(|()| socket)
}

/// The frame of a `ClientMessage`.
pub fn client_frame(msg: pb::client_message::Msg) -> Vec<u8> {
    encode_frame_to_vec(&pb::ClientMessage { msg: Some(msg) }).expect("encode")
}

/// The frame of a `ControlRequest` asking for the status.
pub fn control_status_frame() -> Vec<u8> {
    encode_frame_to_vec(&pb::ControlRequest {
        request: Some(pb::control_request::Request::Status(pb::StatusQuery {})),
    })
    .expect("encode")
}

/// The next reply on `stream`.
pub fn reply(stream: &mut UnixStream) -> pb::server_message::Msg {
    let mut scratch = Vec::new();
    let reply: pb::ServerMessage = read_frame(stream, MAX_FRAME, &mut scratch).expect("a reply");
    reply.msg.expect("a message in the reply")
}

/// An `Error` reply's cause; any other reply fails the test.
pub fn error_cause(stream: &mut UnixStream) -> String {
    match reply(stream) {
        pb::server_message::Msg::Error(e) => e.cause,
        other => panic!("expected an Error, got {other:?}"),
    }
}

/// Reads until the server closes the connection (within the read timeout)
/// and returns what came.
pub fn read_to_close(stream: &mut UnixStream) -> Vec<u8> {
    let mut rest = Vec::new();
    stream
        .read_to_end(&mut rest)
        .expect("the server closes the connection");
    rest
}

/// Waits until the peer has closed `fd` (a hang-up, whatever is still
/// unread), at most `limit`; how long that took, or `None`.
pub fn wait_hang_up(fd: impl AsFd, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    loop {
        let left = limit.checked_sub(start.elapsed())?;
        let mut fds = [PollFd::new(&fd, PollFlags::RDHUP)];
        match rustix::event::poll(&mut fds, Some(&nodeipc_shm::wait::timespec(left))) {
            Ok(_)
                if fds[0]
                    .revents()
                    .intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR) =>
            {
                return Some(start.elapsed());
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("poll: {e}"),
        }
    }
}

/// User plus system CPU time of process `pid` so far, in clock ticks
/// (`/proc/<pid>/stat` fields 14 and 15).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_name = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // Field 3 (state) is fields[0]: utime (14) and stime (15) are 11 and 12.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// Clock ticks per second.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions; it reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&hz| hz > 0).unwrap_or(100)
}

/// Ticks process `pid` used over `window`.
pub fn cpu_over(pid: u32, window: Duration) -> u64 {
    let before = cpu_ticks(pid);
    std::thread::sleep(window);
    cpu_ticks(pid) - before
}
