//! GPU, RDMA and CDI device injection (with the RDMA memlock default and the write_bw gate on
//! the shim path) through containerd and ctr, against honest doubles: `rund_devices::testutil::FakeHost` (a fake sysfs tree with
//! two mlx5 devices and real char nodes made with mknod in a temp dev root) and a fake
//! `libnvidia-ml.so` built from C with two GPUs (minors 3 and 7). No GPU or RDMA hardware is
//! involved: these paths are verified only against the doubles.
//!
//! How a denied node is proven: the injected nodes' majors (231 infiniband_verbs, 195 nvidia,
//! 509 uvm) have no driver on this host, so opening an injected node passes the device cgroup
//! and fails in the driver lookup (ENXIO/ENODEV), while a node that was not injected, made
//! visible inside by mknod or a bind mount, is refused by the device cgroup with EPERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rund_devices::testutil::{
    build_fake_nvml, FakeHost, FAKE_DRIVER_VERSION, FAKE_GPU_UUIDS, FAKE_UVM_MAJOR, IB_MAJOR,
};
use rund_devices::DeviceConfig;
use rund_tests::inside::{
    assert_allowed, assert_denied, can_raise_limits, locked_memory, memlock_hard, mknod_probe,
    open_probe, parse_stat, probe, stat_script,
};
use rund_tests::ocispec::{set_annotation, ConfigRun};
use rund_tests::{
    assert_no_leaks_within, runtime_under_test, CmdOutput, Containerd, ContainerdOpts,
    LeakSnapshot, RunSpec, RUNC_RUNTIME,
};

const GRACE: Duration = Duration::from_secs(15);

/// A private containerd with the fake host under its instance dir (so clean-up covers it).
struct Env {
    ctd: Containerd,
    host: FakeHost,
    nvml: PathBuf,
    rootfs: PathBuf,
}

fn start(test: &str) -> Option<Env> {
    if runtime_under_test() == RUNC_RUNTIME {
        rund_tests::skip!("device injection is rund's (runc ignores rund's config)");
    }
    let ctd = Containerd::start_under_test(test, ContainerdOpts::new())?;
    let root = ctd.dir.join("fakehost");
    std::fs::create_dir_all(&root).unwrap();
    let host = FakeHost::build(&root).unwrap();
    if let Some(e) = &host.mknod_error {
        rund_tests::skip!("cannot create fake device nodes: {e}");
    }
    let nvml = build_fake_nvml(&ctd.dir.join("nvml")).unwrap();
    let rootfs = ctd.busybox_rootfs().unwrap();
    Some(Env {
        ctd,
        host,
        nvml,
        rootfs,
    })
}

impl Env {
    /// Writes a rund config with `devices`, `[verify] verify` and `[memlock] on_failure`.
    fn config(
        &self,
        name: &str,
        devices: &DeviceConfig,
        verify: &str,
        on_failure: &str,
    ) -> PathBuf {
        let mut t = toml::Table::new();
        t.insert("devices".into(), toml::Value::try_from(devices).unwrap());
        let mut v = toml::Table::new();
        v.insert("verify".into(), verify.into());
        t.insert("verify".into(), v.into());
        let mut m = toml::Table::new();
        m.insert("on_failure".into(), on_failure.into());
        t.insert("memlock".into(), m.into());
        // The default mode: no user namespace unless asked (the device-cgroup
        // probes mknod inside, which a user namespace forbids;
        // devices_under_a_user_namespace covers that case).
        let mut u = toml::Table::new();
        u.insert("mode".into(), "requested".into());
        t.insert("userns".into(), u.into());
        // These tests make the requests a node admin allows; rund_policy covers the refusals.
        let mut p = toml::Table::new();
        let all = toml::Value::Array(vec!["all".into()]);
        p.insert("allowed_gpus".into(), all.clone());
        p.insert("allowed_rdma_devices".into(), all);
        p.insert("accept_nvidia_visible_devices_env".into(), true.into());
        p.insert("max_memlock".into(), "unlimited".into());
        t.insert("policy".into(), p.into());
        let p = self.ctd.dir.join(format!("{name}.toml"));
        std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
        p
    }

