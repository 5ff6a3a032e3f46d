//! How an error from a layer becomes the command's one line and exit
//! status: a bounded wait that ran out is exit 3, whichever layer's it was;
//! its time is said in words ("150 ms") by the layer's own message.

use std::error::Error;

/// Whether `error`, or an error it wraps, is a bounded wait that ran out.
pub(crate) fn timed_out(error: &(dyn Error + 'static)) -> bool {
    chain(error).any(|e| {
        if let Some(e) = e.downcast_ref::<std::io::Error>() {
            e.kind() == std::io::ErrorKind::TimedOut
        } else if let Some(e) = e.downcast_ref::<nodeipc_sem::Error>() {
            e.is_timeout()
        } else if let Some(e) = e.downcast_ref::<nodeipc_monitor::Error>() {
            e.is_timeout()
        } else if let Some(e) = e.downcast_ref::<nodeipc_monitor_host::Error>() {
            e.is_timeout()
        } else {
            e.downcast_ref::<nodeipc_channel::Error>()
                .is_some_and(|e| matches!(e, nodeipc_channel::Error::Timeout { .. }))
                || e.downcast_ref::<nodeipc_barrier::Error>()
                    .is_some_and(|e| matches!(e, nodeipc_barrier::Error::Timeout { .. }))
                || e.downcast_ref::<nodeipc_shm::Error>()
                    .is_some_and(|e| matches!(e, nodeipc_shm::Error::Timeout { .. }))
                || e.downcast_ref::<nodeipc_fdpass::Error>()
                    .is_some_and(|e| matches!(e, nodeipc_fdpass::Error::ConnectTimeout { .. }))
        }
    })
}

/// The line for `error`: its message. Every layer says its durations in
/// words already (`nodeipc_text::InWords`), so nothing is rewritten.
pub(crate) fn line(error: &(dyn Error + 'static)) -> String {
    error.to_string()
}

/// `error` and what it wraps. An `io::Error` made from another error hands
/// that error out through `get_ref`: its `source` skips it.
fn chain<'a>(error: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&e| match e.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn Error + 'static)),
        None => e.source(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_timeout_is_said_in_words_wrapped_or_not() {
        let sem = nodeipc_sem::Error::Timeout {
            name: "/nodeipc-x".to_owned(),
            waited: Duration::from_nanos(151_717_613),
        };
        assert!(timed_out(&sem));
        assert_eq!(
            line(&sem),
            "timed out after 151 ms waiting for semaphore /nodeipc-x"
        );
        let wrapped = std::io::Error::other(sem);
        assert!(timed_out(&wrapped));
        assert_eq!(
            line(&wrapped),
            "timed out after 151 ms waiting for semaphore /nodeipc-x"
        );
    }

    #[test]
    fn other_errors_keep_their_message_and_are_not_timeouts() {
        let error = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(!timed_out(&error));
        assert_eq!(line(&error), error.to_string());
    }
}
