//! POSIX shared-memory names, checked before any system call sees them.

use crate::{Error, Result};

/// The longest name accepted, in bytes, leading `/` included: the file under
/// `/dev/shm` is limited to `NAME_MAX` (255) bytes.
pub const MAX_NAME_LEN: usize = 255;

/// Checks a shared-memory name: one leading `/`, no other `/`, something after
/// it, at most [`MAX_NAME_LEN`] bytes, no NUL or other control character,
/// and not `/.` or `/..`.
///
/// Control characters (bytes below 0x20, 0x7f, and U+0080 to U+009F) are
/// refused because a name becomes a file under `/dev/shm` and a word in
/// logs, listings and `nodeipc ls` output: a newline in it forges lines, an
/// escape sequence rewrites a terminal.
///
/// # Errors
/// [`Error::InvalidName`] naming the rule that is broken.
///
/// # Examples
/// ```
/// assert!(nodeipc_shm::validate_name("/nodeipc-job42").is_ok());
/// assert!(nodeipc_shm::validate_name("nodeipc-job42").is_err());
/// assert!(nodeipc_shm::validate_name("/a/b").is_err());
/// assert!(nodeipc_shm::validate_name("/job\n42").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if !name.starts_with('/') {
        Some("it must start with '/'")
    } else if name.len() == 1 {
        Some("nothing follows the leading '/'")
    } else if name[1..].contains('/') {
        Some("only the leading '/' is allowed")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is longer than 255 bytes")
    } else if name.contains('\0') {
        Some("it contains a NUL byte")
    } else if name.chars().any(char::is_control) {
        Some(
            "it contains a control character (a byte below 0x20, 0x7f, or U+0080 to U+009F): \
             a newline or an escape would forge lines in logs and listings",
        )
    } else if name == "/." || name == "/.." {
        Some("'.' and '..' are not object names")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Where the object of a valid name lives on Linux.
pub(crate) fn dev_shm_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(crate::SHM_DIR).join(&name[1..])
}
