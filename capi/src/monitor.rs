//! The rank's monitor client for C (`nodeipc_monitor::MonitorClient`).

use std::ffi::c_char;

use ::nodeipc_monitor::{MonitorClient, MonitorStatus, RankInfo, RankState};
use nodeipc_monitor_host::StatusJson;

use super::args::{
    self, Handle, bytes, bytes_mut, handle, handle_mut, handle_type, millis, out, text,
};
use super::status::{Failure, NODEIPC_ERR_TOO_LARGE, Outcome, guard, nodeipc_status};

/// A rank's connection to its monitor. One thread at a time, every call
/// included (a thread that beats while another calls must hold a lock).
pub struct nodeipc_monitor {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    client: MonitorClient,
}

handle_type!(nodeipc_monitor, 0x4e49_4d4f_4e49_5452);

/// Where the monitor's state machine is (`nodeipc_monitor_status.state`).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum nodeipc_monitor_state {
    /// No rank registered yet.
    NODEIPC_MONITOR_WAITING = 0,
    /// Registered, no heartbeat yet.
    NODEIPC_MONITOR_INITIALIZED = 1,
    /// Heartbeating.
    NODEIPC_MONITOR_RUNNING = 2,
    /// A timeout fired.
    NODEIPC_MONITOR_TIMED_OUT = 3,
    /// The rank was terminated.
    NODEIPC_MONITOR_TERMINATED = 4,
    /// Waiting for a restarted rank.
    NODEIPC_MONITOR_RESTARTING = 5,
    /// The monitor is shutting down.
    NODEIPC_MONITOR_CLOSED = 6,
    /// A state this library does not know.
    NODEIPC_MONITOR_UNKNOWN = 7,
}

/// The main figures of a monitor's status; `nodeipc_monitor_status_json`
/// gives all of it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nodeipc_monitor_status {
    /// Where the state machine is.
    pub state: nodeipc_monitor_state,
    /// Heartbeats since `Init` (socket and shared-memory ones).
    pub heartbeats: u64,
    /// Milliseconds since the last heartbeat (-1: none yet).
    pub ms_since_last_heartbeat: i64,
    /// Sections open now.
    pub open_sections: u32,
}

fn state_of(s: RankState) -> nodeipc_monitor_state {
    use nodeipc_monitor_state::*;
    match s {
        RankState::Waiting => NODEIPC_MONITOR_WAITING,
        RankState::Initialized => NODEIPC_MONITOR_INITIALIZED,
        RankState::Running => NODEIPC_MONITOR_RUNNING,
        RankState::TimedOut => NODEIPC_MONITOR_TIMED_OUT,
        RankState::Terminated => NODEIPC_MONITOR_TERMINATED,
        RankState::Restarting => NODEIPC_MONITOR_RESTARTING,
        RankState::Closed => NODEIPC_MONITOR_CLOSED,
        #[allow(unreachable_patterns)]
        _ => NODEIPC_MONITOR_UNKNOWN,
    }
}

/// Connects to the monitor's rank socket at `path`, retrying up to
/// `timeout_ms` while nobody listens yet, and checks the monitor runs as
/// our uid. `timeout_ms` (negative: forever; 0 refused) also bounds every
/// later call's wait for its reply.
///
/// # Safety
/// `path` is a NUL-terminated string; `out_monitor` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_connect(
    path: *const c_char,
    timeout_ms: i64,
    out_monitor: *mut *mut nodeipc_monitor,
) -> nodeipc_status {
    guard("nodeipc_monitor_connect", || {
        // SAFETY: the caller's contract above.
        let (path, slot) = unsafe { (text(path, "path")?, out(out_monitor, "out_monitor")?) };
        let client = MonitorClient::connect(path, millis(timeout_ms))?;
        args::publish(
            nodeipc_monitor {
                magic: nodeipc_monitor::MAGIC,
                born: nodeipc_fdpass::ForkGeneration::current(),
                client,
            },
            slot,
        );
        Ok(())
    })
}

/// Registers this process as the rank (`Init`). With `heartbeat_region`,
/// asks for the shared-memory region `nodeipc_monitor_heartbeat_fast` beats
/// in; `*granted` (may be NULL) says whether the monitor gave it.
///
/// # Safety
/// `monitor` is a live monitor handle; `granted` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_init(
    monitor: *mut nodeipc_monitor,
    global_rank: u32,
    local_rank: u32,
    heartbeat_region: bool,
    granted: *mut bool,
) -> nodeipc_status {
    guard("nodeipc_monitor_init", || {
        // SAFETY: the caller's contract above.
        let m = unsafe { handle_mut(monitor)? };
        let rank = RankInfo::this_process(global_rank, local_rank);
        if heartbeat_region {
            m.client.init_with_heartbeat_region(&rank)?;
        } else {
            m.client.init(&rank)?;
        }
        // SAFETY: NULL or writable, per the contract above.
        if let Some(g) = unsafe { granted.as_mut() } {
            *g = m.client.has_heartbeat_region();
        }
        Ok(())
    })
}

