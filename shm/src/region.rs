//! [`Region`]: one shared mapping and the descriptor behind it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::fork::ForkGeneration;
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{self, FileType, MemfdFlags, SealFlags};
use rustix::io::Errno;

use crate::name::{dev_shm_path, validate_name};
use crate::space::{HugePages, reserve};
use crate::{Error, Result};

mod access;
pub use access::Prefetch;

/// What backs an anonymous region's memory
/// ([`Region::anonymous_pages`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pages {
    /// The system's normal pages.
    #[default]
    Normal,
    /// Huge pages (`MFD_HUGETLB`), or an error saying why not.
    Huge,
    /// Huge pages if the system can reserve them now, else normal pages.
    HugeOrNormal,
}

/// The only permission bits a region of ours may carry: owner read and write.
pub const REGION_MODE: u32 = 0o600;

/// A shared-memory mapping: a named POSIX object, an anonymous memfd, or a
/// descriptor received from another process.
///
/// The mapping is `MAP_SHARED` and read-write; the descriptor stays open so the
/// region can be passed on ([`as_fd`](Region::as_fd)) or sealed.
///
/// # Lifetime of the name
/// The creator of a named region removes the name when the `Region` drops,
/// unless [`persist`](Region::persist) was called — in the creating
/// process only: a child forked since drops its copy (unmapped, descriptor
/// closed) and leaves the name to its parent. [`unlink_now`](Region::unlink_now)
/// removes it at once while the mapping lives on: once every peer has opened
/// the region, nothing is left behind even if every process is killed.
/// A name is only ever removed while it still refers to this very object, so a
/// region someone else created later under the same name is never touched.
///
/// # Safety of the bytes
/// Other processes can write the mapped bytes at any time, so this type never
/// hands out a safe `&[u8]` or `&mut [u8]` over them. Its safe accessors are:
/// - [`read_at`](Region::read_at) / [`write_at`](Region::write_at): bounds-checked
///   copies through raw pointers. Bytes copied while another process writes
///   them may be torn; every upper layer orders its copies with release/acquire
///   atomics placed in the region and validates what it reads.
/// - [`view`](Region::view): a `&T` at an offset for types made only of atomics
///   ([`ShmSafe`](crate::ShmSafe)), bounds- and alignment-checked.
///
/// The unsafe accessors ([`bytes`](Region::bytes), [`bytes_mut`](Region::bytes_mut))
/// exist for zero-copy encoding and decoding; their callers promise that, by the
/// protocol they run, no other process touches the range meanwhile.
///
/// A peer that shrinks a shared object makes later accesses fault (`SIGBUS`).
/// Regions passed as memfds can be protected with
/// [`seal_grow_shrink`](Region::seal_grow_shrink); named objects rely on the
/// owner check (only our own uid can have opened them).
///
/// `Region` is `Send` and `Sync`: the mapping stays valid until drop, and
/// everything reachable through `&Region` is either atomic or a raw-pointer copy.
#[derive(Debug)]
pub struct Region {
    map: MmapRaw,
    fd: OwnedFd,
    /// The POSIX name, for named regions.
    name: Option<String>,
    /// How errors and `Debug` refer to this region.
    label: String,
    /// `(st_dev, st_ino)`: tells our object from a later one of the same name.
    identity: (u64, u64),
    /// Whether this `Region` should remove the name when it drops.
    unlink_on_drop: AtomicBool,
    /// False for a `PROT_READ` mapping: every write is refused before it faults.
    writable: bool,
    /// The process that made this `Region`: in a child forked since, the
    /// name is the parent's and dropping removes nothing.
    born: ForkGeneration,
}

/// Removes a region's name (`shm_unlink`), whoever created it; mappings of it
/// live on. For the creator's own handle prefer [`Region::unlink_now`], which
/// never removes a later object of the same name.
///
/// # Errors
/// [`Error::InvalidName`], [`Error::NotFound`], [`Error::Io`].
#[doc(alias = "shm_unlink")]
pub fn unlink(name: &str) -> Result<()> {
    validate_name(name)?;
    fs::unlink(dev_shm_path(name)).map_err(|e| match e {
        Errno::NOENT => Error::NotFound {
            name: name.to_owned(),
        },
        e => Error::io("shm_unlink", name, e),
    })
}

/// Removes a freshly created name if creation fails half-way.
struct CreationGuard<'a> {
    name: &'a str,
    armed: bool,
}

