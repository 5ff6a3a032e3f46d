//! `install.sh` lays out every header, both libraries (the shared one as
//! `libnodeipc.so.X.Y.Z` with its SONAME `libnodeipc.so.X` and the links),
//! `nodeipc.pc`, `nodeipc-static.pc` and the CMake package config under a
//! prefix, and a C program (`tests/c/hello.c`) and a C++ one
//! (`tests/c/installed.cpp`: KittensBroker ranks, a coordinator and a
//! worker; with pkg-config also `tests/c/mindie_server.cpp`, a MindIE-shaped
//! server with a send thread and a response thread) build from
//! pkg-config's flags alone and from
//! `find_package(nodeipc)`, against the static library and against the
//! shared one, and run with no `LD_LIBRARY_PATH`: the static ones need no
//! libnodeipc at run time, the shared ones find `libnodeipc.so.X` by
//! themselves.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, skip, spawn_child, unique_name};

/// Runs install.sh into `dir/prefix` for this test run's profile.
fn install(dir: &TempDir) -> PathBuf {
    let lib = common::static_lib();
    let profile_dir = lib.parent().expect("profile dir");
    let profile = profile_dir.file_name().expect("profile").to_string_lossy();
    let target = profile_dir.parent().expect("target dir");
    install_from(target, &profile, &dir.join("prefix"))
}

/// Runs install.sh from `target/profile/` into `prefix`.
fn install_from(target: &Path, profile: &str, prefix: &Path) -> PathBuf {
    let out = Command::new(common::crate_dir().join("install.sh"))
        .arg("--prefix")
        .arg(prefix)
        .args(["--profile", profile, "--target-dir"])
        .arg(target)
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    prefix.to_path_buf()
}

/// Where pkg-config looks besides nothing: the prefix's folder alone, or
/// the prefix's beside the system's (for a package the system holds).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Search {
    PrefixOnly,
    PrefixAndSystem,
}

/// `pkg-config ARGS` against the prefix's pkgconfig folder, split into
/// arguments; `None` (a failure under CI) without pkg-config.
fn pkg_config_in(prefix: &Path, search: Search, args: &[&str]) -> Option<Vec<String>> {
    let folder = prefix.join("lib/pkgconfig");
    let mut command = Command::new("pkg-config");
    command.args(args);
    match search {
        Search::PrefixOnly => command
            .env("PKG_CONFIG_LIBDIR", folder)
            .env_remove("PKG_CONFIG_PATH"),
        Search::PrefixAndSystem => command
            .env("PKG_CONFIG_PATH", folder)
            .env_remove("PKG_CONFIG_LIBDIR"),
    };
    match command.output() {
        Ok(o) => {
            assert!(
                o.status.success(),
                "pkg-config {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
            )
        }
        Err(e) => {
            skip("pkg-config", &format!("no pkg-config: {e}"));
            None
        }
    }
}

/// `pkg-config ARGS` against the prefix's pkgconfig folder alone.
fn pkg_config(prefix: &Path, args: &[&str]) -> Option<Vec<String>> {
    pkg_config_in(prefix, Search::PrefixOnly, args)
}

/// The two programs, each run in `dir` and checked by what it prints.
#[derive(Clone, Copy)]
enum Program {
    /// tests/c/hello.c: one region.
    C,
    /// tests/c/installed.cpp: KittensBroker, Coordinator and Worker.
    Cpp,
    /// tests/c/mindie_server.cpp: a send thread and a response thread,
    /// worker processes, a worker killed.
    Server,
}

