//! NVML, loaded at run time (`libnvidia-ml.so.1`): no build or link
//! dependency on the driver. A machine without it gets
//! [`Nvml::load`]'s error once, at start, and never a failure later for
//! that reason.
//!
//! Not exercised on a GPU in this tree's tests (no GPU on the machines
//! that run them): only the "unavailable" path runs here; the rest follows
//! NVML's documented signatures.

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_uint, c_ulonglong, c_void};

use crate::health::gpu::{GpuId, GpuProbe};

type Ret = c_int;
type Device = *mut c_void;
type EventSet = *mut c_void;

const SUCCESS: Ret = 0;
const ERROR_NOT_SUPPORTED: Ret = 3;
const ERROR_TIMEOUT: Ret = 10;
const ERROR_GPU_IS_LOST: Ret = 15;
/// `nvmlEventTypeXidCriticalError`.
const EVENT_XID_CRITICAL: c_ulonglong = 0x8;
/// `NVML_MEMORY_ERROR_TYPE_UNCORRECTED`.
const ECC_UNCORRECTED: c_int = 1;
/// `NVML_VOLATILE_ECC`: since the driver loaded.
const ECC_VOLATILE: c_int = 0;
/// `NVML_TEMPERATURE_GPU`.
const TEMPERATURE_GPU: c_int = 0;
/// `NVML_FEATURE_ENABLED`.
const ENABLED: c_int = 1;

/// `nvmlEventData_t`.
#[repr(C)]
struct EventData {
    device: Device,
    event_type: c_ulonglong,
    event_data: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

type InitFn = unsafe extern "C" fn() -> Ret;
type ByIndexFn = unsafe extern "C" fn(c_uint, *mut Device) -> Ret;
type ByUuidFn = unsafe extern "C" fn(*const c_char, *mut Device) -> Ret;
type TotalEccFn = unsafe extern "C" fn(Device, c_int, c_int, *mut c_ulonglong) -> Ret;
type PagesPendingFn = unsafe extern "C" fn(Device, *mut c_int) -> Ret;
type TemperatureFn = unsafe extern "C" fn(Device, c_int, *mut c_uint) -> Ret;
type EventSetCreateFn = unsafe extern "C" fn(*mut EventSet) -> Ret;
type RegisterEventsFn = unsafe extern "C" fn(Device, c_ulonglong, EventSet) -> Ret;
type EventSetWaitFn = unsafe extern "C" fn(EventSet, *mut EventData, c_uint) -> Ret;
type EventSetFreeFn = unsafe extern "C" fn(EventSet) -> Ret;

/// The NVML entry points used, resolved once.
struct Api {
    shutdown: InitFn,
    by_index: ByIndexFn,
    by_uuid: ByUuidFn,
    total_ecc: TotalEccFn,
    pages_pending: PagesPendingFn,
    temperature: TemperatureFn,
    event_set_create: EventSetCreateFn,
    register_events: RegisterEventsFn,
    event_set_wait: EventSetWaitFn,
    event_set_free: EventSetFreeFn,
}

/// What is kept per device between checks.
struct DeviceState {
    handle: Device,
    /// Uncorrected volatile ECC errors at the first check.
    ecc_baseline: Option<u64>,
    /// Registered for XID events, when the device supports them.
    events: Option<EventSet>,
}

/// NVML, initialised; shut down on drop.
pub(crate) struct Nvml {
    library: *mut c_void,
    api: Api,
    devices: HashMap<GpuId, DeviceState>,
}

// SAFETY: NVML's handles and event sets are process-wide, documented as
// thread-safe, and used by one thread at a time (the monitor's loop owns
// the check); the library handle is only passed to dlclose.
unsafe impl Send for Nvml {}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml")
            .field("devices", &self.devices.len())
            .finish()
    }
}

/// The library's file name, as the driver installs it.
pub(crate) const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

