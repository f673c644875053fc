use super::*;

/// A minimal ELF64 file whose `.go.buildinfo` names `main_path`, as `go build` (≥ 1.18)
/// writes it.
fn fake_go_elf(main_path: &str) -> Vec<u8> {
    let mut info = Vec::new();
    info.extend_from_slice(BUILDINFO_MAGIC);
    info.extend_from_slice(&[8, 2]);
    info.resize(32, 0);
    let push = |out: &mut Vec<u8>, s: &[u8]| {
        assert!(s.len() < 128 * 128);
        if s.len() >= 0x80 {
            out.push((s.len() & 0x7f) as u8 | 0x80);
            out.push((s.len() >> 7) as u8);
        } else {
            out.push(s.len() as u8);
        }
        out.extend_from_slice(s);
    };
    push(&mut info, b"go1.22.1");
    let sentinel = [0x30u8; 16];
    let mut m = sentinel.to_vec();
    m.extend_from_slice(
        format!("path\t{main_path}\nbuild\t-compiler=gc\nbuild\tGOOS=linux\n").as_bytes(),
    );
    m.extend_from_slice(&sentinel);
    push(&mut info, &m);

    let names = b"\0.shstrtab\0.go.buildinfo\0";
    let names_off = 64u64;
    let info_off = names_off + names.len() as u64;
    let shoff = info_off + info.len() as u64;
    let mut f = vec![0u8; 64];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4] = 2; // 64-bit
    f[5] = 1; // little endian
    f[6] = 1;
    f[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    f[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
    f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
    f[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
    f.extend_from_slice(names);
    f.extend_from_slice(&info);
    let sh = |name: u32, off: u64, size: u64| {
        let mut s = vec![0u8; 64];
        s[0..4].copy_from_slice(&name.to_le_bytes());
        s[4..8].copy_from_slice(&1u32.to_le_bytes());
        s[24..32].copy_from_slice(&off.to_le_bytes());
        s[32..40].copy_from_slice(&size.to_le_bytes());
        s
    };
    f.extend(vec![0u8; 64]);
    f.extend(sh(1, names_off, names.len() as u64));
    f.extend(sh(11, info_off, info.len() as u64));
    f
}

fn write_fake(dir: &Path, name: &str, main_path: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, fake_go_elf(main_path)).unwrap();
    p
}

#[test]
fn main_package_path_gives_the_major_version() {
    let m = major_of_main_package;
    assert_eq!(
        m("github.com/containerd/containerd/cmd/containerd"),
        Some(1)
    );
    assert_eq!(
        m("github.com/containerd/containerd/v2/cmd/containerd"),
        Some(2)
    );
    assert_eq!(
        m("github.com/containerd/containerd/v3/cmd/containerd"),
        Some(3)
    );
    assert_eq!(
        m("github.com/containerd/containerd/vx/cmd/containerd"),
        None
    );
    assert_eq!(m("github.com/containerd/containerd-shim"), None);
    assert_eq!(m("github.com/k3s-io/k3s/cmd/server"), None);
}

#[test]
fn build_info_is_read_from_the_elf_section() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = write_fake(
        dir.path(),
        "c2",
        "github.com/containerd/containerd/v2/cmd/containerd",
    );
    let info = go_build_info(&v2).expect("build info");
    assert!(info.starts_with("path\tgithub.com/containerd/containerd/v2/cmd/containerd\n"));
    assert!(info.contains("build\tGOOS=linux"), "{info:?}");
    assert_eq!(containerd_major(&v2), Some(2));
    let v1 = write_fake(
        dir.path(),
        "c1",
        "github.com/containerd/containerd/cmd/containerd",
    );
    assert_eq!(containerd_major(&v1), Some(1));
}

#[test]
fn a_long_module_info_uses_a_two_byte_length() {
    let long = format!(
        "github.com/containerd/containerd/v2/cmd/{}",
        "x".repeat(200)
    );
    let dir = tempfile::tempdir().unwrap();
    let p = write_fake(dir.path(), "long", &long);
    let info = go_build_info(&p).unwrap();
    assert_eq!(info.lines().next(), Some(format!("path\t{long}").as_str()));
}

#[test]
fn non_go_and_broken_files_give_nothing() {
    // This test binary is ELF but not Go.
    let me = std::env::current_exe().unwrap();
    assert_eq!(go_build_info(&me), None);
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("script");
    std::fs::write(
        &text,
        "#!/bin/sh\necho containerd github.com/containerd/containerd/v2\n",
    )
    .unwrap();
    assert_eq!(containerd_major(&text), None);
    let mut cut = fake_go_elf("github.com/containerd/containerd/v2/cmd/containerd");
    cut.truncate(100);
    let p = dir.path().join("cut");
    std::fs::write(&p, cut).unwrap();
    assert_eq!(containerd_major(&p), None);
    assert_eq!(containerd_major(&dir.path().join("missing")), None);
}

#[test]
fn pre_1_18_layout_is_not_guessed() {
    let mut sec = BUILDINFO_MAGIC.to_vec();
    sec.extend_from_slice(&[8, 0]);
    sec.resize(64, 0);
    assert_eq!(parse_build_info(&sec), None);
}

#[test]
fn replies_render_as_containerd_parses_them() {
    let a = "unix:///run/containerd/s/abc";
    assert_eq!(Reply::Address.render(a), a);
    let v: serde_json::Value = serde_json::from_str(&Reply::V3.render(a)).unwrap();
    assert_eq!(v["version"], 3);
    assert_eq!(v["address"], a);
    assert_eq!(v["protocol"], "ttrpc");
}

#[test]
fn the_caller_binary_decides_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = write_fake(
        dir.path(),
        "c2",
        "github.com/containerd/containerd/v2/cmd/containerd",
    );
    let v1 = write_fake(
        dir.path(),
        "c1",
        "github.com/containerd/containerd/cmd/containerd",
    );
    // One test owns the variable: tests run in parallel threads of one process.
    std::env::remove_var(BOOTSTRAP_ENV);
    assert_eq!(choose(v2.to_str().unwrap()), Reply::V3);
    assert_eq!(choose(v1.to_str().unwrap()), Reply::Address);
    assert_eq!(choose(""), Reply::Address);
    assert_eq!(choose("/nonexistent/containerd"), Reply::Address);
    std::env::set_var(BOOTSTRAP_ENV, "address");
    assert_eq!(choose(v2.to_str().unwrap()), Reply::Address);
    std::env::set_var(BOOTSTRAP_ENV, "v3");
    assert_eq!(choose(v1.to_str().unwrap()), Reply::V3);
    std::env::remove_var(BOOTSTRAP_ENV);
}
