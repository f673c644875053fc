//! What a shim or agent process keeps mapped, as its idle trim sees it.

/// kB resident in `pid`'s clean, read-only file mappings (what an idle trim unmaps).
pub fn mapped_kb(pid: u32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    rund_sys::trim::trimmable(&smaps)
        .iter()
        .map(|m| m.rss_kb)
        .sum()
}
