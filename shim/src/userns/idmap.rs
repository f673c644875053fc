//! uid/gid maps, written by the shim from outside the new user namespace.

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum IdMapError {
    #[error("{kind}: no mappings")]
    Empty { kind: String },
    #[error("{kind}: {n} mappings, the kernel allows 340")]
    TooMany { kind: String, n: usize },
    #[error("{kind}[{i}]: size 0")]
    ZeroSize { kind: String, i: usize },
    #[error("{kind}[{i}]: range wraps past id 4294967294 (4294967295 cannot be mapped)")]
    Wraps { kind: String, i: usize },
    #[error("{kind}[{i}] and {kind}[{j}] overlap {place}")]
    Overlap {
        kind: String,
        i: usize,
        j: usize,
        place: &'static str,
    },
    #[error("the joined user namespace's {file} is {got:?}, not the spec's {want:?}")]
    Mismatch {
        file: &'static str,
        got: Vec<String>,
        want: Vec<String>,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        source: std::io::Error,
    },
}

impl IdMapError {
    /// The maps asked for are wrong (not the node failing to apply them).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, IdMapError::Io { .. })
    }
}

/// One line of uid_map/gid_map: `container_id host_id size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapping {
    pub container_id: u32,
    pub host_id: u32,
    pub size: u32,
}

/// Renders a map in the kernel's format.
pub fn render(map: &[IdMapping]) -> String {
    map.iter()
        .map(|m| format!("{} {} {}\n", m.container_id, m.host_id, m.size))
        .collect()
}

/// Rejects empty, zero-sized, wrapping or overlapping mappings with a message
/// that names the offending entries.
pub fn validate(kind: &str, map: &[IdMapping]) -> Result<(), IdMapError> {
    if map.is_empty() {
        return Err(IdMapError::Empty { kind: kind.into() });
    }
    if map.len() > 340 {
        return Err(IdMapError::TooMany {
            kind: kind.into(),
            n: map.len(),
        });
    }
    for (i, m) in map.iter().enumerate() {
        if m.size == 0 {
            return Err(IdMapError::ZeroSize {
                kind: kind.into(),
                i,
            });
        }
        // The kernel refuses an extent that reaches id 2^32-1 ((uid_t)-1);
        // below that, the end fits in a u32 and the overlap test is exact.
        if m.container_id.checked_add(m.size).is_none() || m.host_id.checked_add(m.size).is_none() {
            return Err(IdMapError::Wraps {
                kind: kind.into(),
                i,
            });
        }
        for (j, o) in map.iter().enumerate().take(i) {
            let overlap =
                |a: u32, b: u32| a < b.saturating_add(o.size) && b < a.saturating_add(m.size);
            let place = if overlap(m.container_id, o.container_id) {
                "inside the container"
            } else if overlap(m.host_id, o.host_id) {
                "on the host"
            } else {
                continue;
            };
            return Err(IdMapError::Overlap {
                kind: kind.into(),
                i,
                j,
                place,
            });
        }
    }
    Ok(())
}

/// Writes gid_map then uid_map of `pid` (which just unshared its user ns).
pub fn write_maps(pid: i32, uid: &[IdMapping], gid: &[IdMapping]) -> Result<(), IdMapError> {
    for (file, map) in [("gid_map", gid), ("uid_map", uid)] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, render(map)).map_err(|source| IdMapError::Io {
            op: "write",
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Checks that `pid`, which joined an existing user namespace, sees exactly
/// the maps the spec gives: a path could name any namespace, and only the
/// maps were checked against the policy.
pub fn check_maps(pid: i32, uid: &[IdMapping], gid: &[IdMapping]) -> Result<(), IdMapError> {
    for (file, map) in [("uid_map", uid), ("gid_map", gid)] {
        let path = format!("/proc/{pid}/{file}");
        let got = std::fs::read_to_string(&path).map_err(|source| IdMapError::Io {
            op: "read",
            path: path.clone(),
            source,
        })?;
        let norm = |t: &str| -> Vec<String> {
            t.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|l| !l.is_empty())
                .collect()
        };
        if norm(&got) != norm(&render(map)) {
            return Err(IdMapError::Mismatch {
                file,
                got: norm(&got),
                want: norm(&render(map)),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(c: u32, h: u32, s: u32) -> IdMapping {
        IdMapping {
            container_id: c,
            host_id: h,
            size: s,
        }
    }

    #[test]
    fn renders_kernel_format() {
        assert_eq!(render(&[m(0, 100000, 65536)]), "0 100000 65536\n");
    }

    #[test]
    fn validation_catches_bad_maps() {
        assert!(validate("uid", &[m(0, 100000, 65536)]).is_ok());
        assert!(validate("uid", &[]).is_err());
        assert!(validate("uid", &[m(0, 1, 0)]).is_err());
        assert!(validate("uid", &[m(0, u32::MAX, 2)]).is_err());
        let e = validate("uid", &[m(0, 1000, 10), m(5, 5000, 10)]).unwrap_err();
        assert!(e.to_string().contains("inside the container"), "{e}");
        let e = validate("gid", &[m(0, 1000, 10), m(100, 1005, 10)]).unwrap_err();
        assert!(e.to_string().contains("on the host"), "{e}");
        assert!(validate("uid", &[m(0, 1000, 10), m(10, 1010, 10)]).is_ok());
    }

    /// Found by fuzzing: an extent ending at 2^32 passed, so did one
    /// overlapping it at id 2^32-1; the kernel refuses both.
    #[test]
    fn id_4294967295_is_never_mapped() {
        let top = u32::MAX - 65535;
        assert!(validate("uid", &[m(0, top - 1, 65536)]).is_ok());
        let e = validate("uid", &[m(0, top, 65536)]).unwrap_err();
        assert!(e.to_string().contains("4294967295"), "{e}");
        assert!(validate("uid", &[m(u32::MAX, 1, 1)]).is_err());
        assert!(validate("uid", &[m(0, u32::MAX - 9, 10), m(10, u32::MAX, 1)]).is_err());
    }
}
