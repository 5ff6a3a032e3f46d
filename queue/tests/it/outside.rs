//! The README's example, compiled in a crate outside this workspace that
//! depends on `nodeipc-queue` alone (no `bytemuck`): what a new user does
//! first. The same crate shows the derive refusing a struct without
//! `#[repr(C)]`, with a message that says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nodeipc_testkit::{Watchdog, skip, spawn_child};

/// The README's first ```rust block as a program: hidden lines (`# `)
/// shown, the whole inside `main`.
fn readme_program() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let start = readme.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let end = start + readme[start..].find("```").expect("its end");
    let body: String = readme[start..end]
        .lines()
        .map(|line| line.strip_prefix("# ").unwrap_or(line))
        .map(|line| format!("    {line}\n"))
        .collect();
    format!("fn main() -> Result<(), nodeipc_queue::Error> {{\n{body}}}\n")
}

const REFUSED: &str = r#"
#[derive(Clone, Copy, nodeipc_queue::Message)]
struct NoRepr { id: u64, vote: bool }
fn main() {}
"#;

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn write(path: PathBuf, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_readme_example_compiles_in_a_crate_that_depends_on_nodeipc_queue_alone() {
    let _dog = Watchdog::new("outside crate", Duration::from_secs(600));
    if Command::new(cargo()).arg("--version").output().is_err() {
        skip("outside crate", "no cargo to build a crate with");
        return;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Inside this build's own target folder (no second one elsewhere).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("outside-crate");
    let _ = std::fs::remove_dir_all(dir.join("src"));
    write(
        dir.join("Cargo.toml"),
        &format!(
            "[package]\nname = \"outside\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nnodeipc-queue = {{ path = {:?} }}\n\n[workspace]\n",
            here.display().to_string()
        ),
    );
    // The workspace's versions, so the check needs nothing new (offline).
    std::fs::copy(here.join("../Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    write(dir.join("src/bin/readme.rs"), &readme_program());
    write(dir.join("src/bin/refused.rs"), REFUSED);
    let check = |bin: &str| {
        spawn_child(
            Command::new(cargo())
                .args(["check", "--offline", "--quiet", "--bin", bin])
                .current_dir(&dir)
                .env("CARGO_TARGET_DIR", dir.join("target"))
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_ENCODED_RUSTFLAGS")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped()),
        )
        .output_timeout(Duration::from_secs(540))
    };
    let readme = check("readme");
    assert!(
        readme.status.success(),
        "the README's example does not compile outside the workspace:\n{}",
        String::from_utf8_lossy(&readme.stderr)
    );
    let refused = check("refused");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a struct without repr(C) passed");
    assert!(
        stderr.contains("Message: a struct needs #[repr(C)]"),
        "the refusal does not say why:\n{stderr}"
    );
}
