//! Who else takes part: `--nnodes`, `--rdzv-*`, `--node-rank`,
//! `--standalone`, checked before anything starts. Built with or without
//! the `etcd` feature, so that a bad flag is named the same either way.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Error, Result};
use parse::{check_host, check_id, parse_conf, parse_endpoints, parse_nnodes};

mod parse;

/// Most nodes one job may have.
pub const MAX_NNODES: u32 = 4096;

/// Most etcd endpoints one launcher is given.
pub const MAX_ENDPOINTS: usize = 16;

/// Longest `--rdzv-ttl`.
pub const MAX_RDZV_TTL: Duration = Duration::from_secs(3600);

/// Longest `--rdzv-timeout`.
pub const MAX_RDZV_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The rendezvous flags as given (strings from the command line or the
/// `PET_*` environment), before [`RdzvOptions::resolve`] checks them.
#[derive(Clone, Debug)]
pub struct RdzvOptions {
    /// `--nnodes N` or `N:M`.
    pub nnodes: String,
    /// `--rdzv-backend`: `etcd`, or none (this node alone).
    pub backend: Option<String>,
    /// `--rdzv-endpoint HOST:PORT[,HOST:PORT…]`.
    pub endpoint: Option<String>,
    /// `--rdzv-id`.
    pub id: Option<String>,
    /// `--node-rank`.
    pub node_rank: Option<u32>,
    /// `--rdzv-ttl`: the lease of each launcher.
    pub ttl: Duration,
    /// `--rdzv-timeout`: how long to wait for etcd and for the other
    /// nodes, and how long a finished job's state is kept.
    pub timeout: Duration,
    /// `--local-addr`: what node 0 publishes as `MASTER_ADDR`.
    pub local_addr: Option<String>,
    /// `--standalone`: this node alone.
    pub standalone: bool,
    /// `--rdzv-conf KEY=VALUE[,KEY=VALUE…]`: torchrun's rendezvous
    /// settings; `last_call_timeout` (seconds) and, for TLS to etcd,
    /// `protocol` (`http` or `https`), `cacert`, `cert` and `key` (PEM
    /// files) are read, other keys are reported back as ignored.
    pub conf: Option<String>,
}

impl Default for RdzvOptions {
    fn default() -> Self {
        RdzvOptions {
            nnodes: "1".to_owned(),
            backend: None,
            endpoint: None,
            id: None,
            node_rank: None,
            ttl: Duration::from_secs(5),
            timeout: Duration::from_secs(600),
            local_addr: None,
            standalone: false,
            conf: None,
        }
    }
}

/// Where rounds are agreed on, once the flags are checked.
#[derive(Clone, Debug, PartialEq, Eq)]
// Made once per launch and matched at once: a box would buy nothing.
#[expect(clippy::large_enum_variant)]
pub enum Rendezvous {
    /// This node alone (today's launch).
    Local,
    /// Several nodes through etcd v3.
    Etcd(EtcdRendezvous),
}

/// A checked etcd rendezvous.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdRendezvous {
    /// `host:port` of each endpoint.
    pub endpoints: Vec<String>,
    /// The job id (`[A-Za-z0-9._-]{1,64}`).
    pub id: String,
    /// Fewest nodes a round runs with (`--nnodes N` or the N of `N:M`).
    pub min_nodes: u32,
    /// Most nodes a round runs with: launchers beyond wait as spares.
    pub max_nodes: u32,
    /// This node's rank, when given (fixed membership only).
    pub node_rank: Option<u32>,
    /// Lease time to live (whole seconds, at least 2).
    pub ttl: Duration,
    /// See [`RdzvOptions::timeout`].
    pub timeout: Duration,
    /// See [`RdzvOptions::local_addr`].
    pub local_addr: Option<String>,
    /// With a range of nodes: how long a round still waits for more nodes
    /// once it has its fewest (torchrun's `last_call_timeout`, 30 s).
    pub last_call: Duration,
    /// `--rdzv-conf` keys this launcher does not read, for a warning.
    pub ignored_conf: Vec<String>,
    /// TLS to etcd (`https://` endpoints or `--rdzv-conf protocol=https`).
    pub tls: Option<EtcdTls>,
}

/// TLS to etcd: the PEM files `--rdzv-conf` names (read when the launcher
/// connects).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// `cacert`: the CA certificate(s) etcd's certificate must chain to.
    pub ca: PathBuf,
    /// `cert` and `key`: this launcher's certificate and private key, for
    /// an etcd that authenticates its clients (`--client-cert-auth`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl EtcdRendezvous {
    /// A range of nodes (`--nnodes N:M`, N < M): nodes are numbered anew
    /// each round and launchers beyond M wait as spares.
    pub fn elastic(&self) -> bool {
        self.min_nodes != self.max_nodes
    }
}