impl Program {
    fn source(self) -> &'static str {
        match self {
            Program::C => "hello.c",
            Program::Cpp => "installed.cpp",
            Program::Server => "mindie_server.cpp",
        }
    }

    /// Runs the built program `exe` with no `LD_LIBRARY_PATH`; it must
    /// succeed and say so. `shared`: whether it was linked against
    /// libnodeipc.so (and must need it by its SONAME) or statically (and
    /// must not need it at all).
    fn run(self, dir: &TempDir, exe: &Path, shared: bool) {
        let Some(needed) = dynamic(exe, "NEEDED") else {
            return;
        };
        let soname = format!("libnodeipc.so.{}", env!("CARGO_PKG_VERSION_MAJOR"));
        match shared {
            true => assert!(needed.contains(&soname), "{}: {needed:?}", exe.display()),
            false => assert!(
                !needed.iter().any(|n| n.starts_with("libnodeipc")),
                "{}: {needed:?}",
                exe.display()
            ),
        }
        let mut command = Command::new(exe);
        let group = unique_name("installed");
        let name = exe.file_name().unwrap().to_string_lossy();
        match self {
            // The group's name, the channel's, the handshake's socket.
            Program::Cpp => command
                .arg(&group)
                .arg(unique_name("installed-channel"))
                .arg(dir.join(&format!("{name}.sock"))),
            Program::Server => command.arg(dir.join(&format!("{name}.sock"))),
            Program::C => &mut command,
        };
        command
            .env_remove("LD_LIBRARY_PATH")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = spawn_child(&mut command).output_timeout(Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let says = match self {
            Program::C => "says hi",
            Program::Cpp => "installed: kittens 100 101, worker 0 says pong to ping",
            Program::Server => "200 requests in order, 4 failures folded",
        };
        assert!(
            out.status.success() && stdout.contains(says),
            "{}: {}\n{stdout}\n{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(shm_leftovers(&group).is_empty());
    }
}

/// The values of the ELF dynamic section's `kind` entries of `file`
/// (`NEEDED`, `SONAME`), from `readelf -d`; `None` (a failure under CI)
/// without readelf.
fn dynamic(file: &Path, kind: &str) -> Option<Vec<String>> {
    let out = match Command::new("readelf").arg("-d").arg(file).output() {
        Ok(o) => o,
        Err(e) => {
            skip("install", &format!("no readelf (binutils): {e}"));
            return None;
        }
    };
    assert!(out.status.success(), "readelf -d {}", file.display());
    let tag = format!("({kind})");
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(tag.as_str()))
            .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_owned()))
            .collect(),
    )
}

/// The debug-information sections of `file` (an object, a library, every
/// member of an archive), from `readelf -S`: `.debug_*` but for
/// `.debug_gdb_scripts`, which is loaded (flag A), 34 bytes telling gdb
/// where Rust's pretty-printers are, and not debug information.
fn debug_sections(file: &Path) -> Option<usize> {
    let out = match Command::new("readelf")
        .args(["-S", "-W"])
        .arg(file)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            skip("install", &format!("no readelf (binutils): {e}"));
            return None;
        }
    };
    assert!(out.status.success(), "readelf -S {}", file.display());
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(']').map(|(_, rest)| rest))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter(|name| name.starts_with(".debug_") && *name != ".debug_gdb_scripts")
            .count(),
    )
}

