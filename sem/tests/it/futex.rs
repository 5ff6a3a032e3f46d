//! What only futex semaphores have: placement in a region, overflow, and
//! sharing through a second mapping of the same memory.

use std::time::Duration;

use nodeipc_sem::{Error, Semaphore, ShmSemaphore};
use nodeipc_shm::Region;

#[test]
fn two_mappings_of_one_region_share_the_semaphore() {
    let region = Region::anonymous(4096).unwrap();
    let other = Region::from_fd(region.as_fd().try_clone_to_owned().unwrap()).unwrap();
    assert_ne!(
        region.as_ptr(),
        other.as_ptr(),
        "the test needs two distinct mappings"
    );
    let a: &ShmSemaphore = region.view(128).unwrap();
    let b: &ShmSemaphore = other.view(128).unwrap();
    a.init(0);
    let waiter = std::thread::scope(|s| {
        let h = s.spawn(|| b.wait_timeout(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(50));
        a.post().unwrap();
        h.join().unwrap()
    });
    waiter.unwrap();
    assert_eq!(a.value().unwrap(), 0);
}

#[test]
fn post_at_the_maximum_is_refused() {
    let region = Region::anonymous(64).unwrap();
    let sem: &ShmSemaphore = region.view(0).unwrap();
    sem.init(ShmSemaphore::MAX - 1);
    sem.post().unwrap();
    assert!(matches!(
        sem.post(),
        Err(Error::Overflow {
            max: ShmSemaphore::MAX,
            ..
        })
    ));
    assert_eq!(sem.value().unwrap(), ShmSemaphore::MAX);
    assert!(sem.try_wait().unwrap());
    sem.post().unwrap();
}

#[test]
fn it_is_eight_bytes_and_needs_four_byte_alignment() {
    assert_eq!(ShmSemaphore::SIZE, 8);
    let region = Region::anonymous(64).unwrap();
    assert!(region.view::<ShmSemaphore>(2).is_err());
    assert!(region.view::<ShmSemaphore>(60).is_err());
    assert!(region.view::<ShmSemaphore>(56).is_ok());
}
