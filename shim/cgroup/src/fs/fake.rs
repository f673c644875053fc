//! A fake cgroupfs in an ordinary directory, for tests without root.
//! It mimics the kernel rules the pool relies on: mkdir seeds control files,
//! rmdir refuses busy or non-leaf cgroups, rename refuses existing targets,
//! and on v2 rename is refused (EPERM) as the kernel does. On v2 a child's
//! `cgroup.controllers` is its parent's `cgroup.subtree_control`, which
//! takes `+ctrl`/`-ctrl` only for controllers the cgroup has.

use super::CgroupFs;
use crate::bpf::{decode_all, encode_all, Insn};
use std::io;
use std::path::{Path, PathBuf};

/// Where a fake cgroup keeps its device filter (a real one keeps it in the
/// kernel): the encoded program, so tests can run it.
const FILTER_FILE: &str = ".fake-device-filter";

/// Fake cgroupfs. `files` are seeded (name, content) into every new directory.
#[derive(Debug, Clone)]
pub struct FakeFs {
    files: Vec<(String, String)>,
    allow_rename: bool,
}

impl FakeFs {
    /// A fake v2 tree: rename refused, typical v2 control files.
    pub fn v2() -> Self {
        let files = [
            ("cgroup.procs", ""),
            ("cgroup.freeze", "0\n"),
            ("cgroup.events", "populated 0\nfrozen 0\n"),
            ("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma\n"),
            ("cgroup.kill", ""),
            ("cgroup.subtree_control", ""),
            ("memory.max", "max\n"),
            ("memory.high", "max\n"),
            ("memory.low", "0\n"),
            ("memory.min", "0\n"),
            ("memory.swap.max", "max\n"),
            ("memory.current", "0\n"),
            ("memory.swap.current", "0\n"),
            ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
            ("memory.stat", "anon 0\nfile 0\n"),
            ("memory.oom.group", "0\n"),
            ("memory.reclaim", ""),
            ("cpu.max", "max 100000\n"),
            ("cpu.max.burst", "0\n"),
            ("cpu.weight", "100\n"),
            ("cpu.idle", "0\n"),
            ("cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"),
            ("cpuset.cpus", ""),
            ("cpuset.mems", ""),
            ("pids.max", "max\n"),
            ("pids.current", "0\n"),
            ("io.max", ""),
            ("io.weight", "default 100\n"),
            ("io.stat", ""),
            ("hugetlb.2MB.max", "max\n"),
            ("hugetlb.2MB.current", "0\n"),
            ("hugetlb.2MB.events", "max 0\n"),
            ("rdma.max", ""),
            ("rdma.current", ""),
        ];
        FakeFs {
            files: files
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            allow_rename: false,
        }
    }

    /// A fake v1 hierarchy: rename allowed, cgroup.procs, tasks and the
    /// devices files (a hierarchy named `devices` then works).
    pub fn v1() -> Self {
        FakeFs {
            files: vec![
                ("cgroup.procs".into(), String::new()),
                ("tasks".into(), String::new()),
                ("devices.allow".into(), String::new()),
                ("devices.deny".into(), String::new()),
                ("devices.list".into(), "a *:* rwm\n".into()),
            ],
            allow_rename: true,
        }
    }

    /// Seed the root of a fake tree with the control files.
    pub fn seed_root(&self, root: &Path) -> io::Result<()> {
        std::fs::create_dir_all(root)?;
        self.seed(root)
    }

    /// The device filter set on a fake cgroup, if any.
    pub fn device_filter(dir: &Path) -> Option<Vec<Insn>> {
        std::fs::read(dir.join(FILTER_FILE))
            .ok()
            .map(|b| decode_all(&b))
    }

    fn seed(&self, dir: &Path) -> io::Result<()> {
        for (name, content) in &self.files {
            std::fs::write(dir.join(name), content)?;
        }
        Ok(())
    }
}

impl CgroupFs for FakeFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)?;
        self.seed(path)?;
        if !self.allow_rename {
            let parent = path.parent().map(|p| p.join("cgroup.subtree_control"));
            let on = parent
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default();
            std::fs::write(path.join("cgroup.controllers"), on)?;
        }
        Ok(())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        if !path.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        if !self.subdirs(path)?.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
        let procs = std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
        if !procs.trim().is_empty() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        std::fs::remove_dir_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if !self.allow_rename {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        if !from.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        if to.exists() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        std::fs::rename(from, to)
    }

    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        if !path.is_file() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match name {
            // The kernel appends pids; keep that so emptiness checks work.
            "cgroup.procs" => {
                let mut cur = std::fs::read_to_string(path)?;
                cur.push_str(data.trim());
                cur.push('\n');
                std::fs::write(path, cur)
            }
            "cgroup.subtree_control" => {
                let have = std::fs::read_to_string(path.with_file_name("cgroup.controllers"))?;
                let mut on: Vec<String> = std::fs::read_to_string(path)?
                    .split_whitespace()
                    .map(str::to_string)
                    .collect();
                for tok in data.split_whitespace() {
                    let (add, c) = tok.split_at(1);
                    if !have.split_whitespace().any(|h| h == c) {
                        return Err(io::Error::from_raw_os_error(libc::ENOENT));
                    }
                    on.retain(|x| x != c);
                    if add == "+" {
                        on.push(c.to_string());
                    }
                }
                std::fs::write(path, on.join(" ") + "\n")
            }
            "cgroup.freeze" => {
                std::fs::write(path, data)?;
                let frozen = data.trim() == "1";
                let events = format!("populated 0\nfrozen {}\n", u8::from(frozen));
                std::fs::write(path.with_file_name("cgroup.events"), events)
            }
            _ => std::fs::write(path, data),
        }
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>> {
        super::RealFs.subdirs(path)
    }

    fn set_device_filter(&self, dir: &Path, prog: &[Insn]) -> crate::Result<()> {
        let p: PathBuf = dir.join(FILTER_FILE);
        if !dir.is_dir() {
            return Err(crate::Error::io(
                "open",
                dir,
                io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
        std::fs::write(&p, encode_all(prog)).map_err(|e| crate::Error::io("write", p, e))
    }

    fn clear_device_filter(&self, dir: &Path) -> crate::Result<()> {
        match std::fs::remove_file(dir.join(FILTER_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(crate::Error::io("remove", dir, e))
            }
            _ => Ok(()),
        }
    }
}
