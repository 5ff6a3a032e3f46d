//! The client's side of the handshake.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Credentials, SCM_MAX_FD};
use nodeipc_proto::LEN_PREFIX;
use nodeipc_proto::handshake::{
    Accept, FdKind, Logon, LogonReply, PROTOCOL_VERSION, RejectCode, logon_reply,
};

use crate::wire::{first_batch, recv_batch};
use crate::{Error, PeerGone, PeerLink, Result};

/// How a client logs on.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The whole handshake's bound: connecting, sending, every batch.
    pub timeout: Duration,
    /// The most descriptors taken from one accept (more: refused, all closed).
    pub max_fds: usize,
    /// The largest reply frame read, in bytes.
    pub max_reply: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(5),
            max_fds: crate::MAX_FDS,
            max_reply: crate::MAX_REPLY,
        }
    }
}

/// One descriptor the server passed, with what the accept says of it.
#[derive(Debug)]
pub struct PassedDescriptor {
    /// Its kind.
    pub kind: FdKind,
    /// The server's name for it (may be empty).
    pub role: String,
    /// The bytes it may be mapped for (checked against `fstat`; 0: none).
    pub size: u64,
    /// The descriptor.
    pub fd: OwnedFd,
}

/// An accepted logon, on the client's side: what the server said, the
/// descriptors it passed, and the link that tells when it is gone.
/// Dropping it closes the session (the server sees end of file).
#[derive(Debug)]
pub struct ClientSession {
    /// The server's `Accept` (its `fds` describe [`fds`](ClientSession::fds)
    /// as they arrived).
    pub accept: Accept,
    /// The descriptors not taken yet, in the order they arrived.
    pub fds: Vec<PassedDescriptor>,
    /// Who the server is (it runs as our uid: checked).
    pub server: Credentials,
    /// The session socket and the server's pidfd.
    pub link: PeerLink,
}

impl ClientSession {
    /// Takes the first descriptor of `kind`.
    pub fn take(&mut self, kind: FdKind) -> Option<OwnedFd> {
        let index = self.fds.iter().position(|d| d.kind == kind)?;
        Some(self.fds.remove(index).fd)
    }

    /// Takes the descriptor named `role`.
    ///
    /// # Errors
    /// [`Error::Handshake`] naming the role and the roles there are.
    pub fn take_role(&mut self, role: &str) -> Result<PassedDescriptor> {
        match self.fds.iter().position(|d| d.role == role) {
            Some(index) => Ok(self.fds.remove(index)),
            None => Err(Error::Handshake {
                peer: format!("server pid {}", self.server.pid),
                reason: format!(
                    "the accept carries no descriptor of role {role:?} (left: {:?})",
                    self.roles()
                ),
            }),
        }
    }

    /// The roles of the descriptors not taken yet.
    pub fn roles(&self) -> Vec<&str> {
        self.fds.iter().map(|d| d.role.as_str()).collect()
    }

    /// Checks that the descriptors left are exactly `roles` (any order).
    ///
    /// # Errors
    /// [`Error::Handshake`] naming the count, the roles missing and the
    /// roles nobody asked for.
    pub fn expect_roles<S: AsRef<str>>(&self, roles: &[S]) -> Result<()> {
        let have = self.roles();
        let missing: Vec<&str> = roles
            .iter()
            .map(AsRef::as_ref)
            .filter(|r| !have.contains(r))
            .collect();
        let extra: Vec<&str> = have
            .iter()
            .copied()
            .filter(|h| !roles.iter().any(|r| r.as_ref() == *h))
            .collect();
        if missing.is_empty() && extra.is_empty() && have.len() == roles.len() {
            return Ok(());
        }
        Err(Error::Handshake {
            peer: format!("server pid {}", self.server.pid),
            reason: format!(
                "the accept carries {} descriptors where {} were expected (missing {missing:?}, unexpected {extra:?})",
                have.len(),
                roles.len()
            ),
        })
    }

    /// The answer in the server's own schema.
    pub fn payload(&self) -> &[u8] {
        &self.accept.payload
    }

    /// Whether the server's end of the session is still there.
    pub fn server_alive(&self) -> bool {
        self.link.is_alive()
    }

    /// Waits up to `timeout` for the server's end of the session.
    pub fn wait_server_gone(&self, timeout: Duration) -> Option<PeerGone> {
        self.link.wait_gone(timeout)
    }
}

/// Logs on with [`ClientOptions::default`] but `timeout`.
///
/// # Errors
/// As [`connect_with`].
pub fn connect(path: impl AsRef<Path>, logon: &Logon, timeout: Duration) -> Result<ClientSession> {
    let options = ClientOptions {
        timeout,
        ..ClientOptions::default()
    };
    connect_with(path, logon, &options)
}

