//! Rust errors as the Python exceptions of `nodeipc._errors`: each carries
//! the Rust error's message, and the `errno` of a failed system call as its
//! `errno` attribute (`None` otherwise).

use std::error::Error as StdError;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// The Python classes of `nodeipc._errors`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Base,
    Timeout,
    PeerDied,
    NotPermitted,
    NotFound,
    AlreadyExists,
    InvalidArgument,
    Refused,
    RankMonitorClient,
    MonitorRefused,
    MonitorTimeout,
    Forked,
    ConcurrentUse,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Base => "NodeipcError",
            Kind::Timeout => "TimeoutError",
            Kind::PeerDied => "PeerDiedError",
            Kind::NotPermitted => "NotPermittedError",
            Kind::NotFound => "NotFoundError",
            Kind::AlreadyExists => "AlreadyExistsError",
            Kind::InvalidArgument => "InvalidArgumentError",
            Kind::Refused => "RefusedError",
            Kind::RankMonitorClient => "RankMonitorClientError",
            Kind::MonitorRefused => "MonitorRefusedError",
            Kind::MonitorTimeout => "MonitorTimeoutError",
            Kind::Forked => "ForkedError",
            Kind::ConcurrentUse => "ConcurrentUseError",
        }
    }
}

/// An exception of class `kind` carrying `message` and `errno`.
pub(crate) fn raise(py: Python<'_>, kind: Kind, message: String, errno: Option<i32>) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let class = py.import("nodeipc._errors")?.getattr(kind.class_name())?;
        let instance = class.call1((message.as_str(),))?;
        instance.setattr("errno", errno)?;
        Ok(PyErr::from_value(instance))
    })();
    // The package's own module is always importable; were it not, the
    // message still reaches the caller.
    made.unwrap_or_else(|_| PyOSError::new_err(message))
}

/// `Ok` in the process that made the object; in a child forked since, a
/// `ForkedError` naming it (`what` is only built then): a forked child may
/// only close or drop its parent's objects. One load and a compare.
pub(crate) fn usable(
    py: Python<'_>,
    born: &nodeipc_fdpass::ForkGeneration,
    what: impl FnOnce() -> String,
) -> PyResult<()> {
    if !born.is_forked() {
        return Ok(());
    }
    match born.check(&what()) {
        Ok(()) => Ok(()),
        Err(forked) => Err(raise(py, Kind::Forked, forked.to_string(), None)),
    }
}

/// A bad argument caught before any Rust call.
pub(crate) fn invalid(message: String) -> PyErr {
    invalid_errno(message, None)
}

/// A bad argument that a system call refused, keeping its errno.
pub(crate) fn invalid_errno(message: String, errno: Option<i32>) -> PyErr {
    Python::attach(|py| raise(py, Kind::InvalidArgument, message, errno))
}

/// The first errno in `error`'s source chain: a failed system call's own,
/// or the one a layer's error stands for (`EPERM`, `ESRCH`, `EBADF`,
/// `ENOENT`, `EEXIST`: see each layer's `raw_os_error`).
pub(crate) fn errno_of(error: &(dyn StdError + 'static)) -> Option<i32> {
    let mut next = Some(error);
    while let Some(e) = next {
        let code = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .or_else(|| {
                e.downcast_ref::<nodeipc_fdpass::Error>()
                    .and_then(nodeipc_fdpass::Error::raw_os_error)
            })
            .or_else(|| {
                e.downcast_ref::<nodeipc_shm::Error>()
                    .and_then(nodeipc_shm::Error::raw_os_error)
            })
            .or_else(|| {
                e.downcast_ref::<nodeipc_sem::Error>()
                    .and_then(nodeipc_sem::Error::raw_os_error)
            });
        if code.is_some() {
            return code;
        }
        next = e.source();
    }
    None
}

pub(crate) fn shm_kind(e: &nodeipc_shm::Error) -> Kind {
    use nodeipc_shm::Error as E;
    match e {
        E::InvalidName { .. }
        | E::InvalidSize { .. }
        | E::OutOfBounds { .. }
        | E::Misaligned { .. }
        | E::TooSmall { .. } => Kind::InvalidArgument,
        E::AlreadyExists { .. } => Kind::AlreadyExists,
        E::NotFound { .. } => Kind::NotFound,
        E::Untrusted { .. } | E::NotRegular { .. } => Kind::NotPermitted,
        E::Timeout { .. } => Kind::Timeout,
        _ => Kind::Base,
    }
}

/// A region error.
pub(crate) fn shm(py: Python<'_>, e: nodeipc_shm::Error) -> PyErr {
    raise(py, shm_kind(&e), e.to_string(), errno_of(&e))
}

/// A semaphore error.
pub(crate) fn sem(py: Python<'_>, e: nodeipc_sem::Error) -> PyErr {
    use nodeipc_sem::Error as E;
    let kind = match &e {
        E::InvalidName { .. } | E::InvalidValue { .. } | E::Overflow { .. } => {
            Kind::InvalidArgument
        }
        E::AlreadyExists { .. } => Kind::AlreadyExists,
        E::NotFound { .. } => Kind::NotFound,
        E::Untrusted { .. } | E::NotRegular { .. } => Kind::NotPermitted,
        E::Timeout { .. } => Kind::Timeout,
        _ => Kind::Base,
    };
    raise(py, kind, e.to_string(), errno_of(&e))
}

/// A group error.
pub(crate) fn group(py: Python<'_>, e: nodeipc_barrier::Error) -> PyErr {
    use nodeipc_barrier::Error as E;
    let kind = match &e {
        E::InvalidOptions { .. }
        | E::TooLarge { .. }
        | E::RankOutOfRange { .. }
        | E::SubsetOutOfRange { .. } => Kind::InvalidArgument,
        E::NameTaken { .. } => Kind::AlreadyExists,
        E::PeerDied { .. } | E::PeerLeft { .. } | E::Poisoned { .. } => Kind::PeerDied,
        E::Timeout { .. } => Kind::Timeout,
        E::Busy { .. } => Kind::ConcurrentUse,
        E::Shm { source, .. } => shm_kind(source),
        _ => Kind::Base,
    };
    raise(py, kind, e.to_string(), errno_of(&e))
}

/// A monitor client error: a `RankMonitorClientError`, as
/// nvidia-resiliency-ext raises; a refusal is also a `RefusedError`, a
/// timeout also a `TimeoutError`.
pub(crate) fn monitor(py: Python<'_>, e: nodeipc_monitor::Error) -> PyErr {
    let kind = if e.is_refused() {
        Kind::MonitorRefused
    } else if e.is_timeout() {
        Kind::MonitorTimeout
    } else {
        Kind::RankMonitorClient
    };
    raise(py, kind, e.to_string(), errno_of(&e))
}
