//! `rund install` against a real containerd of the selected line: install into a temp prefix
//! and a temp containerd config (as the user would have it), start containerd from that config,
//! run a rund pod through CRI, then `rund uninstall` restores the config byte for byte and
//! containerd no longer knows the handler.
//!
//! rund's binaries are NOT on this containerd's PATH: it finds the shim only through the
//! `runtime_path` install wrote, and the shim its agent next to itself.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rund_tests::containerd::config::{self, Layout};
use rund_tests::containerd::line;
use rund_tests::cri::IdRange;
use rund_tests::{
    assert_no_leaks_within, rund_bins_or_skip, ContainerSpec, Containerd, ContainerdOpts,
    LeakSnapshot, PodSpec, BUSYBOX_IMAGE, K8S_NAMESPACE,
};

const GRACE: Duration = Duration::from_secs(15);

struct Paths {
    prefix: PathBuf,
    config: PathBuf,
    rund_config: PathBuf,
    manifest: PathBuf,
}

fn paths(dir: &Path) -> Paths {
    Paths {
        prefix: dir.join("prefix"),
        config: dir.join("etc/containerd/config.toml"),
        rund_config: dir.join("etc/rund/config.toml"),
        manifest: dir.join("var/lib/rund/install-manifest.json"),
    }
}

fn rund(bin_dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin_dir.join("rund"))
        .args(args)
        .output()
        .expect("run rund");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn install_and_run_a_pod(test: &str, config_version: Option<u32>) {
    let Some(bins) = rund_bins_or_skip(test) else {
        return;
    };
    let ctrd = line::selected().unwrap();
    let dir = Containerd::new_dir().unwrap();
    let p = paths(&dir);
    // The user's config: this instance's private paths and CRI, no rund.
    let mut opts = ContainerdOpts::new().cri();
    opts.with_rund = false;
    opts.rund_runtime = false;
    opts.config_version = config_version;
    let user_cfg = config::render(&Layout::new(&dir), &opts, &ctrd);
    std::fs::create_dir_all(p.config.parent().unwrap()).unwrap();
    std::fs::write(&p.config, &user_cfg).unwrap();

    let s = |p: &Path| p.display().to_string();
    let (code, out) = rund(
        &bins.dir,
        &[
            "install",
            "--prefix",
            &s(&p.prefix),
            "--containerd-config",
            &s(&p.config),
            "--rund-config",
            &s(&p.rund_config),
            "--manifest",
            &s(&p.manifest),
            "--containerd-bin",
            &s(&ctrd.containerd()),
            "--from",
            &s(&bins.dir),
        ],
    );
    eprintln!("---- rund install ----\n{out}");
    assert_eq!(code, 0, "{out}");
    let expect_line = if ctrd.is_v2() {
        "containerd 2.x"
    } else {
        "containerd 1.x"
    };
    assert!(out.contains(expect_line), "{out}");
    assert!(
        out.contains("containerd restart: needed, not done"),
        "{out}"
    );
    assert!(p.prefix.join("bin/containerd-shim-rund-v2").exists());
    assert!(p.rund_config.exists());

    opts.config_file = Some(p.config.clone());
    if ctrd.is_v2() {
        // As the install's note says; and a pod network, which hostUsers: false needs.
        opts.env
            .push(("RUND_CONFIG".into(), p.rund_config.display().to_string()));
        opts.pod_network = true;
    }
    if !ctrd.is_v2() {
        // Debian's containerd 1.6.20 drops `runtime_path` on the way to the task service
        // (fixed in 1.6.21), so it finds the shim on its PATH only, as containerd.service
        // finds /usr/local/bin on a node.
        opts.path_links = vec![p.prefix.join("bin/containerd-shim-rund-v2")];
    }
    let mut ctd = Containerd::start_in(dir.clone(), opts, ctrd.clone()).unwrap();
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let mut pod = PodSpec::new("installed", &ctd.cgroup_parent);
    // One forwarded pod annotation and one that must not be (a privileged request).
    pod.annotations
        .insert("rund.io/grace-period-seconds".into(), "3".into());
    pod.annotations
        .insert("rund.io/memlock".into(), "unlimited".into());
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);
    let id = cri.create_and_start(&pod_id, &app, &pod).expect("app");
    let r = cri
        .exec_sync(&id, &["echo", "installed"], 10)
        .expect("ExecSync");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "installed\n", "{r:?}");
    // The shim containerd runs is the installed one (its executable: on 1.6 containerd
    // names it through a link on its PATH).
    let shim = p.prefix.join("bin/containerd-shim-rund-v2");
    let procs = rund_tests::leaks::owned_processes(&ctd.watch_prefixes(), &[], ctd.pid());
    assert!(
        procs.iter().any(
            |pr| std::fs::read_link(format!("/proc/{}/exe", pr.pid)).ok() == Some(shim.clone())
        ),
        "{procs:?}"
    );
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(ctd.task_bundle(K8S_NAMESPACE, &pod_id).join("config.json")).unwrap(),
    )
    .unwrap();
    let ann = &spec["annotations"];
    assert_eq!(ann["rund.io/grace-period-seconds"], "3", "{ann}");
    assert!(ann.get("rund.io/memlock").is_none(), "{ann}");
    cri.remove_pod(&pod_id);
    if ctrd.is_v2() {
        // containerd 2.x fails a hostUsers: false container of a runtime that has options
        // ("can't unmarshal type runtimeoptions.v1.Options"): the drop-in has none.
        let mut pod = PodSpec::new("installed-userns", &ctd.cgroup_parent);
        pod.host_network = false;
        pod.user_namespace = Some(IdRange {
            host: 0x7100_0000,
            len: 65536,
        });
        let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
        let app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);
        let id = cri
            .create_and_start(&pod_id, &app, &pod)
            .unwrap_or_else(|e| panic!("hostUsers: false: {e}\n{}", ctd.log_tail(40)));
        let r = cri
            .exec_sync(&id, &["cat", "/proc/self/uid_map"], 10)
            .expect("ExecSync");
        let map = String::from_utf8_lossy(&r.stdout);
        let fields: Vec<&str> = map.split_whitespace().collect();
        assert_eq!(fields, ["0", &0x7100_0000u32.to_string(), "65536"], "{r:?}");
        cri.remove_pod(&pod_id);
    }
    assert_no_leaks_within(&ctd, &before, GRACE);

    ctd.stop();
    let (code, out) = rund(
        &bins.dir,
        &[
            "uninstall",
            "--manifest",
            &s(&p.manifest),
            "--containerd-config",
            &s(&p.config),
        ],
    );
    eprintln!("---- rund uninstall ----\n{out}");
    assert_eq!(code, 0, "{out}");
    assert_eq!(std::fs::read_to_string(&p.config).unwrap(), user_cfg);
    assert!(!p.prefix.join("bin/containerd-shim-rund-v2").exists());
    assert!(!p.rund_config.exists());
    assert!(!p.manifest.exists());
    ctd.restart().unwrap();
    let cri = ctd.cri_client().expect("CRI client");
    let e = cri
        .run_pod_sandbox(&PodSpec::new("gone", &ctd.cgroup_parent), "rund")
        .expect_err("the rund handler is gone");
    assert!(format!("{e}").contains("rund"), "{e}");
}

