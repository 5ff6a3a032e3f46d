//! What `Listener::bind` trusts about the directory a socket goes in: the
//! directory must be ours and private, and a symlink in its place must be
//! ours (or root's) too — one another user owns can be pointed elsewhere
//! after the checks.

use std::os::unix::fs::PermissionsExt;

use nodeipc_fdpass::{Error, Listener};
use nodeipc_testkit::{NOBODY, TempDir, is_root, skip};

fn private_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn regression_a_socket_directory_that_is_another_users_symlink_is_refused() {
    if !is_root()
        && skip(
            "regression_a_socket_directory_that_is_another_users_symlink_is_refused",
            "needs root to make a symlink another user owns",
        )
    {
        return;
    }
    // The target is ours and private: only the link belongs to the stranger,
    // who could re-point it at a directory of theirs once we have checked.
    let target = private_dir("symdir-target");
    let holder = private_dir("symdir-holder");
    let link = holder.join("jobdir");
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(NOBODY.0), Some(NOBODY.1)).unwrap();
    match Listener::bind(&link.join("sock")) {
        Err(Error::UnsafeDirectory { dir, owner, .. }) => {
            assert_eq!(dir, link);
            assert_eq!(owner, NOBODY.0);
        }
        other => panic!("expected UnsafeDirectory, got {other:?}"),
    }
    assert!(
        std::fs::read_dir(target.path()).unwrap().next().is_none(),
        "something was bound behind the link"
    );
}

#[test]
fn our_own_symlink_as_the_directory_is_followed_and_its_target_checked() {
    let target = private_dir("symdir-ours");
    let holder = private_dir("symdir-ours-holder");
    let link = holder.join("jobdir");
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    let listener = Listener::bind(&link.join("sock")).expect("our link to our private directory");
    assert!(target.join("sock").exists());
    drop(listener);
    assert!(!target.join("sock").exists());

    // The same link to a directory anyone can write: the target is refused.
    std::fs::set_permissions(target.path(), PermissionsExt::from_mode(0o777)).unwrap();
    match Listener::bind(&link.join("sock")) {
        Err(Error::UnsafeDirectory { mode, .. }) => assert_eq!(mode, 0o777),
        other => panic!("expected UnsafeDirectory, got {other:?}"),
    }
}

#[test]
fn a_directory_of_another_user_is_refused_naming_its_owner() {
    if !is_root()
        && skip(
            "a_directory_of_another_user_is_refused_naming_its_owner",
            "needs root to chown",
        )
    {
        return;
    }
    let dir = private_dir("otherdir");
    std::os::unix::fs::chown(dir.path(), Some(NOBODY.0), Some(NOBODY.1)).unwrap();
    match Listener::bind(&dir.join("sock")) {
        Err(Error::UnsafeDirectory { owner, mode, .. }) => {
            assert_eq!(owner, NOBODY.0);
            assert_eq!(mode, 0o700);
        }
        other => panic!("expected UnsafeDirectory, got {other:?}"),
    }
}
