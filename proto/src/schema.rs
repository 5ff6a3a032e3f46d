//! Wire types checked against the schema before prost decodes.
//!
//! prost checks the wire type of every field it decodes except map fields:
//! a map field on another wire type (a `fixed64` in place of an entry, say)
//! is read as a length and an entry anyway, the reader falls out of step
//! with the fields that follow, and the decode either fails later with an
//! error that names no field or the wrong one ("invalid tag value: 0"), or
//! succeeds with an entry the sender never wrote — where every other
//! protobuf reader refuses or skips the field. So a message that can hold a
//! map is walked first: a field on a wire type its schema does not accept is
//! refused with the error prost gives for any other field, naming message
//! and field (`Timeouts.section_timeouts_ms: invalid wire type: SixtyFourBit
//! (expected LengthDelimited)`). The walk stops where the bytes stop being
//! well-formed and leaves those to prost, which stays in step up to there.

use prost::DecodeError;
use prost::encoding::{
    DecodeContext, WireType, check_wire_type, decode_key, decode_varint, skip_field,
};

/// A message of this crate's `.proto` files: the decoders of this crate
/// check its wire types against its schema (see [`decode_message`](crate::decode_message)).
///
/// Implemented for every generated message type, and only for those.
pub trait KnownMessage: prost::Message + Default + sealed::Sealed {
    /// Where its schema sits in the generated table.
    #[doc(hidden)]
    const SCHEMA_INDEX: usize;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// One message of the `.proto` files, as the walk needs it.
pub(crate) struct MessageSchema {
    /// The name prost's errors give it (the Rust type's).
    pub(crate) name: &'static str,
    /// A map's entry: prost's errors never name it, only the map field.
    pub(crate) map_entry: bool,
    /// Whether it holds a map, itself or in a field's message.
    pub(crate) reaches_map: bool,
    pub(crate) fields: &'static [FieldSchema],
}

pub(crate) struct FieldSchema {
    pub(crate) number: u32,
    /// The name prost's errors give it (its oneof's, for a oneof member).
    pub(crate) name: &'static str,
    pub(crate) wire: WireType,
    /// A repeated scalar, which may also come packed (length-delimited).
    pub(crate) packable: bool,
    /// The message type it holds, as an index into [`MESSAGES`].
    pub(crate) message: Option<usize>,
}

impl FieldSchema {
    fn accepts(&self, wire_type: WireType) -> bool {
        wire_type == self.wire || (self.packable && wire_type == WireType::LengthDelimited)
    }
}

include!(concat!(env!("OUT_DIR"), "/schema.rs"));

/// prost's recursion limit: deeper than this, prost refuses on its own.
const DEPTH_LIMIT: u32 = 100;

/// Refuses `body` as an `M` when a field in it comes on a wire type its
/// schema does not accept, with the error prost gives for such a field.
pub(crate) fn check_wire_types<M: KnownMessage>(body: &[u8]) -> Result<(), DecodeError> {
    let schema = &MESSAGES[M::SCHEMA_INDEX];
    if !schema.reaches_map {
        // prost checks every field of such a message itself.
        return Ok(());
    }
    match walk(schema, body, 0) {
        Ok(()) | Err(Stop::Malformed) => Ok(()),
        Err(Stop::Fault(error)) => Err(error),
    }
}

enum Stop {
    /// The bytes are not well-formed here: prost will say so, in step.
    Malformed,
    /// A field on a wrong wire type.
    Fault(DecodeError),
}

fn walk(schema: &MessageSchema, mut buf: &[u8], depth: u32) -> Result<(), Stop> {
    if depth > DEPTH_LIMIT {
        return Err(Stop::Malformed);
    }
    let name = |mut error: DecodeError, field: &FieldSchema| {
        if !schema.map_entry {
            error.push(schema.name, field.name);
        }
        Stop::Fault(error)
    };
    while !buf.is_empty() {
        let (number, wire_type) = decode_key(&mut buf).map_err(|_| Stop::Malformed)?;
        let Some(field) = schema.fields.iter().find(|f| f.number == number) else {
            skip_field(wire_type, number, &mut buf, DecodeContext::default())
                .map_err(|_| Stop::Malformed)?;
            continue;
        };
        if !field.accepts(wire_type) {
            let error = check_wire_type(field.wire, wire_type)
                .expect_err("a wire type the field does not accept");
            return Err(name(error, field));
        }
        let inner = field
            .message
            .map(|i| &MESSAGES[i])
            .filter(|m| m.reaches_map && wire_type == WireType::LengthDelimited);
        let Some(inner) = inner else {
            skip_field(wire_type, number, &mut buf, DecodeContext::default())
                .map_err(|_| Stop::Malformed)?;
            continue;
        };
        let len = decode_varint(&mut buf).map_err(|_| Stop::Malformed)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= buf.len())
            .ok_or(Stop::Malformed)?;
        let (bytes, rest) = buf.split_at(len);
        walk(inner, bytes, depth + 1).map_err(|stop| match stop {
            Stop::Fault(error) => name(error, field),
            malformed => malformed,
        })?;
        buf = rest;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
