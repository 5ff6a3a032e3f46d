//! `install.sh` lays out every header, both libraries, `nodeipc.pc` and the
//! CMake package config under a prefix, and a C program (`tests/c/hello.c`)
//! and a C++ one (`tests/c/installed.cpp`: KittensBroker ranks, a
//! coordinator and a worker) build from pkg-config's flags alone and from
//! `find_package(nodeipc)`, against the static library and against the
//! shared one, and run.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, skip, spawn_child, unique_name};

/// Runs install.sh into `dir/prefix` for this test run's profile.
fn install(dir: &TempDir) -> PathBuf {
    let lib = common::static_lib();
    let profile_dir = lib.parent().expect("profile dir");
    let (target, profile) = (
        profile_dir.parent().expect("target dir"),
        profile_dir
            .file_name()
            .expect("profile")
            .to_string_lossy()
            .into_owned(),
    );
    let prefix = dir.join("prefix");
    let out = Command::new(common::crate_dir().join("install.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .args(["--profile", &profile, "--target-dir"])
        .arg(target)
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    prefix
}

/// `pkg-config ARGS nodeipc` against the prefix's pkgconfig folder, split
/// into arguments; `None` (a failure under CI) without pkg-config.
fn pkg_config(prefix: &Path, args: &[&str]) -> Option<Vec<String>> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("nodeipc")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output();
    match out {
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
            skip(
                "installed_library_builds_with_pkg_config",
                &format!("no pkg-config: {e}"),
            );
            None
        }
    }
}

/// The two programs, each run in `dir` and checked by what it prints.
#[derive(Clone, Copy)]
enum Program {
    /// tests/c/hello.c: one region.
    C,
    /// tests/c/installed.cpp: KittensBroker, Coordinator and Worker.
    Cpp,
}

impl Program {
    fn source(self) -> &'static str {
        match self {
            Program::C => "hello.c",
            Program::Cpp => "installed.cpp",
        }
    }

    /// Runs the built program `exe` with `env`; it must succeed and say so.
    fn run(self, dir: &TempDir, exe: &Path, env: &[(&str, String)]) {
        let mut command = Command::new(exe);
        let group = unique_name("installed");
        if let Program::Cpp = self {
            let name = exe.file_name().unwrap().to_string_lossy();
            // The group's name, the channel's, the handshake's socket.
            command
                .arg(&group)
                .arg(unique_name("installed-channel"))
                .arg(dir.join(&format!("{name}.sock")));
        }
        command
            .envs(env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = spawn_child(&mut command).output_timeout(Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let says = match self {
            Program::C => "says hi",
            Program::Cpp => "installed: kittens 100 101, worker 0 says pong to ping",
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
    for file in [
        "lib/libnodeipc.a",
        "lib/libnodeipc.so",
        "lib/pkgconfig/nodeipc.pc",
        "lib/cmake/nodeipc/nodeipc-config.cmake",
        "lib/cmake/nodeipc/nodeipc-config-version.cmake",
    ] {
        assert!(prefix.join(file).is_file(), "{file} not installed");
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
    let Some(static_flags) = pkg_config(&prefix, &["--cflags", "--libs", "--static"]) else {
        return;
    };
    // Static: link the archive itself (the linker prefers the .so for -lnodeipc).
    let archive: Vec<String> = static_flags
        .iter()
        .map(|f| match f.as_str() {
            "-lnodeipc" => prefix.join("lib/libnodeipc.a").display().to_string(),
            other => other.to_owned(),
        })
        .collect();
    let shared = pkg_config(&prefix, &["--cflags", "--libs"]).expect("pkg-config ran above");
    let lib_path = [("LD_LIBRARY_PATH", prefix.join("lib").display().to_string())];
    for program in [Program::C, Program::Cpp] {
        let name = format!("{}-static", program.source());
        let Some(exe) = build(&dir, program, &name, &archive) else {
            return;
        };
        program.run(&dir, &exe, &[]);
        let name = format!("{}-shared", program.source());
        let exe = build(&dir, program, &name, &shared).expect("built above");
        program.run(&dir, &exe, &lib_path);
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
    let lib_path = [("LD_LIBRARY_PATH", prefix.join("lib").display().to_string())];
    for (program, exe) in [
        (Program::C, "hello_static"),
        (Program::C, "hello_shared"),
        (Program::Cpp, "installed_static"),
        (Program::Cpp, "installed_shared"),
    ] {
        program.run(&dir, &build.join(exe), &lib_path);
    }
}
