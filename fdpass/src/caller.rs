//! [`borrow_open`]: a descriptor number a caller outside Rust passed (a C
//! `int`, a Python `int`), checked open before anything borrows it.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};

/// A descriptor number that names no open descriptor of this process.
#[derive(Debug, thiserror::Error)]
#[error("descriptor {fd} is not open in this process ({source})")]
pub struct NotOpen {
    /// The number given.
    pub fd: RawFd,
    /// What `fcntl(F_GETFD)` said, with its errno (`EBADF`).
    #[source]
    pub source: io::Error,
}

/// Borrows descriptor `fd` of this process once `fcntl(fd, F_GETFD)` says
/// it is open: a number that is not (closed, never opened, negative) is
/// refused here, instead of reaching a call that would not notice (an
/// `FdHandle` export only records the number).
///
/// # Errors
/// [`NotOpen`] with the errno (`EBADF`).
///
/// # Safety
/// If `fd` is open, it stays open for `'a` and nobody closes it meanwhile
/// (the caller that passed it keeps it, as with any borrowed descriptor).
///
/// # References
/// - [Linux `fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html)
#[doc(alias = "F_GETFD")]
pub unsafe fn borrow_open<'a>(fd: RawFd) -> Result<BorrowedFd<'a>, NotOpen> {
    // SAFETY: F_GETFD reads only this process's descriptor table entry for
    // the number; it touches no memory and changes nothing.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(NotOpen {
            fd,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` is open (checked just above), and the caller promised
    // it stays open for 'a.
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, IntoRawFd};

    use super::borrow_open;

    #[test]
    fn an_open_descriptor_is_lent_and_a_closed_or_negative_one_refused() {
        let (read, write) = std::io::pipe().unwrap();
        // SAFETY: `read` outlives the borrow.
        let lent = unsafe { borrow_open(read.as_raw_fd()) }.unwrap();
        assert_eq!(lent.as_raw_fd(), read.as_raw_fd());
        let closed = write.into_raw_fd();
        // SAFETY: closes the number this test owns, once.
        unsafe { libc::close(closed) };
        for fd in [closed, 99_999, -1] {
            // SAFETY: refused before anything is borrowed.
            let refused = unsafe { borrow_open(fd) }.unwrap_err();
            assert_eq!(refused.source.raw_os_error(), Some(libc::EBADF), "{fd}");
            assert!(
                refused
                    .to_string()
                    .contains(&format!("descriptor {fd} is not open"))
            );
        }
    }
}
