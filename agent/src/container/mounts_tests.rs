use super::*;
use crate::container::mounter::MountCtx;
use crate::container::propagation::RootPropagation;
use crate::sys::fake::Recorder;
use oci_spec::runtime::MountBuilder;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

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
    let steps = plan(&ctr_mounts(), false).unwrap();
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
fn plan_refuses_relative_typeless_and_the_root() {
    assert!(matches!(
        plan(&[m("data", "tmpfs", &[])], false),
        Err(MountError::Relative { .. })
    ));
    let typeless = MountBuilder::default().destination("/x").build().unwrap();
    assert!(matches!(
        plan(&[typeless], false),
        Err(MountError::NoType { index: 0, .. })
    ));
    assert!(matches!(
        plan(&[m("/a/..", "tmpfs", &[])], false),
        Err(MountError::OnRoot { index: 0, .. })
    ));
}

#[test]
fn shared_propagation_is_refused_in_a_user_namespace() {
    let mounts = [m("/vol", "bind", &["rbind", "rshared"])];
    assert!(plan(&mounts, false).is_ok());
    let e = plan(&mounts, true).unwrap_err().to_string();
    assert!(e.contains("rshared") && e.contains("user namespace"), "{e}");
    assert!(plan(&[m("/vol", "bind", &["rbind", "rslave"])], true).is_ok());
}

fn fds_for(indexes: &[usize]) -> HashMap<usize, OwnedFd> {
    indexes
        .iter()
        .map(|i| (*i, OwnedFd::from(std::fs::File::open("/dev/null").unwrap())))
        .collect()
}

fn ctx<'a>(
    rec: &'a Recorder,
    root: &'a OwnedFd,
    fds: &'a HashMap<usize, OwnedFd>,
    cgroups: &'a str,
) -> MountCtx<'a> {
    MountCtx {
        sys: rec,
        root: root.as_fd(),
        fds,
        cgroups,
        propagation: RootPropagation::DEFAULT,
        userns: false,
    }
}

#[test]
fn apply_mounts_onto_fds_resolved_in_the_root_in_order() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    let fds = fds_for(&[3]);
    let applied = ctx(&rec, &root, &fds, "0::/\n")
        .apply(&plan(&ctr_mounts(), false).unwrap())
        .unwrap();
    assert!(applied.dev_tmpfs, "a tmpfs on /dev must be reported");
    let fd = fds[&3].as_raw_fd();
    let want = [
        "mkdir /r/proc".to_string(),
        format!(
            "fsmount proc proc {:#x} ",
            (MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV).bits()
        ),
        "move_mount proc /r/proc".to_string(),
        "mkdir /r/dev".to_string(),
        format!(
            "fsmount tmpfs tmpfs {:#x} mode=755,size=65536k",
            (MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME).bits()
        ),
        "move_mount tmpfs /r/dev".to_string(),
        "mkdir /r/dev/pts".to_string(),
        format!(
            "fsmount devpts devpts {:#x} newinstance,ptmxmode=0666,mode=0620,gid=5",
            (MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC).bits()
        ),
        "move_mount devpts /r/dev/pts".to_string(),
        // /dev/null is not a directory: the bind's mount point is a file.
        "touch /r/data".to_string(),
        format!("move_mount fd{fd} /r/data"),
        // runc's default rootfsPropagation, as its binds inherit it.
        format!("propagation fd{fd} rslave"),
        // "ro" on a bind: the top mount only.
        format!("setattr fd{fd} set=0x1 clr=0x0 rec=false"),
        "mkdir /r/sys".to_string(),
    ];
    assert_eq!(&rec.calls()[..want.len()], &want[..]);
    assert!(rec.calls()[want.len()].starts_with("fsmount sysfs sysfs"));
}

#[test]
fn recursive_read_only_only_when_asked() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    let fds = fds_for(&[0]);
    ctx(&rec, &root, &fds, "")
        .apply(&plan(&[m("/data", "bind", &["rbind", "rro"])], false).unwrap())
        .unwrap();
    let fd = fds[&0].as_raw_fd();
    assert_eq!(
        rec.calls().last().unwrap(),
        &format!("setattr fd{fd} set=0x1 clr=0x0 rec=true")
    );
    assert!(!rec.calls().iter().any(|c| c.contains("rec=false")));
}

#[test]
fn bind_trees_never_stay_host_peers_in_a_user_namespace() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    let fds = fds_for(&[0]);
    let mut c = ctx(&rec, &root, &fds, "");
    c.userns = true;
    c.propagation = RootPropagation::parse(Some("rprivate"), true).unwrap();
    c.apply(&plan(&[m("/data", "bind", &["rbind", "rslave"])], true).unwrap())
        .unwrap();
    let fd = fds[&0].as_raw_fd();
    let props: Vec<_> = rec
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("propagation"))
        .collect();
    assert_eq!(
        props,
        [
            format!("propagation fd{fd} rslave"),
            format!("propagation fd{fd} rprivate"),
            format!("propagation fd{fd} rslave"),
        ]
    );
}

