//! `linux.cgroupsPath`, both the path form and systemd's
//! `slice:prefix:name`: whatever parses stays under the hierarchy root and
//! off rund's reserved names.

use std::path::{Component, Path};

use rund_cgroup::CgroupPath;

/// Names rund keeps for its pool (slots, gc scratch).
const RESERVED: &str = ".rund-pool";

pub fn run(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = CgroupPath::parse(raw) else {
        return;
    };
    let rel = p.rel();
    let parts: Vec<&str> = rel.iter().map(|c| c.to_str().expect("utf-8")).collect();
    assert!(!parts.is_empty(), "{raw:?}: the root cgroup");
    assert!(
        rel.components().all(|c| matches!(c, Component::Normal(_))),
        "{raw:?} -> {rel:?}"
    );
    for part in &parts {
        assert!(!part.is_empty() && *part != "." && *part != "..", "{raw:?}");
        assert!(!part.contains(['/', '\0', '\n']), "{raw:?}: {part:?}");
        assert!(!part.starts_with(RESERVED), "{raw:?}: reserved {part:?}");
        assert!(part.len() <= 255, "{raw:?}: {part:?} too long");
    }
    let name = p.name();
    assert_eq!(Some(&name), parts.last());
    assert!(!name.starts_with("cgroup.") && name != "tasks" && name != "notify_on_release");
    assert_eq!(p.parent().join(name), rel);

    let root = Path::new("/sys/fs/cgroup/memory");
    let dir = p.under(root);
    assert!(
        dir.starts_with(root) && dir != root,
        "{raw:?} escapes: {dir:?}"
    );
    assert_eq!(dir.strip_prefix(root).expect("under root"), rel);

    let key = p.key();
    assert!(
        !key.is_empty() && !key.contains('/') && key != "." && key != "..",
        "{key:?}"
    );
    // The key names one state file per cgroup: distinct paths, distinct keys.
    let unescaped = key.replace("%2F", "/").replace("%25", "%");
    assert_eq!(Path::new(&unescaped), rel, "key {key:?} is ambiguous");

    // A parsed path, written back in the path form, parses to itself.
    let again = CgroupPath::parse(&format!("/{}", rel.display())).expect("reparses");
    assert_eq!(again, p, "{raw:?}");
    if !raw.contains('/') && raw.matches(':').count() == 2 {
        systemd(raw, &parts);
    }
}

/// `slice:prefix:name`: the slice expands as runc's ExpandSlice does
/// (`a-b.slice` is `a.slice/a-b.slice`, `-.slice` is the root, no empty
/// dash-separated component), then the unit.
fn systemd(raw: &str, parts: &[&str]) {
    let slice = raw.split(':').next().unwrap_or_default();
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let (unit, slices) = parts.split_last().expect("non-empty");
    assert!(
        unit.ends_with(".scope") || unit.ends_with(".slice"),
        "{raw:?}: {unit}"
    );
    let base = slice.strip_suffix(".slice").expect("a slice");
    if base == "-" {
        assert!(slices.is_empty(), "{raw:?}: -.slice is the root");
        return;
    }
    let comps: Vec<&str> = base.split('-').collect();
    assert!(
        comps.iter().all(|c| !c.is_empty()),
        "{raw:?}: empty slice component"
    );
    assert_eq!(slices.len(), comps.len(), "{raw:?}");
    for (i, s) in slices.iter().enumerate() {
        assert_eq!(*s, format!("{}.slice", comps[..=i].join("-")), "{raw:?}");
    }
}
