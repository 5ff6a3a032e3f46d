//! iceoryx2's request-response between two processes, for the channel suite:
//! the client sends a byte slice of the payload size, the server reads all
//! of it in place (as any server that uses a request must; our worker copies
//! it into an owned message) and answers with an 8-byte digest the client
//! checks; both poll (iceoryx2's fastest mode), each on its own core.
//!
//! Each session runs in an iceoryx2 domain of its own: a config (passed to
//! the `NodeBuilder` of both processes) with a unique file prefix and root
//! directory, removed when the session ends. iceoryx2's defaults would put
//! files under `/dev/shm/iox2_*` (one of them world-writable) and
//! `/tmp/iceoryx2/` that outlive the run.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use iceoryx2::prelude::*;
use nodeipc_cli::bench::channel::digest;
use nodeipc_cli::bench::channel_loan;
use nodeipc_cli::bench::machine;

/// Set in the server process's environment: `SERVICE PAYLOAD ROUNDS CPU
/// PREFIX ROOT` (`CPU` is `-` for no pinning; the parent decides, since a
/// child of a pinned parent would count only the one core it inherited;
/// `PREFIX` and `ROOT` name the session's [`Domain`]).
const SERVER_ENV: &str = "NODEIPC_BENCH_ICEORYX2_SERVER";
const TIMEOUT: Duration = Duration::from_secs(30);

/// What the session's steps return: iceoryx2's errors, boxed.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Where one session's iceoryx2 objects live: every file in `/dev/shm`
/// starts with `prefix`, everything else is under `root`. Both are unique to
/// the session, so removing them touches no other iceoryx2 user.
struct Domain {
    prefix: String,
    root: PathBuf,
}

impl Domain {
    /// A fresh domain: `nodeipc_bench_<pid>_<n>_<nanos>_` and
    /// `/tmp/nodeipc-bench-iceoryx2-<pid>-<n>-<nanos>/`.
    fn unique() -> Domain {
        static SESSIONS: AtomicU64 = AtomicU64::new(0);
        let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let pid = std::process::id();
        Domain {
            prefix: format!("nodeipc_bench_{pid}_{n}_{nanos:x}_"),
            root: PathBuf::from(format!("/tmp/nodeipc-bench-iceoryx2-{pid}-{n}-{nanos:x}/")),
        }
    }

    /// The iceoryx2 config both processes of the session use.
    fn config(&self) -> Result<Config> {
        let mut config = Config::default();
        config.global.prefix = FileName::new(self.prefix.as_bytes())
            .map_err(|e| format!("iceoryx2 refuses {:?} as a file prefix: {e}", self.prefix))?;
        let root = self
            .root
            .to_str()
            .ok_or("the iceoryx2 root path is not UTF-8")?;
        config.global.set_root_path(
            &Path::new(root.as_bytes())
                .map_err(|e| format!("iceoryx2 refuses {root:?} as a root path: {e}"))?,
        );
        Ok(config)
    }

