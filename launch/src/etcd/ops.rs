//! The few etcd requests the launcher makes: a put bound to a lease, and
//! transactions that compare one key's revision and read it back when the
//! comparison fails.

use super::pb::etcdserverpb::{
    Compare, PutRequest, RangeRequest, RequestOp, TxnRequest, TxnResponse, compare,
    request_op::Request, response_op::Response,
};
use super::pb::mvccpb::KeyValue;
use super::session::Session;
use crate::Result;

/// `key`'s modification revision equals `revision` (0: the key is absent).
pub(crate) fn mod_revision_is(key: &str, revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Mod as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(compare::TargetUnion::ModRevision(revision)),
    }
}

/// `key` does not exist.
pub(crate) fn absent(key: &str) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(compare::TargetUnion::CreateRevision(0)),
    }
}

pub(crate) fn put_op(key: &str, value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
            ..PutRequest::default()
        })),
    }
}

pub(crate) fn get_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(RangeRequest {
            key: key.as_bytes().to_vec(),
            ..RangeRequest::default()
        })),
    }
}

/// If `compare` holds, `then`; else read `key`. Whether it held, and
/// `key` as read when it did not (`None`: absent).
pub(crate) fn txn_or_read(
    session: &Session,
    what: &str,
    compare: Compare,
    then: Vec<RequestOp>,
    key: &str,
) -> Result<(bool, Option<KeyValue>)> {
    let request = TxnRequest {
        compare: vec![compare],
        success: then,
        failure: vec![get_op(key)],
    };
    let mut kv = session.kv();
    let answer: TxnResponse = session.call(what, async move { kv.txn(request).await })?;
    session.catch_up(answer.header.map_or(0, |h| h.revision));
    if answer.succeeded {
        return Ok((true, None));
    }
    let read = answer
        .responses
        .into_iter()
        .find_map(|r| match r.response {
            Some(Response::ResponseRange(range)) => Some(range),
            _ => None,
        })
        .and_then(|range| range.kvs.into_iter().next());
    Ok((false, read))
}

/// Puts `value` at `key`, bound to `lease`.
pub(crate) fn put(session: &Session, key: &str, value: Vec<u8>, lease: i64) -> Result<()> {
    let request = PutRequest {
        key: key.as_bytes().to_vec(),
        value,
        lease,
        ..PutRequest::default()
    };
    let mut kv = session.kv();
    let answer = session.call("Put", async move { kv.put(request).await })?;
    session.catch_up(answer.header.map_or(0, |h| h.revision));
    Ok(())
}
