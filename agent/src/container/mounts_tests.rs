use super::*;
use crate::sys::fake::Recorder;
use oci_spec::runtime::MountBuilder;
use std::os::fd::AsRawFd;

fn m(dest: &str, typ: &str, opts: &[&str]) -> Mount {
    MountBuilder::default()
        .destination(dest)
        .typ(typ)
        .source(typ)
        .options(opts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .unwrap()
}

fn ctr_mounts() -> Vec<Mount> {
    vec![
        m("/proc", "proc", &["nosuid", "noexec", "nodev"]),
        m(
            "/dev",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        m(
            "/dev/pts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        m("/data", "bind", &["rbind", "ro"]),
        m("/sys", "sysfs", &["nosuid", "noexec", "nodev", "ro"]),
    ]
}

#[test]
fn plan_keeps_order_and_kinds() {
    let steps = plan(&ctr_mounts()).unwrap();
    let dests: Vec<_> = steps.iter().map(|s| s.dest.display().to_string()).collect();
    assert_eq!(dests, ["/proc", "/dev", "/dev/pts", "/data", "/sys"]);
    assert_eq!(steps[3].kind, Kind::Bind);
    assert_eq!(steps[3].point, MountPoint::LikeSource);
    assert_eq!(steps[0].point, MountPoint::Dir);
    assert_eq!(
        steps[2].kind,
        Kind::Fs {
            fstype: "devpts".into(),
            source: "devpts".into()
        }
    );
}

#[test]
fn plan_refuses_relative_and_typeless() {
    assert!(matches!(
        plan(&[m("data", "tmpfs", &[])]),
        Err(MountError::Relative { .. })
    ));
    let typeless = MountBuilder::default().destination("/x").build().unwrap();
    assert!(matches!(
        plan(&[typeless]),
        Err(MountError::NoType { index: 0, .. })
    ));
}

fn fds_for(indexes: &[usize]) -> HashMap<usize, OwnedFd> {
    indexes
        .iter()
        .map(|i| (*i, OwnedFd::from(std::fs::File::open("/dev/null").unwrap())))
        .collect()
}

#[test]
fn apply_records_mounts_in_order() {
    let rec = Recorder::default();
    let fds = fds_for(&[3]);
    let ctx = MountCtx {
        sys: &rec,
        root: Path::new("/nonexistent-root"),
        fds: &fds,
        cgroups: "0::/\n",
    };
    let dev = ctx.apply(&plan(&ctr_mounts()).unwrap()).unwrap();
    assert!(dev, "a tmpfs on /dev must be reported");
    let calls = rec.calls();
    let fd = fds[&3].as_raw_fd();
    let want = [
        "mkdir /nonexistent-root/proc".to_string(),
        format!("mount proc /nonexistent-root/proc proc {:#x} ", (MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV).bits()),
        "mkdir /nonexistent-root/dev".to_string(),
        format!("mount tmpfs /nonexistent-root/dev tmpfs {:#x} mode=755,size=65536k", (MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME).bits()),
        "mkdir /nonexistent-root/dev/pts".to_string(),
        format!("mount devpts /nonexistent-root/dev/pts devpts {:#x} newinstance,ptmxmode=0666,mode=0620,gid=5", (MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC).bits()),
        // /dev/null is not a directory: the bind's mount point is a file.
        "touch /nonexistent-root/data".to_string(),
        format!("move_mount fd{fd} /nonexistent-root/data"),
        "setattr /nonexistent-root/data set=0x1 clr=0x0 rec=true".to_string(),
        "mkdir /nonexistent-root/sys".to_string(),
    ];
    assert_eq!(&calls[..want.len()], &want[..]);
    assert!(calls[want.len()].starts_with("mount sysfs /nonexistent-root/sys sysfs"));
}

#[test]
fn bind_of_a_directory_gets_a_directory() {
    let fds = fds_for(&[0]);
    let rec = Recorder {
        dir_fds: [fds[&0].as_raw_fd()].into(),
        ..Default::default()
    };
    let ctx = MountCtx {
        sys: &rec,
        root: Path::new("/r"),
        fds: &fds,
        cgroups: "",
    };
    ctx.apply(&plan(&[m("/data", "bind", &["bind"])]).unwrap())
        .unwrap();
    assert_eq!(rec.calls()[0], "mkdir /r/data");
}

#[test]
fn bind_without_fd_is_a_clear_error() {
    let rec = Recorder::default();
    let fds = HashMap::new();
    let ctx = MountCtx {
        sys: &rec,
        root: Path::new("/r"),
        fds: &fds,
        cgroups: "",
    };
    let err = ctx
        .apply(&plan(&[m("/data", "bind", &["rbind"])]).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("FdKind::Mount(0)"), "{err}");
}

#[test]
fn refused_sysfs_names_the_cause() {
    let rec = Recorder {
        refuse: ["sysfs".to_string()].into(),
        ..Default::default()
    };
    let fds = HashMap::new();
    let ctx = MountCtx {
        sys: &rec,
        root: Path::new("/r"),
        fds: &fds,
        cgroups: "",
    };
    let err = ctx
        .apply(&plan(&[m("/sys", "sysfs", &["ro"])]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("EPERM") && err.contains("network namespace"),
        "{err}"
    );
}

#[test]
fn cgroup_v1_hybrid_layout() {
    let rec = Recorder::default();
    let fds = HashMap::new();
    let text = "12:cpu:/x\n11:cpuacct:/x\n5:cpuset,memory:/x\n1:name=systemd:/x\n0::/x\n";
    let ctx = MountCtx {
        sys: &rec,
        root: Path::new("/r"),
        fds: &fds,
        cgroups: text,
    };
    ctx.apply(&plan(&[m("/sys/fs/cgroup", "cgroup", &["ro", "nosuid"])]).unwrap())
        .unwrap();
    let calls = rec.calls().join("\n");
    assert!(
        calls.contains("mount tmpfs /r/sys/fs/cgroup tmpfs"),
        "{calls}"
    );
    assert!(
        calls.contains("mount cgroup /r/sys/fs/cgroup/cpu cgroup 0x3 cpu"),
        "{calls}"
    );
    assert!(
        calls.contains("mount cgroup /r/sys/fs/cgroup/cpuset,memory cgroup 0x3 cpuset,memory"),
        "{calls}"
    );
    assert!(
        calls.contains("symlink /r/sys/fs/cgroup/memory -> cpuset,memory"),
        "{calls}"
    );
    assert!(
        calls.contains("mount cgroup /r/sys/fs/cgroup/systemd cgroup 0x3 none,name=systemd"),
        "{calls}"
    );
    assert!(
        calls.contains("mount cgroup /r/sys/fs/cgroup/unified cgroup2"),
        "{calls}"
    );
    assert!(
        calls.ends_with("setattr /r/sys/fs/cgroup set=0x1 clr=0x0 rec=false"),
        "{calls}"
    );
}

#[test]
fn cgroup_v2_only_is_one_mount() {
    let rec = Recorder::default();
    let fds = HashMap::new();
    let ctx = MountCtx {
        sys: &rec,
        root: Path::new("/r"),
        fds: &fds,
        cgroups: "0::/\n",
    };
    ctx.apply(&plan(&[m("/sys/fs/cgroup", "cgroup", &[])]).unwrap())
        .unwrap();
    assert_eq!(
        rec.calls(),
        [
            "mkdir /r/sys/fs/cgroup",
            "mount cgroup2 /r/sys/fs/cgroup cgroup2 0x0 "
        ]
    );
}
