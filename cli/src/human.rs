//! How numbers reach a person: sizes ("4.0 KiB") and owners (a user
//! name), one function each, used by every command. Durations, signal names
//! and the escaping of outside text are `nodeipc-text`'s, shared with the
//! layers' own messages.

use std::collections::HashMap;

/// A byte count in binary units with one decimal (`512 B`, `4.0 KiB`,
/// `1.5 GiB`).
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    // Rounding to one decimal may reach 1024.0: move up a unit then.
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// User names by uid, looked up once each (`getpwuid_r`, so NSS sources
/// such as LDAP count as well as `/etc/passwd`).
#[derive(Default)]
pub(crate) struct Owners {
    known: HashMap<u32, Option<String>>,
}

impl Owners {
    /// The user name of `uid`, or its number when it has none.
    pub(crate) fn name(&mut self, uid: u32) -> String {
        self.known
            .entry(uid)
            .or_insert_with(|| user_name(uid))
            .clone()
            .unwrap_or_else(|| uid.to_string())
    }
}

/// The most buffer a passwd entry may take: an entry past it is taken to
/// have no name, rather than growing without bound.
const MAX_PASSWD_BUFFER: usize = 1 << 20;

fn user_name(uid: u32) -> Option<String> {
    let mut buffer = vec![0u8; 1024];
    loop {
        // SAFETY: `passwd` and `found` are this thread's own locals;
        // `buffer` is ours, of the length passed; getpwuid_r writes only
        // into them, and the strings `passwd` points at live in `buffer`,
        // which outlives the read of `pw_name` below.
        let mut passwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: as above.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut passwd,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buffer.len() < MAX_PASSWD_BUFFER {
            let grown = buffer.len() * 2;
            buffer.resize(grown, 0);
            continue;
        }
        if rc != 0 || found.is_null() || passwd.pw_name.is_null() {
            return None;
        }
        // SAFETY: getpwuid_r succeeded, so `pw_name` points at a
        // NUL-terminated string inside `buffer`, which this thread owns.
        let name = unsafe { std::ffi::CStr::from_ptr(passwd.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units_with_one_decimal() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(4096), "4.0 KiB");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(1 << 20), "1.0 MiB");
        assert_eq!(size((1 << 20) - 1), "1.0 MiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
        assert_eq!(size(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn owners_are_named_or_numbered() {
        let mut owners = Owners::default();
        assert_eq!(owners.name(0), "root");
        // A uid no passwd entry has.
        assert_eq!(owners.name(4_294_967_000), "4294967000");
    }
}