#[test]
fn install_registers_rund_with_this_containerd() {
    install_and_run_a_pod("install_registers_rund_with_this_containerd", None);
}

/// containerd 2.x reading a version 2 config.toml, as Debian ships it: the drop-in must be
/// version 2 too, or containerd would drop config.toml's CRI settings.
#[test]
fn install_on_2x_with_a_version_2_config() {
    if !line::selected().is_ok_and(|b| b.is_v2()) {
        rund_tests::skip!("containerd 2.x only");
    }
    install_and_run_a_pod("install_on_2x_with_a_version_2_config", Some(2));
}

/// What ships: `make build` and `make release` link the agent and the shim static-pie (the
/// Makefile's `static_bins`), so a pod's start runs no ld.so and searches no library path. A
/// plain `cargo build` leaves them dynamic, which works but is not what ships: these fail on
/// one under `RUND_REQUIRE_BINS=1` (make test) and skip otherwise.
#[test]
fn the_agent_is_static_pie() {
    assert_static_pie("the_agent_is_static_pie", rund_tests::bins::AGENT_BIN);
}

#[test]
fn the_shim_is_static_pie() {
    assert_static_pie("the_shim_is_static_pie", rund_tests::bins::SHIM_BIN);
}

/// `rund` loads NVML and libibverbs for the shim (`rund helper`): it must stay dynamic.
#[test]
fn the_cli_is_dynamic() {
    let Some(bins) = rund_bins_or_skip("the_cli_is_dynamic") else {
        return;
    };
    let path = bins.path(rund_tests::bins::CLI_BIN);
    let elf = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let kind = ElfKind::of(&elf).unwrap_or_else(|| panic!("{}: not a 64-bit ELF", path.display()));
    assert!(
        kind.interp,
        "{} is static: it could not dlopen NVML",
        path.display()
    );
}

fn assert_static_pie(test: &str, bin: &str) {
    let Some(bins) = rund_bins_or_skip(test) else {
        return;
    };
    let path = bins.path(bin);
    let elf = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let kind = ElfKind::of(&elf).unwrap_or_else(|| panic!("{}: not a 64-bit ELF", path.display()));
    if kind.interp && std::env::var(rund_tests::bins::REQUIRE_ENV).as_deref() != Ok("1") {
        rund_tests::skip!(
            "{} is dynamic (a plain cargo build): `make build` links it static-pie",
            path.display()
        );
    }
    assert!(
        !kind.interp,
        "{} names a program interpreter: not static",
        path.display()
    );
    assert!(
        kind.pie && kind.dynamic,
        "{} is not position-independent: {kind:?}",
        path.display()
    );
}

/// The ELF facts that tell static-pie apart: no PT_INTERP, ET_DYN with a PT_DYNAMIC (its
/// own relocations).
#[derive(Debug)]
struct ElfKind {
    interp: bool,
    dynamic: bool,
    pie: bool,
}

impl ElfKind {
    fn of(b: &[u8]) -> Option<ElfKind> {
        const PT_DYNAMIC: u32 = 2;
        const PT_INTERP: u32 = 3;
        const ET_DYN: u16 = 3;
        if b.get(..5)? != b"\x7fELF\x02" || b.get(5)? != &1 {
            return None;
        }
        let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
        let (phoff, phentsize, phnum) = (
            usize::try_from(u64_at(32)?).ok()?,
            usize::from(u16_at(54)?),
            usize::from(u16_at(56)?),
        );
        let types: Vec<u32> = (0..phnum)
            .map(|i| u32_at(phoff + i * phentsize))
            .collect::<Option<_>>()?;
        Some(ElfKind {
            interp: types.contains(&PT_INTERP),
            dynamic: types.contains(&PT_DYNAMIC),
            pie: u16_at(16)? == ET_DYN,
        })
    }
}
