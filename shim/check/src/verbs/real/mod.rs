//! The libibverbs backend: rdma-sys 0.3 for the types, the library itself loaded on first
//! use (`libverbs.rs`).

#[cfg(feature = "cuda")]
pub mod cuda;
mod device;
mod dl;
mod libverbs;

use std::ffi::CStr;

use rdma_sys::ibv_device;

pub use device::RealDevice;
use libverbs::{verbs, Verbs};

use super::{VerbsError, VerbsProvider};

/// Lists and opens devices through `ibv_get_device_list`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealProvider;

/// The device list, freed on drop. NULL (which this machine returns with count 0) is "no
/// devices".
pub(crate) struct DeviceList {
    lib: &'static Verbs,
    list: *mut *mut ibv_device,
    count: usize,
}

impl DeviceList {
    pub(crate) fn get() -> Result<Self, VerbsError> {
        let lib = verbs()?;
        let mut n: i32 = 0;
        // SAFETY: n is a valid out-pointer; the returned list is freed in Drop.
        let list = unsafe { (lib.ibv_get_device_list)(&mut n) };
        if list.is_null() {
            return Err(VerbsError::NoDevices);
        }
        let me = Self {
            lib,
            list,
            count: usize::try_from(n).unwrap_or(0),
        };
        if me.count == 0 {
            return Err(VerbsError::NoDevices);
        }
        Ok(me)
    }

    pub(crate) fn entries(&self) -> Vec<(String, *mut ibv_device)> {
        (0..self.count)
            .filter_map(|i| {
                // SAFETY: i < count entries returned by ibv_get_device_list.
                let dev = unsafe { *self.list.add(i) };
                if dev.is_null() {
                    return None;
                }
                // SAFETY: dev is a live ibv_device; the name is a NUL-terminated string
                // owned by libibverbs.
                let name = unsafe { (self.lib.ibv_get_device_name)(dev) };
                if name.is_null() {
                    return None;
                }
                // SAFETY: checked non-NULL above; valid until the list is freed.
                let s = unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned();
                Some((s, dev))
            })
            .collect()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: list came from ibv_get_device_list and is freed once.
        unsafe { (self.lib.ibv_free_device_list)(self.list) };
    }
}

impl VerbsProvider for RealProvider {
    type Device = RealDevice;

    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        let l = DeviceList::get()?;
        Ok(l.entries().into_iter().map(|(n, _)| n).collect())
    }

    fn open(&self, name: &str) -> Result<RealDevice, VerbsError> {
        let list = DeviceList::get()?;
        let entries = list.entries();
        let dev = entries.iter().find(|(n, _)| n == name).map(|(_, d)| *d);
        let Some(dev) = dev else {
            return Err(VerbsError::DeviceNotFound {
                name: name.to_string(),
                available: entries
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        RealDevice::open(name, dev)
    }
}