/// Logs on to the handshake server at `path`: connects (retrying while the
/// server is not up yet or its backlog is full, within the timeout), checks
/// that the server runs as our uid, sends `logon` and reads the reply and
/// every batch of descriptors.
///
/// # Errors
/// [`Error::Rejected`] with the server's code and reason; [`Error::Handshake`]
/// for a server of another uid, a protocol version other than ours, a reply
/// that is not one, descriptors that do not match their description (count,
/// kind, size, a role given twice), more than `max_fds`, or a server that
/// closed early; [`Error::Timeout`] naming the step awaited (connecting,
/// sending the logon, the reply, a batch of descriptors); [`Error::FdPass`]
/// for a socket that cannot be connected to (`EACCES`, say).
pub fn connect_with(
    path: impl AsRef<Path>,
    logon: &Logon,
    options: &ClientOptions,
) -> Result<ClientSession> {
    let path = path.as_ref();
    let peer = || format!("handshake server at {}", path.display());
    let start = Instant::now();
    let timeout = options.timeout;
    let timed_out = |op: &str| Error::Timeout {
        peer: peer(),
        op: op.to_owned(),
        waited: start.elapsed(),
    };
    // Non-blocking underneath: a server stopped with its backlog full costs
    // `timeout`, not forever.
    let mut stream = nodeipc_fdpass::connect_unix_when_up(path, timeout).map_err(|e| match e {
        nodeipc_fdpass::Error::ConnectTimeout { waited, last, .. } => Error::Timeout {
            peer: peer(),
            op: format!(
                "connecting ({})",
                nodeipc_fdpass::connect_failure_reason(&last)
            ),
            waited,
        },
        source => Error::FdPass {
            context: peer(),
            source,
        },
    })?;
    let server =
        nodeipc_fdpass::require_peer_uid(&stream, &[]).map_err(|source| Error::FdPass {
            context: peer(),
            source,
        })?;
    let left = timeout
        .saturating_sub(start.elapsed())
        .max(Duration::from_millis(1));
    let io = |op, source| Error::Io {
        context: peer(),
        op,
        source,
    };
    stream
        .set_read_timeout(Some(left))
        .map_err(|e| io("set_read_timeout", e))?;
    stream
        .set_write_timeout(Some(left))
        .map_err(|e| io("set_write_timeout", e))?;
    match nodeipc_proto::write_frame(&mut stream, logon) {
        Ok(()) => {}
        // A server that refuses us outright (too many clients) answers and
        // closes without reading the logon: its answer may be waiting for us
        // even though the write failed. The read below tells.
        Err(nodeipc_proto::Error::Io(e)) if hung_up(&e) => {}
        Err(nodeipc_proto::Error::Io(e)) if is_timeout(&e) => {
            return Err(timed_out("sending the logon (the server is not reading)"));
        }
        Err(source) => {
            return Err(Error::Proto {
                context: peer(),
                source,
            });
        }
    }
    let (reply, first) = read_reply(&mut stream, options, &peer, &timed_out)?;
    let handshake = |reason: String| Error::Handshake {
        peer: peer(),
        reason,
    };
    let accept = match reply.reply {
        Some(logon_reply::Reply::Reject(reject)) => {
            return Err(Error::Rejected {
                code: RejectCode::try_from(reject.code)
                    .map(|c| c.as_str_name().to_owned())
                    .unwrap_or_else(|_| format!("code {}", reject.code)),
                reason: reject.reason,
            });
        }
        Some(logon_reply::Reply::Accept(accept)) => accept,
        None => {
            return Err(handshake(
                "the reply holds neither an accept nor a reject".to_owned(),
            ));
        }
    };
    if accept.protocol_version != PROTOCOL_VERSION {
        return Err(handshake(format!(
            "the server speaks protocol version {}, we speak {PROTOCOL_VERSION}",
            accept.protocol_version
        )));
    }
    let total = accept.fds.len();
    if total > options.max_fds {
        return Err(handshake(format!(
            "the accept describes {total} descriptors; this client takes at most {}",
            options.max_fds
        )));
    }
    if first.len() != first_batch(total) {
        return Err(handshake(format!(
            "the accept describes {total} descriptors but {} arrived with it (expected {})",
            first.len(),
            first_batch(total)
        )));
    }
    let mut fds = first;
    while fds.len() < total {
        let expected = (total - fds.len()).min(SCM_MAX_FD);
        let batch_no = fds.len() / SCM_MAX_FD + 1;
        let (word, batch) = recv_batch(&stream, expected).map_err(|e| match e {
            nodeipc_fdpass::Error::Io { source, .. } if is_timeout(&source) => {
                timed_out(&format!("waiting for descriptor batch {batch_no}"))
            }
            nodeipc_fdpass::Error::Closed { .. } => handshake(format!(
                "the server closed the connection before descriptor batch {batch_no}"
            )),
            source => Error::FdPass {
                context: peer(),
                source,
            },
        })?;
        if word as usize != expected || batch.len() != expected {
            return Err(handshake(format!(
                "descriptor batch {batch_no} says {word} and carries {}, the accept needs {expected} more",
                batch.len()
            )));
        }
        fds.extend(batch);
    }
    let fds = describe(&accept, fds, &handshake)?;
    // The session is watched from here on: no socket timeouts left over.
    stream
        .set_read_timeout(None)
        .map_err(|e| io("set_read_timeout", e))?;
    let link = PeerLink::new(stream, server.pid);
    Ok(ClientSession {
        accept,
        fds,
        server,
        link,
    })
}

