//! A real etcd (Debian's `etcd-server`) on loopback: free ports, a
//! temporary data directory, killed and removed when dropped.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeipc_testkit::{ChildGuard, TempDir, spawn_child};

pub struct Etcd {
    child: Option<ChildGuard>,
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
    /// Serving TLS only, to clients with a certificate of its CA.
    tls: bool,
}

/// The PEM files of a TLS etcd and its clients, made by `openssl`.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A port etcd was to bind was taken by another process.
struct Taken;

/// The etcd binary, if installed.
fn binary() -> Option<String> {
    ["/usr/bin/etcd", "/usr/local/bin/etcd"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| (*p).to_owned())
}

impl Etcd {
    /// Starts etcd, or says the test is skipped (`None`; under CI=true the
    /// test fails instead).
    pub fn start(test: &str) -> Option<Etcd> {
        if binary().is_none() {
            nodeipc_testkit::skip(test, "no etcd (apt-get install etcd-server)");
            return None;
        }
        let mut etcd = Etcd {
            child: None,
            dir: TempDir::new("etcd"),
            client_port: free_port(),
            peer_port: free_port(),
            tls: false,
        };
        etcd.first_run();
        Some(etcd)
    }

    /// As [`start`](Etcd::start), serving TLS only and asking every client
    /// for a certificate of its CA (`--client-cert-auth`).
    pub fn start_tls(test: &str) -> Option<Etcd> {
        if binary().is_none() {
            nodeipc_testkit::skip(test, "no etcd (apt-get install etcd-server)");
            return None;
        }
        if !Path::new("/usr/bin/openssl").exists() {
            nodeipc_testkit::skip(
                test,
                "no openssl to make certificates (apt-get install openssl)",
            );
            return None;
        }
        let mut etcd = Etcd {
            child: None,
            dir: TempDir::new("etcd-tls"),
            client_port: free_port(),
            peer_port: free_port(),
            tls: true,
        };
        etcd.pki();
        etcd.first_run();
        Some(etcd)
    }

    /// The certificates (for a TLS etcd).
    pub fn pki(&self) -> Pki {
        let pki = Pki {
            ca: self.dir.join("ca.pem"),
            cert: self.dir.join("client.pem"),
            key: self.dir.join("client.key"),
            other_ca: self.dir.join("other-ca.pem"),
            server_cert: self.dir.join("server.pem"),
            server_key: self.dir.join("server.key"),
        };
        if !pki.ca.exists() {
            let dir = self.dir.path();
            make_ca(dir, "ca");
            make_ca(dir, "other-ca");
            make_signed(
                dir,
                "server",
                "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
            );
            make_signed(dir, "client", "extendedKeyUsage=clientAuth\n");
        }
        pki
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The first start: on ports of its own. A port is picked free, then
    /// released for etcd to bind, and another test's process (a launcher
    /// listening on an ephemeral port, another etcd) may take it in
    /// between: etcd then exits at once with "address already in use", and
    /// it starts again on two other ports.
    fn first_run(&mut self) {
        for _ in 0..5 {
            match self.try_run() {
                Ok(()) => return,
                Err(Taken) => {
                    self.client_port = free_port();
                    self.peer_port = free_port();
                }
            }
        }
        panic!("etcd found its ports taken five times: {}", self.log());
    }

    /// Starts etcd (again, on the same data and ports) and waits until it
    /// takes connections.
    pub fn run(&mut self) {
        if self.try_run().is_err() {
            panic!("etcd's port was taken while it was down: {}", self.log());
        }
    }

    /// [`run`](Etcd::run), or `Err` if etcd exited because a port of its
    /// was taken.
    fn try_run(&mut self) -> Result<(), Taken> {
        let logged = self.log().len();
        let scheme = if self.tls { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("etcd log");
        let mut command = Command::new(binary().expect("etcd"));
        command
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"));
        if self.tls {
            let pki = self.pki();
            command
                .arg(format!("--cert-file={}", pki.server_cert.display()))
                .arg(format!("--key-file={}", pki.server_key.display()))
                .arg(format!("--trusted-ca-file={}", pki.ca.display()))
                .arg("--client-cert-auth");
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(spawn_child(&mut command));
        let began = Instant::now();
        loop {
            let listening = TcpStream::connect((Ipv4Addr::LOCALHOST, self.client_port)).is_ok();
            if listening {
                // What answered may be the process that took the port:
                // etcd, having failed to bind, exits within moments.
                std::thread::sleep(Duration::from_millis(100));
            }
            if self.exited() {
                let log = self.log();
                if log
                    .get(logged..)
                    .is_some_and(|new| new.contains("address already in use"))
                {
                    self.child = None;
                    return Err(Taken);
                }
                panic!("etcd exited: {log}");
            }
            if listening {
                return Ok(());
            }
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "etcd did not listen within 20 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the etcd process has exited.
    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .and_then(|c| c.child().try_wait().ok().flatten())
            .is_some()
    }

    /// Kills etcd (SIGKILL), keeping its data.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
    }

    /// Whether `key` exists, read through etcd's JSON gateway
    /// (`POST /v3/kv/range`): the test's own view, not a launcher's.
    pub fn has_key(&self, key: &str) -> bool {
        let body = format!("{{\"key\":\"{}\"}}", base64(key.as_bytes()));
        self.gateway("/v3/kv/range", &body)
            .is_some_and(|answer| answer.contains("\"kvs\""))
    }

    /// Writes `value` at `key` (no lease) through the JSON gateway
    /// (`POST /v3/kv/put`), as another client that can write the job's
    /// prefix would; whether etcd took it.
    pub fn put(&self, key: &str, value: &[u8]) -> bool {
        let body = format!(
            "{{\"key\":\"{}\",\"value\":\"{}\"}}",
            base64(key.as_bytes()),
            base64(value)
        );
        self.gateway("/v3/kv/put", &body).is_some_and(|answer| {
            answer.starts_with("HTTP/1.0 200") && answer.contains("\"header\"")
        })
    }

    /// One request to the JSON gateway; the whole answer, headers included.
    fn gateway(&self, path: &str, body: &str) -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.client_port)).ok()?;
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        Some(answer)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `openssl` with `args` in `dir`; the test fails if it does.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("/usr/bin/openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `NAME.key`, a new P-256 key, and `out`: a certificate for it signed by
/// itself (`self_signed`, two days) or a signing request, for `cn`.
fn new_key(dir: &Path, name: &str, out: &str, cn: &str, self_signed: bool) {
    let key = format!("{name}.key");
    let subject = format!("/CN={cn}");
    let mut args = vec!["req"];
    if self_signed {
        args.extend(["-x509", "-days", "2"]);
    }
    args.extend([
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        out,
        "-subj",
        &subject,
    ]);
    openssl(dir, &args);
}

/// `NAME.pem` and `NAME.key`: a self-signed CA (P-256, two days).
fn make_ca(dir: &Path, name: &str) {
    new_key(
        dir,
        name,
        &format!("{name}.pem"),
        &format!("nodeipc test {name}"),
        true,
    );
}

/// `NAME.pem` and `NAME.key` signed by `ca`, with the extensions `ext`.
fn make_signed(dir: &Path, name: &str, ext: &str) {
    let (csr, pem, extfile) = (
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    std::fs::write(dir.join(&extfile), ext).expect("extensions file");
    new_key(dir, name, &csr, name, false);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ],
    );
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
