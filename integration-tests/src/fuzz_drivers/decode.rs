//! Bytes decoded with no process behind them: frames of every protobuf
//! message, and descriptor handles.

use nodeipc_fdpass::FdHandle;
use nodeipc_proto::{Error as ProtoError, KnownMessage, LEN_PREFIX, decode_frame, read_frame};
use prost::Message;

use super::Script;

/// Decodes `buf` as a frame of `M` with limit `max`, and checks that the
/// answer is the one the bytes call for.
fn frame_of<M: KnownMessage + PartialEq + std::fmt::Debug>(buf: &[u8], max: usize) {
    let name = std::any::type_name::<M>();
    match decode_frame::<M>(buf, max) {
        Ok(msg) => {
            let size = nodeipc_proto::frame_len(buf, max).expect("a decoded frame has a length");
            assert!(
                size <= max && size <= buf.len(),
                "{name}: frame past its limits"
            );
            // What decoded encodes again, to something that decodes the same.
            let again = nodeipc_proto::encode_frame_to_vec(&msg).expect("re-encode");
            let back: M = decode_frame(&again, again.len()).expect("decode the re-encoding");
            assert_eq!(back, msg, "{name}: unstable decoding");
        }
        Err(ProtoError::TooLarge { size, max: limit }) => {
            assert!(
                size > limit && limit == max,
                "{name}: TooLarge {size} vs {limit}"
            );
        }
        Err(ProtoError::Truncated { need, have }) => {
            assert!(
                need > have && have == buf.len(),
                "{name}: Truncated {need} vs {have}"
            );
        }
        Err(ProtoError::Decode(e)) => {
            let size = nodeipc_proto::frame_len(buf, max).expect("a decode error has a frame");
            check_decode_error::<M>(&e, &buf[LEN_PREFIX..size]);
        }
        Err(other) => panic!("{name}: unexpected error {other}"),
    }
    // The same bytes as a stream: frames until the first error, never more
    // frames than the bytes could hold; a frame that does not decode says
    // why as the buffer's does (its bytes are in `scratch`).
    let mut stream = buf;
    let mut scratch = Vec::new();
    for _ in 0..=buf.len() / LEN_PREFIX {
        match read_frame::<M>(&mut stream, max, &mut scratch) {
            Ok(_) => {}
            Err(ProtoError::Decode(e)) => {
                check_decode_error::<M>(&e, &scratch);
                return;
            }
            Err(_) => return,
        }
    }
    assert!(stream.is_empty(), "{name}: more frames than bytes");
}

/// How prost says what was wrong with a message's bytes: the start of each
/// description prost 0.14 gives (`DecodeErrorKind`).
const DECODE_FAULTS: &[&str] = &[
    "length delimiter exceeds maximum usize value",
    "invalid varint",
    "recursion limit reached",
    "invalid wire type value: ",
    "invalid key value: ",
    "invalid tag value: 0",
    "invalid wire type: ",
    "buffer underflow",
    "delimited length exceeded",
    "unexpected end group tag",
    "invalid string value: data is not UTF-8 encoded",
];

/// The `(message, field)` path and the description in a prost decode error's
/// text: `failed to decode Protobuf message: Inner.f: Outer.g: what was
/// wrong`, innermost first. `None` when the text is not shaped so.
fn split_decode_error(text: &str) -> Option<(Vec<(&str, &str)>, &str)> {
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut rest = text.strip_prefix("failed to decode Protobuf message: ")?;
    let mut path = Vec::new();
    while let Some((head, tail)) = rest.split_once(": ") {
        match head.split_once('.') {
            Some((message, field)) if ident(message) && ident(field) => {
                path.push((message, field));
                rest = tail;
            }
            _ => break,
        }
    }
    Some((path, rest))
}

/// A decode error of `M` from `body` says what was wrong: prost's text, a
/// fault prost knows, a path of `Message.field` steps ending (outermost) at
/// a field of `M` — and a path there must be whenever the fault lies inside
/// a field, that is whenever `body` is well-formed protobuf at the top level
/// (it skips cleanly as fields nobody knows). Returns the error's text.
pub(crate) fn check_decode_error<M: Message + Default>(
    error: &prost::DecodeError,
    body: &[u8],
) -> String {
    let text = error.to_string();
    let type_name = std::any::type_name::<M>();
    let short = type_name.rsplit("::").next().unwrap_or(type_name);
    let Some((path, fault)) = split_decode_error(&text) else {
        panic!("{short}: a decode error not in prost's words: {text:?}");
    };
    assert!(
        DECODE_FAULTS.iter().any(|f| fault.starts_with(f)),
        "{short}: a decode error naming no known fault: {text:?}"
    );
    for &(message, field) in &path {
        assert!(
            message.starts_with(|c: char| c.is_ascii_uppercase())
                && field.starts_with(|c: char| c.is_ascii_lowercase()),
            "{short}: a decode error whose path is not Message.field steps: {text:?}"
        );
    }
    match path.last() {
        Some(&(outer, _)) => assert_eq!(
            outer, short,
            "{short}: a decode error whose path starts at another message: {text:?}"
        ),
        None => assert!(
            <() as Message>::decode(body).is_err(),
            "{short}: the bytes are well-formed protobuf, so the fault is inside a field, \
             but the error names none: {text:?} (bytes {body:02x?})"
        ),
    }
    text
}

/// Every message type of the three `.proto` files, the first byte choosing
/// which and the second the reader's limit.
pub fn frame(data: &[u8]) {
    let mut script = Script::new(data);
    let which = script.byte();
    let max = match script.byte() {
        0..=63 => script.u16() as usize,
        64..=127 => usize::MAX,
        128..=191 => nodeipc_monitor::MAX_FRAME,
        _ => 4096,
    };
    let buf = script.rest();
    macro_rules! dispatch {
        ($($ty:ty),* $(,)?) => {{
            let all: &[fn(&[u8], usize)] = &[$(frame_of::<$ty>),*];
            all[which as usize % all.len()](buf, max)
        }};
    }
    nodeipc_proto::every_message!(dispatch)
}

// ---------------------------------------------------------------------------
// Descriptor handles.
// ---------------------------------------------------------------------------

/// What `FdHandle::from_bytes` may name in a refusal: every field it checks.
const HANDLE_FIELDS: &[&str] = &[
    "bytes, expected",
    "magic",
    "layout version",
    "reserved",
    "pid",
    "descriptor",
];

/// `FdHandle::from_bytes`: a handle that writes back to the very same bytes,
/// or a refusal naming the field.
pub fn fd_handle(data: &[u8]) {
    match FdHandle::from_bytes(data) {
        Ok(handle) => assert_eq!(
            &handle.to_bytes()[..],
            data,
            "a handle that does not round-trip"
        ),
        Err(nodeipc_fdpass::Error::BadHandle { reason }) => assert!(
            HANDLE_FIELDS.iter().any(|f| reason.contains(f)),
            "a refusal that names no field: {reason}"
        ),
        Err(other) => panic!("unexpected error {other}"),
    }
}