impl Drop for CreationGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::unlink(dev_shm_path(self.name));
        }
    }
}

impl Region {
    /// Creates a new named region of `size` bytes and maps it.
    ///
    /// Performs `shm_open(name, O_CREAT|O_EXCL|O_RDWR, 0600)` (as glibc does:
    /// `open("/dev/shm/<name>")` with `O_NOFOLLOW|O_CLOEXEC`), then `fchmod(0600)`
    /// if a strict umask took owner bits, `fallocate` so every page
    /// is taken now, `ftruncate(size)` and `mmap`. An opener sees the size
    /// only once the memory is there. The name is removed when the region
    /// drops unless [`persist`](Region::persist) is called.
    ///
    /// # Errors
    /// [`Error::InvalidName`] before any system call; [`Error::InvalidSize`] for 0;
    /// [`Error::AlreadyExists`] if the name is taken; [`Error::NoSpace`] when
    /// `/dev/shm` (or memory) cannot hold `size` bytes, instead of a `SIGBUS`
    /// at the first write past the room; [`Error::Io`] otherwise.
    /// On any error nothing is left under the name.
    ///
    /// # Examples
    /// ```
    /// use nodeipc_shm::Region;
    /// let name = format!("/nodeipc-doc-create-{}", std::process::id());
    /// let region = Region::create(&name, 4096)?;
    /// region.write_at(0, b"hello")?;
    /// let mut buf = [0u8; 5];
    /// region.read_at(0, &mut buf)?;
    /// assert_eq!(&buf, b"hello");
    /// # Ok::<(), nodeipc_shm::Error>(())
    /// ```
    ///
    /// # References
    /// - [POSIX `shm_open`](https://pubs.opengroup.org/onlinepubs/9799919799/functions/shm_open.html)
    /// - [Linux `shm_open(3)`](https://man7.org/linux/man-pages/man3/shm_open.3.html)
    #[doc(alias = "shm_open")]
    pub fn create(name: &str, size: usize) -> Result<Region> {
        validate_name(name)?;
        check_size(name, size as u64)?;
        // O_CREAT|O_EXCL|O_NOFOLLOW with mode 0600, widened back to 0600 by
        // fchmod only where a strict umask took owner bits (never a window
        // for anyone else; and no chmod at all under a usual umask).
        let fd = nodeipc_fs::create_exclusive(&dev_shm_path(name), REGION_MODE).map_err(
            |e| match e {
                nodeipc_fs::Error::Io { source, .. }
                    if source.raw_os_error() == Some(Errno::EXIST.raw_os_error()) =>
                {
                    Error::AlreadyExists {
                        name: name.to_owned(),
                    }
                }
                nodeipc_fs::Error::Io { op, source, .. } => {
                    Error::io(if op == "create" { "shm_open" } else { op }, name, source)
                }
                other => Error::io("shm_open", name, std::io::Error::other(other)),
            },
        )?;
        let mut guard = CreationGuard { name, armed: true };
        reserve(fd.as_fd(), size as u64, name, false)?;
        fs::ftruncate(&fd, size as u64).map_err(|e| Error::io("ftruncate", name, e))?;
        let region = Region::map(fd, Some(name.to_owned()), name.to_owned(), size, true)?;
        region.unlink_on_drop.store(true, Ordering::Relaxed);
        guard.armed = false;
        Ok(region)
    }

    /// Creates an anonymous region of `size` bytes: a memfd (`MFD_CLOEXEC |
    /// MFD_ALLOW_SEALING`), its memory reserved (`fallocate`), sized and
    /// mapped. It has no name to leak; pass it to other processes with
    /// [`as_fd`](Region::as_fd) over `SCM_RIGHTS` or `pidfd_getfd`.
    ///
    /// # Errors
    /// [`Error::InvalidSize`] for 0; [`Error::NoSpace`] when the system has
    /// not the memory for `size` bytes (checked before allocating, so a huge
    /// size is refused rather than handed to the OOM killer); [`Error::Io`]
    /// for `memfd_create`, `fallocate`, `ftruncate` or `mmap`.
    ///
    /// # Examples
    /// ```
    /// let region = nodeipc_shm::Region::anonymous(1 << 20)?;
    /// region.seal_grow_shrink()?; // a peer can no longer truncate it under us
    /// assert_eq!(region.len(), 1 << 20);
    /// # Ok::<(), nodeipc_shm::Error>(())
    /// ```
    ///
    /// # References
    /// - [Linux `memfd_create(2)`](https://man7.org/linux/man-pages/man2/memfd_create.2.html)
    #[doc(alias = "memfd_create")]
    pub fn anonymous(size: usize) -> Result<Region> {
        Region::anonymous_with(size, false)
    }

