//! `nodeipc launch`'s multi-node flags at the command line: torchrun's
//! spellings and `PET_*` defaults reach the same checks, and each refusal
//! names the flag (exit 2, before anything starts).

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nodeipc_testkit::{Watchdog, spawn_child};

fn launch(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeipc"));
    command
        .arg("launch")
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("PET_") {
            command.env_remove(name);
        }
    }
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(20));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn several_nodes_without_a_backend_are_refused_by_flag_or_by_pet_variable() {
    let _dog = Watchdog::new("launch rdzv refusals", Duration::from_secs(60));
    let (code, err) = launch(
        &["--nnodes", "2", "--nproc_per_node", "1", "--", "true"],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--nnodes 2 needs a rendezvous"), "{err}");
    let (code, err) = launch(&["--nproc", "1", "--", "true"], &[("PET_NNODES", "3")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--nnodes 3 needs a rendezvous"), "{err}");
}

#[test]
fn torchrun_spellings_reach_the_same_checks() {
    let _dog = Watchdog::new("launch rdzv spellings", Duration::from_secs(60));
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "--nnodes",
                "2",
                "--rdzv_backend",
                "etcd",
                "--rdzv_endpoint",
                "h:1",
                "--rdzv_id",
                "a b",
            ],
            "--rdzv-id \"a b\"",
        ),
        (
            &[
                "--nnodes",
                "2",
                "--rdzv-backend",
                "etcd",
                "--rdzv_endpoint",
                "h",
                "--rdzv-id",
                "j",
            ],
            "--rdzv-endpoint \"h\" is not HOST:PORT",
        ),
        (
            &[
                "--nnodes",
                "2",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                "h:1",
                "--rdzv-id",
                "j",
            ],
            "--rdzv-backend c10d is torch's rendezvous: across nodes nodeipc meets through etcd",
        ),
        (
            &[
                "--nnodes",
                "2:4",
                "--node_rank",
                "0",
                "--rdzv-backend",
                "etcd",
                "--rdzv-endpoint",
                "h:1",
                "--rdzv-id",
                "j",
            ],
            "numbered anew each round",
        ),
        (
            &[
                "--nnodes",
                "1:2",
                "--rdzv_conf",
                "last_call_timeout=soon",
                "--rdzv-backend",
                "etcd",
                "--rdzv-endpoint",
                "h:1",
                "--rdzv-id",
                "j",
            ],
            "--rdzv-conf last_call_timeout=\"soon\" is not seconds",
        ),
        (
            &[
                "--nnodes",
                "2",
                "--node_rank",
                "2",
                "--rdzv-backend",
                "etcd",
                "--rdzv-endpoint",
                "h:1",
                "--rdzv-id",
                "j",
            ],
            "--node-rank 2 is out of range",
        ),
    ];
    for (flags, expected) in cases {
        let mut args = flags.to_vec();
        args.extend(["--nproc-per-node", "1", "--", "true"]);
        let (code, err) = launch(&args, &[]);
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(expected), "{flags:?}: {err}");
    }
    // The same through Kubeflow's environment.
    let (code, err) = launch(
        &["--", "true"],
        &[
            ("PET_NPROC_PER_NODE", "1"),
            ("PET_NNODES", "2"),
            ("PET_RDZV_BACKEND", "etcd"),
            ("PET_RDZV_ENDPOINT", "h:1"),
            ("PET_RDZV_ID", "bad/id"),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--rdzv-id \"bad/id\""), "{err}");
}

#[test]
fn standalone_is_the_single_node_launch() {
    let _dog = Watchdog::new("launch standalone", Duration::from_secs(60));
    let (code, err) = launch(&["--standalone", "--nproc", "1", "--", "true"], &[]);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = launch(
        &[
            "--standalone",
            "--rdzv-id",
            "j",
            "--nproc",
            "1",
            "--",
            "true",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--standalone runs this node alone"), "{err}");
}

/// The README's two-node run, as printed there, with only its ports and
/// its directory made this test's own: both launchers exit 0 after round 1.
#[test]
fn the_readmes_two_node_run_works_as_printed() {
    let test = "launch README two nodes";
    let _dog = Watchdog::new(test, Duration::from_secs(120));
    let Some(etcd) = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        nodeipc_testkit::skip(test, "no etcd (apt-get install etcd-server)");
        return;
    };
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("```sh\netcd --data-dir /tmp/etcd-two")
        .expect("the README's two-node run")
        + "```sh\n".len();
    let end = start + readme[start..].find("```").expect("its end");
    let dir = nodeipc_testkit::TempDir::new("readme-two");
    let (client, peer) = (free_port(), free_port());
    let peer_url = format!("http://127.0.0.1:{peer}");
    let script = readme[start..end]
        .replace("2379", &client.to_string())
        .replace("/tmp/etcd-two", &dir.join("etcd-two").display().to_string())
        .replacen(
            "etcd --data-dir",
            &format!(
                "{etcd} --listen-peer-urls {peer_url} --initial-advertise-peer-urls {peer_url} --initial-cluster default={peer_url} --data-dir"
            ),
            1,
        );
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_nodeipc"))
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["-c", &script])
        .env("PATH", path)
        .current_dir(dir.path())
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = spawn_child(&mut command);
    // etcd and the launchers are in the script's process group: a test
    // that fails takes them all.
    let _group = KillGroup(child.id());
    let out = child.output_timeout(Duration::from_secs(90));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let done = "exit 0: every rank on every node exited 0 in round 1 (1 failure rounds)";
    assert_eq!(text.matches(done).count(), 2, "{text}");
    assert!(text.contains("rank 3/4 round 1"), "{text}");
    assert!(!dir.join("etcd-two").exists(), "the script's clean-up ran");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Kills a process group when dropped.
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0 as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}
