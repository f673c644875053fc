use std::path::Path;

use super::*;
use crate::containerd::line::ContainerdBins;

fn bins(major: u32, minor: u32) -> ContainerdBins {
    ContainerdBins {
        dir: "/x/bin".into(),
        version: format!("{major}.{minor}.0"),
        major,
        minor,
    }
}

fn parse(cfg: &str) -> toml::Value {
    toml::from_str(cfg).unwrap_or_else(|e| panic!("{e}\n{cfg}"))
}

fn strings(v: &toml::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

fn layout() -> Layout {
    Layout::new(Path::new("/tmp/x"))
}

#[test]
fn v2_cri_is_disabled_unless_asked() {
    let l = layout();
    let plain = parse(&render(&l, &ContainerdOpts::new(), &bins(1, 6)));
    assert_eq!(plain["version"].as_integer(), Some(2));
    assert!(strings(&plain["disabled_plugins"]).contains(&v2::CRI_PLUGIN.to_owned()));
    assert!(plain["plugins"].get(v2::CRI_PLUGIN).is_none());
    assert_eq!(plain["grpc"]["address"].as_str(), Some("/tmp/x/c.sock"));

    let mut o = ContainerdOpts::new().cri();
    o.rund_config_path = Some("/etc/rund.toml".into());
    let v = parse(&render(&l, &o, &bins(1, 6)));
    assert!(!strings(&v["disabled_plugins"]).contains(&v2::CRI_PLUGIN.to_owned()));
    let cri = &v["plugins"][v2::CRI_PLUGIN];
    assert_eq!(cri["restrict_oom_score_adj"].as_bool(), Some(true));
    assert_eq!(
        cri["sandbox_image"].as_str(),
        Some(crate::image::BUSYBOX_IMAGE)
    );
    assert_eq!(
        cri["registry"]["config_path"].as_str(),
        Some("/tmp/x/certs.d")
    );
    assert_eq!(cri["cni"]["conf_dir"].as_str(), Some("/tmp/x/cni"));
    let rund = &cri["containerd"]["runtimes"]["rund"];
    assert_eq!(rund["runtime_type"].as_str(), Some("io.containerd.rund.v2"));
    assert_eq!(strings(&rund["pod_annotations"]), ["*", "*/*"]);
    assert_eq!(
        rund["options"]["ConfigPath"].as_str(),
        Some("/etc/rund.toml")
    );
    assert!(cri["containerd"]["runtimes"].get("runc").is_none());
    let both = parse(&render(
        &l,
        &ContainerdOpts::new().cri().with_runc(),
        &bins(1, 6),
    ));
    let runc = &both["plugins"][v2::CRI_PLUGIN]["containerd"]["runtimes"]["runc"];
    assert_eq!(runc["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
}

#[test]
fn v3_splits_cri_into_images_runtime_and_service() {
    let l = layout();
    let plain = parse(&render(&l, &ContainerdOpts::new(), &bins(2, 1)));
    assert_eq!(plain["version"].as_integer(), Some(3));
    let disabled = strings(&plain["disabled_plugins"]);
    for p in [v3::CRI_SERVICE, v3::CRI_RUNTIME, v3::CRI_IMAGES] {
        assert!(disabled.contains(&p.to_owned()), "{p} not in {disabled:?}");
    }
    assert!(plain["plugins"].get(v3::CRI_RUNTIME).is_none());

    let mut o = ContainerdOpts::new().cri().with_runc();
    o.rund_config_path = Some("/etc/rund.toml".into());
    let v = parse(&render(&l, &o, &bins(2, 1)));
    let disabled = strings(&v["disabled_plugins"]);
    assert!(
        !disabled.contains(&v3::CRI_RUNTIME.to_owned()),
        "{disabled:?}"
    );
    assert!(
        disabled.contains(&"io.containerd.nri.v1.nri".to_owned()),
        "NRI's socket is global: {disabled:?}"
    );
    // No v2 CRI keys survive: containerd 2.x would migrate or ignore them.
    assert!(v["plugins"][v3::CRI_SERVICE].get("sandbox_image").is_none());
    assert!(v["plugins"][v3::CRI_SERVICE].get("containerd").is_none());
    let images = &v["plugins"][v3::CRI_IMAGES];
    assert_eq!(
        images["pinned_images"]["sandbox"].as_str(),
        Some(crate::image::BUSYBOX_IMAGE)
    );
    assert_eq!(
        images["registry"]["config_path"].as_str(),
        Some("/tmp/x/certs.d")
    );
    let runtime = &v["plugins"][v3::CRI_RUNTIME];
    assert_eq!(runtime["restrict_oom_score_adj"].as_bool(), Some(true));
    assert_eq!(strings(&runtime["cni"]["bin_dirs"]), ["/usr/lib/cni"]);
    assert_eq!(runtime["cni"]["conf_dir"].as_str(), Some("/tmp/x/cni"));
    let rund = &runtime["containerd"]["runtimes"]["rund"];
    assert_eq!(rund["runtime_type"].as_str(), Some("io.containerd.rund.v2"));
    assert_eq!(rund["sandboxer"].as_str(), Some("podsandbox"));
    assert_eq!(strings(&rund["pod_annotations"]), ["*", "*/*"]);
    assert_eq!(
        rund["options"]["ConfigPath"].as_str(),
        Some("/etc/rund.toml")
    );
    let runc = &runtime["containerd"]["runtimes"]["runc"];
    assert_eq!(runc["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
    assert_eq!(
        v["plugins"][v3::CRI_SERVICE]["stream_server_port"].as_str(),
        Some("0")
    );

    let mut shim = ContainerdOpts::new().cri();
    shim.rund_sandboxer = Some("shim".into());
    let v = parse(&render(&l, &shim, &bins(2, 1)));
    assert_eq!(
        v["plugins"][v3::CRI_RUNTIME]["containerd"]["runtimes"]["rund"]["sandboxer"].as_str(),
        Some("shim")
    );
}

#[test]
fn offline_hosts_toml_names_a_closed_local_port() {
    let v = parse(&hosts_toml());
    assert_eq!(v["server"].as_str(), Some("http://127.0.0.1:9"));
    let dir = tempfile::tempdir().unwrap();
    let l = Layout::new(dir.path());
    l.create().unwrap();
    let on_disk = std::fs::read_to_string(l.default_hosts_toml()).unwrap();
    assert_eq!(on_disk, hosts_toml());
}

#[test]
fn without_rund_runtime_and_with_a_forced_version() {
    let l = layout();
    let mut o = ContainerdOpts::new().cri();
    o.rund_runtime = false;
    o.rund_config_path = Some("/etc/rund.toml".into());
    for b in [bins(1, 6), bins(2, 1)] {
        let cfg = render(&l, &o, &b);
        assert!(!cfg.contains("runtimes.rund"), "{cfg}");
        assert!(!cfg.contains("ConfigPath"), "{cfg}");
        parse(&cfg);
    }
    // containerd 2.x with a version 2 file (Debian's shape): the 1.x CRI plugin keys.
    o.config_version = Some(2);
    let v = parse(&render(&l, &o, &bins(2, 1)));
    assert_eq!(v["version"].as_integer(), Some(2));
    assert!(v["plugins"][v2::CRI_PLUGIN].get("sandbox_image").is_some());
}

#[test]
fn debug_logs_at_trace_on_2x_only() {
    let l = layout();
    let level = |b: &ContainerdBins| {
        parse(&render(&l, &ContainerdOpts::new(), b))["debug"]["level"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(level(&bins(1, 6)), "debug");
    assert_eq!(level(&bins(2, 1)), "trace");
}
