//! `nodeipc launch` given torchrun's and ft_launcher's command lines, as
//! NVRx job scripts write them: a script run through Python, `-m`,
//! `--no-python`, both spellings of torchrun's options, the `--ft-*`
//! options (implemented, warned, refused), progress tracking ending a job
//! with 93, and torchrun's output options.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, skip, spawn_child};

fn launch(dir: &TempDir, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeipc"));
    command
        .arg("launch")
        .args(["--run-dir", dir.path().to_str().unwrap()])
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawn_child(&mut command).output_timeout(Duration::from_secs(120))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn python3() -> bool {
    Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success())
}

/// A script writing its rank, whether it runs unbuffered, and its
/// arguments to `out-<rank>`.
const SCRIPT: &str = "import os, sys\n\
open(f\"out-{os.environ['RANK']}\", 'w').write(repr((os.environ['LOCAL_RANK'], int('-u' in sys.orig_argv), sys.argv[1:])))\n";

fn written(dir: &TempDir, rank: u32) -> String {
    std::fs::read_to_string(dir.join(&format!("out-{rank}"))).unwrap_or_default()
}

#[test]
fn a_script_runs_through_python_with_its_arguments_as_torchrun_runs_it() {
    let _dog = Watchdog::new("torchrun script", Duration::from_secs(240));
    if !python3() && skip("torchrun script", "no python3 on PATH") {
        return;
    }
    let dir = TempDir::new("torchrun-script");
    std::fs::write(dir.join("train.py"), SCRIPT).unwrap();
    // Underscores and =, a script, then arguments that look like options
    // (the launcher's own among them) and a `--`: all the script's.
    let out = launch(
        &dir,
        &[
            "--nproc_per_node=2",
            "train.py",
            "--lr",
            "1",
            "--nproc",
            "7",
            "--",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for rank in 0..2 {
        assert_eq!(
            written(&dir, rank),
            format!("('{rank}', 1, ['--lr', '1', '--nproc', '7', '--', 'x'])"),
        );
    }

    // -m MODULE, found through PYTHONPATH as python -m finds it.
    std::fs::create_dir(dir.join("pkg")).unwrap();
    std::fs::write(dir.join("pkg/__init__.py"), "").unwrap();
    std::fs::write(dir.join("pkg/train.py"), SCRIPT).unwrap();
    let out = launch(&dir, &["--nproc-per-node", "1", "-m", "pkg.train", "--m"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(written(&dir, 0), "('0', 1, ['--m'])");

    // --python names the interpreter.
    let out = launch(&dir, &["--python", "/no/such/python", "train.py"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("/no/such/python"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn no_python_and_dashes_run_the_program_as_it_is() {
    let _dog = Watchdog::new("torchrun no-python", Duration::from_secs(120));
    let dir = TempDir::new("torchrun-nopython");
    let out = launch(
        &dir,
        &[
            "--nproc",
            "2",
            "--no-python",
            "sh",
            "-c",
            "echo $RANK > no-python-$RANK",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = launch(
        &dir,
        &[
            "--nproc",
            "2",
            "--",
            "sh",
            "-c",
            "echo $RANK > dashes-$RANK",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for rank in 0..2 {
        for kind in ["no-python", "dashes"] {
            let got = std::fs::read_to_string(dir.join(&format!("{kind}-{rank}"))).unwrap();
            assert_eq!(got.trim(), rank.to_string(), "{kind}");
        }
    }
    let out = launch(&dir, &["-m", "--", "sh", "-c", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("after -- runs as it is"));
}

#[test]
fn ft_options_are_implemented_warned_or_refused_by_name() {
    let _dog = Watchdog::new("ft options", Duration::from_secs(120));
    let dir = TempDir::new("ft-options");
    let program = ["--no-python", "true"];
    let args = |extra: &[&'static str]| -> Vec<&'static str> {
        extra.iter().copied().chain(program).collect()
    };
    // Implemented, in both spellings, with NVRx's value forms.
    let out = launch(
        &dir,
        &args(&[
            "--ft-initial-rank-heartbeat-timeout=none",
            "--ft-rank_heartbeat_timeout=15",
            "--ft-rank-section-timeouts=setup:600,step:180",
            "--ft-rank-out-of-section-timeout",
            "30",
            "--rdzv-backend=c10d",
            "--rdzv_endpoint=localhost:29400",
        ]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Only NVRx's own: tracking is on by default, without its file.
    assert!(
        text(&out.stderr)
            .lines()
            .filter(|l| l.contains("warning"))
            .all(|l| l.contains("progress tracking: no checkpoint iteration file")),
        "{}",
        text(&out.stderr)
    );
    // Accepted with one line each.
    let out = launch(
        &dir,
        &args(&[
            "--ft-log-level=DEBUG",
            "--monitor-interval=1",
            "--ft_enable_nic_monitor=false",
        ]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for warned in [
        "--ft-log-level: accepted, no effect",
        "--monitor-interval: accepted, no effect",
        "--ft-enable-nic-monitor: accepted, no effect",
    ] {
        assert_eq!(err.matches(warned).count(), 1, "{warned}: {err}");
    }
    // Refused by name, before anything starts.
    for (flag, said) in [
        (
            "--ft-segment=4",
            "--ft-segment: not supported: no hot-spare segments",
        ),
        (
            "--ft_storage_health_check_path=/x",
            "--ft-storage-health-check-path: not supported",
        ),
        (
            "--ft-rank-heartbeat-timeout=soon",
            "--ft-rank-heartbeat-timeout \"soon\": not a number",
        ),
        ("--run-path", "--run-path is not supported"),
    ] {
        let out = launch(&dir, &args(&[flag]));
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(said),
            "{flag}: {}",
            text(&out.stderr)
        );
    }
    // Across nodes, c10d is refused naming what to use.
    let out = launch(
        &dir,
        &args(&["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=h:1"]),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--rdzv-backend etcd"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_nvrx_yaml_file_loads_with_the_options_over_it() {
    let _dog = Watchdog::new("ft yaml", Duration::from_secs(120));
    let dir = TempDir::new("ft-yaml");
    // As NVRx's examples ship it, and as `to_yaml_file` writes every field
    // (defaults quiet, a changed log level warned).
    std::fs::write(
        dir.join("ft.yaml"),
        "fault_tolerance:\n  initial_rank_heartbeat_timeout: null\n  rank_heartbeat_timeout: null\n  \
         rank_section_timeouts:\n    init: 20\n    step: 10\n  rank_out_of_section_timeout: 30\n  \
         log_level: DEBUG\n  segment: null\n  enable_nic_healthcheck: true\n  max_no_progress_cycles: 3\n",
    )
    .unwrap();
    let out = launch(
        &dir,
        &[
            "--ft-cfg-path",
            "ft.yaml",
            "--ft-rank-heartbeat-timeout=5",
            "--no-python",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(
        err.matches("warning: ft.yaml: fault_tolerance.").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("fault_tolerance.log_level: accepted, no effect"),
        "{err}"
    );
    std::fs::write(dir.join("seg.yaml"), "fault_tolerance:\n  segment: 4\n").unwrap();
    let out = launch(&dir, &["--ft-cfg-path=seg.yaml", "--no-python", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("fault_tolerance.segment = 4: not supported"));
}

/// A job that fails every round without its checkpointed iteration moving
/// is not restarted after `max_no_progress_cycles`, with restarts to spare:
/// the launcher exits 93 (or the code asked for).
#[test]
fn a_job_without_progress_ends_with_the_no_restart_code() {
    let _dog = Watchdog::new("ft no progress", Duration::from_secs(120));
    let dir = TempDir::new("ft-progress");
    let rounds = |dir: &TempDir| {
        std::fs::read_to_string(dir.join("rounds"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    // Every round checkpoints iteration 7, then fails.
    let stuck = "echo r >> rounds; echo 7 > iteration; exit 1";
    let out = launch(
        &dir,
        &[
            "--max-restarts=10",
            "--ft-max-no-progress-cycles=2",
            "--ft-checkpoint-iteration-file=iteration",
            "--no-python",
            "sh",
            "-c",
            stuck,
        ],
    );
    assert_eq!(out.status.code(), Some(93), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("2 cycles in a row made no progress"));
    // The first round moved from nothing to 7; the next two did not.
    assert_eq!(rounds(&dir), 3);

    // Progress every round: the restarts run out instead (exit 1).
    let dir = TempDir::new("ft-progress-moving");
    let moving = "echo r >> rounds; echo $(( $(cat iteration 2>/dev/null || echo 0) + 5 )) > iteration.new; mv iteration.new iteration; exit 1";
    let out = launch(
        &dir,
        &[
            "--max-restarts=3",
            "--ft-max-no-progress-cycles=1",
            "--ft-min-progress-iterations=5",
            "--ft-checkpoint-iteration-file=iteration",
            "--ft-no-restart-exit-code=94",
            "--no-python",
            "sh",
            "-c",
            moving,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(rounds(&dir), 4);
}

#[test]
fn tee_copies_prefixed_lines_and_keeps_torchruns_files() {
    let _dog = Watchdog::new("torchrun tee", Duration::from_secs(120));
    let dir = TempDir::new("torchrun-tee");
    let logs = dir.join("logs");
    let program = "echo out-$RANK; echo err-$RANK >&2; printf 'part'; printf 'ial\\n'";
    let out = launch(
        &dir,
        &[
            "--nproc=3",
            "--tee=3",
            "--local-ranks-filter=0,2",
            "--log-dir",
            logs.to_str().unwrap(),
            "--no-python",
            "sh",
            "-c",
            program,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    for rank in [0, 2] {
        assert!(
            stdout.contains(&format!("[rank{rank}]: out-{rank}\n")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("[rank{rank}]: partial\n")),
            "{stdout}"
        );
        assert!(
            stderr.contains(&format!("[rank{rank}]: err-{rank}\n")),
            "{stderr}"
        );
    }
    assert!(
        !stdout.contains("rank1"),
        "rank 1 is filtered out: {stdout}"
    );
    // Every rank's files, the filtered one's too.
    let run: Vec<_> = std::fs::read_dir(&logs).unwrap().flatten().collect();
    assert_eq!(run.len(), 1);
    for rank in 0..3 {
        let rank_dir = run[0].path().join("attempt_0").join(rank.to_string());
        let read = |name: &str| std::fs::read_to_string(rank_dir.join(name)).unwrap();
        assert_eq!(read("stdout.log"), format!("out-{rank}\npartial\n"));
        assert_eq!(read("stderr.log"), format!("err-{rank}\n"));
    }
    assert!(Path::new(&logs).is_dir());
}
