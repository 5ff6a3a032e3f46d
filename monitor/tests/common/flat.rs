//! Without the `json` feature the crate reads no JSON, but the tests are
//! written with JSON configs and the helper reads the file
//! `spawn_monitor_with` writes. This reads that subset (objects, strings,
//! whole numbers, booleans, null, lists of strings) into a `MonitorConfig`,
//! so the whole suite runs both ways; it also checks the hand-written
//! `to_json` from the outside.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use nodeipc_monitor::{GpuHealth, HealthConfig, MonitorConfig, NicHealth, Signal, signal_name};

#[derive(Debug)]
enum V {
    Null,
    Bool(bool),
    Num(u64),
    Str(String),
    List(Vec<V>),
    Obj(BTreeMap<String, V>),
}

struct P<'a>(&'a [u8], usize);

impl P<'_> {
    fn ws(&mut self) {
        while self.1 < self.0.len() && self.0[self.1].is_ascii_whitespace() {
            self.1 += 1;
        }
    }
    fn eat(&mut self, b: u8) -> bool {
        self.ws();
        let hit = self.0.get(self.1) == Some(&b);
        if hit {
            self.1 += 1;
        }
        hit
    }
    fn word(&mut self, w: &str) -> bool {
        let hit = self.0[self.1..].starts_with(w.as_bytes());
        if hit {
            self.1 += w.len();
        }
        hit
    }
    fn string(&mut self) -> String {
        assert!(self.eat(b'"'), "a string at {}", self.1);
        let mut out = String::new();
        loop {
            let c = self.0[self.1];
            self.1 += 1;
            match c {
                b'"' => return out,
                b'\\' => {
                    let e = self.0[self.1];
                    self.1 += 1;
                    match e {
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hex = std::str::from_utf8(&self.0[self.1..self.1 + 4]).unwrap();
                            out.push(
                                char::from_u32(u32::from_str_radix(hex, 16).unwrap()).unwrap(),
                            );
                            self.1 += 4;
                        }
                        other => out.push(char::from(other)),
                    }
                }
                _ => {
                    // Copy a whole UTF-8 sequence.
                    let start = self.1 - 1;
                    let mut end = self.1;
                    while end < self.0.len() && (self.0[end] & 0xc0) == 0x80 {
                        end += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.0[start..end]).unwrap());
                    self.1 = end;
                }
            }
        }
    }
    fn value(&mut self) -> V {
        self.ws();
        let next = self.0[self.1];
        match next {
            b'{' => {
                self.1 += 1;
                let mut map = BTreeMap::new();
                if self.eat(b'}') {
                    return V::Obj(map);
                }
                loop {
                    let key = self.string();
                    assert!(self.eat(b':'), "':' at {}", self.1);
                    map.insert(key, self.value());
                    if self.eat(b'}') {
                        return V::Obj(map);
                    }
                    assert!(self.eat(b','), "',' at {}", self.1);
                }
            }
            b'[' => {
                self.1 += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return V::List(items);
                }
                loop {
                    items.push(self.value());
                    if self.eat(b']') {
                        return V::List(items);
                    }
                    assert!(self.eat(b','), "',' at {}", self.1);
                }
            }
            b'"' => V::Str(self.string()),
            _ if self.word("null") => V::Null,
            _ if self.word("true") => V::Bool(true),
            _ if self.word("false") => V::Bool(false),
            _ => {
                let start = self.1;
                while self.1 < self.0.len() && self.0[self.1].is_ascii_digit() {
                    self.1 += 1;
                }
                V::Num(
                    std::str::from_utf8(&self.0[start..self.1])
                        .unwrap()
                        .parse()
                        .unwrap(),
                )
            }
        }
    }
}

fn ms(v: &V) -> Option<Duration> {
    match v {
        V::Null => None,
        V::Num(n) => Some(Duration::from_millis(*n)),
        other => panic!("not milliseconds: {other:?}"),
    }
}

fn flag(v: &V) -> bool {
    match v {
        V::Bool(b) => *b,
        other => panic!("not a boolean: {other:?}"),
    }
}

fn signal(name: &str) -> Signal {
    [
        Signal::KILL,
        Signal::TERM,
        Signal::INT,
        Signal::QUIT,
        Signal::HUP,
        Signal::ABORT,
        Signal::USR1,
        Signal::USR2,
    ]
    .into_iter()
    .find(|s| signal_name(*s) == name)
    .unwrap_or_else(|| panic!("signal {name}"))
}

fn health(v: &V) -> HealthConfig {
    let V::Obj(h) = v else {
        panic!("health_checks {v:?}")
    };
    let nic = h.get("nic").map(|v| {
        let V::Obj(n) = v else { panic!("nic {v:?}") };
        let V::List(devices) = &n["devices"] else {
            panic!("devices")
        };
        NicHealth {
            devices: devices
                .iter()
                .map(|d| match d {
                    V::Str(s) => s.clone(),
                    other => panic!("device {other:?}"),
                })
                .collect(),
            sysfs_root: match n.get("sysfs_root") {
                Some(V::Str(s)) => PathBuf::from(s),
                _ => PathBuf::from("/sys"),
            },
            interval: n
                .get("interval_ms")
                .and_then(ms)
                .unwrap_or(Duration::from_secs(5)),
        }
    });
    let gpu = h.get("gpu").map(|v| {
        let V::Obj(g) = v else { panic!("gpu {v:?}") };
        GpuHealth {
            interval: g
                .get("interval_ms")
                .and_then(ms)
                .unwrap_or(Duration::from_secs(5)),
            cuda_visible_devices: match g.get("cuda_visible_devices") {
                Some(V::Str(s)) => Some(s.clone()),
                _ => None,
            },
        }
    });
    HealthConfig { nic, gpu }
}

/// The config `text` describes (panics on anything else: test input only).
pub fn parse(text: &str) -> MonitorConfig {
    let mut p = P(text.as_bytes(), 0);
    let V::Obj(fields) = p.value() else {
        panic!("not an object: {text}")
    };
    let mut c = MonitorConfig::default();
    for (key, v) in &fields {
        match key.as_str() {
            "initial_heartbeat_timeout_ms" => c.timeouts.initial_heartbeat = ms(v),
            "heartbeat_timeout_ms" => c.timeouts.heartbeat = ms(v),
            "out_of_section_timeout_ms" => c.timeouts.out_of_section = ms(v),
            "section_timeouts_ms" => {
                let V::Obj(s) = v else {
                    panic!("sections {v:?}")
                };
                c.timeouts.sections = s.iter().map(|(k, v)| (k.clone(), ms(v).unwrap())).collect();
            }
            "check_interval_ms" => c.check_interval = ms(v).unwrap(),
            "termination_signal" => match v {
                V::Str(name) => c.termination_signal = signal(name),
                V::Num(n) => c.termination_signal = Signal::from_named_raw(*n as i32).unwrap(),
                other => panic!("termination_signal {other:?}"),
            },
            "kill_after_ms" => c.kill_after = ms(v),
            "skip_section_replies" => c.skip_section_replies = flag(v),
            "connection_wait_ms" => c.connection_wait = ms(v).unwrap(),
            "first_message_timeout_ms" => c.first_message_timeout = ms(v).unwrap(),
            "reply_timeout_ms" => c.reply_timeout = ms(v).unwrap(),
            "restart_expected" => c.restart_expected = flag(v),
            "heartbeat_region" => c.heartbeat_region = flag(v),
            "health_checks" => c.health = health(v),
            other => panic!("unknown field {other}"),
        }
    }
    c.validate().expect("a valid test config");
    c
}
