//! Text that came from outside the process, made safe to print.

use std::borrow::Cow;
use std::fmt;

/// `text` with every control character escaped as Rust escapes it (`\n`,
/// `\t`, `\u{1b}`), everything else as it is: what another process chose
/// (a value in etcd, a rank's cause, a peer's error, a file name) can then
/// neither start a line of its own in a log nor send the terminal an
/// escape sequence. Borrowed when there is nothing to escape.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(Printable(text).to_string())
}

/// [`printable`] as a `Display` wrapper, for `format!` without an
/// allocation: `format!("cause: {}", Printable(&cause))`.
#[derive(Clone, Copy, Debug)]
pub struct Printable<'a>(pub &'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(char::is_control) {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            write!(f, "{}", c.escape_default())?;
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(printable("plain text, é, ✓"), Cow::Borrowed(_)));
        assert_eq!(
            printable("x\nnodeipc launch: exit 0\r\u{1b}[2J\u{7f}\u{85}\0"),
            "x\\nnodeipc launch: exit 0\\r\\u{1b}[2J\\u{7f}\\u{85}\\u{0}"
        );
        assert_eq!(printable("tab\there"), "tab\\there");
        assert_eq!(Printable("a\nb").to_string(), "a\\nb");
        assert_eq!(printable(""), "");
    }
}