    /// The usual config: fake tree, fake NVML, no write_bw gate, memlock clamped (RDMA
    /// containers default to unlimited, which this machine cannot grant).
    fn default_config(&self) -> PathBuf {
        let cfg = self.host.config_with_nvml(&self.nvml);
        self.config("rund-devices", &cfg, "off", "clamp-with-warning")
    }

    /// `ctr run --rm --runtime-config-path <config> <flags> <rootfs> <id> sh -c <script>`.
    fn run(&self, id: &str, config: &Path, flags: &[&str], script: &str) -> CmdOutput {
        let mut f = vec![
            "--runtime-config-path".to_string(),
            config.display().to_string(),
        ];
        f.extend(flags.iter().map(|s| s.to_string()));
        self.ctd
            .run_spec(&RunSpec {
                id: id.into(),
                rootfs: Some(self.rootfs.clone()),
                args: vec!["sh".into(), "-c".into(), script.into()],
                flags: f,
                ..RunSpec::new(&runtime_under_test())
            })
            .unwrap()
    }

    /// `ctr run` must fail, name `needles` on stderr, and leave nothing behind.
    fn bad_input(&self, id: &str, config: &Path, flags: &[&str], needles: &[&str]) {
        let before = LeakSnapshot::take(&self.ctd);
        let out = self.run(id, config, flags, "true");
        assert!(!out.success(), "{id}: must fail: {out:?}");
        for n in needles {
            assert!(
                out.stderr.contains(n),
                "{id}: ctr's error should mention {n:?}: {}",
                out.stderr
            );
        }
        let _ = self.ctd.container_delete(id);
        assert_no_leaks_within(&self.ctd, &before, GRACE);
    }
}

const IB_NODES: &[&str] = &[
    "/dev/infiniband/uverbs0",
    "/dev/infiniband/umad0",
    "/dev/infiniband/issm0",
    "/dev/infiniband/rdma_cm",
    "/dev/infiniband/uverbs1",
    "/dev/infiniband/umad1",
    "/dev/infiniband/issm1",
];

