//! Writing the JSON form of [`MonitorConfig`] by hand: a spawned monitor
//! (`nodeipc monitor serve --config FILE`) reads it, and writing needs no
//! serde, so a build without the `json` feature can still start one.

use std::fmt::Write;

use super::{ms, signal_name};
use crate::MonitorConfig;

/// `text` as a JSON string literal: quotes, backslashes and every control
/// character escaped.
fn string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes `"name": value` lines at one indentation, commas between.
struct Object<'a> {
    out: &'a mut String,
    indent: usize,
    first: bool,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut String, indent: usize) -> Object<'a> {
        out.push('{');
        Object {
            out,
            indent,
            first: true,
        }
    }

    fn key(&mut self, name: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('\n');
        self.out.push_str(&" ".repeat(self.indent + 2));
        string(self.out, name);
        self.out.push_str(": ");
        self.out
    }

    fn raw(&mut self, name: &str, value: &str) {
        self.key(name).push_str(value);
    }

    fn opt(&mut self, name: &str, value: Option<u64>) {
        let value = value.map_or_else(|| "null".to_owned(), |v| v.to_string());
        self.raw(name, &value);
    }

    fn close(self) {
        if !self.first {
            self.out.push('\n');
            self.out.push_str(&" ".repeat(self.indent));
        }
        self.out.push('}');
    }
}

impl MonitorConfig {
    /// The JSON form, which `from_json` (feature `json`) reads back. Needs
    /// no feature: written by hand.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        let mut o = Object::open(&mut out, 0);
        let t = &self.timeouts;
        o.opt("initial_heartbeat_timeout_ms", t.initial_heartbeat.map(ms));
        o.opt("heartbeat_timeout_ms", t.heartbeat.map(ms));
        o.opt("out_of_section_timeout_ms", t.out_of_section.map(ms));
        {
            let out = o.key("section_timeouts_ms");
            let mut sections = Object::open(out, 2);
            for (name, timeout) in &t.sections {
                sections.raw(name, &ms(*timeout).to_string());
            }
            sections.close();
        }
        o.raw("check_interval_ms", &ms(self.check_interval).to_string());
        string(
            o.key("termination_signal"),
            &signal_name(self.termination_signal),
        );
        o.opt("kill_after_ms", self.kill_after.map(ms));
        o.raw(
            "skip_section_replies",
            &self.skip_section_replies.to_string(),
        );
        o.raw("connection_wait_ms", &ms(self.connection_wait).to_string());
        o.raw(
            "first_message_timeout_ms",
            &ms(self.first_message_timeout).to_string(),
        );
        o.raw("reply_timeout_ms", &ms(self.reply_timeout).to_string());
        o.raw("restart_expected", &self.restart_expected.to_string());
        o.raw("heartbeat_region", &self.heartbeat_region.to_string());
        if !self.health.is_empty() {
            let out = o.key("health_checks");
            let mut health = Object::open(out, 2);
            if let Some(nic) = &self.health.nic {
                let out = health.key("nic");
                let mut n = Object::open(out, 4);
                {
                    let out = n.key("devices");
                    out.push('[');
                    for (i, device) in nic.devices.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        string(out, device);
                    }
                    out.push(']');
                }
                // UTF-8 by `validate`; a lossy form would name another path.
                string(n.key("sysfs_root"), &nic.sysfs_root.to_string_lossy());
                n.raw("interval_ms", &ms(nic.interval).to_string());
                n.close();
            }
            if let Some(gpu) = &self.health.gpu {
                let out = health.key("gpu");
                let mut g = Object::open(out, 4);
                g.raw("interval_ms", &ms(gpu.interval).to_string());
                match &gpu.cuda_visible_devices {
                    Some(list) => string(g.key("cuda_visible_devices"), list),
                    None => g.raw("cuda_visible_devices", "null"),
                }
                g.close();
            }
            health.close();
        }
        o.close();
        out
    }
}
