//! A shared library opened at run time (dlopen), closed on drop.

use std::ffi::{c_void, CStr};

pub(crate) struct Library {
    handle: *mut c_void,
}

// SAFETY: a dlopen handle is a process-wide token; dlsym and dlclose may be
// called on it from any thread.
unsafe impl Send for Library {}
// SAFETY: as above; the handle is never mutated through a shared reference.
unsafe impl Sync for Library {}

impl Library {
    /// `dlopen(soname, RTLD_NOW | RTLD_LOCAL)`; the error is dlerror's text.
    pub(crate) fn open(soname: &CStr) -> Result<Self, String> {
        // SAFETY: soname is a valid C string; dlopen has no other preconditions.
        let handle = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(last_error());
        }
        Ok(Self { handle })
    }

    /// The address of `name`, or None when the library lacks it.
    pub(crate) fn symbol(&self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: handle is live (closed only on drop) and name a valid C string.
        let p = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: handle came from dlopen and is closed once; whoever used its
        // symbols has released what they made with them first.
        unsafe { libc::dlclose(self.handle) };
    }
}

fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a valid C string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown dlopen error".to_string();
    }
    // SAFETY: a non-NULL C string from dlerror, read before any other dl call.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}
