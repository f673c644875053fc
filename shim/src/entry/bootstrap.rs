//! What `start` prints: a plain ttrpc address, or containerd 2.x's JSON bootstrap params
//! (`{"version":3,"address":...,"protocol":"ttrpc"}`).
//!
//! containerd 1.6 takes the whole output as the address; 1.7 rejects `version` 3; 2.x takes
//! either, and only with version 3 does it call the task v3 API and attach a pod's later
//! containers to the pod's shim without running `start` and `delete` for each. No flag or
//! environment variable tells 1.7 from 2.x (both set `MAX_SHIM_VERSION=2`), so the shim reads
//! the Go build info of its caller, `-publish-binary` (containerd's own executable): the main
//! package of 2.x is `github.com/containerd/containerd/v2/cmd/containerd`. Anything unknown
//! gets the plain address, which every containerd accepts.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Forces the reply: `address`, `v3`, or `auto` (default).
pub const BOOTSTRAP_ENV: &str = "RUND_SHIM_BOOTSTRAP";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The bare address (containerd 1.x, unknown callers).
    Address,
    /// JSON bootstrap params, version 3 (containerd ≥ 2.0).
    V3,
}

impl Reply {
    pub fn name(self) -> &'static str {
        match self {
            Reply::Address => "address",
            Reply::V3 => "v3",
        }
    }

    /// What `start` prints for `address` (`unix:///run/containerd/s/...`).
    pub fn render(self, address: &str) -> String {
        match self {
            Reply::Address => address.to_owned(),
            Reply::V3 => serde_json::json!({
                "version": 3,
                "address": address,
                "protocol": "ttrpc",
            })
            .to_string(),
        }
    }
}

/// The reply for a caller whose executable is `publish_binary` (may be empty).
pub fn choose(publish_binary: &str) -> Reply {
    match std::env::var(BOOTSTRAP_ENV).as_deref() {
        Ok("address") => return Reply::Address,
        Ok("v3") => return Reply::V3,
        _ => {}
    }
    if publish_binary.is_empty() {
        return Reply::Address;
    }
    match containerd_major(Path::new(publish_binary)) {
        Some(m) if m >= 2 => Reply::V3,
        _ => Reply::Address,
    }
}

/// The containerd major version a Go binary was built as, from its main package path;
/// `None` when it is not containerd or carries no readable build info.
pub fn containerd_major(bin: &Path) -> Option<u32> {
    let info = go_build_info(bin)?;
    let main = info.lines().find_map(|l| l.strip_prefix("path\t"))?;
    major_of_main_package(main)
}

/// `github.com/containerd/containerd/v2/cmd/containerd` → 2; without `/vN` → 1.
fn major_of_main_package(path: &str) -> Option<u32> {
    let rest = path.strip_prefix("github.com/containerd/containerd")?;
    if rest.is_empty() || rest.starts_with("/cmd/") {
        return Some(1);
    }
    let v = rest.strip_prefix("/v")?;
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    if v[digits.len()..].is_empty() || v[digits.len()..].starts_with('/') {
        digits.parse().ok()
    } else {
        None
    }
}

const BUILDINFO_MAGIC: &[u8] = b"\xff Go buildinf:";
/// Only the header and the two inline strings are read.
const BUILDINFO_MAX: u64 = 64 * 1024;

/// The module info text of a Go ≥ 1.18 binary (`path\t...\nbuild\t...`): the
/// `.go.buildinfo` section found through the ELF section headers, never the whole file.
pub fn go_build_info(bin: &Path) -> Option<String> {
    let mut f = File::open(bin).ok()?;
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh).ok()?;
    // 64-bit little-endian ELF only (x86_64, aarch64, ppc64le, riscv64).
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let shoff = u64::from_le_bytes(eh[0x28..0x30].try_into().ok()?);
    let shentsize = u64::from(u16::from_le_bytes(eh[0x3a..0x3c].try_into().ok()?));
    let shnum = u64::from(u16::from_le_bytes(eh[0x3c..0x3e].try_into().ok()?));
    let shstrndx = u64::from(u16::from_le_bytes(eh[0x3e..0x40].try_into().ok()?));
    if shentsize < 64 || shnum == 0 || shnum > 4096 || shstrndx >= shnum {
        return None;
    }
    let mut table = vec![0u8; (shentsize * shnum) as usize];
    f.seek(SeekFrom::Start(shoff)).ok()?;
    f.read_exact(&mut table).ok()?;
    let section = |i: u64| -> Option<(u32, u64, u64)> {
        let s = &table[(i * shentsize) as usize..][..64];
        Some((
            u32::from_le_bytes(s[0..4].try_into().ok()?),
            u64::from_le_bytes(s[24..32].try_into().ok()?),
            u64::from_le_bytes(s[32..40].try_into().ok()?),
        ))
    };
    let (_, stroff, strsize) = section(shstrndx)?;
    let names = read_at(&mut f, stroff, strsize.min(BUILDINFO_MAX))?;
    let (off, size) = (0..shnum).find_map(|i| {
        let (name, off, size) = section(i)?;
        let n = names.get(name as usize..)?;
        let end = n.iter().position(|&b| b == 0)?;
        (&n[..end] == b".go.buildinfo").then_some((off, size))
    })?;
    parse_build_info(&read_at(&mut f, off, size.min(BUILDINFO_MAX))?)
}

fn read_at(f: &mut File, off: u64, len: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    f.seek(SeekFrom::Start(off)).ok()?;
    f.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// The `.go.buildinfo` section: a 32-byte header (magic, pointer size, flags), then, with
/// flag 2 (Go ≥ 1.18), the Go version and the module info as varint-prefixed strings. The
/// module info is framed by 16 sentinel bytes on each side.
pub fn parse_build_info(sec: &[u8]) -> Option<String> {
    if !sec.starts_with(BUILDINFO_MAGIC) || sec.len() < 32 || sec[15] & 2 == 0 {
        return None;
    }
    let mut rest = &sec[32..];
    let _go_version = take_string(&mut rest)?;
    let mut mod_info = take_string(&mut rest)?;
    if mod_info.len() >= 33 {
        mod_info = &mod_info[16..mod_info.len() - 16];
    }
    Some(String::from_utf8_lossy(mod_info).into_owned())
}

fn take_string<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (mut len, mut shift, mut used) = (0u64, 0u32, 0usize);
    for &b in rest.iter() {
        used += 1;
        len |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
        if shift > 35 {
            return None;
        }
    }
    let s = rest.get(used..used + len as usize)?;
    *rest = &rest[used + len as usize..];
    Some(s)
}

#[cfg(test)]
mod tests;
