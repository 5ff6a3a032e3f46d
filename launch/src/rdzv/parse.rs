//! The rendezvous flags' text: `--nnodes`, `--rdzv-id`,
//! `--rdzv-endpoint`, `--rdzv-conf` and host names, each refused naming
//! the flag and what it allows.

use std::path::PathBuf;
use std::time::Duration;

use super::{DEFAULT_LAST_CALL, EtcdTls, MAX_ENDPOINTS, MAX_NNODES, MAX_RDZV_TIMEOUT};
use crate::{Error, Result};

/// `N` or `N:M`, each 1 to [`MAX_NNODES`], N ≤ M.
pub(super) fn parse_nnodes(text: &str) -> Result<(u32, u32)> {
    let number = |part: &str| -> Result<u32> {
        match part.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_NNODES).contains(&n) => Ok(n),
            _ => Err(Error::options(format!(
                "--nnodes {text:?}: {part:?} is not a number of nodes from 1 to {MAX_NNODES}"
            ))),
        }
    };
    let (min, max) = match text.split_once(':') {
        Some((min, max)) => (number(min)?, number(max)?),
        None => {
            let n = number(text)?;
            (n, n)
        }
    };
    if min > max {
        return Err(Error::options(format!(
            "--nnodes {text}: the minimum {min} is more than the maximum {max}"
        )));
    }
    Ok((min, max))
}

/// `--rdzv-conf` as read.
#[derive(Default)]
pub(super) struct Conf {
    pub(super) last_call: Duration,
    protocol: Option<String>,
    cacert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    pub(super) ignored: Vec<String>,
}

/// `--rdzv-conf`: `last_call_timeout` (whole or decimal seconds, at most
/// [`MAX_RDZV_TIMEOUT`]) and the TLS keys read; other keys returned, to be
/// warned about.
pub(super) fn parse_conf(text: &str) -> Result<Conf> {
    let mut conf = Conf {
        last_call: DEFAULT_LAST_CALL,
        ..Conf::default()
    };
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(Error::options(format!(
                "--rdzv-conf {pair:?} is not KEY=VALUE"
            )));
        };
        let (key, value) = (key.trim(), value.trim());
        let path = || -> Result<Option<PathBuf>> {
            match value.is_empty() {
                true => Err(Error::options(format!("--rdzv-conf {key}= names no file"))),
                false => Ok(Some(PathBuf::from(value))),
            }
        };
        match key {
            "last_call_timeout" => {
                conf.last_call = value
                    .parse::<f64>()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .filter(|d| *d <= MAX_RDZV_TIMEOUT)
                    .ok_or_else(|| {
                        Error::options(format!(
                            "--rdzv-conf last_call_timeout={value:?} is not seconds from 0 to {}",
                            MAX_RDZV_TIMEOUT.as_secs()
                        ))
                    })?;
            }
            "protocol" => match value {
                "http" | "https" => conf.protocol = Some(value.to_owned()),
                _ => {
                    return Err(Error::options(format!(
                        "--rdzv-conf protocol={value:?}: http or https"
                    )));
                }
            },
            "cacert" => conf.cacert = path()?,
            "cert" => conf.cert = path()?,
            "key" => conf.key = path()?,
            _ => conf.ignored.push(key.to_owned()),
        }
    }
    Ok(conf)
}

impl Conf {
    /// TLS or not, from `protocol` and the endpoints' scheme, with the
    /// files it needs: a CA always, a certificate and its key together.
    pub(super) fn tls(&self, https_endpoints: bool) -> Result<Option<EtcdTls>> {
        let https = match (self.protocol.as_deref(), https_endpoints) {
            (Some("http"), true) => {
                return Err(Error::options(
                    "--rdzv-conf protocol=http but --rdzv-endpoint says https://",
                ));
            }
            (Some("https"), _) | (_, true) => true,
            _ => false,
        };
        if !https {
            if self.cacert.is_some() || self.cert.is_some() || self.key.is_some() {
                return Err(Error::options(
                    "--rdzv-conf cacert, cert and key are for TLS: give protocol=https or https:// endpoints",
                ));
            }
            return Ok(None);
        }
        let ca = self.cacert.clone().ok_or_else(|| {
            Error::options(
                "TLS to etcd needs --rdzv-conf cacert=FILE (the CA that signed etcd's certificate, PEM)",
            )
        })?;
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => {
                return Err(Error::options(
                    "--rdzv-conf cert and key go together (this launcher's certificate and its private key, PEM)",
                ));
            }
        };
        Ok(Some(EtcdTls { ca, identity }))
    }
}

pub(super) fn check_id(id: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > 64 || !id.chars().all(allowed) {
        return Err(Error::options(format!(
            "--rdzv-id {id:?} must be 1 to 64 of A-Z a-z 0-9 . _ -"
        )));
    }
    if id == "." || id == ".." {
        return Err(Error::options(format!(
            "--rdzv-id {id:?} is not a name (a path component)"
        )));
    }
    Ok(())
}

/// `HOST:PORT[,HOST:PORT…]`, an optional `http://` or `https://` before
/// each (the same for all); whether they said `https://`.
pub(super) fn parse_endpoints(text: &str) -> Result<(Vec<String>, bool)> {
    let mut endpoints = Vec::new();
    let mut schemes = Vec::new();
    for part in text.split(',') {
        let bare = part.trim();
        let (scheme, bare) = match (bare.strip_prefix("https://"), bare.strip_prefix("http://")) {
            (Some(rest), _) => (Some(true), rest),
            (None, Some(rest)) => (Some(false), rest),
            (None, None) => (None, bare),
        };
        schemes.push(scheme);
        let bare = bare.strip_suffix('/').unwrap_or(bare);
        let Some((host, port)) = bare.rsplit_once(':') else {
            return Err(Error::options(format!(
                "--rdzv-endpoint {part:?} is not HOST:PORT"
            )));
        };
        check_host(host, "--rdzv-endpoint")?;
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => {
                return Err(Error::options(format!(
                    "--rdzv-endpoint {part:?}: port {port:?} is not 1 to 65535"
                )));
            }
        }
        endpoints.push(bare.to_owned());
        if endpoints.len() > MAX_ENDPOINTS {
            return Err(Error::options(format!(
                "--rdzv-endpoint: more than {MAX_ENDPOINTS} endpoints"
            )));
        }
    }
    let https = schemes.contains(&Some(true));
    if https && schemes.iter().any(|s| *s != Some(true)) {
        return Err(Error::options(format!(
            "--rdzv-endpoint {text:?}: https:// on some endpoints and not on others"
        )));
    }
    Ok((endpoints, https))
}

/// A host name or address: 1 to 253 characters, none of them spaces,
/// controls, `/`, `,` or `@` (an `[ipv6]` keeps its colons).
pub(super) fn check_host(host: &str, flag: &str) -> Result<()> {
    let bad = |c: char| c.is_whitespace() || c.is_control() || matches!(c, '/' | ',' | '@');
    if host.is_empty() || host.len() > 253 || host.chars().any(bad) {
        return Err(Error::options(format!(
            "{flag}: {host:?} is not a host name or address"
        )));
    }
    Ok(())
}
