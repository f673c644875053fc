//! Resolving container paths inside the rootfs through fds (a container
//! image is untrusted input): symlinks and ".." are resolved as if the
//! rootfs were `/`, and what is missing is created beneath an fd, so no path
//! string is ever re-resolved after the check (the CVE-2021-30465 class).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};

use rund_sys::mount::{openat2, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS};

/// What to do when the path (or a parent) does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    /// Fail with ENOENT.
    No,
    /// Create directories (mode 0755).
    Dir,
    /// Create parent directories and an empty file (mode 0644) at the end.
    File,
}

/// Symlinks followed before giving up with ELOOP (the kernel's limit).
const MAX_LINKS: usize = 40;

/// `path` relative to a root: "." for the root itself.
pub fn relative(path: &Path) -> PathBuf {
    let p = path.strip_prefix("/").unwrap_or(path);
    if p.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        p.to_path_buf()
    }
}

/// `path` with "." and ".." applied lexically (never above "/").
pub fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Whether `path` names the root itself once "." and ".." are applied.
pub fn is_root(path: &Path) -> bool {
    clean(path) == Path::new("/")
}

/// Opens `path` (O_PATH) inside the tree rooted at `root`, creating what is
/// missing according to `create`.
pub fn open_in_root(root: BorrowedFd<'_>, path: &Path, create: Create) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_PATH.bits();
    match openat2(
        root,
        &relative(path),
        flags,
        0,
        RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    ) {
        Err(Errno::ENOENT) if create != Create::No => walk(root, path, create),
        r => r,
    }
}

fn components(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

fn kind(fd: BorrowedFd<'_>) -> Result<SFlag, Errno> {
    let st = nix::sys::stat::fstat(fd)?;
    Ok(SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()))
}

fn open_one(dir: BorrowedFd<'_>, name: &OsString) -> Result<OwnedFd, Errno> {
    let fd = nix::fcntl::openat(
        dir,
        name.as_os_str(),
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    Ok(fd)
}

/// The component-by-component walk: each step opens one name beneath a dir
/// fd without following it; symlinks are read and their targets resolved
/// from the root (absolute) or the current dir (relative); ".." never goes
/// above the root. Missing names are created beneath the current dir fd.
fn walk(root: BorrowedFd<'_>, path: &Path, create: Create) -> Result<OwnedFd, Errno> {
    let mut todo = components(path);
    // The dirs walked through, root first: ".." pops one.
    let mut stack: Vec<OwnedFd> = vec![root.try_clone_to_owned().map_err(crate::sys::io_errno)?];
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let cur = stack.last().expect("the root is never popped").as_fd();
        let next = match open_one(cur, &name) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create != Create::No => {
                let last = todo.is_empty();
                let made = if last && create == Create::File {
                    nix::fcntl::openat(
                        cur,
                        name.as_os_str(),
                        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY,
                        Mode::from_bits_truncate(0o644),
                    )
                    .map(drop)
                } else {
                    nix::sys::stat::mkdirat(cur, name.as_os_str(), Mode::from_bits_truncate(0o755))
                };
                match made {
                    // Someone else made it meanwhile: look again.
                    Ok(()) | Err(Errno::EEXIST) => {
                        todo.push_front(name);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        if kind(next.as_fd())? == SFlag::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::ELOOP);
            }
            let target = nix::fcntl::readlinkat(next.as_fd(), "")?;
            let target = Path::new(std::ffi::OsStr::from_bytes(target.as_bytes()));
            if target.is_absolute() {
                stack.truncate(1);
            }
            for c in components(target).into_iter().rev() {
                todo.push_front(c);
            }
            continue;
        }
        stack.push(next);
    }
    Ok(stack.pop().expect("at least the root"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn real(fd: &OwnedFd) -> PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    fn root() -> (tempfile::TempDir, std::fs::File) {
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::open(d.path()).unwrap();
        (d, f)
    }

    #[test]
    fn symlinks_stay_inside_root() {
        let (d, r) = root();
        let root = d.path();
        std::fs::create_dir_all(root.join("real/x")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), "").unwrap();
        std::os::unix::fs::symlink("/real", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../etc", root.join("up")).unwrap();
        let fd = open_in_root(r.as_fd(), Path::new("/abs/x"), Create::No).unwrap();
        assert_eq!(real(&fd), root.join("real/x"));
        let fd = open_in_root(r.as_fd(), Path::new("/up/passwd"), Create::No).unwrap();
        assert_eq!(real(&fd), root.join("etc/passwd"));
        let fd = open_in_root(r.as_fd(), Path::new("/../../real/./x"), Create::No).unwrap();
        assert_eq!(real(&fd), root.join("real/x"));
    }

    #[test]
    fn dangling_symlinks_out_of_root_are_created_inside() {
        let (d, r) = root();
        let root = d.path();
        let outside = tempfile::tempdir().unwrap();
        let name = outside.path().file_name().unwrap().to_str().unwrap();
        // Points outside the root, both ways; neither target exists inside it.
        let target = format!(
            "/../../../../{}/{name}/made",
            outside.path().parent().unwrap().display()
        );
        std::os::unix::fs::symlink(&target, root.join("abs")).unwrap();
        std::os::unix::fs::symlink(format!("../../../..{target}"), root.join("rel")).unwrap();
        for (link, kind) in [("/abs/sub", Create::Dir), ("/rel/file", Create::File)] {
            let fd = open_in_root(r.as_fd(), Path::new(link), kind).unwrap();
            let got = real(&fd);
            assert!(
                got.starts_with(root),
                "{link} resolved to {}",
                got.display()
            );
        }
        assert!(
            !outside.path().join("made").exists(),
            "created outside the root"
        );
        let inside = root.join(
            target
                .trim_start_matches("/../../../../")
                .trim_start_matches('/'),
        );
        assert!(inside.join("sub").is_dir(), "{}", inside.display());
        assert!(inside.join("file").is_file());
    }

    #[test]
    fn missing_is_enoent_without_create_and_loops_are_refused() {
        let (d, r) = root();
        assert_eq!(
            open_in_root(r.as_fd(), Path::new("/nope"), Create::No).unwrap_err(),
            Errno::ENOENT
        );
        std::os::unix::fs::symlink("/loop", d.path().join("loop")).unwrap();
        assert_eq!(
            open_in_root(r.as_fd(), Path::new("/loop/x"), Create::Dir).unwrap_err(),
            Errno::ELOOP
        );
    }

    #[test]
    fn root_and_relative_forms() {
        assert!(is_root(Path::new("/")));
        assert!(is_root(Path::new("/a/..")));
        assert!(is_root(Path::new("/../..")));
        assert!(!is_root(Path::new("/a")));
        assert_eq!(relative(Path::new("/")), PathBuf::from("."));
        assert_eq!(relative(Path::new("/a/b")), PathBuf::from("a/b"));
        assert_eq!(clean(Path::new("/a/../b/./c")), PathBuf::from("/b/c"));
    }
}
