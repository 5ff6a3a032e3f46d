//! NICs through sysfs: an Ethernet-style device's `operstate`, every port
//! `state` of an InfiniBand device. The sysfs root is configurable so that
//! tests drive the check from a fixture directory.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::Result;
use nodeipc_monitor::{HealthCheck, RankContext};

use crate::config_error;

/// Longest sysfs attribute read: they are a word or two.
const MAX_ATTRIBUTE: u64 = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Nic {
    /// `<root>/class/net/<name>`.
    Net(String),
    /// `<root>/class/infiniband/<name>`.
    Infiniband(String),
}

/// Fails when a named NIC is not up: `operstate` other than `up` (or
/// `unknown`, which drivers without carrier detection and the loopback
/// report), or an InfiniBand port whose `state` is not `ACTIVE`. A device
/// that disappears fails too.
#[derive(Debug)]
pub(crate) struct NicCheck {
    root: PathBuf,
    nics: Vec<Nic>,
}

impl NicCheck {
    /// Checks `names` under `sysfs_root` (`/sys` on a real machine): each
    /// must exist now, as `class/net/<name>` or `class/infiniband/<name>`.
    ///
    /// # Errors
    /// [`Error::Config`] naming a device that is not there or a name that
    /// is not a plain file name.
    pub(crate) fn new(sysfs_root: impl Into<PathBuf>, names: &[String]) -> Result<NicCheck> {
        let root = sysfs_root.into();
        let mut nics = Vec::new();
        for name in names {
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(config_error(format!(
                    "NIC name {name:?} is not a device name"
                )));
            }
            if root.join("class/net").join(name).exists() {
                nics.push(Nic::Net(name.clone()));
            } else if root.join("class/infiniband").join(name).exists() {
                nics.push(Nic::Infiniband(name.clone()));
            } else {
                return Err(config_error(format!(
                    "NIC {name:?} is neither in {} nor in {}",
                    root.join("class/net").display(),
                    root.join("class/infiniband").display()
                )));
            }
        }
        Ok(NicCheck { root, nics })
    }

    /// Looks at every device once; the first one down, described.
    ///
    /// # Errors
    /// Which device or port is not up, and what sysfs says.
    pub(crate) fn probe(&self) -> std::result::Result<(), String> {
        for nic in &self.nics {
            match nic {
                Nic::Net(name) => {
                    let path = self.root.join("class/net").join(name).join("operstate");
                    let state = read_attribute(&path)?;
                    if state != "up" && state != "unknown" {
                        return Err(format!("NIC {name} is {state} ({})", path.display()));
                    }
                }
                Nic::Infiniband(name) => {
                    let ports = self.root.join("class/infiniband").join(name).join("ports");
                    let entries = std::fs::read_dir(&ports)
                        .map_err(|e| format!("InfiniBand {name}: {}: {e}", ports.display()))?;
                    let mut seen = 0;
                    for entry in entries.flatten() {
                        seen += 1;
                        let path = entry.path().join("state");
                        let state = read_attribute(&path)?;
                        // "4: ACTIVE"
                        if state.rsplit(' ').next() != Some("ACTIVE") {
                            return Err(format!(
                                "InfiniBand {name} port {} is {state:?} ({})",
                                entry.file_name().to_string_lossy(),
                                path.display()
                            ));
                        }
                    }
                    if seen == 0 {
                        return Err(format!(
                            "InfiniBand {name} has no ports in {}",
                            ports.display()
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl HealthCheck for NicCheck {
    fn name(&self) -> &str {
        "NIC"
    }

    fn check(&mut self, _rank: &RankContext<'_>) -> std::result::Result<(), String> {
        self.probe()
    }
}

/// A sysfs attribute, trimmed, at most [`MAX_ATTRIBUTE`] bytes read.
fn read_attribute(path: &Path) -> std::result::Result<String, String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_ATTRIBUTE).read_to_string(&mut text))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text.trim().to_owned())
}
