//! TLS to etcd: an etcd on loopback that serves TLS only and asks every
//! client for a certificate of its CA (`--client-cert-auth`); launchers
//! given `https://` endpoints and `--rdzv-conf cacert=,cert=,key=` run a
//! job through it, and launchers without what it asks are refused.

mod etcd_kit;
mod fuse;

use std::time::Duration;

use etcd_kit::etcd::Etcd;
use etcd_kit::{Launcher, Spec, job_id, records, rounds_of};
use nodeipc_testkit::{TempDir, Watchdog};

fn main() {
    etcd_kit::main(&[
        (
            "two_nodes_with_client_certificates_restart_a_round_over_tls",
            two_nodes_over_tls,
            false,
        ),
        (
            "a_launcher_without_a_certificate_or_trusting_another_ca_ends_naming_the_endpoint",
            launchers_etcd_does_not_accept,
            false,
        ),
    ]);
}

fn conf(ca: &std::path::Path, identity: Option<(&std::path::Path, &std::path::Path)>) -> String {
    let mut conf = format!("cacert={}", ca.display());
    if let Some((cert, key)) = identity {
        conf += &format!(",cert={},key={}", cert.display(), key.display());
    }
    conf
}

fn two_nodes_over_tls() {
    let test = "etcd tls";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start_tls(test) else {
        return;
    };
    let pki = etcd.pki();
    let dir = TempDir::new("etcd-tls-job");
    let record = dir.join("record");
    let id = job_id("tls");
    let spec = Spec {
        conf: Some(conf(&pki.ca, Some((&pki.cert, &pki.key)))),
        ..Spec::new(
            &format!("https://{}", etcd.endpoint()),
            &id,
            2,
            "fail-first",
            &record,
        )
    };
    let mut launchers: Vec<Launcher> = (0..2)
        .map(|node| Launcher::start(&spec, dir.path(), &format!("node{node}")))
        .collect();
    for launcher in &mut launchers {
        let status = launcher.wait(Duration::from_secs(60));
        let out = launcher.output();
        assert_eq!(status.code(), Some(0), "{out}");
        assert!(out.contains("in round 1 (1 failure rounds)"), "{out}");
    }
    let seen = records(&record);
    for rank in 0..4 {
        assert_eq!(rounds_of(&seen, rank), [0, 1], "rank {rank}: {seen:?}");
    }
}

/// A file that is not PEM.
fn record_not_pem(dir: &TempDir) -> std::path::PathBuf {
    let path = dir.join("not.pem");
    std::fs::write(&path, b"certainly not a certificate").expect("write");
    path
}

fn launchers_etcd_does_not_accept() {
    let test = "etcd tls refused";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start_tls(test) else {
        return;
    };
    let pki = etcd.pki();
    let dir = TempDir::new("etcd-tls-refused");
    let record = dir.join("record");
    let https = format!("https://{}", etcd.endpoint());
    let plain = etcd.endpoint();
    let unanswered = format!("no answer from etcd at {plain} within 2.0 s");
    let missing = dir.join("missing.pem");
    // Each: the endpoint, --rdzv-conf, what the launcher's error says.
    let cases = [
        (
            "no-cert",
            &https,
            Some(conf(&pki.ca, None)),
            unanswered.clone(),
        ),
        (
            "other-ca",
            &https,
            Some(conf(&pki.other_ca, Some((&pki.cert, &pki.key)))),
            "invalid peer certificate".to_owned(),
        ),
        ("plain", &plain, None, unanswered.clone()),
        (
            "missing-ca",
            &https,
            Some(conf(&missing, None)),
            format!("--rdzv-conf cacert={}: No such file", missing.display()),
        ),
        (
            "not-pem",
            &https,
            Some(conf(&record_not_pem(&dir), None)),
            "not a PEM file".to_owned(),
        ),
    ];
    let mut launchers: Vec<(&str, &str, Launcher)> = cases
        .iter()
        .map(|(tag, endpoint, conf, says)| {
            let spec = Spec {
                conf: conf.clone(),
                timeout_s: 2,
                ..Spec::new(endpoint, &job_id(tag), 1, "quick", &record)
            };
            (*tag, says.as_str(), Launcher::start(&spec, dir.path(), tag))
        })
        .collect();
    for (tag, says, launcher) in &mut launchers {
        let status = launcher.wait(Duration::from_secs(30));
        let out = launcher.output();
        assert_eq!(status.code(), Some(99), "{tag}: {out}");
        assert!(out.contains(*says), "{tag}: {out}");
    }
    assert!(records(&record).is_empty(), "no rank ran");
}
