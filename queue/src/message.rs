//! What a queue carries: [`Message`], plain data copied as it is, or a
//! `#[repr(C)]` type whose `bool` and enum fields are checked on the way in.

use std::mem::MaybeUninit;

/// A value a queue can carry between processes.
///
/// Two kinds implement it:
///
/// - **Plain data**: every `bytemuck::Pod` type (integers, floats, arrays
///   of them, `#[derive(Pod)]` structs), and any derived type whose fields
///   are all plain with no padding between them. Any bytes are a valid
///   value and there is no padding: a message is copied as it is, never
///   checked ([`PLAIN`](Message::PLAIN) is `true`).
/// - **Checked**: `#[derive(nodeipc_queue::Message)]` on a `#[repr(C)]`
///   struct with `bool`, field-less enum or padded fields (Agave's own
///   message types, say), or on a field-less `#[repr(u8)]` (…`i64`) enum.
///   On the way out the message is written field by field into a zeroed
///   buffer, so padding leaves as zeros (never whatever the stack held). On
///   the way in it is copied into the consumer's own memory first and that
///   copy is checked — every `bool` 0 or 1, every enum a declared
///   discriminant — before it becomes a value; a bad one is
///   [`Error::Invalid`](crate::Error::Invalid), naming the queue, the slot,
///   the field and its offset. Shared bytes are never checked in place (the
///   peer could change them between the check and the use).
///
/// The derive refuses what it cannot carry soundly: a struct without
/// `#[repr(C)]` (the compiler would choose the field order), `packed`,
/// generics, unions, enums with fields or without an integer `repr`. Its
/// generated code names `::nodeipc_queue`; a crate that renamed this one
/// says `#[message(crate = "path::to::it")]`.
///
/// ```
/// use nodeipc_queue::{Message, Queue};
///
/// #[derive(Clone, Copy, Debug, PartialEq, Message)]
/// #[repr(u8)]
/// enum Kind { Check = 1, Execute = 2 }
///
/// #[derive(Clone, Copy, Debug, PartialEq, Message)]
/// #[repr(C)]
/// struct Work { kind: Kind, urgent: bool, slot: u64 } // 6 bytes of padding
///
/// let queue = Queue::<Work>::anonymous(8, 1)?;
/// let (mut tx, mut rx) = (queue.producer()?, queue.consumer()?);
/// let work = Work { kind: Kind::Execute, urgent: true, slot: 7 };
/// assert!(tx.try_push(&work)?);
/// assert_eq!(rx.try_pop()?, Some(work));
/// assert!(!Work::PLAIN && <[u64; 4]>::PLAIN);
/// # Ok::<(), nodeipc_queue::Error>(())
/// ```
///
/// # Safety
/// An implementation promises, for `size_of::<Self>()` bytes:
/// - with `PLAIN` true: every byte pattern is a valid `Self` and `Self` has
///   no padding (the queue copies it as raw bytes both ways);
/// - `encode` writes `self`'s field bytes into `out` (zeroed by the caller)
///   at their offsets and leaves padding bytes alone;
/// - `check` returns `Ok` only for bytes that are a valid `Self`.
///
/// The derive upholds these; write one by hand only with the same care.
pub unsafe trait Message: Copy + 'static {
    /// Whether every byte pattern is a valid value and there is no padding:
    /// the fast path, copied as it is and never checked.
    const PLAIN: bool;

    /// Writes the value's bytes into `out` (`size_of::<Self>()` bytes, all
    /// 0 on entry), each field at its offset; padding stays 0.
    fn encode(&self, out: &mut [u8]);

    /// Checks that `bytes` (`size_of::<Self>()` bytes of a private copy)
    /// hold a valid value.
    ///
    /// # Errors
    /// The first invalid field, with its offset and value.
    fn check(bytes: &[u8]) -> Result<(), Invalid>;

    /// Writes the value into `out` as a queue slot holds it (padding as
    /// zeros): for a message kept somewhere else another process reads,
    /// a pool block, say (Agave's response arrays).
    ///
    /// # Panics
    /// When `out` is not `size_of::<Self>()` bytes long (a caller's bug).
    fn write_bytes(&self, out: &mut [u8]) {
        assert_eq!(
            out.len(),
            size_of::<Self>(),
            "Message::write_bytes: buffer size"
        );
        out.copy_from_slice(Outgoing::new(self).bytes());
    }

    /// Reads a value from `bytes` (a private copy: check never runs on
    /// memory another process may write), checked as a queue checks what it
    /// pops.
    ///
    /// # Errors
    /// The first invalid field, as [`check`](Message::check) finds it.
    ///
    /// # Panics
    /// When `bytes` is not `size_of::<Self>()` bytes long (a caller's bug).
    fn read_bytes(bytes: &[u8]) -> Result<Self, Invalid> {
        assert_eq!(
            bytes.len(),
            size_of::<Self>(),
            "Message::read_bytes: buffer size"
        );
        let mut copy = Incoming::<Self>::new();
        // SAFETY: `bytes` holds `size_of::<Self>()` bytes (asserted), the
        // copy as many; they do not overlap (the copy is a new local).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), copy.as_mut_ptr(), bytes.len()) };
        // SAFETY: every byte of the copy was written just above.
        unsafe { copy.finish() }
    }
}

