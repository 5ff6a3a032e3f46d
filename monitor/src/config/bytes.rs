//! The binary form of [`MonitorConfig`] that [`spawn_monitor`](crate::spawn_monitor)
//! hands to a re-executed monitor in its environment, as hex: the same
//! executable on both sides, so no JSON (and no `json` feature) is needed.
//! Decoded as untrusted input all the same (the environment is the
//! caller's) and validated before use.

use std::path::PathBuf;
use std::time::Duration;

use nodeipc_fdpass::Signal;

use super::{Timeouts, ms, signal_by_number};
use crate::codec::{Reader, Writer};
use crate::limits::{MAX_SECTION_NAME, MAX_SECTIONS};
use crate::{Error, GpuHealth, HealthConfig, MAX_NICS, MonitorConfig, NicHealth, Result};

const MAGIC: &[u8; 4] = b"NIMC";
const VERSION: u16 = 1;
const WHAT: &str = "monitor configuration";
/// Longest string field (a path, a device list).
const MAX_TEXT: usize = 4096;

fn duration(r: &mut Reader<'_>, field: &str) -> std::result::Result<Duration, String> {
    r.u64(field).map(Duration::from_millis)
}

fn opt_duration(r: &mut Reader<'_>, field: &str) -> std::result::Result<Option<Duration>, String> {
    Ok(r.opt_u64(field)?.map(Duration::from_millis))
}

impl MonitorConfig {
    /// The binary form, as lowercase hex.
    pub(crate) fn to_hex(&self) -> String {
        let mut w = Writer::new(MAGIC, VERSION);
        let t = &self.timeouts;
        w.opt_u64(t.initial_heartbeat.map(ms));
        w.opt_u64(t.heartbeat.map(ms));
        w.opt_u64(t.out_of_section.map(ms));
        w.len(t.sections.len());
        for (name, timeout) in &t.sections {
            w.str(name);
            w.u64(ms(*timeout));
        }
        w.u64(ms(self.check_interval));
        w.i32(self.termination_signal.as_raw());
        w.opt_u64(self.kill_after.map(ms));
        w.bool(self.skip_section_replies);
        w.u64(ms(self.connection_wait));
        w.u64(ms(self.first_message_timeout));
        w.u64(ms(self.reply_timeout));
        w.bool(self.restart_expected);
        w.bool(self.heartbeat_region);
        match &self.health.nic {
            None => w.bool(false),
            Some(nic) => {
                w.bool(true);
                w.len(nic.devices.len());
                for device in &nic.devices {
                    w.str(device);
                }
                w.bytes(nic.sysfs_root.as_os_str().as_encoded_bytes());
                w.u64(ms(nic.interval));
            }
        }
        match &self.health.gpu {
            None => w.bool(false),
            Some(gpu) => {
                w.bool(true);
                w.u64(ms(gpu.interval));
                match &gpu.cuda_visible_devices {
                    None => w.bool(false),
                    Some(list) => {
                        w.bool(true);
                        w.str(list);
                    }
                }
            }
        }
        let bytes = w.finish();
        let mut hex = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        hex
    }

    /// Reads [`to_hex`](MonitorConfig::to_hex)'s output back, validated.
    ///
    /// # Errors
    /// [`Error::Config`] naming what does not read, or the invalid value.
    pub(crate) fn from_hex(hex: &str) -> Result<MonitorConfig> {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let pairs = hex.as_bytes().chunks(2);
        let mut bytes = Vec::with_capacity(hex.len() / 2);
        for pair in pairs {
            match pair {
                [hi, lo] => match (digit(*hi), digit(*lo)) {
                    (Some(hi), Some(lo)) => bytes.push(hi << 4 | lo),
                    _ => return Err(Error::config(format!("{WHAT}: not lowercase hex"))),
                },
                _ => {
                    return Err(Error::config(format!(
                        "{WHAT}: an odd number of hex digits"
                    )));
                }
            }
        }
        let config = decode(&bytes).map_err(Error::config)?;
        config.validate()?;
        Ok(config)
    }
}

