//! iceoryx2's request-response between two processes, for the channel suite:
//! the client sends a byte slice of the payload size, the server reads all
//! of it in place (as any server that uses a request must; our worker copies
//! it into an owned message) and answers with an 8-byte digest the client
//! checks; both poll (iceoryx2's fastest mode), each on its own core.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use iceoryx2::prelude::*;

/// Set in the server process's environment: `SERVICE PAYLOAD ROUNDS CPU`
/// (`CPU` is `-` for no pinning; the parent decides, since a child of a
/// pinned parent would count only the one core it inherited).
const SERVER_ENV: &str = "NODEIPC_BENCH_ICEORYX2_SERVER";
const TIMEOUT: Duration = Duration::from_secs(30);

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// If this process was spawned as the iceoryx2 server, serves and exits.
pub(crate) fn run_if_server() {
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
    let (Some(service), Some(payload), Some(rounds), Some(cpu)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("bad server arguments".into());
    };
    let (payload, rounds): (usize, u64) = (payload.parse()?, rounds.parse()?);
    if cpu != "-" {
        nodeipc_benches::machine::pin_current_thread(cpu.parse()?)?;
    }
    let node = NodeBuilder::new().create::<ipc::Service>()?;
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

/// XOR of the payload's 8-byte words (and its tail): cheap, but it reads
/// every byte, so the server cannot answer without touching the request.
fn digest(bytes: &[u8]) -> u64 {
    let words = bytes.chunks_exact(8);
    let tail = words
        .remainder()
        .iter()
        .fold(0u64, |d, &b| d.rotate_left(8) ^ u64::from(b));
    words.fold(tail, |d, w| {
        d ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))
    })
}

/// A client and a server process, ready for `rounds` round trips.
pub(crate) struct IceoryxSession {
    server: Child,
    /// Keeps the client's node alive as long as the client.
    _node: Node<ipc::Service>,
    client: iceoryx2::port::client::Client<ipc::Service, [u8], (), [u8], ()>,
    payload: Vec<u8>,
    /// What the server must answer for `payload`.
    digest: [u8; 8],
    /// The client polls on core 0 while the server polls on core 1: two
    /// pollers sharing a core would take turns a scheduler slice at a time.
    _pinned: Option<nodeipc_benches::machine::Pinned>,
}

impl IceoryxSession {
    pub(crate) fn start(payload: usize, rounds: u64) -> Result<IceoryxSession> {
        let name = format!(
            "nodeipc-bench/iceoryx2-{}-{}",
            std::process::id(),
            Instant::now().elapsed().subsec_nanos()
        );
        let pin = nodeipc_benches::machine::cores() >= 2;
        let cpu = if pin { "1" } else { "-" };
        let mut server = Command::new(std::env::current_exe()?)
            .env(SERVER_ENV, format!("{name} {payload} {rounds} {cpu}"))
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(server.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = server.kill();
            return Err("the iceoryx2 server did not start".into());
        }
        let node = NodeBuilder::new().create::<ipc::Service>()?;
        let service = node
            .service_builder(&name.as_str().try_into()?)
            .request_response::<[u8], [u8]>()
            .open_or_create()?;
        let client = service
            .client_builder()
            .initial_max_slice_len(payload.max(1))
            .create()?;
        let pinned = if pin {
            Some(nodeipc_benches::machine::Pinned::to(0)?)
        } else {
            None
        };
        Ok(IceoryxSession {
            server,
            _node: node,
            client,
            payload: vec![0x5a; payload],
            digest: digest(&vec![0x5a; payload]).to_le_bytes(),
            _pinned: pinned,
        })
    }

    /// `rounds` round trips; the time they took.
    pub(crate) fn run(&mut self, rounds: u64) -> Result<Duration> {
        let start = Instant::now();
        for _ in 0..rounds {
            let request = self.client.loan_slice_uninit(self.payload.len())?;
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

    pub(crate) fn finish(mut self) -> Result<()> {
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
    }
}
