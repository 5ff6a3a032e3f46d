//! What a region costs to create, map and remove: `Region::create` + drop
//! beside the same system calls made bare, and `Region::anonymous` beside a
//! bare memfd.

use criterion::{Criterion, criterion_group, criterion_main};
use nodeipc_shm::Region;
use rustix::fs::{MemfdFlags, Mode, OFlags};
use rustix::mm::{MapFlags, ProtFlags};

const SIZE: usize = 1 << 20;

fn bare_map_unmap(fd: &std::os::fd::OwnedFd) {
    rustix::fs::ftruncate(fd, SIZE as u64).unwrap();
    // SAFETY: a fresh shared mapping of a descriptor we own, unmapped right after.
    let ptr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            SIZE,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    }
    .unwrap();
    // SAFETY: `ptr` is the mapping made just above, of `SIZE` bytes, no longer used.
    unsafe { rustix::mm::munmap(ptr, SIZE) }.unwrap();
}

fn create_map_unlink(c: &mut Criterion) {
    let name = format!("/nodeipc-bench-shm-{}", std::process::id());
    let mut group = c.benchmark_group("shm/create_map_unlink_1MiB");
    group.bench_function("region", |b| {
        b.iter(|| drop(Region::create(&name, SIZE).unwrap()))
    });
    group.bench_function("bare_syscalls", |b| {
        b.iter(|| {
            let path = format!("/dev/shm{name}");
            let fd = rustix::fs::open(
                &path,
                OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .unwrap();
            bare_map_unmap(&fd);
            rustix::fs::unlink(&path).unwrap();
        })
    });
    group.finish();

    let mut group = c.benchmark_group("shm/anonymous_1MiB");
    group.bench_function("region", |b| {
        b.iter(|| drop(Region::anonymous(SIZE).unwrap()))
    });
    group.bench_function("bare_memfd", |b| {
        b.iter(|| {
            let fd =
                rustix::fs::memfd_create("bench", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                    .unwrap();
            bare_map_unmap(&fd);
        })
    });
    group.finish();
}

criterion_group!(benches, create_map_unlink);
criterion_main!(benches);