impl Nvml {
    /// Loads `libnvidia-ml.so.1` and initialises NVML.
    ///
    /// # Errors
    /// Why NVML is unavailable (the library is not there, a symbol is
    /// missing, `nvmlInit_v2` failed), for people: the check is then not run.
    pub(crate) fn load() -> Result<Nvml, String> {
        let name = CString::new(NVML_LIBRARY).map_err(|e| e.to_string())?;
        // SAFETY: a valid C string; dlopen runs the library's initialisers,
        // which for NVML touch only its own state.
        let library = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if library.is_null() {
            return Err(format!("{NVML_LIBRARY} not loaded: {}", dl_error()));
        }
        match Self::resolve(library) {
            Ok(nvml) => Ok(nvml),
            Err(e) => {
                // SAFETY: the handle dlopen gave us, closed once.
                unsafe { libc::dlclose(library) };
                Err(e)
            }
        }
    }

    fn resolve(library: *mut c_void) -> Result<Nvml, String> {
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                let symbol = dlsym(library, $name)?;
                // SAFETY: NVML exports `$name` with signature `$ty` (NVML
                // API reference); a function pointer has the size of the
                // data pointer dlsym returns, and it is not null.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(symbol) }
            }};
        }
        let init = sym!("nvmlInit_v2", InitFn);
        let api = Api {
            shutdown: sym!("nvmlShutdown", InitFn),
            by_index: sym!("nvmlDeviceGetHandleByIndex_v2", ByIndexFn),
            by_uuid: sym!("nvmlDeviceGetHandleByUUID", ByUuidFn),
            total_ecc: sym!("nvmlDeviceGetTotalEccErrors", TotalEccFn),
            pages_pending: sym!("nvmlDeviceGetRetiredPagesPendingStatus", PagesPendingFn),
            temperature: sym!("nvmlDeviceGetTemperature", TemperatureFn),
            event_set_create: sym!("nvmlEventSetCreate", EventSetCreateFn),
            register_events: sym!("nvmlDeviceRegisterEvents", RegisterEventsFn),
            event_set_wait: sym!("nvmlEventSetWait_v2", EventSetWaitFn),
            event_set_free: sym!("nvmlEventSetFree", EventSetFreeFn),
        };
        // SAFETY: nvmlInit_v2 takes nothing and may be called from any thread.
        let rc = unsafe { init() };
        if rc != SUCCESS {
            return Err(format!("nvmlInit_v2 failed: NVML error {rc}"));
        }
        Ok(Nvml {
            library,
            api,
            devices: HashMap::new(),
        })
    }

    fn device(&mut self, gpu: &GpuId) -> Result<&mut DeviceState, String> {
        if !self.devices.contains_key(gpu) {
            let mut handle: Device = std::ptr::null_mut();
            let rc = match gpu {
                // SAFETY: `handle` is a valid out-pointer for the call.
                GpuId::Index(i) => unsafe { (self.api.by_index)(*i, &mut handle) },
                GpuId::Uuid(u) => {
                    let uuid = CString::new(u.as_str()).map_err(|e| e.to_string())?;
                    // SAFETY: a valid C string and out-pointer for the call.
                    unsafe { (self.api.by_uuid)(uuid.as_ptr(), &mut handle) }
                }
            };
            if rc != SUCCESS {
                return Err(format!("does not answer (handle: NVML error {rc})"));
            }
            let mut set: EventSet = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the set is freed in Drop.
            let events = match unsafe { (self.api.event_set_create)(&mut set) } {
                SUCCESS => {
                    // SAFETY: a handle and a set NVML gave us.
                    let rc = unsafe { (self.api.register_events)(handle, EVENT_XID_CRITICAL, set) };
                    if rc == SUCCESS {
                        Some(set)
                    } else {
                        // SAFETY: the set just created, freed once.
                        unsafe { (self.api.event_set_free)(set) };
                        None
                    }
                }
                _ => None,
            };
            self.devices.insert(
                gpu.clone(),
                DeviceState {
                    handle,
                    ecc_baseline: None,
                    events,
                },
            );
        }
        self.devices
            .get_mut(gpu)
            .ok_or_else(|| "device state lost".to_owned())
    }
}