/// Compiles `program` into `dir/<name>` with `flags` after the source.
fn build(dir: &TempDir, program: Program, name: &str, flags: &[String]) -> Option<PathBuf> {
    let (compiler, std) = common::compiler_for(program.source());
    let exe = dir.join(name);
    let mut command = Command::new(compiler);
    command
        .args([std, "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(common::crate_dir().join("tests/c").join(program.source()))
        .args(flags);
    common::run_compiler(&mut command, name).then_some(exe)
}

#[test]
fn install_lays_out_every_header_and_both_libraries() {
    let dir = TempDir::new("capi-install-files");
    let prefix = install(&dir);
    let include = common::crate_dir().join("include");
    let mut headers = Vec::new();
    let mut folders = vec![include.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            match entry.path() {
                p if p.is_dir() => folders.push(p),
                p => headers.push(p.strip_prefix(&include).unwrap().to_path_buf()),
            }
        }
    }
    assert!(headers.len() >= 4, "{headers:?}");
    for header in &headers {
        let installed = prefix.join("include").join(header);
        assert!(
            std::fs::read(&installed).ok() == std::fs::read(include.join(header)).ok(),
            "{} not installed as it is in capi/include",
            header.display()
        );
    }
    let version = env!("CARGO_PKG_VERSION");
    let soname = format!("libnodeipc.so.{}", env!("CARGO_PKG_VERSION_MAJOR"));
    let real = format!("libnodeipc.so.{version}");
    for file in [
        "lib/libnodeipc.a".to_owned(),
        format!("lib/{real}"),
        "lib/pkgconfig/nodeipc.pc".to_owned(),
        "lib/pkgconfig/nodeipc-static.pc".to_owned(),
        "lib/cmake/nodeipc/nodeipc-config.cmake".to_owned(),
        "lib/cmake/nodeipc/nodeipc-config-version.cmake".to_owned(),
    ] {
        let meta = std::fs::symlink_metadata(prefix.join(&file));
        assert!(
            meta.is_ok_and(|m| m.file_type().is_file()),
            "{file} not installed (as a file)"
        );
    }
    // libnodeipc.so -> libnodeipc.so.X -> libnodeipc.so.X.Y.Z, as
    // distributions ship a library.
    for (link, to) in [("libnodeipc.so", soname.as_str()), (&soname, &real)] {
        let target = std::fs::read_link(prefix.join("lib").join(link));
        assert!(
            target.as_ref().is_ok_and(|t| t == Path::new(to)),
            "lib/{link} should link to {to}: {target:?}"
        );
    }
    if let Some(names) = dynamic(&prefix.join("lib").join(&real), "SONAME") {
        assert_eq!(names, [soname], "the SONAME of lib/{real}");
    }
}

#[test]
fn installed_library_builds_with_pkg_config() {
    let _dog = Watchdog::new(
        "installed_library_builds_with_pkg_config",
        Duration::from_secs(120),
    );
    let dir = TempDir::new("capi-install");
    let prefix = install(&dir);
    // The archive through nodeipc-static.pc, with --static or without.
    let Some(archive) = pkg_config(&prefix, &["--cflags", "--libs", "nodeipc-static"]) else {
        return;
    };
    let archive_static = pkg_config(
        &prefix,
        &["--cflags", "--libs", "--static", "nodeipc-static"],
    );
    assert_eq!(Some(&archive), archive_static.as_ref());
    let shared = pkg_config(&prefix, &["--cflags", "--libs", "nodeipc"]).expect("ran above");
    for program in [Program::C, Program::Cpp, Program::Server] {
        let name = format!("{}-static", program.source());
        let Some(exe) = build(&dir, program, &name, &archive) else {
            return;
        };
        program.run(&dir, &exe, false);
        let name = format!("{}-shared", program.source());
        let exe = build(&dir, program, &name, &shared).expect("built above");
        program.run(&dir, &exe, true);
    }
}

#[test]
fn installed_library_builds_with_cmake_find_package() {
    let _dog = Watchdog::new(
        "installed_library_builds_with_cmake",
        Duration::from_secs(180),
    );
    let dir = TempDir::new("capi-cmake");
    let prefix = install(&dir);
    let project = dir.join("project");
    std::fs::create_dir(&project).unwrap();
    for program in [Program::C, Program::Cpp] {
        std::fs::copy(
            common::crate_dir().join("tests/c").join(program.source()),
            project.join(program.source()),
        )
        .unwrap();
    }
    std::fs::write(
        project.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.16)\n\
         project(installed C CXX)\n\
         set(CMAKE_CXX_STANDARD 17)\n\
         find_package(nodeipc 0.1 REQUIRED)\n\
         foreach(kind static shared)\n\
         \x20 set(lib nodeipc::shared)\n\
         \x20 if(kind STREQUAL static)\n\
         \x20   set(lib nodeipc::nodeipc)\n\
         \x20 endif()\n\
         \x20 add_executable(hello_${kind} hello.c)\n\
         \x20 target_link_libraries(hello_${kind} PRIVATE ${lib})\n\
         \x20 add_executable(installed_${kind} installed.cpp)\n\
         \x20 target_link_libraries(installed_${kind} PRIVATE ${lib})\n\
         endforeach()\n",
    )
    .unwrap();
    let build = dir.join("build");
    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(&project)
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()));
    if !common::run_compiler(&mut configure, "CMakeLists.txt (configure)") {
        return;
    }
    let mut compile = Command::new("cmake");
    compile.arg("--build").arg(&build).args(["--parallel", "2"]);
    assert!(common::run_compiler(&mut compile, "CMakeLists.txt (build)"));
    for (program, exe, shared) in [
        (Program::C, "hello_static", false),
        (Program::C, "hello_shared", true),
        (Program::Cpp, "installed_static", false),
        (Program::Cpp, "installed_shared", true),
    ] {
        program.run(&dir, &build.join(exe), shared);
    }
}

#[test]
fn a_release_install_carries_no_debug_information() {
    let _dog = Watchdog::new(
        "a_release_install_carries_no_debug_information",
        Duration::from_secs(120),
    );
    // This run's libraries (a debug build: debug information aplenty) as
    // both the release and the debug ones of another target folder.
    let lib = common::static_lib();
    let built = lib.parent().expect("profile dir");
    let dir = TempDir::new("capi-install-strip");
    let target = dir.join("target");
    let real = format!("libnodeipc.so.{}", env!("CARGO_PKG_VERSION"));
    let files = [("libnodeipc.a", "libnodeipc.a"), ("libnodeipc.so", &real)];
    for profile in ["release", "debug"] {
        std::fs::create_dir_all(target.join(profile)).unwrap();
        for (file, _) in files {
            std::os::unix::fs::symlink(built.join(file), target.join(profile).join(file)).unwrap();
        }
    }
    let Some(before) = debug_sections(&lib) else {
        return;
    };
    assert!(before > 0, "{} has no debug information", lib.display());

    let release = install_from(&target, "release", &dir.join("release"));
    let debug = install_from(&target, "debug", &dir.join("debug"));
    for (file, installed) in files {
        let stripped = release.join("lib").join(installed);
        assert_eq!(debug_sections(&stripped), Some(0), "{}", stripped.display());
        // A debug install keeps it all; what was built stays as it was.
        let kept = debug.join("lib").join(installed);
        assert!(debug_sections(&kept) > Some(0), "{}", kept.display());
        assert!(debug_sections(&built.join(file)) > Some(0), "{file}");
        let size = |p: &Path| std::fs::metadata(p).unwrap().len();
        eprintln!(
            "{file}: {} bytes built (debug), {} installed stripped",
            size(&built.join(file)),
            size(&stripped)
        );
    }

    // The stripped archive still links, and the program runs.
    let Some(flags) = pkg_config(&release, &["--cflags", "--libs", "nodeipc-static"]) else {
        return;
    };
    let Some(exe) = build(&dir, Program::C, "hello-stripped", &flags) else {
        return;
    };
    Program::C.run(&dir, &exe, false);
}

