use super::*;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
const HYBRID_CGROUP: &str = "4:memory:/user\n3:cpu:/user\n1:name=systemd:/user\n0::/user\n";

/// A host whose mountinfo reads are counted.
struct Fake {
    mountinfo: RefCell<String>,
    proc_cgroup: RefCell<String>,
    devs: RefCell<HashMap<PathBuf, u64>>,
    reads: Cell<usize>,
}

impl Fake {
    fn hybrid() -> Self {
        let devs = [
            ("/sys/fs/cgroup/cpu", 29),
            ("/sys/fs/cgroup/memory", 32),
            ("/sys/fs/cgroup/systemd", 37),
            ("/sys/fs/cgroup/unified", 38),
        ]
        .into_iter()
        .map(|(p, d)| (PathBuf::from(p), d))
        .collect();
        Fake {
            mountinfo: RefCell::new(HYBRID.into()),
            proc_cgroup: RefCell::new(HYBRID_CGROUP.into()),
            devs: RefCell::new(devs),
            reads: Cell::new(0),
        }
    }
}

impl Source for Fake {
    fn mountinfo(&self) -> io::Result<String> {
        self.reads.set(self.reads.get() + 1);
        Ok(self.mountinfo.borrow().clone())
    }
    fn proc_cgroup(&self) -> io::Result<String> {
        Ok(self.proc_cgroup.borrow().clone())
    }
    fn dev_of(&self, path: &Path) -> Option<u64> {
        self.devs.borrow().get(path).copied()
    }
}

#[test]
fn second_detect_reads_no_mountinfo_and_gives_the_same_layout() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("state");
    let src = Fake::hybrid();
    let first = detect(&dir, &src).unwrap();
    assert_eq!(first, Hierarchy::from_mountinfo(HYBRID).unwrap());
    assert_eq!(src.reads.get(), 1);
    assert!(
        dir.join(FILE).is_file(),
        "the state dir is made for the record"
    );
    for _ in 0..3 {
        assert_eq!(detect(&dir, &src).unwrap(), first);
    }
    assert_eq!(src.reads.get(), 1, "the record served every later detect");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "no temporary file is left: {left:?}");
}

#[test]
fn pure_v2_is_remembered_too() {
    let d = tempfile::tempdir().unwrap();
    let src = Fake::hybrid();
    *src.mountinfo.borrow_mut() =
        "1 0 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n".into();
    *src.proc_cgroup.borrow_mut() = "0::/init.scope\n".into();
    src.devs.borrow_mut().insert("/sys/fs/cgroup".into(), 40);
    let first = detect(d.path(), &src).unwrap();
    assert_eq!(first, Hierarchy::v2_at(Path::new("/sys/fs/cgroup")));
    assert_eq!(detect(d.path(), &src).unwrap(), first);
    assert_eq!(src.reads.get(), 1);
}

#[test]
fn a_changed_host_is_read_again_and_the_record_rewritten() {
    let d = tempfile::tempdir().unwrap();
    let src = Fake::hybrid();
    detect(d.path(), &src).unwrap();

    // A hierarchy mounted since: /proc/self/cgroup lists it.
    *src.mountinfo.borrow_mut() =
        format!("{HYBRID}50 31 0:50 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n");
    *src.proc_cgroup.borrow_mut() = format!("5:pids:/user\n{HYBRID_CGROUP}");
    src.devs
        .borrow_mut()
        .insert("/sys/fs/cgroup/pids".into(), 50);
    let h = detect(d.path(), &src).unwrap();
    assert_eq!(src.reads.get(), 2);
    assert!(h.v1_mount("pids").is_some(), "{h:?}");
    detect(d.path(), &src).unwrap();
    assert_eq!(src.reads.get(), 2, "the rewritten record holds");

    // A mount point that is another filesystem now (unmounted, remounted).
    src.devs
        .borrow_mut()
        .insert("/sys/fs/cgroup/memory".into(), 99);
    detect(d.path(), &src).unwrap();
    assert_eq!(src.reads.get(), 3);
    // The unified mount gone.
    src.devs
        .borrow_mut()
        .remove(Path::new("/sys/fs/cgroup/unified"));
    detect(d.path(), &src).unwrap();
    assert_eq!(src.reads.get(), 4);
}

#[test]
fn a_bad_record_or_an_unwritable_dir_falls_back_to_mountinfo() {
    let d = tempfile::tempdir().unwrap();
    let src = Fake::hybrid();
    std::fs::write(d.path().join(FILE), b"{not json").unwrap();
    let want = Hierarchy::from_mountinfo(HYBRID).unwrap();
    assert_eq!(detect(d.path(), &src).unwrap(), want);
    assert_eq!(src.reads.get(), 1);
    assert_eq!(detect(d.path(), &src).unwrap(), want, "rewritten whole");
    assert_eq!(src.reads.get(), 1);
    // Empty, as a reader may see it while a writer is between its truncate and its write.
    std::fs::write(d.path().join(FILE), b"").unwrap();
    assert_eq!(detect(d.path(), &src).unwrap(), want);
    assert_eq!(detect(d.path(), &src).unwrap(), want);
    assert_eq!(src.reads.get(), 2);

    // The state dir's place is a file: nothing is remembered, no error.
    let blocked = d.path().join("file");
    std::fs::write(&blocked, b"").unwrap();
    assert_eq!(detect(&blocked, &src).unwrap(), want);
    assert_eq!(detect(&blocked, &src).unwrap(), want);
    assert_eq!(src.reads.get(), 4);
}

#[test]
fn this_host_gives_what_mountinfo_gives() {
    let d = tempfile::tempdir().unwrap();
    let want = Hierarchy::detect().unwrap();
    assert_eq!(detect(d.path(), &Host).unwrap(), want, "cold");
    assert!(d.path().join(FILE).is_file());
    assert_eq!(detect(d.path(), &Host).unwrap(), want, "from the record");
}
