//! What a response must be, and how many become one.

use nodeipc_proto::execute::{ExecuteResponse, ExecuteType, PdErrorCode, execute_response};

use crate::{Error, Result};

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

/// The first response whose pull-KV results carry a code other than
/// success (an unknown code counts as a failure), else rank 0's.
pub(crate) fn aggregate(mut responses: Vec<ExecuteResponse>) -> Result<ExecuteResponse> {
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
