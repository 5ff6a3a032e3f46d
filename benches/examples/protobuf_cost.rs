//! What the protobuf work of one 64-byte execute round trip costs on this
//! machine, in one thread with no IPC at all: encoding and decoding the
//! request and the response. It is the floor under the channel's 64-byte
//! round trip, whatever the transport (BENCHMARKS.md quotes it).
//!
//! ```sh
//! cargo run --release -p nodeipc-benches --example protobuf_cost
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use nodeipc_proto::execute::{ExecuteRequest, ExecuteResponse, ForwardResponse, execute_response};
use prost::Message;

const N: u32 = 2_000_000;

fn time(what: &str, mut f: impl FnMut()) -> Duration {
    for _ in 0..N / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..N {
        f();
    }
    let each = start.elapsed() / N;
    println!("{what:<32} {:>6} ns", each.as_nanos());
    each
}

fn response() -> ExecuteResponse {
    ExecuteResponse {
        msg_type: 2,
        sequence: 1,
        result: Some(execute_response::Result::Forward(ForwardResponse {
            output: 64u32.to_le_bytes().to_vec().into(),
        })),
        ..Default::default()
    }
}

fn main() {
    let request = nodeipc_cli::bench::channel::request(1, 64);
    let mut frame = [0u8; 256];
    let mut total = time("encode the request", || {
        black_box(nodeipc_proto::encode_frame(black_box(&request), &mut frame).unwrap());
    });
    let len = nodeipc_proto::encode_frame(&request, &mut frame).unwrap();
    let mut decoded = ExecuteRequest::default();
    total += time("decode the request", || {
        decoded.clear();
        decoded.merge(black_box(&frame[4..len])).unwrap();
    });
    total += time("build the response", || {
        black_box(response());
    });
    let answer = response();
    total += time("encode the response", || {
        black_box(nodeipc_proto::encode_frame(black_box(&answer), &mut frame).unwrap());
    });
    let len = nodeipc_proto::encode_frame(&answer, &mut frame).unwrap();
    total += time("decode the response", || {
        black_box(
            nodeipc_proto::decode_frame::<ExecuteResponse>(black_box(&frame[..len]), 256).unwrap(),
        );
    });
    println!(
        "{:<32} {:>6} ns",
        "protobuf work of one round trip",
        total.as_nanos()
    );
}
