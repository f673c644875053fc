//! Whole installs and uninstalls on a temp node (containerd itself is not run here: the
//! integration test `rund_install` starts one from the result).

use std::os::unix::fs::PermissionsExt;

use super::{install, uninstall, Node};
use crate::cli::install::InstallError;

const V2_MAIN: &str = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"example/pause:1\"\n";
const V3_MAIN: &str = "version = 3\n\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = \"example/pause:1\"\n";

fn dry(node: &Node, version: &str) -> String {
    let mut a = node.args(version);
    a.dry_run = true;
    let before = node.snapshot();
    let (r, out) = install(&a);
    assert_eq!(r.unwrap(), 0, "{out}");
    assert_eq!(node.snapshot(), before, "a dry run writes nothing:\n{out}");
    assert!(out.contains("containerd restart: needed"), "{out}");
    out
}

#[test]
fn dry_run_on_1x_prints_the_version_2_block_for_config_toml() {
    let node = Node::new();
    std::fs::write(node.config(), V2_MAIN).unwrap();
    let out = dry(&node, "1.6.20");
    assert!(out.contains("containerd 1.x"), "{out}");
    assert!(
        out.contains(&format!(
            "would back up and append to {}",
            node.config().display()
        )),
        "{out}"
    );
    assert!(
        out.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.rund]"),
        "{out}"
    );
    assert!(!out.contains("io.containerd.cri.v1.runtime"), "{out}");
    assert!(!out.contains("drop-in"), "1.x never gets a drop-in: {out}");
    let shim = node.prefix().join("bin/containerd-shim-rund-v2");
    assert!(
        out.contains(&format!("runtime_path = \"{}\"", shim.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "ConfigPath = \"{}\"",
            node.rund_config().display()
        )),
        "{out}"
    );
    for b in ["containerd-shim-rund-v2", "rund-agent", "rund", "rund-init"] {
        assert!(
            out.contains(&format!(
                "would install {}",
                node.prefix().join("bin").join(b).display()
            )),
            "{b}: {out}"
        );
    }
    assert!(
        !out.contains("rund-bench") && !out.contains("rund-probe") && !out.contains("rund-agent.d"),
        "{out}"
    );
    // A prefix off systemd's PATH: 1.6.20 would not find the shim.
    assert!(out.contains("ignore `runtime_path`"), "{out}");
}

#[test]
fn dry_run_on_2x_with_a_version_3_config_prints_a_version_3_drop_in() {
    let node = Node::new();
    std::fs::write(node.config(), V3_MAIN).unwrap();
    let out = dry(&node, "2.1.9");
    assert!(out.contains("containerd 2.x"), "{out}");
    assert!(
        out.contains("imports = [\""),
        "no imports yet: one is added: {out}"
    );
    let drop_in = node.etc().join("conf.d/rund.toml");
    assert!(
        out.contains(&format!("would write drop-in {}", drop_in.display())),
        "{out}"
    );
    assert!(out.contains("version = 3"), "{out}");
    assert!(
        out.contains("[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.rund]"),
        "{out}"
    );
    assert!(out.contains("sandboxer = \"podsandbox\""), "{out}");
    // No runtime options on 2.x: the custom config path goes through RUND_CONFIG.
    assert!(!out.contains("ConfigPath"), "{out}");
    let env = format!("RUND_CONFIG={}", node.rund_config().display());
    assert!(
        out.contains(&format!("set {env} in containerd's environment (e.g.")),
        "the plan's note: {out}"
    );
}

#[test]
fn dry_run_on_2x_with_a_version_2_config_keeps_version_2() {
    // Debian's containerd 2.1 ships a version 2 config.toml; a version 3 drop-in would make
    // containerd drop config.toml's CRI settings.
    let node = Node::new();
    let main = format!(
        "version = 2\nimports = [\"conf.d/*.toml\"]\n{}",
        &V2_MAIN["version = 2\n".len()..]
    );
    std::fs::write(node.config(), main).unwrap();
    let out = dry(&node, "2.1");
    assert!(
        !out.contains("insert into"),
        "imports cover conf.d already: {out}"
    );
    assert!(out.contains("version = 2"), "{out}");
    assert!(out.contains("io.containerd.grpc.v1.cri"), "{out}");
    assert!(!out.contains("io.containerd.cri.v1.runtime"), "{out}");
}

