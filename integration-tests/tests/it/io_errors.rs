//! Every crate's error turns into an `io::Error` without losing anything:
//! the typed error comes back by downcast, and the kernel's errno is still
//! there in the `source()` chain.

use std::error::Error as _;
use std::io;

/// The errno somewhere down `error`'s source chain.
fn errno_in_chain(error: &io::Error) -> Option<i32> {
    let mut next = error.source();
    while let Some(e) = next {
        if let Some(os) = e
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(os);
        }
        next = e.source();
    }
    None
}

#[test]
fn regression_io_error_conversions_keep_the_errno_and_the_error() {
    // fdpass: a send on a socket whose peer is gone fails with EPIPE.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(b);
    let failed = nodeipc_fdpass::send_fds(&a, b"x", &[]).unwrap_err();
    let message = failed.to_string();
    let as_io = io::Error::from(failed);
    assert_eq!(as_io.kind(), io::ErrorKind::BrokenPipe);
    assert_eq!(as_io.to_string(), message);
    assert!(
        as_io
            .get_ref()
            .unwrap()
            .downcast_ref::<nodeipc_fdpass::Error>()
            .is_some()
    );
    assert_eq!(
        errno_in_chain(&as_io),
        Some(rustix::io::Errno::PIPE.raw_os_error())
    );

    // shm: an anonymous region of an impossible size.
    let failed = nodeipc_shm::Region::anonymous(usize::MAX).unwrap_err();
    let as_io = io::Error::from(failed);
    assert!(
        as_io
            .get_ref()
            .unwrap()
            .downcast_ref::<nodeipc_shm::Error>()
            .is_some()
    );

    // sem: a missing semaphore, typed and kinded.
    let failed = nodeipc_sem::NamedSemaphore::open("/nodeipc-test-io-errors-missing").unwrap_err();
    let as_io = io::Error::from(failed);
    assert_eq!(as_io.kind(), io::ErrorKind::NotFound);
    assert!(
        as_io
            .get_ref()
            .unwrap()
            .downcast_ref::<nodeipc_sem::Error>()
            .is_some()
    );
}