    /// Like [`anonymous`](Region::anonymous), backed by huge pages
    /// (`MFD_HUGETLB`, the system's default huge page size). `size` is rounded
    /// up to a whole number of huge pages.
    ///
    /// # Errors
    /// [`Error::HugePagesUnavailable`] saying how many huge pages the system
    /// has free and of what size, when it cannot provide them.
    pub fn anonymous_huge(size: usize) -> Result<Region> {
        Region::anonymous_with(size, true)
    }

    /// An anonymous region backed as `pages` asks: normal pages, huge pages,
    /// or huge pages if the system has them and normal ones otherwise
    /// ([`Pages::HugeOrNormal`]). The choice is made here, at creation: huge
    /// pages are reserved with `fallocate` before anything is mapped, so a
    /// region that got them never faults for want of one later.
    /// [`is_huge`](Region::is_huge) says which it got.
    ///
    /// # Errors
    /// As [`anonymous`](Region::anonymous) and
    /// [`anonymous_huge`](Region::anonymous_huge) ([`Pages::Huge`] only:
    /// `HugeOrNormal` falls back instead).
    ///
    /// # Examples
    /// ```
    /// use nodeipc_shm::{Pages, Region};
    /// let region = Region::anonymous_pages(1 << 20, Pages::HugeOrNormal)?;
    /// println!("huge pages: {}", region.is_huge());
    /// # Ok::<(), nodeipc_shm::Error>(())
    /// ```
    pub fn anonymous_pages(size: usize, pages: Pages) -> Result<Region> {
        match pages {
            Pages::Normal => Region::anonymous(size),
            Pages::Huge => Region::anonymous_huge(size),
            Pages::HugeOrNormal => match Region::anonymous_huge(size) {
                Err(Error::HugePagesUnavailable { .. }) => Region::anonymous(size),
                other => other,
            },
        }
    }

    /// Whether huge pages back the region (its file is on hugetlbfs:
    /// `fstatfs`), for any region, received ones included.
    pub fn is_huge(&self) -> bool {
        const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
        // `f_type`'s type differs between architectures (i64 on x86-64).
        #[allow(clippy::unnecessary_cast)]
        fs::fstatfs(&self.fd).is_ok_and(|st| st.f_type as i64 == HUGETLBFS_MAGIC)
    }

    fn anonymous_with(size: usize, huge: bool) -> Result<Region> {
        const LABEL: &str = "memfd:nodeipc";
        check_size(LABEL, size as u64)?;
        let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
        let mut len = size;
        if huge {
            flags |= MemfdFlags::HUGETLB;
            let info = HugePages::read();
            let Some(page) = info.page_size.filter(|_| info.free > 0) else {
                return Err(Error::HugePagesUnavailable {
                    object: LABEL.to_owned(),
                    reason: info.describe(),
                });
            };
            len = size.div_ceil(page) * page;
        }
        let unavailable = |e: Errno| {
            if huge && matches!(e, Errno::NOMEM | Errno::INVAL | Errno::NOSPC) {
                Error::HugePagesUnavailable {
                    object: LABEL.to_owned(),
                    reason: format!("{} ({e})", HugePages::read().describe()),
                }
            } else {
                Error::io("memfd_create", LABEL, e)
            }
        };
        let fd = fs::memfd_create("nodeipc", flags).map_err(unavailable)?;
        reserve(fd.as_fd(), len as u64, LABEL, huge).map_err(|e| match e {
            Error::NoSpace { source, .. } | Error::Io { source, .. } if huge => {
                unavailable(Errno::from_io_error(&source).unwrap_or(Errno::NOMEM))
            }
            e => e,
        })?;
        fs::ftruncate(&fd, len as u64).map_err(unavailable)?;
        Region::map(fd, None, LABEL.to_owned(), len, true).map_err(|e| match e {
            Error::Io { source, .. } if huge => {
                unavailable(Errno::from_io_error(&source).unwrap_or(Errno::NOMEM))
            }
            e => e,
        })
    }