/// Runs the README's example `exe` (built from `examples/<file>`) with no
/// `LD_LIBRARY_PATH`: it must succeed and print what the README says.
/// `shared`: whether it was linked against libnodeipc.so (and must need it
/// by its SONAME) or statically (and must not need it).
fn readme_example_runs(file: &str, exe: &Path, shared: bool) {
    let Some(needed) = dynamic(exe, "NEEDED") else {
        return;
    };
    let linked = needed.iter().any(|n| n.starts_with("libnodeipc"));
    assert_eq!(linked, shared, "{}: {needed:?}", exe.display());
    let mut command = Command::new(exe);
    command
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(60));
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
    if file == "channel.cpp" {
        assert!(
            stdout.contains(": worker 2 (pid ") && stdout.trim_end().ends_with(") died"),
            "{stdout}"
        );
    }
}

#[test]
fn the_readmes_examples_build_from_an_install_with_cmake() {
    let _dog = Watchdog::new(
        "the_readmes_examples_build_from_an_install_with_cmake",
        Duration::from_secs(300),
    );
    let dir = TempDir::new("capi-readme-cmake");
    let prefix = install(&dir);
    // As the README says: cmake -S capi/examples -B build
    // -DCMAKE_PREFIX_PATH=<prefix>; cmake --build build.
    let build = dir.join("build");
    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(common::crate_dir().join("examples"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()));
    if !common::run_compiler(&mut configure, "examples/CMakeLists.txt (configure)") {
        return;
    }
    let mut compile = Command::new("cmake");
    compile.arg("--build").arg(&build).args(["--parallel", "2"]);
    assert!(common::run_compiler(
        &mut compile,
        "examples/CMakeLists.txt (build)"
    ));
    readme_example_runs("group.c", &build.join("group"), false);
    readme_example_runs("kittens.cpp", &build.join("kittens"), true);
    readme_example_runs("channel.cpp", &build.join("channel"), false);
}

#[test]
fn the_readmes_examples_build_from_an_install_with_pkg_config() {
    let _dog = Watchdog::new(
        "the_readmes_examples_build_from_an_install_with_pkg_config",
        Duration::from_secs(300),
    );
    let dir = TempDir::new("capi-readme-pkg-config");
    let prefix = install(&dir);
    let examples = common::crate_dir().join("examples");
    // As the README says: PKG_CONFIG_PATH=<prefix>/lib/pkgconfig, beside
    // the system's .pc files (protobuf's).
    let flags = |packages: &[&str]| -> Option<Vec<String>> {
        let args: Vec<&str> = ["--cflags", "--libs"]
            .iter()
            .chain(packages)
            .copied()
            .collect();
        pkg_config_in(&prefix, Search::PrefixAndSystem, &args)
    };
    let Some(archive) = flags(&["nodeipc-static"]) else {
        return;
    };
    let shared = flags(&["nodeipc"]).expect("ran above");
    let with_protobuf = flags(&["nodeipc", "protobuf"]).expect("ran above");
    let mut protoc = Command::new("protoc");
    protoc
        .arg(format!("--proto_path={}", examples.display()))
        .arg(format!("--cpp_out={}", dir.path().display()))
        .arg(examples.join("model.proto"));
    if !common::run_compiler(&mut protoc, "examples/model.proto") {
        return;
    }
    for (file, extra, flags, shared) in [
        ("group.c", None, &archive, false),
        ("kittens.cpp", None, &shared, true),
        (
            "channel.cpp",
            Some(dir.join("model.pb.cc")),
            &with_protobuf,
            true,
        ),
    ] {
        let (compiler, std) = common::compiler_for(file);
        let exe = dir.join(&file.replace('.', "_"));
        let mut command = Command::new(compiler);
        command
            .args([std, "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(dir.path())
            .arg(examples.join(file))
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .args(flags);
        assert!(common::run_compiler(&mut command, file));
        readme_example_runs(file, &exe, shared);
    }
}
