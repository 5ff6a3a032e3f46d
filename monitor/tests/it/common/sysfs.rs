//! A fake sysfs tree for the NIC health checks. Each file is written to a
//! temporary name and renamed into place, as the kernel's files change at
//! once: a check polling while the test flips a state never reads a file
//! half written (it once read an empty `operstate` and failed the rank).

use std::path::Path;

/// Writes `value` and a newline to `<root>/<rel>`, atomically.
fn set(root: &Path, rel: &str, value: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("a file under the root")).unwrap();
    let staged = path.with_extension("staged");
    std::fs::write(&staged, format!("{value}\n")).unwrap();
    std::fs::rename(&staged, &path).unwrap();
}

/// `<root>/class/net/<name>/operstate` = `state`.
pub fn net(root: &Path, name: &str, state: &str) {
    set(root, &format!("class/net/{name}/operstate"), state);
}

/// `<root>/class/infiniband/<name>/ports/<port>/state` = `state`.
pub fn ib_port(root: &Path, name: &str, port: u32, state: &str) {
    set(
        root,
        &format!("class/infiniband/{name}/ports/{port}/state"),
        state,
    );
}
