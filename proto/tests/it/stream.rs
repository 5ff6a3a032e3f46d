//! Framing over streams: `write_frame` / `read_frame` across a Unix socket
//! pair, early close, lengths over the maximum, slow and interrupted readers.
//! Every socket read has a timeout, so a broken test fails instead of hanging.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use nodeipc_proto::execute::{ExecuteRequest, ExecuteType, ForwardRequest, execute_request};
use nodeipc_proto::monitor::{
    ClientMessage, Heartbeat, ServerMessage, StatusQuery, client_message, server_message,
};
use nodeipc_proto::{Error, LEN_PREFIX, encode_frame_to_vec, read_frame, write_frame};

/// Watchdog for every blocking socket call of these tests.
const WATCHDOG: Duration = Duration::from_secs(10);

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(WATCHDOG)).unwrap();
        s.set_write_timeout(Some(WATCHDOG)).unwrap();
    }
    (a, b)
}

fn request(sequence: u64, input_len: usize) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute.into(),
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![sequence],
            input: (vec![sequence as u8; input_len]).into(),
        })),
    }
}

fn heartbeat() -> ClientMessage {
    ClientMessage {
        msg: Some(client_message::Msg::Heartbeat(Heartbeat {
            state: Some(b"step 1".to_vec()),
        })),
    }
}

#[test]
fn frames_cross_a_socket_in_order_both_ways() {
    let (mut client, mut server) = pair();
    let (mut scratch, mut client_scratch) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        write_frame(&mut client, &heartbeat()).unwrap();
        let query = ClientMessage {
            msg: Some(client_message::Msg::StatusQuery(StatusQuery {})),
        };
        write_frame(&mut client, &query).unwrap();

        assert_eq!(
            read_frame::<ClientMessage>(&mut server, 1024, &mut scratch).unwrap(),
            heartbeat()
        );
        assert_eq!(
            read_frame::<ClientMessage>(&mut server, 1024, &mut scratch).unwrap(),
            query
        );
        let ok = ServerMessage {
            msg: Some(server_message::Msg::Ok(Default::default())),
        };
        write_frame(&mut server, &ok).unwrap();
        assert_eq!(
            read_frame::<ServerMessage>(&mut client, 1024, &mut client_scratch).unwrap(),
            ok
        );
    }
}

#[test]
fn scratch_is_reused_across_frames() {
    let (mut a, mut b) = pair();
    let mut scratch = Vec::new();
    write_frame(&mut a, &request(1, 1000)).unwrap();
    assert_eq!(
        read_frame::<ExecuteRequest>(&mut b, 4096, &mut scratch).unwrap(),
        request(1, 1000)
    );
    let capacity = scratch.capacity();
    assert!(capacity >= 1000);
    let ptr = scratch.as_ptr();
    for sequence in 2..10 {
        write_frame(&mut a, &request(sequence, 500)).unwrap();
        assert_eq!(
            read_frame::<ExecuteRequest>(&mut b, 4096, &mut scratch).unwrap(),
            request(sequence, 500)
        );
    }
    assert_eq!(scratch.capacity(), capacity);
    assert_eq!(scratch.as_ptr(), ptr);
}

#[test]
fn empty_message_crosses_as_a_bare_prefix() {
    let (mut a, mut b) = pair();
    write_frame(&mut a, &ExecuteRequest::default()).unwrap();
    drop(a);
    let mut raw = Vec::new();
    b.read_to_end(&mut raw).unwrap();
    assert_eq!(raw, [0, 0, 0, 0]);
    let msg: ExecuteRequest = read_frame(&mut raw.as_slice(), LEN_PREFIX, &mut Vec::new()).unwrap();
    assert_eq!(msg, ExecuteRequest::default());
}

#[test]
fn clean_close_between_frames_is_closed() {
    let (mut a, mut b) = pair();
    write_frame(&mut a, &heartbeat()).unwrap();
    drop(a);
    let mut scratch = Vec::new();
    assert_eq!(
        read_frame::<ClientMessage>(&mut b, 1024, &mut scratch).unwrap(),
        heartbeat()
    );
    assert!(matches!(
        read_frame::<ClientMessage>(&mut b, 1024, &mut scratch),
        Err(Error::Closed)
    ));
}

#[test]
fn close_inside_the_prefix_is_truncated() {
    let (mut a, mut b) = pair();
    a.write_all(&[7, 0]).unwrap();
    drop(a);
    assert!(matches!(
        read_frame::<ClientMessage>(&mut b, 1024, &mut Vec::new()),
        Err(Error::Truncated { need: 4, have: 2 })
    ));
}

