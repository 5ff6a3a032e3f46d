//! The README's examples are `examples/group.c`, `examples/kittens.cpp`,
//! `examples/model.proto`, `examples/channel.cpp` and
//! `examples/CMakeLists.txt` verbatim, and the first two build against the
//! source tree and run (all of them build against an install, with CMake
//! and with pkg-config, in `tests/install.rs`); its list of functions names
//! every function `include/nodeipc.h` declares.

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, spawn_child};

fn readme() -> String {
    std::fs::read_to_string(common::crate_dir().join("README.md")).expect("README.md")
}

fn in_readme_verbatim(file: &str) {
    let source = common::crate_dir().join("examples").join(file);
    let text = std::fs::read_to_string(&source).expect("example source");
    assert!(
        readme().contains(text.trim_end()),
        "README lacks {file} verbatim"
    );
}

fn example_runs(file: &str) {
    in_readme_verbatim(file);
    let source = common::crate_dir().join("examples").join(file);
    let dir = TempDir::new("capi-readme");
    let Some(program) = common::compile_file(&source, &dir) else {
        return;
    };
    let mut command = Command::new(program);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{file}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for line in common::example_says(file) {
        assert!(stdout.contains(line), "{file}: no {line:?} in\n{stdout}");
    }
}

#[test]
fn c_example_runs() {
    let _dog = Watchdog::new("c_example_runs", Duration::from_secs(60));
    example_runs("group.c");
}

#[test]
fn cpp_example_runs() {
    let _dog = Watchdog::new("cpp_example_runs", Duration::from_secs(60));
    example_runs("kittens.cpp");
}

#[test]
fn readme_holds_the_getting_started_files_and_what_they_print() {
    for file in ["CMakeLists.txt", "model.proto", "channel.cpp"] {
        in_readme_verbatim(file);
    }
    let readme = readme();
    for line in common::example_says("channel.cpp") {
        assert!(readme.contains(line), "README lacks the output {line:?}");
    }
}

#[test]
fn readme_lists_every_function_of_the_header() {
    let header = std::fs::read_to_string(common::crate_dir().join("include/nodeipc.h")).unwrap();
    let declared: BTreeSet<&str> = header
        .lines()
        .filter(|l| !l.starts_with("//") && !l.starts_with(' ') && !l.starts_with('#'))
        .filter_map(|l| l.split_once('(').map(|(head, _)| head))
        .filter_map(|head| head.rsplit([' ', '*']).next())
        .filter(|name| name.starts_with("nodeipc_"))
        .collect();
    assert!(declared.len() > 50, "{declared:?}");
    let readme = readme();
    let missing: Vec<_> = declared
        .iter()
        .filter(|f| !readme.contains(&format!("`{f}`")))
        .collect();
    assert!(missing.is_empty(), "README does not list {missing:?}");
}