fn decode(bytes: &[u8]) -> std::result::Result<MonitorConfig, String> {
    let (version, mut r) = Reader::open(bytes, MAGIC, WHAT)?;
    if version != VERSION {
        return Err(format!(
            "{WHAT} version {version}; this build reads {VERSION}"
        ));
    }
    let initial_heartbeat = opt_duration(&mut r, "initial heartbeat timeout")?;
    let heartbeat = opt_duration(&mut r, "heartbeat timeout")?;
    let out_of_section = opt_duration(&mut r, "out-of-section timeout")?;
    let n = r.len("section timeouts", MAX_SECTIONS, 13)?;
    let mut sections = std::collections::BTreeMap::new();
    for _ in 0..n {
        let name = r.string("section name", MAX_SECTION_NAME)?;
        sections.insert(name, duration(&mut r, "section timeout")?);
    }
    let check_interval = duration(&mut r, "check interval")?;
    let signal = r.i32("termination signal")?;
    let termination_signal: Signal = signal_by_number(signal)?;
    let kill_after = opt_duration(&mut r, "kill_after")?;
    let skip_section_replies = r.bool("skip_section_replies")?;
    let connection_wait = duration(&mut r, "connection wait")?;
    let first_message_timeout = duration(&mut r, "first message timeout")?;
    let reply_timeout = duration(&mut r, "reply timeout")?;
    let restart_expected = r.bool("restart_expected")?;
    let heartbeat_region = r.bool("heartbeat_region")?;
    let nic = match r.bool("NIC check")? {
        false => None,
        true => {
            let n = r.len("NIC devices", MAX_NICS, 5)?;
            let mut devices = Vec::with_capacity(n);
            for _ in 0..n {
                devices.push(r.string("NIC device", MAX_TEXT)?);
            }
            let root = r.bytes("sysfs root", MAX_TEXT)?;
            let root = std::str::from_utf8(root)
                .map_err(|e| format!("{WHAT}: sysfs root is not UTF-8: {e}"))?;
            Some(NicHealth {
                devices,
                sysfs_root: PathBuf::from(root),
                interval: duration(&mut r, "NIC check interval")?,
            })
        }
    };
    let gpu = match r.bool("GPU check")? {
        false => None,
        true => Some(GpuHealth {
            interval: duration(&mut r, "GPU check interval")?,
            cuda_visible_devices: match r.bool("cuda_visible_devices")? {
                false => None,
                true => Some(r.string("cuda_visible_devices", MAX_TEXT)?),
            },
        }),
    };
    r.end()?;
    Ok(MonitorConfig {
        timeouts: Timeouts {
            initial_heartbeat,
            heartbeat,
            out_of_section,
            sections,
        },
        check_interval,
        termination_signal,
        kill_after,
        skip_section_replies,
        connection_wait,
        first_message_timeout,
        reply_timeout,
        restart_expected,
        heartbeat_region,
        health: HealthConfig { nic, gpu },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_round_trips_through_hex() {
        let mut config = MonitorConfig {
            timeouts: Timeouts {
                initial_heartbeat: Some(Duration::from_millis(1500)),
                heartbeat: None,
                out_of_section: Some(Duration::from_secs(9)),
                sections: [("step \"1\"\n".to_owned(), Duration::from_millis(7))].into(),
            },
            check_interval: Duration::from_millis(250),
            termination_signal: Signal::TERM,
            kill_after: Some(Duration::from_secs(2)),
            skip_section_replies: true,
            restart_expected: false,
            heartbeat_region: false,
            ..MonitorConfig::default()
        };
        config.health = HealthConfig {
            nic: Some(NicHealth {
                devices: vec!["eth0".into(), "mlx5_0".into()],
                sysfs_root: PathBuf::from("/tmp/fixture"),
                interval: Duration::from_millis(300),
            }),
            gpu: Some(GpuHealth {
                interval: Duration::from_secs(10),
                cuda_visible_devices: Some("GPU-abc,3".into()),
            }),
        };
        for c in [MonitorConfig::default(), config] {
            assert_eq!(MonitorConfig::from_hex(&c.to_hex()).unwrap(), c);
        }
    }

    #[test]
    fn bad_hex_and_truncations_are_errors_naming_what() {
        let hex = MonitorConfig::default().to_hex();
        for cut in (0..hex.len()).step_by(2) {
            let e = MonitorConfig::from_hex(&hex[..cut])
                .unwrap_err()
                .to_string();
            assert!(e.contains(WHAT), "{e}");
        }
        let e = MonitorConfig::from_hex("zz").unwrap_err().to_string();
        assert!(e.contains("hex"), "{e}");
        let e = MonitorConfig::from_hex(&format!("{hex}00"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("after the last field"), "{e}");
    }
}