    /// Maps a region from a descriptor another process passed us (a memfd or a
    /// shared-memory object); its size comes from `fstat`.
    ///
    /// No owner check is made here: whoever handed over the descriptor is the
    /// one to trust or not (peer credentials of the socket, say).
    ///
    /// # Errors
    /// [`Error::NotRegular`] if the descriptor is not a regular file;
    /// [`Error::InvalidSize`] if it is empty; [`Error::Io`].
    pub fn from_fd(fd: OwnedFd) -> Result<Region> {
        Region::from_fd_with(fd, true)
    }

    /// Maps a region from a descriptor read-only (`PROT_READ`): this process
    /// cannot change a byte of it, and [`write_at`](Region::write_at) and
    /// [`bytes_mut`](Region::bytes_mut) answer [`Error::ReadOnly`]. The
    /// descriptor may be read-write or read-only (see
    /// [`reopen_read_only`](Region::reopen_read_only)); a read-only one
    /// also keeps this process from mapping it writable later.
    ///
    /// Storing through a [`view`](Region::view) of a read-only region faults
    /// (`SIGSEGV`): views of such regions are for loads.
    ///
    /// # Errors
    /// As [`from_fd`](Region::from_fd).
    ///
    /// # Examples
    /// ```
    /// let owner = nodeipc_shm::Region::anonymous(4096)?;
    /// owner.write_at(0, b"only mine to write")?;
    /// let reader = nodeipc_shm::Region::from_fd_read_only(owner.reopen_read_only()?)?;
    /// let mut buf = [0u8; 4];
    /// reader.read_at(0, &mut buf)?;
    /// assert_eq!(&buf, b"only");
    /// assert!(matches!(reader.write_at(0, b"x"), Err(nodeipc_shm::Error::ReadOnly { .. })));
    /// # Ok::<(), nodeipc_shm::Error>(())
    /// ```
    pub fn from_fd_read_only(fd: OwnedFd) -> Result<Region> {
        Region::from_fd_with(fd, false)
    }

    fn from_fd_with(fd: OwnedFd, writable: bool) -> Result<Region> {
        const LABEL: &str = "received fd";
        let stat = fs::fstat(&fd).map_err(|e| Error::io("fstat", LABEL, e))?;
        let file_type = FileType::from_raw_mode(stat.st_mode as _);
        if file_type != FileType::RegularFile {
            return Err(Error::NotRegular {
                object: LABEL.to_owned(),
                found: nodeipc_fs::file_type_name(file_type),
            });
        }
        let size = stat.st_size as u64;
        check_size(LABEL, size)?;
        Region::map(fd, None, LABEL.to_owned(), size as usize, writable)
    }

    pub(crate) fn map(
        fd: OwnedFd,
        name: Option<String>,
        label: String,
        len: usize,
        writable: bool,
    ) -> Result<Region> {
        let stat = fs::fstat(&fd).map_err(|e| Error::io("fstat", &label, e))?;
        let mut options = MmapOptions::new();
        options.len(len);
        let map = if writable {
            options.map_raw(&fd)
        } else {
            options.map_raw_read_only(&fd)
        }
        .map_err(|e| Error::io("mmap", &label, e))?;
        Ok(Region {
            map,
            fd,
            name,
            label,
            identity: (stat.st_dev, stat.st_ino),
            unlink_on_drop: AtomicBool::new(false),
            writable,
            born: ForkGeneration::current(),
        })
    }

    /// Whether this process may write the region (false for read-only mappings).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// A new descriptor for the same memory, opened read-only (through
    /// `/proc/self/fd`): hand it to a peer that must only read, and that peer
    /// can neither map it writable nor write, truncate or seal it.
    ///
    /// It does not stop a process of our uid that can open the region's name
    /// (while it has one) or ptrace us; see the crate's README.
    ///
    /// # Errors
    /// [`Error::Io`] if `/proc` is not mounted or the open fails.
    pub fn reopen_read_only(&self) -> Result<OwnedFd> {
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        fs::open(
            path.as_str(),
            fs::OFlags::RDONLY | fs::OFlags::CLOEXEC,
            fs::Mode::empty(),
        )
        .map_err(|e| Error::io("open(/proc/self/fd, O_RDONLY)", &self.label, e))
    }

