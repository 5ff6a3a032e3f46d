//! The generated table against prost itself: every field's name as prost's
//! errors print it, and, for every field prost checks, the very error prost
//! gives for a wrong wire type.

use prost::encoding::{WireType, encode_key};

use super::{KnownMessage, MESSAGES, Stop, walk};

/// A field `number` announcing one byte that is not there: whatever its
/// type, prost fails inside the field and names it.
fn names_match<M: KnownMessage>() {
    let schema = &MESSAGES[M::SCHEMA_INDEX];
    for field in schema.fields {
        let mut body = Vec::new();
        encode_key(field.number, WireType::LengthDelimited, &mut body);
        body.push(1);
        let Err(error) = M::decode(body.as_slice()) else {
            panic!(
                "{}.{}: a field missing its byte decoded",
                schema.name, field.name
            );
        };
        let text = error.to_string();
        let path = format!(
            "failed to decode Protobuf message: {}.{}: ",
            schema.name, field.name
        );
        assert!(
            text.starts_with(&path),
            "{text:?} does not start with {path:?}"
        );
    }
}

/// Every field but a map, on a wire type it does not take: the walk's error
/// is prost's, word for word.
fn wrong_wire_types_match<M: KnownMessage>() {
    let schema = &MESSAGES[M::SCHEMA_INDEX];
    for field in schema.fields {
        if field.message.is_some_and(|m| MESSAGES[m].map_entry) {
            continue;
        }
        let mut body = Vec::new();
        if field.wire == WireType::Varint {
            encode_key(field.number, WireType::SixtyFourBit, &mut body);
            body.extend([0; 8]);
        } else {
            encode_key(field.number, WireType::Varint, &mut body);
            body.push(0);
        }
        let Err(prost) = M::decode(body.as_slice()) else {
            panic!(
                "{}.{}: prost took a wrong wire type",
                schema.name, field.name
            );
        };
        let prost = prost.to_string();
        let ours = match walk(schema, &body, 0) {
            Err(Stop::Fault(error)) => error.to_string(),
            _ => panic!(
                "{}.{}: the walk let a wrong wire type through",
                schema.name, field.name
            ),
        };
        assert_eq!(ours, prost);
    }
}

#[test]
fn the_table_names_fields_and_wire_types_as_prost_does() {
    macro_rules! each {
        ($($ty:ty),* $(,)?) => {{
            $( names_match::<$ty>(); wrong_wire_types_match::<$ty>(); )*
            [$(stringify!($ty)),*].len()
        }};
    }
    let listed = crate::every_message!(each);
    let messages = MESSAGES.iter().filter(|m| !m.map_entry).count();
    assert_eq!(
        listed, messages,
        "every_message! lists {listed} of {messages} messages"
    );
}
