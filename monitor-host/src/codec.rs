//! The small, versioned binary encoding of the estimator's saved state
//! ([`crate::EstimatorState`]): little-endian integers and length-prefixed
//! byte strings.
//!
//! The reader treats its input as untrusted (a rank persists the state and
//! may give back anything): every length is checked against what is left
//! before anything is read or allocated, so a bad length is an error naming
//! the field, never a panic or a huge allocation.

/// Appends fields to a byte vector.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    /// A writer whose output starts with `magic` and `version`.
    pub(crate) fn new(magic: &[u8; 4], version: u16) -> Writer {
        let mut w = Writer::default();
        w.bytes.extend_from_slice(magic);
        w.bytes.extend_from_slice(&version.to_le_bytes());
        w
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    pub(crate) fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// `None` as a 0 byte; `Some(v)` as a 1 byte and `v`.
    pub(crate) fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
        }
    }

    /// A count of items (saturating: no encoded list is anywhere near 4 G).
    pub(crate) fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.len(v.len());
        self.bytes.extend_from_slice(v);
    }

    pub(crate) fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads fields back, each error naming what it was reading (`what`, the
/// encoding's name, then the field).
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// Checks the magic word and returns the version and a reader after it.
    ///
    /// # Errors
    /// A sentence naming `what` when the input is too short or the magic
    /// word is not `magic`.
    pub(crate) fn open(
        bytes: &'a [u8],
        magic: &[u8; 4],
        what: &'static str,
    ) -> Result<(u16, Reader<'a>), String> {
        let mut r = Reader { rest: bytes, what };
        let found = r.take(4, "magic word")?;
        if found != magic {
            return Err(format!(
                "{what}: starts with {found:02x?}, not the magic word {magic:02x?}"
            ));
        }
        let version = u16::from_le_bytes(r.array("version")?);
        Ok((version, r))
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], String> {
        if n > self.rest.len() {
            return Err(format!(
                "{}: {field} needs {n} bytes, {} left",
                self.what,
                self.rest.len()
            ));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], String> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, field: &str) -> Result<u8, String> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(crate) fn bool(&mut self, field: &str) -> Result<bool, String> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!(
                "{}: {field} is {other}, not a boolean (0 or 1)",
                self.what
            )),
        }
    }

    pub(crate) fn u32(&mut self, field: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn opt_u64(&mut self, field: &str) -> Result<Option<u64>, String> {
        match self.bool(field)? {
            false => Ok(None),
            true => self.u64(field).map(Some),
        }
    }

    /// A count of at most `max` items, each at least `min_item` bytes long:
    /// a count the remaining input cannot hold is refused before anything
    /// is allocated for it.
    pub(crate) fn len(
        &mut self,
        field: &str,
        max: usize,
        min_item: usize,
    ) -> Result<usize, String> {
        let n = self.u32(field)?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n > max {
            return Err(format!("{}: {n} {field}; at most {max}", self.what));
        }
        if n.saturating_mul(min_item) > self.rest.len() {
            return Err(format!(
                "{}: {n} {field} cannot fit in the {} bytes left",
                self.what,
                self.rest.len()
            ));
        }
        Ok(n)
    }

    /// A byte string of at most `max` bytes.
    pub(crate) fn bytes(&mut self, field: &str, max: usize) -> Result<&'a [u8], String> {
        let n = self.len(field, max, 1)?;
        self.take(n, field)
    }

    /// A UTF-8 string of at most `max` bytes.
    pub(crate) fn string(&mut self, field: &str, max: usize) -> Result<String, String> {
        let raw = self.bytes(field, max)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|e| format!("{}: {field} is not UTF-8: {e}", self.what))
    }

    /// Refuses bytes left over after the last field.
    pub(crate) fn end(self) -> Result<(), String> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(format!("{}: {n} bytes after the last field", self.what)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_a_short_input_names_the_field() {
        let mut w = Writer::new(b"TEST", 3);
        w.u64(7);
        w.opt_u64(None);
        w.opt_u64(Some(9));
        w.str("step");
        let bytes = w.finish();
        let (version, mut r) = Reader::open(&bytes, b"TEST", "test").unwrap();
        assert_eq!(version, 3);
        assert_eq!(r.u64("a").unwrap(), 7);
        assert_eq!(r.opt_u64("b").unwrap(), None);
        assert_eq!(r.opt_u64("c").unwrap(), Some(9));
        assert_eq!(r.string("name", 10).unwrap(), "step");
        r.end().unwrap();

        let (_, mut r) = Reader::open(&bytes[..12], b"TEST", "test").unwrap();
        r.u64("a").unwrap_err();
        let e = Reader::open(&bytes[..10], b"TEST", "test")
            .and_then(|(_, mut r)| r.u64("the count"))
            .unwrap_err();
        assert!(e.contains("the count needs 8 bytes, 4 left"), "{e}");
    }

    #[test]
    fn a_length_larger_than_the_input_is_refused_before_allocating() {
        let mut w = Writer::new(b"TEST", 1);
        w.u32(u32::MAX);
        let bytes = w.finish();
        let (_, mut r) = Reader::open(&bytes, b"TEST", "test").unwrap();
        let e = r.string("name", usize::MAX).unwrap_err();
        assert!(e.contains("cannot fit"), "{e}");
        let (_, mut r) = Reader::open(&bytes, b"TEST", "test").unwrap();
        let e = r.len("sections", 64, 1).unwrap_err();
        assert!(e.contains("at most 64"), "{e}");
        let e = Reader::open(b"NOPE\x01\x00", b"TEST", "test").unwrap_err();
        assert!(e.contains("magic word"), "{e}");
    }
}