    /// Removes whatever the session's nodes left: files in `/dev/shm`
    /// starting with the prefix, and the root directory.
    fn remove_leftovers(&self) {
        if let Ok(entries) = std::fs::read_dir("/dev/shm") {
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| name.starts_with(&self.prefix))
                {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// If this process was spawned as the iceoryx2 server, serves and exits;
/// otherwise returns at once. Call it first thing in `main`.
pub fn run_if_server() {
    let Ok(spec) = std::env::var(SERVER_ENV) else {
        return;
    };
    let code = match serve(&spec) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("iceoryx2 server: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn serve(spec: &str) -> Result<()> {
    let mut parts = spec.split(' ');
    let (Some(service), Some(payload), Some(rounds), Some(cpu), Some(prefix), Some(root)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(format!(
            "bad server arguments {spec:?}: expected SERVICE PAYLOAD ROUNDS CPU PREFIX ROOT"
        )
        .into());
    };
    // The client removes the domain once the session is over.
    let domain = Domain {
        prefix: prefix.to_owned(),
        root: PathBuf::from(root),
    };
    let (payload, rounds): (usize, u64) = (payload.parse()?, rounds.parse()?);
    if cpu != "-" {
        machine::pin_current_thread(cpu.parse()?)?;
    }
    let node = NodeBuilder::new()
        .config(&domain.config()?)
        .create::<ipc::Service>()?;
    let service = node
        .service_builder(&service.try_into()?)
        .request_response::<[u8], [u8]>()
        .open_or_create()?;
    let server = service.server_builder().initial_max_slice_len(8).create()?;
    println!("ready");
    let start = Instant::now();
    let mut served = 0;
    while served < rounds {
        if let Some(request) = server.receive()? {
            let len = request.payload().len();
            if len != payload {
                return Err(format!("a {len}-byte request, expected {payload}").into());
            }
            let response = request.loan_slice_uninit(8)?;
            response
                .write_from_slice(&digest(request.payload()).to_le_bytes())
                .send()?;
            served += 1;
        } else {
            std::hint::spin_loop();
            if start.elapsed() > TIMEOUT * 4 {
                return Err("the client stopped".into());
            }
        }
    }
    Ok(())
}

/// The client's iceoryx2 objects; the client port drops before its node.
struct Ports {
    client: iceoryx2::port::client::Client<ipc::Service, [u8], (), [u8], ()>,
    _node: Node<ipc::Service>,
}

/// A client and a server process, ready for `rounds` round trips. Dropping
/// it (or [`finish`](IceoryxSession::finish)) stops the server if it still
/// runs, drops the client's node and removes the session's domain.
pub struct IceoryxSession {
    server: Child,
    /// `None` only while starting and while dropping.
    ports: Option<Ports>,
    payload: Vec<u8>,
    /// What the server must answer for `payload`.
    digest: [u8; 8],
    /// The client polls on core 0 while the server polls on core 1: two
    /// pollers sharing a core would take turns a scheduler slice at a time.
    _pinned: Option<machine::Pinned>,
    domain: Domain,
}

impl IceoryxSession {
    /// Starts the server process (this executable again, pinned to core 1
    /// where there are two) and the client, for `rounds` round trips of a
    /// `payload`-byte request.
    ///
    /// # Errors
    /// iceoryx2 refusing the domain or a port, or the server not starting.
    pub fn start(payload: usize, rounds: u64) -> Result<IceoryxSession> {
        let domain = Domain::unique();
        let config = domain.config()?;
        let name = format!("nodeipc-bench/iceoryx2-{}", domain.prefix);
        let pin = machine::cores() >= 2;
        let cpu = if pin { "1" } else { "-" };
        let server = Command::new(std::env::current_exe()?)
            .env(
                SERVER_ENV,
                format!(
                    "{name} {payload} {rounds} {cpu} {} {}",
                    domain.prefix,
                    domain.root.display()
                ),
            )
            .stdout(Stdio::piped())
            .spawn()?;
        // From here on, an early return drops the session: the server is
        // stopped and the domain removed.
        let mut session = IceoryxSession {
            server,
            ports: None,
            payload: vec![0x5a; payload],
            digest: digest(&vec![0x5a; payload]).to_le_bytes(),
            _pinned: None,
            domain,
        };
        let mut line = String::new();
        BufReader::new(session.server.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        if line.trim() != "ready" {
            return Err("the iceoryx2 server did not start".into());
        }
        let node = NodeBuilder::new()
            .config(&config)
            .create::<ipc::Service>()?;
        let service = node
            .service_builder(&name.as_str().try_into()?)
            .request_response::<[u8], [u8]>()
            .open_or_create()?;
        let client = service
            .client_builder()
            .initial_max_slice_len(payload.max(1))
            .create()?;
        session.ports = Some(Ports {
            client,
            _node: node,
        });
        if pin {
            session._pinned = Some(machine::Pinned::to(0)?);
        }
        Ok(session)
    }

    /// `rounds` round trips; the time they took.
    ///
    /// # Errors
    /// A send or receive iceoryx2 refused, a wrong digest, or a server that
    /// stopped answering.
    pub fn run(&mut self, rounds: u64) -> Result<Duration> {
        let client = &self
            .ports
            .as_ref()
            .ok_or("the session has no client")?
            .client;
        let start = Instant::now();
        for _ in 0..rounds {
            let request = client.loan_slice_uninit(self.payload.len())?;
            let pending = request.write_from_slice(&self.payload).send()?;
            let waiting = Instant::now();
            loop {
                if let Some(response) = pending.receive()? {
                    if response.payload() != self.digest.as_slice() {
                        return Err("a response with the wrong digest".into());
                    }
                    break;
                }
                std::hint::spin_loop();
                if waiting.elapsed() > TIMEOUT {
                    return Err("the iceoryx2 server stopped answering".into());
                }
            }
        }
        Ok(start.elapsed())
    }

    /// `rounds` round trips whose payload is built in the loaned request
    /// ([`channel_loan::build_uninit`]: the bytes nodeipc's loan row builds
    /// in its frame), starting at round `first`; the time they took.
    ///
    /// # Errors
    /// As [`run`](IceoryxSession::run).
    pub fn run_built(&mut self, first: u64, rounds: u64) -> Result<Duration> {
        let client = &self
            .ports
            .as_ref()
            .ok_or("the session has no client")?
            .client;
        let expected = channel_loan::Expected::new(self.payload.len());
        let start = Instant::now();
        for round in first..first + rounds {
            let mut request = client.loan_slice_uninit(self.payload.len())?;
            channel_loan::build_uninit(round, request.payload_mut());
            // SAFETY: `build_uninit` wrote every byte of the payload.
            let pending = unsafe { request.assume_init() }.send()?;
            let digest = expected.of(round).to_le_bytes();
            let waiting = Instant::now();
            loop {
                if let Some(response) = pending.receive()? {
                    if response.payload() != digest.as_slice() {
                        return Err("a response with the wrong digest".into());
                    }
                    break;
                }
                std::hint::spin_loop();
                if waiting.elapsed() > TIMEOUT {
                    return Err("the iceoryx2 server stopped answering".into());
                }
            }
        }
        Ok(start.elapsed())
    }

    /// Waits for the server to exit after its rounds.
    ///
    /// # Errors
    /// The server failed.
    pub fn finish(mut self) -> Result<()> {
        let status = self.server.wait()?;
        if !status.success() {
            return Err(format!("the iceoryx2 server failed: {status}").into());
        }
        Ok(())
    }
}

impl Drop for IceoryxSession {
    fn drop(&mut self) {
        if let Ok(None) = self.server.try_wait() {
            let _ = self.server.kill();
            let _ = self.server.wait();
        }
        // Our node goes first (it removes what it can), then whatever is left.
        self.ports = None;
        self.domain.remove_leftovers();
    }
}