#[test]
fn close_inside_the_message_is_truncated() {
    let (mut a, mut b) = pair();
    let frame = encode_frame_to_vec(&request(1, 100)).unwrap();
    a.write_all(&frame[..LEN_PREFIX + 10]).unwrap();
    drop(a);
    assert!(matches!(
        read_frame::<ExecuteRequest>(&mut b, 4096, &mut Vec::new()),
        Err(Error::Truncated { need, have: 14 }) if need == frame.len()
    ));
}

/// A hostile length is refused from the prefix alone: nothing is allocated
/// and nothing more is read.
#[test]
fn length_over_the_maximum_is_refused_before_allocating() {
    let (mut a, mut b) = pair();
    a.write_all(&(1u32 << 30).to_le_bytes()).unwrap();
    let mut scratch = Vec::new();
    assert!(matches!(
        read_frame::<ExecuteRequest>(&mut b, 1024, &mut scratch),
        Err(Error::TooLarge { size, max: 1024 }) if size == (1 << 30) + LEN_PREFIX
    ));
    assert_eq!(scratch.capacity(), 0);
}

/// A peer that announces a large frame (under the maximum) and sends little
/// of it does not make the reader allocate the announced size.
#[test]
fn announced_length_alone_allocates_little() {
    let (mut a, mut b) = pair();
    a.write_all(&(100u32 << 20).to_le_bytes()).unwrap();
    a.write_all(&[0; 10]).unwrap();
    drop(a);
    let mut scratch = Vec::new();
    assert!(matches!(
        read_frame::<ExecuteRequest>(&mut b, 1 << 30, &mut scratch),
        Err(Error::Truncated { need, have: 14 }) if need == (100 << 20) + LEN_PREFIX
    ));
    assert!(scratch.capacity() <= 1 << 20, "{}", scratch.capacity());
}

/// Undecodable bytes cost one frame, not the connection: the length was
/// valid, so the next frame is read normally.
#[test]
fn decode_error_leaves_the_stream_in_step() {
    let (mut a, mut b) = pair();
    a.write_all(&[2, 0, 0, 0, 0x0F, 0x00]).unwrap();
    write_frame(&mut a, &heartbeat()).unwrap();
    let mut scratch = Vec::new();
    assert!(matches!(
        read_frame::<ClientMessage>(&mut b, 1024, &mut scratch),
        Err(Error::Decode(_))
    ));
    assert_eq!(
        read_frame::<ClientMessage>(&mut b, 1024, &mut scratch).unwrap(),
        heartbeat()
    );
}

#[test]
fn read_timeout_is_an_io_error() {
    let (_a, mut b) = pair();
    b.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    match read_frame::<ClientMessage>(&mut b, 1024, &mut Vec::new()) {
        Err(Error::Io(error)) => assert!(matches!(
            error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        )),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn writing_to_a_closed_peer_is_an_io_error() {
    let (mut a, b) = pair();
    drop(b);
    match write_frame(&mut a, &heartbeat()) {
        Err(Error::Io(error)) => assert_eq!(error.kind(), io::ErrorKind::BrokenPipe),
        other => panic!("expected Io, got {other:?}"),
    }
}

/// A frame larger than the socket buffer arrives in many reads while the
/// writer is still writing.
#[test]
fn frame_larger_than_the_socket_buffer_arrives_whole() {
    let (mut a, mut b) = pair();
    let big = request(5, 4 << 20);
    let sent = big.clone();
    let writer = thread::spawn(move || write_frame(&mut a, &sent));
    let received: ExecuteRequest = read_frame(&mut b, 8 << 20, &mut Vec::new()).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(received, big);
}

/// A reader that hands out one byte at a time and is interrupted before
/// every byte, as a signal handler would.
struct Trickle<'a> {
    bytes: &'a [u8],
    interrupt: bool,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.interrupt = !self.interrupt;
        if self.interrupt {
            return Err(io::ErrorKind::Interrupted.into());
        }
        match (self.bytes.split_first(), buf.first_mut()) {
            (Some((&byte, rest)), Some(slot)) => {
                *slot = byte;
                self.bytes = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[test]
fn short_and_interrupted_reads_are_retried() {
    let mut stream = encode_frame_to_vec(&request(3, 50)).unwrap();
    stream.extend(encode_frame_to_vec(&heartbeat()).unwrap());
    let mut r = Trickle {
        bytes: &stream,
        interrupt: false,
    };
    let mut scratch = Vec::new();
    assert_eq!(
        read_frame::<ExecuteRequest>(&mut r, 1024, &mut scratch).unwrap(),
        request(3, 50)
    );
    assert_eq!(
        read_frame::<ClientMessage>(&mut r, 1024, &mut scratch).unwrap(),
        heartbeat()
    );
    assert!(matches!(
        read_frame::<ClientMessage>(&mut r, 1024, &mut scratch),
        Err(Error::Closed)
    ));
}