#[test]
fn without_a_config_toml_one_is_created() {
    let node = Node::new();
    let out = dry(&node, "2.1");
    assert!(
        out.contains(&format!("would create {}", node.config().display())),
        "{out}"
    );
    assert!(out.contains("version = 3"), "{out}");
    let node = Node::new();
    let out = dry(&node, "1.6");
    assert!(out.contains("would create"), "{out}");
    assert!(out.contains("version = 2"), "{out}");
}

fn files_under(node: &Node, rel: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(node.path(rel))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn round_trip(version: &str, main: &str) {
    let node = Node::new();
    std::fs::write(node.config(), main).unwrap();
    let (r, out) = install(&node.args(version));
    assert_eq!(r.unwrap(), 0, "{out}");
    assert!(
        out.contains("containerd restart: needed, not done"),
        "{out}"
    );
    assert_eq!(
        files_under(&node, "usr/local/bin"),
        ["containerd-shim-rund-v2", "rund", "rund-agent", "rund-init"]
    );
    let mode = std::fs::metadata(node.prefix().join("bin/rund"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert!(node.rund_config().exists());
    let edited = std::fs::read_to_string(node.config()).unwrap();
    assert_ne!(edited, main);
    let backups: Vec<String> = files_under(&node, "etc/containerd")
        .into_iter()
        .filter(|f| f.starts_with("config.toml.rund-backup-"))
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(
        std::fs::read_to_string(node.etc().join(&backups[0])).unwrap(),
        main
    );

    // Again: nothing to do, no restart.
    let (r, out) = install(&node.args(version));
    assert_eq!(r.unwrap(), 0, "{out}");
    assert!(out.contains("containerd restart: not needed"), "{out}");
    assert_eq!(std::fs::read_to_string(node.config()).unwrap(), edited);

    let (r, out) = uninstall(&node.uninstall_args());
    assert_eq!(r.unwrap(), 0, "{out}");
    assert!(out.contains("containerd restart: needed"), "{out}");
    assert_eq!(
        std::fs::read_to_string(node.config()).unwrap(),
        main,
        "{out}"
    );
    assert!(files_under(&node, "usr/local/bin").is_empty(), "{out}");
    assert!(!node.rund_config().exists());
    assert!(!node.etc().join("conf.d/rund.toml").exists());
    assert!(!node.manifest().exists());
    let (r, out) = uninstall(&node.uninstall_args());
    assert_eq!(r.unwrap(), 0);
    assert!(out.contains("nothing to uninstall"), "{out}");
}

#[test]
fn install_then_uninstall_restores_a_1x_config() {
    round_trip("1.6", V2_MAIN);
}

#[test]
fn install_then_uninstall_restores_a_2x_config() {
    round_trip("2.1", V3_MAIN);
    round_trip("2.1", V2_MAIN);
}

#[test]
fn foreign_files_are_kept_or_refused() {
    let node = Node::new();
    std::fs::write(node.config(), V3_MAIN).unwrap();
    // Someone's own rund binary: moved aside, restored on uninstall.
    let old = node.prefix().join("bin/rund");
    std::fs::create_dir_all(old.parent().unwrap()).unwrap();
    std::fs::write(&old, "old rund").unwrap();
    // An existing rund config is never touched.
    std::fs::create_dir_all(node.rund_config().parent().unwrap()).unwrap();
    std::fs::write(node.rund_config(), "grace_period_seconds = 5\n").unwrap();
    let (r, out) = install(&node.args("2.1"));
    assert_eq!(r.unwrap(), 0, "{out}");
    assert!(out.contains("keep"), "{out}");
    assert_ne!(std::fs::read(&old).unwrap(), b"old rund");
    // The user edits the drop-in: uninstall leaves it and says so.
    let drop_in = node.etc().join("conf.d/rund.toml");
    let mut d = std::fs::read_to_string(&drop_in).unwrap();
    d.push_str("# mine\n");
    std::fs::write(&drop_in, &d).unwrap();
    let (r, out) = uninstall(&node.uninstall_args());
    assert_eq!(r.unwrap(), 1, "{out}");
    assert!(
        out.contains(&format!(
            "left in place: {} changed since install",
            drop_in.display()
        )),
        "{out}"
    );
    assert_eq!(std::fs::read(&old).unwrap(), b"old rund", "{out}");
    assert_eq!(
        std::fs::read_to_string(node.rund_config()).unwrap(),
        "grace_period_seconds = 5\n"
    );
    assert_eq!(std::fs::read_to_string(&drop_in).unwrap(), d);
    assert!(node.manifest().exists(), "what is left stays recorded");
}

fn refused(version: &str, main: Option<&str>, needle: &str) -> InstallError {
    let node = Node::new();
    if let Some(m) = main {
        std::fs::write(node.config(), m).unwrap();
    }
    let before = node.snapshot();
    let (r, out) = install(&node.args(version));
    let e = r.expect_err(&out);
    assert!(e.to_string().contains(needle), "{e}");
    assert_eq!(node.snapshot(), before, "a refused install writes nothing");
    e
}

#[test]
fn bad_configs_are_refused_with_nothing_written() {
    let mine = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.rund]\n  runtime_type = \"io.containerd.rund.v2\"\n";
    refused("1.6", Some(mine), "already registers a `rund` runtime");
    refused("2.1", Some(mine), "already registers a `rund` runtime");
    refused("1.6", Some("[plugins.cri]\n"), "version = 2");
    refused("2.1", Some("root = \"/r\"\n"), "containerd config migrate");
    refused("2.1", Some("version = 3\nimports = 7\n"), "list of strings");
    refused("1.6", Some("version = = 2"), "not valid TOML");
}

#[test]
fn an_import_that_replaces_the_cri_section_on_1x_is_refused() {
    let node = Node::new();
    let extra = node.etc().join("cri.toml");
    std::fs::write(
        &extra,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"x\"\n",
    )
    .unwrap();
    std::fs::write(
        node.config(),
        format!(
            "version = 2\nimports = [{:?}]\n",
            extra.display().to_string()
        ),
    )
    .unwrap();
    let (r, out) = install(&node.args("1.6"));
    let e = r.expect_err(&out);
    assert!(
        e.to_string()
            .contains("replaces config.toml's whole CRI section"),
        "{e}"
    );
}

#[test]
fn a_foreign_drop_in_or_missing_binary_is_refused() {
    let node = Node::new();
    std::fs::write(
        node.config(),
        "version = 3\nimports = [\"conf.d/*.toml\"]\n",
    )
    .unwrap();
    std::fs::create_dir_all(node.etc().join("conf.d")).unwrap();
    std::fs::write(node.etc().join("conf.d/rund.toml"), "# someone's\n").unwrap();
    let (r, out) = install(&node.args("2.1"));
    assert!(
        matches!(r, Err(InstallError::Foreign { .. })),
        "{r:?} {out}"
    );
    let node = Node::new();
    std::fs::remove_file(node.from().join("rund-agent")).unwrap();
    let (r, _) = install(&node.args("2.1"));
    let e = r.unwrap_err();
    assert!(e.to_string().contains("rund-agent"), "{e}");
}

#[test]
fn restart_only_when_asked_and_needed() {
    let node = Node::new();
    // containerd's socket, per config.toml, and a systemctl that records its arguments.
    let sock = node.path("c.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::write(
        node.config(),
        format!(
            "version = 3\n\n[grpc]\n  address = {:?}\n",
            sock.display().to_string()
        ),
    )
    .unwrap();
    let fake = node.path("fakebin");
    std::fs::create_dir_all(&fake).unwrap();
    let calls = node.path("systemctl.calls");
    std::fs::write(
        fake.join("systemctl"),
        format!("#!/bin/sh\necho \"$@\" >> {}\n", calls.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        fake.join("systemctl"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    // Only this test runs a command by name.
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::set_var("PATH", format!("{}:{path}", fake.display()));

    let (r, out) = install(&node.args("2.1"));
    assert_eq!(r.unwrap(), 0, "{out}");
    assert!(!calls.exists(), "no restart without --restart: {out}");
    let mut a = node.args("2.1");
    a.restart = true;
    let (r, out) = install(&a);
    assert_eq!(r.unwrap(), 0, "{out}");
    assert!(out.contains("containerd restart: not needed"), "{out}");
    assert!(!calls.exists(), "nothing changed, so no restart: {out}");
    let mut u = node.uninstall_args();
    u.restart = true;
    let (r, out) = uninstall(&u);
    std::env::set_var("PATH", path);
    assert_eq!(r.unwrap(), 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap(),
        "restart containerd\n"
    );
    assert!(
        out.contains(&format!("containerd is back on {}", sock.display())),
        "{out}"
    );
}