/// torchrun's default `last_call_timeout`.
pub const DEFAULT_LAST_CALL: Duration = Duration::from_secs(30);

impl RdzvOptions {
    /// Checks the flags together.
    ///
    /// # Errors
    /// [`Error::Options`] naming the flag, its value and what is allowed.
    pub fn resolve(&self) -> Result<Rendezvous> {
        let (min, max) = parse_nnodes(&self.nnodes)?;
        if self.standalone {
            for (flag, given) in [
                ("--rdzv-backend", self.backend.is_some()),
                ("--rdzv-endpoint", self.endpoint.is_some()),
                ("--rdzv-id", self.id.is_some()),
            ] {
                if given {
                    return Err(Error::options(format!(
                        "--standalone runs this node alone: {flag} does not go with it"
                    )));
                }
            }
        }
        let Some(backend) = self.backend.as_deref().filter(|_| !self.standalone) else {
            if max > 1 {
                return Err(Error::options(format!(
                    "--nnodes {} needs a rendezvous: give --rdzv-backend etcd, --rdzv-endpoint and --rdzv-id",
                    self.nnodes.trim()
                )));
            }
            if let Some(rank) = self.node_rank.filter(|&r| r != 0) {
                return Err(Error::options(format!(
                    "--node-rank {rank} is out of range for a single node: 0 only"
                )));
            }
            return Ok(Rendezvous::Local);
        };
        // torchrun's and ft_launcher's defaults: on one node there is
        // nothing to meet, so their job scripts run as they are.
        if matches!(backend.to_ascii_lowercase().as_str(), "c10d" | "static") {
            if max > 1 {
                return Err(Error::options(format!(
                    "--rdzv-backend {backend} is torch's rendezvous: across nodes nodeipc meets through etcd, give --rdzv-backend etcd with --rdzv-endpoint HOST:PORT of an etcd v3 server"
                )));
            }
            if let Some(rank) = self.node_rank.filter(|&r| r != 0) {
                return Err(Error::options(format!(
                    "--node-rank {rank} is out of range for a single node: 0 only"
                )));
            }
            return Ok(Rendezvous::Local);
        }
        if backend != "etcd" && backend != "etcd-v3" {
            return Err(Error::options(format!(
                "--rdzv-backend {backend:?} is not supported: only etcd (etcd v3)"
            )));
        }
        let id = self.id.as_deref().ok_or_else(|| {
            Error::options(
                "--rdzv-backend etcd needs --rdzv-id (the job's name, [A-Za-z0-9._-]{1,64})",
            )
        })?;
        check_id(id)?;
        let endpoint = self.endpoint.as_deref().ok_or_else(|| {
            Error::options("--rdzv-backend etcd needs --rdzv-endpoint HOST:PORT[,HOST:PORT...]")
        })?;
        let (endpoints, https) = parse_endpoints(endpoint)?;
        if let (Some(rank), true) = (self.node_rank, min != max) {
            return Err(Error::options(format!(
                "--node-rank {rank} does not go with --nnodes {min}:{max}: with a range of nodes they are numbered anew each round"
            )));
        }
        if let Some(rank) = self.node_rank.filter(|&r| r >= min) {
            return Err(Error::options(format!(
                "--node-rank {rank} is out of range for --nnodes {min}: 0 to {}",
                min - 1
            )));
        }
        let ttl_secs = self.ttl.as_secs();
        if self.ttl.subsec_nanos() != 0 || ttl_secs < 2 || self.ttl > MAX_RDZV_TTL {
            return Err(Error::options(format!(
                "--rdzv-ttl {} must be whole seconds from 2 to {} (etcd leases count in seconds)",
                nodeipc_text::duration(self.ttl),
                MAX_RDZV_TTL.as_secs()
            )));
        }
        if self.timeout < Duration::from_secs(1) || self.timeout > MAX_RDZV_TIMEOUT {
            return Err(Error::options(format!(
                "--rdzv-timeout {} must be between 1 s and {} s",
                nodeipc_text::duration(self.timeout),
                MAX_RDZV_TIMEOUT.as_secs()
            )));
        }
        if let Some(addr) = &self.local_addr {
            check_host(addr, "--local-addr")?;
        }
        let conf = parse_conf(self.conf.as_deref().unwrap_or(""))?;
        let tls = conf.tls(https)?;
        Ok(Rendezvous::Etcd(EtcdRendezvous {
            endpoints,
            id: id.to_owned(),
            min_nodes: min,
            max_nodes: max,
            node_rank: self.node_rank,
            ttl: self.ttl,
            timeout: self.timeout,
            local_addr: self.local_addr.clone(),
            last_call: conf.last_call,
            ignored_conf: conf.ignored,
            tls,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(nnodes: &str) -> RdzvOptions {
        RdzvOptions {
            nnodes: nnodes.into(),
            backend: Some("etcd".into()),
            endpoint: Some("127.0.0.1:2379".into()),
            id: Some("job-1".into()),
            ..RdzvOptions::default()
        }
    }

    fn refused(options: &RdzvOptions) -> String {
        options.resolve().unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_this_node_alone() {
        assert_eq!(RdzvOptions::default().resolve().unwrap(), Rendezvous::Local);
        let standalone = RdzvOptions {
            standalone: true,
            ..RdzvOptions::default()
        };
        assert_eq!(standalone.resolve().unwrap(), Rendezvous::Local);
    }

    #[test]
    fn an_etcd_rendezvous_keeps_every_value() {
        let options = RdzvOptions {
            endpoint: Some("http://a:1, b:2/".into()),
            node_rank: Some(2),
            local_addr: Some("10.0.0.1".into()),
            ..etcd("3")
        };
        let Rendezvous::Etcd(etcd) = options.resolve().unwrap() else {
            panic!("local");
        };
        assert_eq!(etcd.endpoints, ["a:1", "b:2"]);
        assert_eq!(
            (etcd.min_nodes, etcd.max_nodes, etcd.node_rank),
            (3, 3, Some(2))
        );
        assert!(!etcd.elastic());
        assert_eq!(etcd.local_addr.as_deref(), Some("10.0.0.1"));
        assert_eq!(etcd.ttl, Duration::from_secs(5));
    }

    #[test]
    fn tls_needs_a_ca_and_takes_a_certificate_with_its_key() {
        let tls = |endpoint: &str, conf: &str| RdzvOptions {
            endpoint: Some(endpoint.into()),
            conf: Some(conf.into()),
            ..etcd("2")
        };
        let Rendezvous::Etcd(plain) = tls("h:1", "").resolve().unwrap() else {
            panic!("local");
        };
        assert_eq!(plain.tls, None);
        let Rendezvous::Etcd(secure) = tls("https://h:1", "cacert=/ca.pem,cert=/c.pem,key=/k.pem")
            .resolve()
            .unwrap()
        else {
            panic!("local");
        };
        assert_eq!(secure.endpoints, ["h:1"]);
        let expected = EtcdTls {
            ca: "/ca.pem".into(),
            identity: Some(("/c.pem".into(), "/k.pem".into())),
        };
        assert_eq!(secure.tls, Some(expected));
        let Rendezvous::Etcd(by_protocol) = tls("h:1", "protocol=https,cacert=/ca.pem")
            .resolve()
            .unwrap()
        else {
            panic!("local");
        };
        assert_eq!(by_protocol.tls.unwrap().identity, None);
        for (endpoint, conf, says) in [
            ("https://h:1", "", "needs --rdzv-conf cacert"),
            ("h:1", "protocol=https", "needs --rdzv-conf cacert"),
            (
                "https://h:1",
                "cacert=/a,cert=/c",
                "cert and key go together",
            ),
            ("h:1", "cacert=/a", "are for TLS"),
            (
                "https://h:1",
                "protocol=http,cacert=/a",
                "protocol=http but",
            ),
            ("h:1", "protocol=ftp", "http or https"),
            ("h:1", "cacert=", "names no file"),
        ] {
            let why = refused(&tls(endpoint, conf));
            assert!(why.contains(says), "{endpoint} {conf}: {why}");
        }
    }

    #[test]
    fn nnodes_out_of_range_or_not_a_number_is_refused() {
        for bad in ["0", "x", "", "4097", "3:2", "1:", ":2", "-1"] {
            assert!(refused(&etcd(bad)).contains("--nnodes"), "{bad}");
        }
    }

    #[test]
    fn a_range_of_nodes_is_elastic_and_refuses_a_node_rank() {
        let Rendezvous::Etcd(range) = etcd("2:4").resolve().unwrap() else {
            panic!("local");
        };
        assert_eq!((range.min_nodes, range.max_nodes), (2, 4));
        assert!(range.elastic());
        assert_eq!(range.last_call, DEFAULT_LAST_CALL);
        let ranked = RdzvOptions {
            node_rank: Some(0),
            ..etcd("2:4")
        };
        assert!(refused(&ranked).contains("numbered anew each round"));
        let local = RdzvOptions {
            nnodes: "1:2".into(),
            ..RdzvOptions::default()
        };
        assert!(refused(&local).contains("--nnodes 1:2 needs a rendezvous"));
    }

    #[test]
    fn rdzv_conf_sets_the_last_call_and_names_what_it_ignores() {
        let options = RdzvOptions {
            conf: Some("last_call_timeout=1.5, join_timeout=900".into()),
            ..etcd("1:3")
        };
        let Rendezvous::Etcd(etcd_rdzv) = options.resolve().unwrap() else {
            panic!("local");
        };
        assert_eq!(etcd_rdzv.last_call, Duration::from_millis(1500));
        assert_eq!(etcd_rdzv.ignored_conf, ["join_timeout"]);
        for bad in [
            "last_call_timeout=-1",
            "last_call_timeout=x",
            "last_call_timeout=1e308",
            "last_call_timeout=inf",
            "last_call_timeout=NaN",
            "last_call_timeout=604801",
            "oops",
        ] {
            let options = RdzvOptions {
                conf: Some(bad.into()),
                ..etcd("1:3")
            };
            assert!(refused(&options).contains("--rdzv-conf"), "{bad}");
        }
    }

    #[test]
    fn several_nodes_without_a_backend_are_refused() {
        let options = RdzvOptions {
            nnodes: "2".into(),
            ..RdzvOptions::default()
        };
        assert!(refused(&options).contains("--rdzv-backend etcd"));
    }

    #[test]
    fn an_unknown_backend_is_refused() {
        let options = RdzvOptions {
            backend: Some("etcd-v2".into()),
            ..etcd("2")
        };
        assert!(refused(&options).contains("\"etcd-v2\" is not supported"));
    }

    #[test]
    fn c10d_runs_one_node_and_is_refused_across_nodes_naming_etcd() {
        let one = RdzvOptions {
            backend: Some("c10d".into()),
            endpoint: Some("localhost:29400".into()),
            ..RdzvOptions::default()
        };
        assert!(matches!(one.resolve(), Ok(Rendezvous::Local)));
        let two = RdzvOptions {
            backend: Some("c10d".into()),
            ..etcd("2")
        };
        let error = refused(&two);
        assert!(
            error.contains("--rdzv-backend c10d") && error.contains("--rdzv-backend etcd"),
            "{error}"
        );
    }

    #[test]
    fn a_backend_without_id_or_endpoint_is_refused() {
        let no_id = RdzvOptions {
            id: None,
            ..etcd("2")
        };
        assert!(refused(&no_id).contains("needs --rdzv-id"));
        let no_endpoint = RdzvOptions {
            endpoint: None,
            ..etcd("2")
        };
        assert!(refused(&no_endpoint).contains("needs --rdzv-endpoint"));
    }

    #[test]
    fn a_bad_id_is_refused() {
        let long = "a".repeat(65);
        for bad in ["", "a/b", "a b", "é", "..", long.as_str()] {
            let options = RdzvOptions {
                id: Some(bad.into()),
                ..etcd("2")
            };
            assert!(refused(&options).contains("--rdzv-id"), "{bad:?}");
        }
        let longest = RdzvOptions {
            id: Some("A.z_0-".repeat(10) + "abcd"),
            ..etcd("2")
        };
        assert!(longest.resolve().is_ok());
    }

    #[test]
    fn a_bad_endpoint_is_refused() {
        let many = vec!["h:1"; MAX_ENDPOINTS + 1].join(",");
        for bad in [
            "host",
            "host:0",
            "host:70000",
            ":2379",
            "a b:1",
            "https://h:1,http://h:2",
            "h:1,",
            many.as_str(),
        ] {
            let options = RdzvOptions {
                endpoint: Some(bad.into()),
                ..etcd("2")
            };
            assert!(refused(&options).contains("--rdzv-endpoint"), "{bad:?}");
        }
    }

    #[test]
    fn a_node_rank_out_of_range_is_refused() {
        let options = RdzvOptions {
            node_rank: Some(2),
            ..etcd("2")
        };
        assert!(refused(&options).contains("--node-rank 2 is out of range"));
        let local = RdzvOptions {
            node_rank: Some(1),
            ..RdzvOptions::default()
        };
        assert!(refused(&local).contains("--node-rank 1"));
    }

    #[test]
    fn a_ttl_or_timeout_out_of_range_is_refused() {
        for ttl in [Duration::from_secs(1), Duration::from_millis(2500)] {
            let options = RdzvOptions { ttl, ..etcd("2") };
            assert!(refused(&options).contains("--rdzv-ttl"), "{ttl:?}");
        }
        let options = RdzvOptions {
            timeout: Duration::from_millis(10),
            ..etcd("2")
        };
        assert!(refused(&options).contains("--rdzv-timeout"));
    }

    #[test]
    fn standalone_with_a_backend_is_refused() {
        let options = RdzvOptions {
            standalone: true,
            ..etcd("1")
        };
        assert!(refused(&options).contains("--standalone"));
    }

    #[test]
    fn a_bad_local_addr_is_refused() {
        let options = RdzvOptions {
            local_addr: Some("a b".into()),
            ..etcd("2")
        };
        assert!(refused(&options).contains("--local-addr"));
    }
}
