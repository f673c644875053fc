//! Resolving container paths under the rootfs without escaping it through
//! symlinks (a container image is untrusted input).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Joins `path` under `root`, resolving symlinks as if `root` were `/`.
/// Missing components are taken literally.
pub fn secure_join(root: &Path, path: &Path) -> Result<PathBuf, nix::errno::Errno> {
    let mut todo: VecDeque<OsString> = components(path);
    let mut cur = PathBuf::new();
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&part);
        let full = root.join(&next);
        match std::fs::symlink_metadata(&full) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 255 {
                    return Err(nix::errno::Errno::ELOOP);
                }
                let target = std::fs::read_link(&full).map_err(crate::sys::io_errno)?;
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for c in components(&target).into_iter().rev() {
                    todo.push_front(c);
                }
            }
            _ => cur = next,
        }
    }
    Ok(root.join(cur))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_stay_inside_root() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink("/real", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../etc", root.join("up")).unwrap();
        assert_eq!(
            secure_join(root, Path::new("/abs/x")).unwrap(),
            root.join("real/x")
        );
        assert_eq!(
            secure_join(root, Path::new("/up/passwd")).unwrap(),
            root.join("etc/passwd")
        );
        assert_eq!(
            secure_join(root, Path::new("/../../a/./b")).unwrap(),
            root.join("a/b")
        );
    }

    #[test]
    fn symlink_loops_are_refused() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/loop", d.path().join("loop")).unwrap();
        assert!(secure_join(d.path(), Path::new("/loop/x")).is_err());
    }
}
