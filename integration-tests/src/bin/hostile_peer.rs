//! A stranger for the security tests, run as another uid: it speaks raw
//! bytes to our sockets, or listens where we will connect.
//!
//! `hostile_peer raw SOCKET HEX`: connects, writes the bytes, reads what
//! comes back until the server closes (2 s at most) and prints
//! `reply HEX`, or `error MESSAGE` if it cannot connect.
//! `hostile_peer serve SOCKET`: binds SOCKET (mode 0777), prints
//! `listening`, and for 10 s answers each connection with one empty frame.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["raw", socket, bytes] => {
            let mut stream = match UnixStream::connect(socket) {
                Ok(stream) => stream,
                Err(e) => {
                    println!("error {e}");
                    return ExitCode::FAILURE;
                }
            };
            stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            let _ = stream.write_all(&unhex(bytes));
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let mut reply = Vec::new();
            let _ = stream.read_to_end(&mut reply);
            println!("reply {}", hex(&reply));
            ExitCode::SUCCESS
        }
        ["serve", socket] => {
            let listener = UnixListener::bind(socket).expect("bind");
            std::fs::set_permissions(socket, PermissionsExt::from_mode(0o777)).expect("chmod");
            listener.set_nonblocking(true).expect("nonblocking");
            println!("listening");
            let _ = std::io::stdout().flush();
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let _ = stream.write_all(&[0, 0, 0, 0]);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            let _ = std::fs::remove_file(socket);
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: hostile_peer raw SOCKET HEX | serve SOCKET");
            ExitCode::from(2)
        }
    }
}