impl GpuProbe for Nvml {
    fn check(&mut self, gpu: &GpuId) -> Result<(), String> {
        let api_temperature = self.api.temperature;
        let api_pending = self.api.pages_pending;
        let api_ecc = self.api.total_ecc;
        let api_wait = self.api.event_set_wait;
        let device = self.device(gpu)?;
        let mut celsius: c_uint = 0;
        // SAFETY: a handle NVML gave us and a valid out-pointer.
        match unsafe { api_temperature(device.handle, TEMPERATURE_GPU, &mut celsius) } {
            SUCCESS | ERROR_NOT_SUPPORTED => {}
            ERROR_GPU_IS_LOST => return Err("is lost (NVML_ERROR_GPU_IS_LOST)".to_owned()),
            rc => return Err(format!("does not answer (temperature: NVML error {rc})")),
        }
        let mut pending: c_int = 0;
        // SAFETY: as above.
        if unsafe { api_pending(device.handle, &mut pending) } == SUCCESS && pending == ENABLED {
            return Err("has retired pages pending (a reset is needed)".to_owned());
        }
        let mut ecc: c_ulonglong = 0;
        // SAFETY: as above.
        if unsafe { api_ecc(device.handle, ECC_UNCORRECTED, ECC_VOLATILE, &mut ecc) } == SUCCESS {
            match device.ecc_baseline {
                None => device.ecc_baseline = Some(ecc),
                Some(base) if ecc > base => {
                    return Err(format!(
                        "{} new uncorrected ECC error(s) ({ecc} since the driver loaded)",
                        ecc - base
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some(set) = device.events {
            // Drain what is pending without waiting (timeout 0).
            for _ in 0..64 {
                let mut data = EventData {
                    device: std::ptr::null_mut(),
                    event_type: 0,
                    event_data: 0,
                    gpu_instance_id: 0,
                    compute_instance_id: 0,
                };
                // SAFETY: a set NVML gave us and a valid out-pointer.
                match unsafe { api_wait(set, &mut data, 0) } {
                    SUCCESS if data.event_type == EVENT_XID_CRITICAL => {
                        return Err(format!("reported XID {}", data.event_data));
                    }
                    SUCCESS => {}
                    ERROR_TIMEOUT => break,
                    rc => return Err(format!("event wait: NVML error {rc}")),
                }
            }
        }
        Ok(())
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        for device in self.devices.values() {
            if let Some(set) = device.events {
                // SAFETY: a set NVML gave us, freed once.
                unsafe { (self.api.event_set_free)(set) };
            }
        }
        // SAFETY: NVML was initialised by `load`; then the library handle
        // dlopen gave us is closed once, after its last use.
        unsafe {
            (self.api.shutdown)();
            libc::dlclose(self.library);
        }
    }
}

fn dlsym(library: *mut c_void, name: &str) -> Result<*mut c_void, String> {
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: a live handle from dlopen and a valid C string.
    let symbol = unsafe { libc::dlsym(library, c_name.as_ptr()) };
    if symbol.is_null() {
        Err(format!("{NVML_LIBRARY} has no {name}: {}", dl_error()))
    } else {
        Ok(symbol)
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a C string valid until the next dl*
    // call on this thread; it is copied out at once.
    unsafe {
        let text = libc::dlerror();
        if text.is_null() {
            "unknown dlerror".to_owned()
        } else {
            std::ffi::CStr::from_ptr(text)
                .to_string_lossy()
                .into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_is_reported_unavailable_where_the_driver_is_not_installed() {
        match Nvml::load() {
            Err(why) => assert!(why.contains(NVML_LIBRARY), "{why}"),
            // A machine with the driver: the real path, on device 0.
            Ok(mut nvml) => {
                let answer = nvml.check(&GpuId::Index(0));
                assert!(answer.is_ok(), "GPU 0 on this machine: {answer:?}");
            }
        }
    }
}
