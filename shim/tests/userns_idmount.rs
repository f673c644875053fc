//! Idmapped mounts on this kernel: a tmpfs file owned by 0 seen through a
//! mount idmapped with `0 1000000 65536` is owned by 1000000 on the host and
//! by 0 inside the user namespace; procfs/sysfs refuse clearly.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::fstatat;
use rund_shim::userns::idmap::IdMapping;
use rund_shim::userns::{attach, idmapped_clone, userns_of_pid, userns_with_maps, UsernsError};

const BASE: u32 = 1_000_000;

fn map() -> Vec<IdMapping> {
    vec![IdMapping {
        container_id: 0,
        host_id: BASE,
        size: 65_536,
    }]
}

/// Runs `f` on a fresh thread in a private mount namespace, so any mount it
/// makes disappears with the thread.
fn in_private_mount_ns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNS).expect("unshare mount ns");
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .expect("make / private");
        f()
    })
    .join()
    .unwrap()
}

fn userns_or_skip() -> Option<OwnedFd> {
    match userns_with_maps(&map(), &map()) {
        Ok(fd) => Some(fd),
        Err(e) => rund_skip::skip!("cannot create a user namespace here: {e}"),
    }
}

#[test]
fn tmpfs_files_owned_by_root_appear_owned_by_the_mapped_root() {
    let Some(ns) = userns_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&dst).unwrap();
    let outcome = in_private_mount_ns(move || -> Result<(), String> {
        mount(
            Some("tmpfs"),
            &src,
            Some("tmpfs"),
            MsFlags::empty(),
            Some("mode=0755"),
        )
        .unwrap();
        std::fs::write(src.join("root-file"), "x").unwrap();
        std::fs::set_permissions(
            src.join("root-file"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::fs::write(src.join("user-file"), "y").unwrap();
        nix::unistd::chown(&src.join("user-file"), Some(1000.into()), Some(2000.into())).unwrap();

        let tree = match idmapped_clone(&src, false, ns.as_fd()) {
            Ok(t) => t,
            Err(UsernsError::IdmapUnsupported { .. }) => {
                return Err("kernel < 6.3: tmpfs has no idmap".into())
            }
            Err(e) => panic!("{e}"),
        };
        // Host view through the detached tree: shifted by BASE.
        let st = fstatat(tree.as_fd(), "root-file", nix::fcntl::AtFlags::empty()).unwrap();
        assert_eq!((st.st_uid, st.st_gid), (BASE, BASE));
        let st = fstatat(tree.as_fd(), "user-file", nix::fcntl::AtFlags::empty()).unwrap();
        assert_eq!((st.st_uid, st.st_gid), (BASE + 1000, BASE + 2000));
        // The source mount itself is untouched (nothing was chowned).
        assert_eq!(std::fs::metadata(src.join("root-file")).unwrap().uid(), 0);

        // Attached, the same through a path.
        attach(tree.as_fd(), &dst).unwrap();
        assert_eq!(
            std::fs::metadata(dst.join("root-file")).unwrap().uid(),
            BASE
        );
        // Host root (uid 0) has no id inside the map: the kernel refuses to
        // create files through the mount rather than write them as 0.
        let e = std::fs::write(dst.join("new"), "z").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOVERFLOW), "{e}");

        // Inside the user namespace, the owners read as on disk.
        let out = stat_inside_userns(&ns, &tree, &["root-file", "user-file"]);
        assert_eq!(out, "0:0\n1000:2000\n");
        Ok(())
    });
    if let Err(reason) = outcome {
        rund_skip::skip!("{reason}");
    }
}

/// `stat -c %u:%g` of `names` under the detached tree, run by a child that
/// joined the user namespace.
fn stat_inside_userns(ns: &OwnedFd, tree: &OwnedFd, names: &[&str]) -> String {
    let (ns_fd, tree_fd) = (ns.as_raw_fd(), tree.as_raw_fd());
    let mut cmd = Command::new("/usr/bin/stat");
    cmd.arg("-c").arg("%u:%g");
    for n in names {
        cmd.arg(format!("/proc/self/fd/3/{n}"));
    }
    // SAFETY: setns, dup2 and fcntl are async-signal-safe; the fds are open
    // in the parent until spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(ns_fd, libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // dup2 onto itself keeps CLOEXEC: the tree may already be fd 3.
            let ok = if tree_fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(tree_fd, 3) == 3
            };
            if !ok {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "stat inside the userns: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn procfs_and_sysfs_refuse_with_a_clear_error() {
    let Some(ns) = userns_or_skip() else { return };
    for (path, fstype) in [("/proc", "proc"), ("/sys", "sysfs")] {
        let e = idmapped_clone(Path::new(path), false, ns.as_fd()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "filesystem of {path} ({fstype}) does not support idmapped mounts"
            )) && msg.contains("[userns] on_unsupported"),
            "{msg}"
        );
        assert!(e.is_precondition());
    }
}