/// One heartbeat over the socket, answered by the monitor. `state` (`len`
/// bytes, at most 16 KiB; NULL with 0 for none) is reported in the status.
///
/// # Safety
/// `monitor` is a live monitor handle; `state` points at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_heartbeat(
    monitor: *mut nodeipc_monitor,
    state: *const u8,
    len: usize,
) -> nodeipc_status {
    guard("nodeipc_monitor_heartbeat", || {
        // SAFETY: the caller's contract above.
        let (m, state) = unsafe { (handle_mut(monitor)?, bytes(state, len, "state")?) };
        if state.is_empty() {
            m.client.heartbeat()?;
        } else {
            m.client.heartbeat_with_state(state)?;
        }
        Ok(())
    })
}

/// One heartbeat through the shared-memory region: one atomic increment, no
/// system call. `NODEIPC_ERR_INVALID_ARGUMENT` if `Init` got no region.
///
/// # Safety
/// `monitor` is a live monitor handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_heartbeat_fast(
    monitor: *const nodeipc_monitor,
) -> nodeipc_status {
    guard("nodeipc_monitor_heartbeat_fast", || {
        // SAFETY: the caller's contract above.
        Ok(unsafe { handle(monitor)? }.client.heartbeat_fast()?)
    })
}

/// Opens section `name`; its timeout, if configured, starts.
///
/// # Safety
/// `monitor` is a live monitor handle; `name` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_start_section(
    monitor: *mut nodeipc_monitor,
    name: *const c_char,
) -> nodeipc_status {
    guard("nodeipc_monitor_start_section", || {
        // SAFETY: the caller's contract above.
        let (m, name) = unsafe { (handle_mut(monitor)?, text(name, "name")?) };
        Ok(m.client.start_section(name)?)
    })
}

/// Closes section `name`.
///
/// # Safety
/// As `nodeipc_monitor_start_section`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_end_section(
    monitor: *mut nodeipc_monitor,
    name: *const c_char,
) -> nodeipc_status {
    guard("nodeipc_monitor_end_section", || {
        // SAFETY: the caller's contract above.
        let (m, name) = unsafe { (handle_mut(monitor)?, text(name, "name")?) };
        Ok(m.client.end_section(name)?)
    })
}

/// Closes every open section.
///
/// # Safety
/// `monitor` is a live monitor handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_end_all_sections(
    monitor: *mut nodeipc_monitor,
) -> nodeipc_status {
    guard("nodeipc_monitor_end_all_sections", || {
        // SAFETY: the caller's contract above.
        Ok(unsafe { handle_mut(monitor)? }.client.end_all_sections()?)
    })
}

fn query(monitor: &mut nodeipc_monitor) -> Outcome<MonitorStatus> {
    Ok(monitor.client.status()?)
}

/// The monitor's status, in figures.
///
/// # Safety
/// `monitor` is a live monitor handle; `status` points at a writable struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_get_status(
    monitor: *mut nodeipc_monitor,
    status: *mut nodeipc_monitor_status,
) -> nodeipc_status {
    guard("nodeipc_monitor_get_status", || {
        // SAFETY: the caller's contract above.
        let (m, slot) = unsafe { (handle_mut(monitor)?, out(status, "status")?) };
        let s = query(m)?;
        *slot = nodeipc_monitor_status {
            state: state_of(s.state),
            heartbeats: s.heartbeats,
            ms_since_last_heartbeat: s
                .ms_since_last_heartbeat
                .map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX)),
            open_sections: u32::try_from(s.open_sections.len()).unwrap_or(u32::MAX),
        };
        Ok(())
    })
}

/// The monitor's whole status as JSON (what `nodeipc monitor status`
/// prints), NUL-terminated, into `buf` of `cap` bytes; `*len` is its length
/// without the NUL (also when `buf` is too small: `NODEIPC_ERR_TOO_LARGE`).
///
/// # Safety
/// `monitor` is a live monitor handle; `buf` points at `cap` writable bytes;
/// `len` at a writable size_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_status_json(
    monitor: *mut nodeipc_monitor,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_monitor_status_json", || {
        // SAFETY: the caller's contract above.
        let (m, buf, len) = unsafe {
            (
                handle_mut(monitor)?,
                bytes_mut(buf.cast(), cap, "buf")?,
                out(len, "len")?,
            )
        };
        let json = query(m)?.to_json();
        *len = json.len();
        if json.len() >= buf.len() {
            return Err(Failure::new(
                NODEIPC_ERR_TOO_LARGE,
                format!(
                    "the status takes {} bytes and a NUL; buf holds {}",
                    json.len(),
                    buf.len()
                ),
            ));
        }
        buf[..json.len()].copy_from_slice(json.as_bytes());
        buf[json.len()] = 0;
        Ok(())
    })
}

/// Disconnects (the monitor forgets the rank) and frees the handle. NULL is
/// a no-op.
///
/// # Safety
/// `monitor` is NULL or a live monitor handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_monitor_free(monitor: *mut nodeipc_monitor) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_monitor_free", || unsafe { args::free(monitor) })
}