/// Reads the reply frame and the descriptors riding on its first byte.
fn read_reply(
    stream: &mut UnixStream,
    options: &ClientOptions,
    peer: &dyn Fn() -> String,
    timed_out: &dyn Fn(&str) -> Error,
) -> Result<(LogonReply, Vec<OwnedFd>)> {
    let handshake = |reason: String| Error::Handshake {
        peer: peer(),
        reason,
    };
    let closed_early = || handshake("the server closed the connection before answering".to_owned());
    let mut prefix = [0u8; LEN_PREFIX];
    let first_max = options.max_fds.min(SCM_MAX_FD);
    let fds =
        nodeipc_fdpass::recv_fds_exact(&*stream, &mut prefix, first_max).map_err(|e| match e {
            nodeipc_fdpass::Error::Closed { .. } => closed_early(),
            nodeipc_fdpass::Error::Io { source, .. } if hung_up(&source) => closed_early(),
            nodeipc_fdpass::Error::Io { source, .. } if is_timeout(&source) => {
                timed_out("waiting for the logon reply")
            }
            source => Error::FdPass {
                context: peer(),
                source,
            },
        })?;
    let len = u32::from_le_bytes(prefix) as usize;
    if len > options.max_reply {
        return Err(handshake(format!(
            "a {len}-byte reply; at most {} bytes are read",
            options.max_reply
        )));
    }
    let mut body = vec![0u8; len];
    std::io::Read::read_exact(stream, &mut body).map_err(|e| {
        if is_timeout(&e) {
            timed_out("waiting for the rest of the logon reply")
        } else {
            handshake(format!("the reply was cut short: {e}"))
        }
    })?;
    // Through the schema's wire-type check, as every frame we read.
    let reply = nodeipc_proto::decode_message::<LogonReply>(&body).map_err(|e| {
        let cause = match e {
            nodeipc_proto::Error::Decode(e) => e.to_string(),
            other => other.to_string(),
        };
        handshake(format!("the reply is not a LogonReply: {cause}"))
    })?;
    Ok((reply, fds))
}

/// Pairs each descriptor with its description, checking the server only
/// as far as we can: a known kind, a size the descriptor really has (that
/// size is what gets mapped), no role given twice.
fn describe(
    accept: &Accept,
    fds: Vec<OwnedFd>,
    handshake: &dyn Fn(String) -> Error,
) -> Result<Vec<PassedDescriptor>> {
    let mut out: Vec<PassedDescriptor> = Vec::with_capacity(fds.len());
    for (index, (described, fd)) in accept.fds.iter().zip(fds).enumerate() {
        let kind = match FdKind::try_from(described.kind) {
            Ok(FdKind::Unspecified) | Err(_) => {
                return Err(handshake(format!(
                    "descriptor {index} of the accept has no known role (kind {})",
                    described.kind
                )));
            }
            Ok(kind) => kind,
        };
        if described.size > 0 {
            let actual = rustix::fs::fstat(&fd)
                .map_err(|e| handshake(format!("fstat of descriptor {index}: {e}")))?
                .st_size;
            if u64::try_from(actual).map_or(true, |actual| actual < described.size) {
                let role = if described.role.is_empty() {
                    String::new()
                } else {
                    format!(" {:?}", described.role)
                };
                return Err(handshake(format!(
                    "descriptor {index} ({}{role}) holds {actual} bytes, the accept says {}",
                    kind.as_str_name(),
                    described.size
                )));
            }
        }
        if !described.role.is_empty() && out.iter().any(|d| d.role == described.role) {
            return Err(handshake(format!(
                "descriptor {index}: role {:?} is given twice",
                described.role
            )));
        }
        out.push(PassedDescriptor {
            kind,
            role: described.role.clone(),
            size: described.size,
            fd,
        });
    }
    Ok(out)
}

fn hung_up(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

/// A socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`) shows as `EAGAIN`.
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// A logon asking for `counts` (name, value) with `request` bytes of the
/// server's own schema.
pub fn logon(counts: &[(&str, u64)], request: impl Into<Vec<u8>>) -> Logon {
    Logon {
        protocol_version: PROTOCOL_VERSION,
        counts: counts
            .iter()
            .map(|&(name, value)| nodeipc_proto::handshake::Count {
                name: name.to_owned(),
                value,
            })
            .collect(),
        request: request.into(),
        ..Logon::default()
    }
}

/// The value of the count `name` in `logon`, if the client gave it.
pub fn count(logon: &Logon, name: &str) -> Option<u64> {
    logon
        .counts
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.value)
}
