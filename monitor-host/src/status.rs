//! The JSON form of a [`MonitorStatus`]: what `nodeipc monitor status`
//! prints, and a launcher reads back. The fields are the status's own
//! (serde's derives in `nodeipc-monitor`, feature `serde`).

use nodeipc_monitor::MonitorStatus;

use crate::{Error, Result};

/// [`MonitorStatus`]'s JSON form.
pub trait StatusJson: Sized {
    /// One object, pretty-printed.
    fn to_json(&self) -> String;

    /// Reads [`to_json`](StatusJson::to_json)'s output back.
    ///
    /// # Errors
    /// [`Error::Monitor`] of a protocol error naming what does not parse.
    fn from_json(text: &str) -> Result<Self>;
}

impl StatusJson for MonitorStatus {
    fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a status always serializes")
    }

    fn from_json(text: &str) -> Result<MonitorStatus> {
        serde_json::from_str(text).map_err(|e| {
            Error::Monitor(nodeipc_monitor::Error::Protocol {
                reason: format!("not a monitor status: {e}"),
            })
        })
    }
}