#[test]
fn shared_root_propagation_keeps_binds_peers_and_applies_mount_options() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    let fds = fds_for(&[0]);
    let mut c = ctx(&rec, &root, &fds, "");
    c.propagation = RootPropagation::parse(Some("rshared"), false).unwrap();
    c.apply(&plan(&[m("/vol", "bind", &["rbind", "rshared"])], false).unwrap())
        .unwrap();
    let fd = fds[&0].as_raw_fd();
    let props: Vec<_> = rec
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("propagation"))
        .collect();
    assert_eq!(props, [format!("propagation fd{fd} rshared")]);
}

#[test]
fn bind_of_a_directory_gets_a_directory() {
    let fds = fds_for(&[0]);
    let rec = Recorder {
        dir_fds: [fds[&0].as_raw_fd()].into(),
        ..Default::default()
    };
    let root = rec.dir("/r");
    ctx(&rec, &root, &fds, "")
        .apply(&plan(&[m("/data", "bind", &["bind"])], false).unwrap())
        .unwrap();
    assert_eq!(rec.calls()[0], "mkdir /r/data");
}

#[test]
fn bind_without_fd_is_a_clear_error() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    let fds = HashMap::new();
    let err = ctx(&rec, &root, &fds, "")
        .apply(&plan(&[m("/data", "bind", &["rbind"])], false).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("FdKind::Mount(0)"), "{err}");
}

#[test]
fn refused_sysfs_names_the_cause() {
    let rec = Recorder {
        refuse: ["sysfs".to_string()].into(),
        ..Default::default()
    };
    let root = rec.dir("/r");
    let fds = HashMap::new();
    let err = ctx(&rec, &root, &fds, "")
        .apply(&plan(&[m("/sys", "sysfs", &["ro"])], false).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("EPERM") && err.contains("network namespace"),
        "{err}"
    );
}

#[test]
fn tmpfs_over_an_existing_dir_keeps_its_mode_and_ro_waits() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    rec.seed_dir("/r/tmp");
    let fds = HashMap::new();
    let applied = ctx(&rec, &root, &fds, "")
        .apply(&plan(&[m("/tmp", "tmpfs", &["ro", "size=1m"])], false).unwrap())
        .unwrap();
    assert_eq!(rec.calls()[0], "fsmount tmpfs tmpfs 0x0 mode=0755,size=1m");
    assert_eq!(applied.read_only_later.len(), 1);
}

#[test]
fn a_destination_resolving_to_the_root_is_refused() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    rec.seed_dir("/r/x");
    let fds = HashMap::new();
    // The fake resolves lexically; "/x/.." passes the planner's check only
    // when built by hand, as a symlink to "/" would resolve.
    let step = Step {
        index: 0,
        dest: "/x/..".into(),
        kind: Kind::Fs {
            fstype: "tmpfs".into(),
            source: "tmpfs".into(),
        },
        point: MountPoint::Dir,
        opts: Default::default(),
    };
    let err = ctx(&rec, &root, &fds, "").apply(&[step]).unwrap_err();
    assert!(matches!(err, MountError::OnRoot { .. }), "{err}");
}

#[test]
fn cgroup_v1_is_never_mounted_whole() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    let fds = HashMap::new();
    let text = "12:cpu:/x\n11:cpuacct:/x\n5:cpuset,memory:/x\n1:name=systemd:/x\n0::/x\n";
    let err = ctx(&rec, &root, &fds, text)
        .apply(&plan(&[m("/sys/fs/cgroup", "cgroup", &["ro", "nosuid"])], false).unwrap())
        .unwrap_err();
    assert!(matches!(err, MountError::CgroupV1 { .. }), "{err}");
    assert!(rec.calls().is_empty(), "{:?}", rec.calls());
}

#[test]
fn cgroup_v2_only_is_one_mount() {
    let rec = Recorder::default();
    let root = rec.dir("/r");
    let fds = HashMap::new();
    ctx(&rec, &root, &fds, "0::/\n")
        .apply(&plan(&[m("/sys/fs/cgroup", "cgroup", &[])], false).unwrap())
        .unwrap();
    assert_eq!(
        rec.calls(),
        [
            "mkdir /r/sys/fs/cgroup",
            "fsmount cgroup2 cgroup2 0x0 ",
            "move_mount cgroup2 /r/sys/fs/cgroup"
        ]
    );
}
