//! Naming the running test: `<binary>::<test>`.

/// The running test as `<binary>::<test>`. libtest runs each test on a thread named after it;
/// off such a thread (a bench's main, a thread the test spawned) the test part is the thread's
/// name or `?`.
pub fn current_test_key() -> String {
    let t = std::thread::current();
    format!("{}::{}", exe_name(), t.name().unwrap_or("?"))
}

/// The running binary's name without cargo's `-<16 hex>` suffix (`rund_ctr-0a1b…` → `rund_ctr`).
pub fn exe_name() -> String {
    let exe = std::env::current_exe().ok();
    let name = exe
        .as_deref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "?".to_owned());
    strip_hash(&name).to_owned()
}

pub(crate) fn strip_hash(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((base, h)) if h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()) => base,
        _ => name,
    }
}
