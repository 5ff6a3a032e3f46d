//! A Python client generated from `monitor.proto` alone (`grpc_tools.protoc`)
//! speaks to the server: the contract really is language-neutral. Skipped,
//! with a message, when python3 lacks the `protobuf` and `grpcio-tools`
//! packages (`pip install protobuf grpcio-tools`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::InProcess;
use nodeipc_monitor::{MonitorConfig, RankState};
use nodeipc_testkit::{Watchdog, skip, spawn_child};

fn python_ready() -> bool {
    Command::new("python3")
        .args(["-c", "import grpc_tools, google.protobuf"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_python_client_built_from_the_proto_speaks_to_the_server() {
    let _dog = Watchdog::new("python_client", Duration::from_secs(120));
    if !python_ready()
        && skip(
            "a_python_client_built_from_the_proto_speaks_to_the_server",
            "python3 with the protobuf and grpcio-tools packages is not available (pip install protobuf grpcio-tools)",
        )
    {
        return;
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = manifest.join("tests/python/monitor_client.py");
    let proto_dir = manifest.join("../proto/proto");
    let mut config = MonitorConfig {
        check_interval: Duration::from_millis(100),
        ..MonitorConfig::default()
    };
    // The rank is the Python process: a timeout would only end it, and it
    // must not fire during the exchange.
    config.timeouts.heartbeat = Some(Duration::from_secs(60));
    let server = InProcess::start("mon-python", config);
    let out = spawn_child(
        Command::new("python3")
            .arg(&script)
            .arg(&proto_dir)
            .arg(&server.socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log_text()
    );
    assert!(
        stdout.contains("python client: all checks passed"),
        "{stdout}"
    );
    assert!(stdout.contains("init ok, termination signal 9"), "{stdout}");
    let status = server.wait_status(Duration::from_secs(5), |s| s.state == RankState::Restarting);
    assert!(status.rank.is_none());
    assert!(
        server.log_text().contains("Init refused: pid 1 is neither"),
        "{}",
        server.log_text()
    );
    server.finish();
}
