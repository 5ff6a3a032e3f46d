//! A TCP proxy between one launcher and etcd that the test can cut: every
//! connection through it is shut down and new ones are closed at once.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Forwards 127.0.0.1:<new port> to 127.0.0.1:`upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("proxy bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("proxy addr").port();
        let proxy = Proxy {
            port,
            cut: Arc::new(AtomicBool::new(false)),
            done: Arc::new(AtomicBool::new(false)),
            live: Arc::new(Mutex::new(Vec::new())),
        };
        let (cut, done, live) = (
            Arc::clone(&proxy.cut),
            Arc::clone(&proxy.done),
            Arc::clone(&proxy.live),
        );
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                if cut.load(Ordering::Relaxed) {
                    continue;
                }
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, upstream)) else {
                    continue;
                };
                let mut live = live.lock().unwrap();
                for stream in [&client, &server] {
                    if let Ok(clone) = stream.try_clone() {
                        live.push(clone);
                    }
                }
                drop(live);
                pump(&client, &server, &cut);
                pump(&server, &client, &cut);
            }
        });
        proxy
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Cuts every connection and refuses new ones until [`heal`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
        for stream in self.live.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::Relaxed);
    }
}

fn pump(from: &TcpStream, to: &TcpStream, cut: &Arc<AtomicBool>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let cut = Arc::clone(cut);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) if !cut.load(Ordering::Relaxed) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Ok(_) => break,
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        self.cut();
    }
}
