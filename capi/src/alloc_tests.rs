//! The checks every call makes on its handle (magic, fork generation)
//! allocate nothing: a counting allocator counts what this thread
//! allocates while its window is open (each thread its own count).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::region::{
    nodeipc_region, nodeipc_region_anonymous, nodeipc_region_data, nodeipc_region_free,
};
use super::sem::{
    nodeipc_sem, nodeipc_sem_free, nodeipc_sem_in_region, nodeipc_sem_post, nodeipc_sem_try_wait,
};
use super::status::NODEIPC_OK;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// How many allocations this thread made while running `f`.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counting touches only thread-local cells, which allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn regression_a_call_on_a_live_handle_allocates_nothing() {
    // The counter counts: a Box is an allocation.
    assert_eq!(allocations_in(|| drop(Box::new(7u64))), 1);
    let mut region: *mut nodeipc_region = std::ptr::null_mut();
    let mut sem: *mut nodeipc_sem = std::ptr::null_mut();
    // SAFETY: out-pointers of ours; the handles are this test's own.
    unsafe {
        assert_eq!(nodeipc_region_anonymous(4096, &mut region), NODEIPC_OK);
        assert_eq!(
            nodeipc_sem_in_region(region, 0, true, 0, &mut sem),
            NODEIPC_OK
        );
    }
    let made = allocations_in(|| {
        for _ in 0..1000 {
            let (mut data, mut len) = (std::ptr::null_mut(), 0);
            let mut acquired = false;
            // SAFETY: live handles and writable out-pointers of this test.
            unsafe {
                assert_eq!(nodeipc_region_data(region, &mut data, &mut len), NODEIPC_OK);
                assert_eq!(nodeipc_sem_post(sem), NODEIPC_OK);
                assert_eq!(nodeipc_sem_try_wait(sem, &mut acquired), NODEIPC_OK);
            }
            assert!(acquired);
        }
    });
    assert_eq!(made, 0, "3000 calls on live handles allocated {made} times");
    // SAFETY: live handles, not used afterwards.
    unsafe {
        assert_eq!(nodeipc_sem_free(sem), NODEIPC_OK);
        assert_eq!(nodeipc_region_free(region), NODEIPC_OK);
    }
}