#[test]
fn rdma_device_is_injected_and_others_denied() {
    let Some(env) = start("rdma_device_is_injected_and_others_denied") else {
        return;
    };
    let cfg = env.default_config();
    let before = LeakSnapshot::take(&env.ctd);
    let not_injected = env.host.dev.join("infiniband/uverbs1");
    let mount = format!(
        "type=bind,src={},dst=/dev/probe-bound,options=rbind",
        not_injected.display()
    );
    let script = format!(
        "{}echo \"env RUND_RDMA_DEVICES=$RUND_RDMA_DEVICES\"; cat /proc/self/limits; {}{}{}{}{}",
        stat_script(IB_NODES),
        open_probe("injected", "/dev/infiniband/uverbs0"),
        open_probe("bound", "/dev/probe-bound"),
        mknod_probe("mk-injected", IB_MAJOR, 192),
        mknod_probe("mk-other", IB_MAJOR, 193),
        open_probe("null", "/dev/null"),
    );
    let out = env.run(
        "rdma",
        &cfg,
        &[
            "--annotation",
            "rund.io/rdma-devices=mlx5_0",
            "--mount",
            &mount,
        ],
        &script,
    );
    assert!(out.success(), "{out:?}");
    let o = &out.stdout;
    eprintln!("---- inside ----\n{o}");
    let nodes = parse_stat(o);
    let want = vec![
        ("/dev/infiniband/uverbs0".to_string(), IB_MAJOR, 192),
        ("/dev/infiniband/umad0".to_string(), IB_MAJOR, 0),
        ("/dev/infiniband/issm0".to_string(), IB_MAJOR, 64),
        ("/dev/infiniband/rdma_cm".to_string(), 10, 58),
    ];
    assert_eq!(nodes, want, "mlx5_0's nodes only, right major:minor:\n{o}");
    assert!(o.contains("env RUND_RDMA_DEVICES=mlx5_0\n"), "{o}");
    // RDMA containers default to unlimited memlock; clamped to the hard limit in force where
    // the shim cannot raise it (this host), unlimited where it can (the VM).
    let h = if can_raise_limits() {
        u64::MAX
    } else {
        memlock_hard()
    };
    let h = if h == u64::MAX {
        "unlimited".into()
    } else {
        h.to_string()
    };
    assert_eq!(
        locked_memory(o),
        (h.clone(), h),
        "RDMA memlock default:\n{o}"
    );

    assert_eq!(probe(o, "null"), "ok", "the default /dev/null works");
    assert_allowed(o, "injected");
    assert_allowed(o, "mk-injected");
    // uverbs1 (mlx5_1) was not injected: visible through a bind mount or mknod, still denied.
    assert_denied(o, "bound");
    assert_denied(o, "mk-other");
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

#[test]
fn gpu_is_injected_by_uuid_and_index() {
    let Some(env) = start("gpu_is_injected_by_uuid_and_index") else {
        return;
    };
    let cfg = env.default_config();
    let before = LeakSnapshot::take(&env.ctd);
    let lib_dir = env.host.lib_dir.display().to_string();
    let bin_dir = env.host.bin_dir.display().to_string();
    let v = FAKE_DRIVER_VERSION;
    let gpu_nodes = [
        "/dev/nvidia3",
        "/dev/nvidia5",
        "/dev/nvidia7",
        "/dev/nvidiactl",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ];
    let script = format!(
        "{}env | grep ^NVIDIA_ | sort; \
         for f in {lib_dir}/libcuda.so.{v} {lib_dir}/libnvidia-ml.so.{v} \
                  {lib_dir}/libnvidia-ptxjitcompiler.so.{v} {lib_dir}/libnvidia-encode.so.{v} \
                  {bin_dir}/nvidia-smi; do \
           [ -e $f ] && echo \"file $f: $(cat $f)\"; done; \
         echo x 2>/dev/null >> {lib_dir}/libcuda.so.{v} && echo 'driver file writable'; \
         {}{}{}",
        stat_script(&gpu_nodes),
        open_probe("gpu", "/dev/nvidia3"),
        mknod_probe("mk-gpu", 195, 3),
        mknod_probe("mk-other-gpu", 195, 7),
    );
    // GPU 0 by UUID through the env: /dev/nvidia3 (its NVML minor, not its index).
    let uuid = FAKE_GPU_UUIDS[0];
    let env_flag = format!("NVIDIA_VISIBLE_DEVICES={uuid}");
    let out = env.run("gpu0", &cfg, &["--env", &env_flag], &script);
    assert!(out.success(), "{out:?}");
    let o = &out.stdout;
    eprintln!("---- inside ----\n{o}");
    let want = vec![
        ("/dev/nvidia3".to_string(), 195, 3),
        ("/dev/nvidiactl".to_string(), 195, 255),
        ("/dev/nvidia-modeset".to_string(), 195, 254),
        ("/dev/nvidia-uvm".to_string(), FAKE_UVM_MAJOR, 0),
        ("/dev/nvidia-uvm-tools".to_string(), FAKE_UVM_MAJOR, 1),
    ];
    assert_eq!(parse_stat(o), want, "{o}");
    assert!(
        o.contains(&format!("NVIDIA_VISIBLE_DEVICES={uuid}\n")),
        "{o}"
    );
    let caps = o
        .lines()
        .find_map(|l| l.strip_prefix("NVIDIA_DRIVER_CAPABILITIES="))
        .unwrap_or_else(|| panic!("no NVIDIA_DRIVER_CAPABILITIES: {o}"));
    let mut caps: Vec<&str> = caps.split(',').collect();
    caps.sort();
    assert_eq!(caps, ["compute", "utility"], "the default capabilities");
    // utility,compute: libcuda, libnvidia-ml, ptxjitcompiler and nvidia-smi; not encode (video).
    for f in ["libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"] {
        let line = format!("file {lib_dir}/{f}.so.{v}: fake {f}.so.{v}\n");
        assert!(o.contains(&line), "{f} must be mounted: {o}");
    }
    assert!(o.contains(&format!("file {bin_dir}/nvidia-smi: ")), "{o}");
    assert!(
        !o.contains("libnvidia-encode"),
        "video libs need `video`: {o}"
    );
    assert!(
        !o.contains("driver file writable"),
        "driver files are read-only: {o}"
    );
    assert_allowed(o, "gpu");
    assert_allowed(o, "mk-gpu");
    assert_denied(o, "mk-other-gpu");

    // GPU 1 by index through rund.io/gpus: minor 7.
    let out = env.run("gpu1", &cfg, &["--annotation", "rund.io/gpus=1"], &script);
    assert!(out.success(), "{out:?}");
    let nodes = parse_stat(&out.stdout);
    assert!(
        nodes.contains(&("/dev/nvidia7".into(), 195, 7))
            && !nodes
                .iter()
                .any(|n| n.0 == "/dev/nvidia3" || n.0 == "/dev/nvidia5"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains(&format!("NVIDIA_VISIBLE_DEVICES={}\n", FAKE_GPU_UUIDS[1])),
        "{}",
        out.stdout
    );
    // A GPU-only container gets no memlock default (nothing to assert inside: it inherits).
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

#[test]
fn cdi_devices_are_injected() {
    let Some(env) = start("cdi_devices_are_injected") else {
        return;
    };
    let dev_cfg = env.host.config_with_nvml(&env.nvml);
    let report = rund_devices::cdi_generate(&dev_cfg, &env.host.cdi_dir).unwrap();
    assert_eq!(report.written.len(), 2, "{report:?}");
    let cfg = env.config("rund-cdi", &dev_cfg, "off", "clamp-with-warning");
    let before = LeakSnapshot::take(&env.ctd);
    let script = stat_script(&[
        "/dev/nvidia3",
        "/dev/nvidia7",
        "/dev/infiniband/uverbs1",
        "/dev/infiniband/uverbs0",
    ]);
    let out = env.run(
        "cdi",
        &cfg,
        &[
            "--annotation",
            "cdi.k8s.io/gpu=nvidia.com/gpu=1",
            "--annotation",
            "cdi.k8s.io/rdma=rund.io/rdma=mlx5_1",
        ],
        &script,
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(
        parse_stat(&out.stdout),
        vec![
            ("/dev/nvidia7".to_string(), 195, 7),
            ("/dev/infiniband/uverbs1".to_string(), IB_MAJOR, 193),
        ],
        "{}",
        out.stdout
    );
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

#[test]
fn rdma_memlock_default_and_its_failure() {
    let Some(env) = start("rdma_memlock_default_and_its_failure") else {
        return;
    };
    let strict = env.config(
        "rund-strict",
        &env.host.config_with_nvml(&env.nvml),
        "off",
        "error",
    );
    let before = LeakSnapshot::take(&env.ctd);
    let rdma = ["--annotation", "rund.io/rdma-devices=mlx5_0"];
    let hard = memlock_hard();
    if can_raise_limits() {
        eprintln!("note: the shim can raise memlock here: the default is grantable");
        let out = env.run("unl", &strict, &rdma, "cat /proc/self/limits");
        assert!(out.success(), "{out:?}");
        assert_eq!(
            locked_memory(&out.stdout),
            ("unlimited".into(), "unlimited".into())
        );
    } else {
        // The default (unlimited) is above the hard limit: one clear error, nothing left.
        env.bad_input(
            "unl",
            &strict,
            &rdma,
            &[
                "RLIMIT_MEMLOCK",
                "unlimited",
                &hard.to_string(),
                "CAP_SYS_RESOURCE",
                "LimitMEMLOCK=infinity",
            ],
        );
    }
    // An explicit request wins over the RDMA default.
    let mut flags = rdma.to_vec();
    flags.extend(["--annotation", "rund.io/memlock=65536"]);
    let out = env.run("small", &strict, &flags, "cat /proc/self/limits");
    assert!(out.success(), "{out:?}");
    assert_eq!(locked_memory(&out.stdout), ("65536".into(), "65536".into()));
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

#[test]
fn verify_require_refuses_unverifiable_rdma() {
    let Some(env) = start("verify_require_refuses_unverifiable_rdma") else {
        return;
    };
    let cfg = env.config(
        "rund-require",
        &env.host.config_with_nvml(&env.nvml),
        "require",
        "clamp-with-warning",
    );
    // The write_bw gate cannot pass on fake devices: Create fails, naming why.
    env.bad_input(
        "gated",
        &cfg,
        &["--annotation", "rund.io/rdma-devices=mlx5_0"],
        &["no RDMA devices found"],
    );
}

#[test]
fn bad_device_requests_fail_cleanly() {
    let Some(env) = start("bad_device_requests_fail_cleanly") else {
        return;
    };
    let cfg = env.default_config();
    let no_nvml = env.config(
        "rund-no-nvml",
        &env.host.config(),
        "off",
        "clamp-with-warning",
    );
    env.bad_input(
        "baduuid",
        &cfg,
        &[
            "--env",
            "NVIDIA_VISIBLE_DEVICES=GPU-deadbeef-0000-0000-0000-000000000000",
        ],
        &["unknown GPU", "GPU-deadbeef-0000-0000-0000-000000000000"],
    );
    env.bad_input(
        "badrdma",
        &cfg,
        &["--annotation", "rund.io/rdma-devices=mlx5_9"],
        &["unknown RDMA device", "mlx5_9"],
    );
    env.bad_input(
        "badcdi",
        &cfg,
        &["--annotation", "cdi.k8s.io/x=not-a-cdi-name"],
        &["malformed CDI device name", "not-a-cdi-name"],
    );
    env.bad_input(
        "nonvml",
        &no_nvml,
        &["--env", "NVIDIA_VISIBLE_DEVICES=0"],
        &["NVML is unavailable", "no-nvml"],
    );
    // Asking for no GPU never needs NVML: plain and RDMA-only containers run without it.
    let before = LeakSnapshot::take(&env.ctd);
    let out = env.run("plain", &no_nvml, &[], "echo fine");
    assert_eq!((out.code(), out.stdout.as_str()), (0, "fine\n"), "{out:?}");
    let out = env.run(
        "rdmaonly",
        &no_nvml,
        &["--annotation", "rund.io/rdma-devices=mlx5_0"],
        "echo fine",
    );
    assert_eq!((out.code(), out.stdout.as_str()), (0, "fine\n"), "{out:?}");
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

#[test]
fn devices_under_a_user_namespace() {
    let Some(env) = start("devices_under_a_user_namespace") else {
        return;
    };
    let cfg = env.default_config();
    let before = LeakSnapshot::take(&env.ctd);
    let not_injected = env.host.dev.join("infiniband/uverbs1");
    let script = format!(
        "read a b c < /proc/self/uid_map; echo \"uidmap $a $b $c\"; {}{}{}",
        stat_script(IB_NODES),
        open_probe("injected", "/dev/infiniband/uverbs0"),
        open_probe("bound", "/dev/probe-bound"),
    );
    // A full spec: `ctr run --uidmap` would replace the runtime options (and so the config
    // path) with runc's CreateOptions for the task.
    let mut spec = env
        .ctd
        .oci_spec("userns", &env.rootfs, &["sh", "-c", &script])
        .unwrap();
    let map = serde_json::json!([{ "containerID": 0, "hostID": 1500000, "size": 65536 }]);
    spec["linux"]["uidMappings"] = map.clone();
    spec["linux"]["gidMappings"] = map;
    spec["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({ "type": "user" }));
    spec["mounts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "destination": "/dev/probe-bound",
            "type": "bind",
            "source": not_injected.display().to_string(),
            "options": ["rbind"],
        }));
    set_annotation(&mut spec, "rund.io/rdma-devices", "mlx5_0");
    let opts = ConfigRun {
        runtime_config: Some(cfg),
        ..ConfigRun::default()
    };
    let out = env.ctd.run_config("userns", &spec, &opts).unwrap();
    // Under a user namespace mknod is not allowed: the nodes must arrive as bind mounts.
    assert!(out.success(), "{out:?}");
    let o = &out.stdout;
    eprintln!("---- inside ----\n{o}");
    assert!(o.contains("uidmap 0 1500000 65536"), "runs remapped: {o}");
    let nodes = parse_stat(o);
    assert_eq!(
        nodes.iter().map(|n| n.0.as_str()).collect::<Vec<_>>(),
        [
            "/dev/infiniband/uverbs0",
            "/dev/infiniband/umad0",
            "/dev/infiniband/issm0",
            "/dev/infiniband/rdma_cm"
        ],
        "bind-mounted nodes under a user namespace:\n{o}"
    );
    assert!(
        nodes.contains(&("/dev/infiniband/uverbs0".into(), IB_MAJOR, 192)),
        "{o}"
    );
    assert_allowed(o, "injected");
    assert_denied(o, "bound");
    let _ = env.ctd.container_delete("userns");
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}