// SAFETY: `Pod` promises exactly `PLAIN`: any bit pattern is valid and
// there is no padding, so copying raw bytes either way is sound.
unsafe impl<T: bytemuck::Pod> Message for T {
    const PLAIN: bool = true;

    #[inline]
    fn encode(&self, out: &mut [u8]) {
        out.copy_from_slice(bytemuck::bytes_of(self));
    }

    #[inline]
    fn check(_bytes: &[u8]) -> Result<(), Invalid> {
        Ok(())
    }
}

/// A field of a received message that holds no valid value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The field, as a path from the message (`batch.processed`,
    /// `flags[2]`; empty for a message that is itself an enum).
    pub field: String,
    /// Its offset in the message, in bytes.
    pub offset: usize,
    /// The value found (the byte, or the enum's discriminant).
    pub value: u64,
    /// What it should have been.
    pub expected: &'static str,
}

impl Invalid {
    /// An invalid `value` in `field` at `offset`.
    pub fn new(field: &str, offset: usize, value: u64, expected: &'static str) -> Invalid {
        Invalid {
            field: field.to_owned(),
            offset,
            value,
            expected,
        }
    }

    /// The same, seen from a message that holds this one as `field` at `at`.
    #[must_use]
    pub fn within(mut self, field: &str, at: usize) -> Invalid {
        self.field = if self.field.is_empty() {
            field.to_owned()
        } else if self.field.starts_with('[') {
            format!("{field}{}", self.field)
        } else {
            format!("{field}.{}", self.field)
        };
        self.offset += at;
        self
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = if self.field.is_empty() {
            "the message"
        } else {
            &self.field
        };
        write!(
            f,
            "field {field} at offset {} holds {}, not {}",
            self.offset, self.value, self.expected
        )
    }
}

impl std::error::Error for Invalid {}

/// The bytes of a value on its way out: the value itself when plain, else
/// its fields written into a zeroed copy. Private memory either way.
pub(crate) struct Outgoing<T> {
    staged: MaybeUninit<T>,
}

impl<T: Message> Outgoing<T> {
    #[inline]
    pub(crate) fn new(value: &T) -> Outgoing<T> {
        if T::PLAIN {
            return Outgoing {
                staged: MaybeUninit::new(*value),
            };
        }
        let mut staged = MaybeUninit::<T>::zeroed();
        // SAFETY: `zeroed` initialised every byte of `staged` (a local), so
        // viewing them as `u8`s reads nothing uninitialised; nothing else
        // refers to it.
        let out = unsafe {
            std::slice::from_raw_parts_mut(staged.as_mut_ptr().cast::<u8>(), size_of::<T>())
        };
        value.encode(out);
        Outgoing { staged }
    }

    /// The bytes to copy into a slot: every byte initialised (a plain
    /// value has no padding; an encoded one was zeroed first).
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: as `new` says: no uninitialised byte, and `staged` is ours.
        unsafe { std::slice::from_raw_parts(self.staged.as_ptr().cast::<u8>(), size_of::<T>()) }
    }
}

/// A received message's private copy, checked before it becomes a `T`.
pub(crate) struct Incoming<T> {
    copy: MaybeUninit<T>,
}

impl<T: Message> Incoming<T> {
    #[inline]
    pub(crate) fn new() -> Incoming<T> {
        Incoming {
            copy: MaybeUninit::uninit(),
        }
    }

    /// Where the bytes go: the caller writes all `size_of::<T>()` of them
    /// before calling [`finish`](Incoming::finish).
    #[inline]
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.copy.as_mut_ptr().cast::<u8>()
    }

    /// The value, once every byte was written.
    ///
    /// # Safety
    /// All `size_of::<T>()` bytes behind [`as_mut_ptr`](Incoming::as_mut_ptr)
    /// were written.
    #[inline]
    pub(crate) unsafe fn finish(self) -> Result<T, Invalid> {
        if !T::PLAIN {
            // SAFETY: the caller wrote every byte; the copy is ours alone.
            let bytes = unsafe {
                std::slice::from_raw_parts(self.copy.as_ptr().cast::<u8>(), size_of::<T>())
            };
            T::check(bytes)?;
        }
        // SAFETY: every byte written (caller), and either any bytes are a
        // valid `T` (`PLAIN`) or `check` accepted them.
        Ok(unsafe { self.copy.assume_init() })
    }
}