    fn check_writable(&self) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::ReadOnly {
                object: self.label.clone(),
            })
        }
    }

    /// Size of the mapping in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The POSIX name, for a named region.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The descriptor behind the mapping, to pass to another process.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Keeps the name after this region drops (the creator removes it otherwise).
    pub fn persist(&self) {
        self.unlink_on_drop.store(false, Ordering::Relaxed);
    }

    /// Removes the name now; the mapping, and every peer's, lives on.
    ///
    /// Call it once every peer has opened the region: from then on nothing can
    /// leak, whatever kills the processes. Removing a name that is already
    /// gone, or that now belongs to another object, does nothing.
    ///
    /// # Errors
    /// [`Error::Io`] if `shm_unlink` fails for another reason than the name
    /// being gone.
    #[doc(alias = "shm_unlink")]
    pub fn unlink_now(&self) -> Result<()> {
        self.unlink_on_drop.store(false, Ordering::Relaxed);
        match &self.name {
            Some(name) => self.unlink_if_ours(name),
            None => Ok(()),
        }
    }

    fn unlink_if_ours(&self, name: &str) -> Result<()> {
        let path = dev_shm_path(name);
        match fs::stat(&path) {
            Ok(stat) if (stat.st_dev, stat.st_ino) == self.identity => {}
            Ok(_) | Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(Error::io("stat", name, e)),
        }
        match fs::unlink(&path) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::io("shm_unlink", name, e)),
        }
    }

    /// Forbids growing and shrinking the region (`F_SEAL_GROW | F_SEAL_SHRINK`),
    /// so no process holding the descriptor can truncate it under a mapping.
    /// Only memfds created by [`anonymous`](Region::anonymous) (or received
    /// from one) can be sealed.
    ///
    /// # Errors
    /// [`Error::NotSealable`] for a named object or a memfd without sealing.
    #[doc(alias = "F_ADD_SEALS")]
    pub fn seal_grow_shrink(&self) -> Result<()> {
        fs::fcntl_add_seals(&self.fd, SealFlags::GROW | SealFlags::SHRINK).map_err(|e| match e {
            Errno::INVAL | Errno::PERM => Error::NotSealable {
                object: self.label.clone(),
            },
            e => Error::io("fcntl(F_ADD_SEALS)", &self.label, e),
        })
    }

    /// Whether the size is sealed (neither grow nor shrink possible), as a
    /// receiver of a memfd may want to check before trusting the mapping.
    pub fn is_size_sealed(&self) -> bool {
        fs::fcntl_get_seals(&self.fd)
            .map(|s| s.contains(SealFlags::GROW | SealFlags::SHRINK))
            .unwrap_or(false)
    }

    /// Whether the region is a memfd (`memfd_create`, made here or received
    /// as a descriptor) rather than a named object or another file; `None`
    /// when `/proc` cannot tell (not mounted, out of descriptors). A memfd
    /// can be sealed, so a receiver demands [`is_size_sealed`](Region::is_size_sealed)
    /// of one; queue and pool take `None` as "maybe" and demand it too.
    ///
    /// Performs `readlink("/proc/self/fd/<fd>")`: a memfd's link reads
    /// `/memfd:<name> (deleted)`.
    ///
    /// # References
    /// - [Linux `memfd_create(2)`](https://man7.org/linux/man-pages/man2/memfd_create.2.html), "NOTES"
    /// - [Linux `proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
    #[doc(alias = "memfd")]
    pub fn is_memfd(&self) -> Option<bool> {
        use std::os::fd::AsRawFd;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).ok()?;
        Some(link.to_string_lossy().starts_with("/memfd:"))
    }

    /// The label errors use for this region: its name, or what it came from.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Start of the mapping. Reading or writing through it is the caller's
    /// responsibility (see the type's safety section).
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

impl AsFd for Region {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // A child forked since it was made unmaps and closes its copy; the
        // name stays its parent's to remove.
        if self.unlink_on_drop.load(Ordering::Relaxed)
            && !self.born.is_forked()
            && let Some(name) = &self.name
        {
            let _ = self.unlink_if_ours(name);
        }
    }
}

pub(crate) fn check_size(object: &str, size: u64) -> Result<()> {
    let reason = if size == 0 {
        "a region needs at least one byte"
    } else if size > isize::MAX as u64 {
        "larger than the address space"
    } else {
        return Ok(());
    };
    Err(Error::InvalidSize {
        object: object.to_owned(),
        size,
        reason,
    })
}

// `Region` is Send and Sync through its fields (memmap2's mapping is); this
// pins that down so a field change that loses it fails to compile here.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Region>();
};