#[test]
fn bad_inputs_name_the_path_and_reason() {
    let Some(ns) = userns_or_skip() else { return };
    let e = idmapped_clone(Path::new("/nonexistent/rund-x"), false, ns.as_fd()).unwrap_err();
    assert!(
        e.to_string().contains("/nonexistent/rund-x") && e.to_string().contains("No such file"),
        "{e}"
    );
    let net = std::fs::File::open("/proc/self/ns/net").unwrap();
    let e = idmapped_clone(Path::new("/tmp"), false, net.as_fd()).unwrap_err();
    assert!(e.to_string().contains("is not a user namespace"), "{e}");
    // The initial user namespace cannot be used as an idmapping.
    let init = userns_of_pid(std::process::id() as i32).unwrap();
    let e = idmapped_clone(Path::new("/tmp"), false, init.as_fd()).unwrap_err();
    assert!(e.to_string().contains("/tmp"), "{e}");
    // Malformed maps never reach the kernel.
    let bad = [IdMapping {
        container_id: 0,
        host_id: 1,
        size: 0,
    }];
    assert!(userns_with_maps(&bad, &map())
        .unwrap_err()
        .to_string()
        .contains("size 0"));
}

#[test]
fn a_held_namespace_has_the_maps_and_no_process() {
    // On a fresh thread, whose children /proc lists apart from those of
    // other tests' threads: the helper child must be gone (reaped).
    let made = std::thread::spawn(|| {
        let ns = userns_with_maps(&map(), &map());
        let tid = nix::unistd::gettid();
        let children = std::fs::read_to_string(format!("/proc/self/task/{tid}/children")).unwrap();
        (ns, children)
    });
    let (ns, children) = made.join().unwrap();
    // Skipped here, on the test's own thread, which names the test.
    let ns = match ns {
        Ok(ns) => ns,
        Err(e) => rund_skip::skip!("cannot create a user namespace here: {e}"),
    };
    assert_eq!(children.trim(), "", "helper process left behind");
    // A process that joins it sees the map.
    let ns_fd = ns.as_raw_fd();
    let mut cmd = Command::new("/bin/cat");
    cmd.arg("/proc/self/uid_map");
    // SAFETY: setns is async-signal-safe; the fd stays open until spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(ns_fd, libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields, ["0", "1000000", "65536"]);
}

#[test]
fn an_overlay_mount_is_idmapped_or_refused_clearly() {
    let Some(ns) = userns_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    for sub in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("lower/etc-passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
    let ok = in_private_mount_ns(move || {
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            d.join("lower").display(),
            d.join("upper").display(),
            d.join("work").display()
        );
        let merged = d.join("merged");
        mount(
            Some("overlay"),
            &merged,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .unwrap();
        // Linux 6.18 refuses (EINVAL): overlay is not FS_ALLOW_IDMAP. Either
        // outcome is fine as long as a refusal is the clear error.
        let tree = match idmapped_clone(&merged, true, ns.as_fd()) {
            Ok(t) => t,
            Err(e @ UsernsError::IdmapUnsupported { .. }) => {
                assert!(
                    e.to_string()
                        .contains("(overlay) does not support idmapped mounts"),
                    "{e}"
                );
                return Err(e.to_string());
            }
            Err(e) => panic!("{e}"),
        };
        let st = fstatat(tree.as_fd(), "etc-passwd", nix::fcntl::AtFlags::empty()).unwrap();
        assert_eq!(st.st_uid, BASE);
        Ok(())
    });
    if let Err(reason) = ok {
        eprintln!("note: {reason}");
    }
}

/// The recipe that works on this kernel (overlay itself cannot be
/// idmapped): idmapped lower layers, a plain upper layer whose (empty)
/// root directory is owned by the mapped root. Container root then reads
/// image files as its own and writes the upper layer as the mapped uid;
/// the image layer is never modified.
#[test]
fn overlay_over_idmapped_lower_layers_with_a_plain_upper() {
    let Some(ns) = userns_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    for sub in ["lower", "lower-mapped", "upper", "work", "merged"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("lower/passwd"), "root\n").unwrap();
    std::fs::set_permissions(
        d.join("lower/passwd"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    nix::unistd::chown(&d.join("upper"), Some(BASE.into()), Some(BASE.into())).unwrap();
    let d2 = d.clone();
    let outcome = in_private_mount_ns(move || -> Result<(), String> {
        let d = d2;
        let lower = match idmapped_clone(&d.join("lower"), false, ns.as_fd()) {
            Ok(t) => t,
            Err(e @ UsernsError::IdmapUnsupported { .. }) => return Err(e.to_string()),
            Err(e) => panic!("{e}"),
        };
        attach(lower.as_fd(), &d.join("lower-mapped")).unwrap();
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            d.join("lower-mapped").display(),
            d.join("upper").display(),
            d.join("work").display()
        );
        let merged = d.join("merged");
        mount(
            Some("overlay"),
            &merged,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .unwrap();
        assert_eq!(
            std::fs::metadata(merged.join("passwd")).unwrap().uid(),
            BASE
        );
        // Container root (host uid BASE) edits an image file and creates one.
        let script = format!("echo x >> {0}/passwd && touch {0}/new", merged.display());
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .uid(BASE)
            .gid(BASE)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        for f in ["upper/passwd", "upper/new"] {
            let m = std::fs::metadata(d.join(f)).unwrap();
            assert_eq!((m.uid(), m.gid()), (BASE, BASE), "{f}");
        }
        // The image layer is untouched.
        let m = std::fs::metadata(d.join("lower/passwd")).unwrap();
        assert_eq!(m.uid(), 0);
        assert_eq!(
            std::fs::read_to_string(d.join("lower/passwd")).unwrap(),
            "root\n"
        );
        Ok(())
    });
    if let Err(reason) = outcome {
        rund_skip::skip!("{reason}");
    }
}
