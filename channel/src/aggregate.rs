//! What a response must be, and how many become one.

use nodeipc_proto::execute::{ExecuteResponse, ExecuteType, PdErrorCode, execute_response};

use crate::coordinator::Gathered;
use crate::{Error, Result};

/// How the responses of every worker to one request become one: the rule a
/// typed coordinator's [`Aggregated`](crate::Aggregated) gather and the
/// response thread apply ([`Coordinator::set_aggregate`](crate::Coordinator::set_aggregate)),
/// or the one [`AggregatedBy`](crate::AggregatedBy) is given. Any
/// `FnMut(Vec<R>) -> Result<R>` is one; [`PullKvRule`] is the execute
/// schema's.
pub trait Aggregate<R> {
    /// Folds `responses` (one per worker, in rank order, never empty) into one.
    ///
    /// # Errors
    /// Whatever the rule decides the request's outcome is.
    fn aggregate(&mut self, responses: Vec<R>) -> Result<R>;
}

impl<R, F: FnMut(Vec<R>) -> Result<R>> Aggregate<R> for F {
    fn aggregate(&mut self, responses: Vec<R>) -> Result<R> {
        self(responses)
    }
}

/// How a [`Raw`](crate::Raw) coordinator's aggregated gather picks the one
/// answer that stands for all: given every worker's bytes, the rank whose
/// answer is handed out (as a [`Picked`](crate::Picked)). Any
/// `FnMut(&Gathered<'_>) -> Result<u32>` is one.
pub trait Pick {
    /// The rank whose answer stands for every worker's in `responses` (one
    /// per worker, in rank order, never empty).
    ///
    /// # Errors
    /// Whatever the rule decides the request's outcome is. A rank outside
    /// the channel is refused by the gather as
    /// [`Error::RankOutOfRange`].
    fn pick(&mut self, responses: &Gathered<'_>) -> Result<u32>;
}

impl<F: FnMut(&Gathered<'_>) -> Result<u32>> Pick for F {
    fn pick(&mut self, responses: &Gathered<'_>) -> Result<u32> {
        self(responses)
    }
}

/// The execute schema's rule: the first response whose pull-KV results carry
/// a code other than success (an unknown code counts as a failure), else
/// rank 0's. What MindIE's coordinator does.
#[derive(Clone, Copy, Debug, Default)]
pub struct PullKvRule;

impl Aggregate<ExecuteResponse> for PullKvRule {
    fn aggregate(&mut self, responses: Vec<ExecuteResponse>) -> Result<ExecuteResponse> {
        aggregate(responses)
    }
}

/// Refuses a response with a non-zero status or a message type this side
/// does not know, naming the worker.
pub(crate) fn validate(
    channel: &str,
    rank: u32,
    response: ExecuteResponse,
) -> Result<ExecuteResponse> {
    if ExecuteType::try_from(response.msg_type).is_err() {
        return Err(Error::UnknownMessageType {
            channel: channel.to_owned(),
            rank,
            value: response.msg_type,
        });
    }
    if response.status != 0 {
        return Err(Error::WorkerFailed {
            channel: channel.to_owned(),
            rank,
            sequence: response.sequence,
            status: response.status,
            message: response.error,
        });
    }
    Ok(response)
}

/// [`PullKvRule`].
fn aggregate(mut responses: Vec<ExecuteResponse>) -> Result<ExecuteResponse> {
    let failed = responses
        .iter()
        .position(|response| match &response.result {
            Some(execute_response::Result::PullKvResponse(pull)) => pull
                .results
                .iter()
                .any(|r| PdErrorCode::try_from(r.pd_error_code) != Ok(PdErrorCode::PdSuccess)),
            _ => false,
        });
    Ok(responses.swap_remove(failed.unwrap_or(0)))
}
