//! The node's policy for privileged requests (`[policy]`, deny by default) and the user
//! namespace modes, through containerd 1.6 and ctr (CRI: rund_policy_cri.rs). Each refusal is
//! a real Create that fails naming the request and the key that decides, and leaves nothing
//! behind; each allowed request still runs. rund only.

use std::path::Path;
use std::time::Duration;

use containerd_shim_protos::ttrpc::Code;
use rund_tests::inside::locked_memory;
use rund_tests::shim::{status_of, unique_id, Bundle, Direct};
use rund_tests::userns::*;
use rund_tests::{
    assert_no_leaks_within, rund_bins_or_skip, runtime_under_test, shared_busybox_rootfs,
    CmdOutput, Containerd, ContainerdOpts, LeakSnapshot, RunSpec, RUND_RUNTIME,
};
use serde_json::json;

const SETTLE: Duration = Duration::from_secs(15);

/// A refused `ctr run`: fails, names every needle, leaves nothing behind.
fn assert_refused(ctd: &Containerd, before: &LeakSnapshot, out: &CmdOutput, needles: &[&str]) {
    assert!(!out.success(), "must be refused: {out:?}");
    eprintln!("ctr's error: {}", out.stderr.trim());
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "error must name {n:?}: {}",
            out.stderr
        );
    }
    assert_no_leaks_within(ctd, before, SETTLE);
}

#[test]
fn requested_mode_remaps_only_pods_that_ask() {
    let test = "requested_mode_remaps_only_pods_that_ask";
    userns_test_with(test, COUNT, "requested", "", |env, _| {
        let map = ["cat", "/proc/self/uid_map"];
        let out = env.run("plain", &map, &[]);
        assert!(out.success(), "{out:?}");
        assert_eq!(
            parse_map(&out.stdout),
            vec![HOST_MAP],
            "no user namespace unasked"
        );
        let pid = env.sleeper("asks", &["--annotation", "rund.io/userns=pod"]);
        let lease = env.lease("asks");
        assert_pool_slot(lease.base);
        assert_eq!(host_ids(pid), (lease.base, lease.base));
        env.remove("asks");
        // "host" is what such pods get anyway: no policy needed.
        let out = env.run("host", &map, &["--annotation", "rund.io/userns=host"]);
        assert!(out.success(), "{out:?}");
        assert_eq!(parse_map(&out.stdout), vec![HOST_MAP]);
    });
}

#[test]
fn always_mode_refuses_userns_host_by_default() {
    let test = "always_mode_refuses_userns_host_by_default";
    userns_test(test, COUNT, |env, before| {
        let out = env.run("host", &["true"], &["--annotation", "rund.io/userns=host"]);
        let needles = [
            "rund.io/userns=\"host\"",
            "[policy] allow_userns_host",
            "mode = \"always\"",
        ];
        assert_bad_input(env, before, &out, &needles, &[]);
    });
}

/// A spec whose device rules allow every device: what `--privileged` and CRI's privileged do.
fn privileged_spec(env: &Env, id: &str, args: &[&str]) -> serde_json::Value {
    let mut spec = env.ctd.oci_spec(id, &env.rootfs, args).unwrap();
    let rules = spec["linux"]["resources"]["devices"]
        .as_array_mut()
        .unwrap();
    rules.push(json!({ "allow": true, "access": "rwm" }));
    spec
}

#[test]
fn always_mode_refuses_privileged_and_host_netns_net_admin() {
    let test = "always_mode_refuses_privileged_and_host_netns_net_admin";
    userns_test(test, COUNT, |env, before| {
        let spec = privileged_spec(env, "priv", &["true"]);
        let out = env.run_config("priv", &spec);
        let needles = ["privileged", "[userns] on_privileged", "mode = \"always\""];
        assert_bad_input(env, before, &out, &needles, &[]);
        let flags = ["--cap-add", "CAP_NET_ADMIN", "--net-host"];
        let out = env.run("netadmin", &["true"], &flags);
        let needles = ["CAP_NET_ADMIN", "[userns] on_privileged"];
        assert_bad_input(env, before, &out, &needles, &[]);
        // In a network namespace of its own, owned by its user namespace, NET_ADMIN works.
        let script = "ip link set lo mtu 1400 && ip link show lo | grep -o 'mtu 1400'; \
                      cat /proc/self/uid_map";
        let out = env.run(
            "ownnet",
            &["sh", "-c", script],
            &["--cap-add", "CAP_NET_ADMIN"],
        );
        assert!(out.success(), "{out:?}");
        let l = lines(&out, 2);
        assert_eq!(l[0], "mtu 1400");
        assert_pool_slot(parse_map(l[1])[0].1);
    });
}

#[test]
fn on_privileged_host_exempts_the_pod() {
    let test = "on_privileged_host_exempts_the_pod";
    userns_test_with(
        test,
        COUNT,
        "always",
        "on_privileged = \"host\"\n",
        |env, _| {
            let spec = privileged_spec(env, "priv", &["cat", "/proc/self/uid_map"]);
            let out = env.run_config("priv", &spec);
            assert!(out.success(), "{out:?}");
            assert_eq!(parse_map(&out.stdout), vec![HOST_MAP]);
            let flags = ["--cap-add", "CAP_NET_ADMIN", "--net-host"];
            let out = env.run("netadmin", &["cat", "/proc/self/uid_map"], &flags);
            assert!(out.success(), "{out:?}");
            assert_eq!(parse_map(&out.stdout), vec![HOST_MAP]);
            assert_eq!(env.leases(), vec![], "exempted pods take no range");
            let log = std::fs::read_to_string(&env.ctd.log).unwrap();
            assert!(
                log.contains("no user namespace for this pod") && log.contains("on_privileged"),
                "the exemption is logged"
            );
        },
    );
}

fn start(test: &str) -> Option<(Containerd, std::path::PathBuf)> {
    if runtime_under_test() != RUND_RUNTIME {
        let _ = test;
        rund_tests::skip!("the policy is rund's");
    }
    let ctd = Containerd::start_rund_or_skip(test, ContainerdOpts::new())?;
    let rootfs = ctd.busybox_rootfs().unwrap();
    Some((ctd, rootfs))
}

/// `ctr run --rm` of `args` with `flags`, under rund's default config, or `config`.
fn run(ctd: &Containerd, rootfs: &Path, id: &str, args: &[&str], flags: &[&str]) -> CmdOutput {
    ctd.run_spec(&RunSpec {
        id: id.into(),
        rootfs: Some(rootfs.to_path_buf()),
        args: args.iter().map(|s| s.to_string()).collect(),
        flags: flags.iter().map(|s| s.to_string()).collect(),
        ..RunSpec::new(RUND_RUNTIME)
    })
    .unwrap()
}

fn config(ctd: &Containerd, name: &str, body: &str) -> String {
    let p = ctd.dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

#[test]
fn memlock_and_grace_are_bounded() {
    let Some((ctd, rootfs)) = start("memlock_and_grace_are_bounded") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let limits = ["cat", "/proc/self/limits"];
    let out = run(
        &ctd,
        &rootfs,
        "unl",
        &limits,
        &["--annotation", "rund.io/memlock=unlimited"],
    );
    assert_refused(
        &ctd,
        &before,
        &out,
        &["rund.io/memlock=\"unlimited\"", "[policy] max_memlock"],
    );
    // Up to the limit the pod inherits, any process may set it: no policy needed.
    let out = run(
        &ctd,
        &rootfs,
        "small",
        &limits,
        &["--annotation", "rund.io/memlock=65536"],
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(locked_memory(&out.stdout), ("65536".into(), "65536".into()));
    let long = ["--annotation", "rund.io/grace-period-seconds=3600"];
    let out = run(&ctd, &rootfs, "long", &["true"], &long);
    let needles = [
        "rund.io/grace-period-seconds=\"3600\"",
        "[policy] max_grace_period_seconds",
    ];
    assert_refused(&ctd, &before, &out, &needles);
    let out = run(
        &ctd,
        &rootfs,
        "short",
        &["true"],
        &["--annotation", "rund.io/grace-period-seconds=2"],
    );
    assert!(out.success(), "{out:?}");
    // Raised bounds are honoured.
    let cfg = config(
        &ctd,
        "allow.toml",
        "[policy]\nmax_grace_period_seconds = 3600\n",
    );
    let mut flags = long.to_vec();
    flags.extend(["--runtime-config-path", &cfg]);
    let out = run(&ctd, &rootfs, "long-ok", &["true"], &flags);
    assert!(out.success(), "{out:?}");
    assert_no_leaks_within(&ctd, &before, SETTLE);
}

#[test]
fn device_requests_need_the_policy() {
    let Some((ctd, rootfs)) = start("device_requests_need_the_policy") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let cases = [
        ("gpus", "rund.io/gpus=all", "[policy] allowed_gpus"),
        (
            "rdma",
            "rund.io/rdma-devices=mlx5_0",
            "[policy] allowed_rdma_devices",
        ),
    ];
    for (id, ann, key) in cases {
        let out = run(&ctd, &rootfs, id, &["true"], &["--annotation", ann]);
        let request = ann.split_once('=').unwrap().0;
        assert_refused(&ctd, &before, &out, &[request, key, "refused"]);
    }
    // NVIDIA_VISIBLE_DEVICES from the image or pod env is ignored (and logged), not refused:
    // CUDA images carry it. Nothing NVIDIA is injected; the env itself is left alone.
    let script = "ls /dev | grep -c nvidia; echo $NVIDIA_VISIBLE_DEVICES";
    let env = ["--env", "NVIDIA_VISIBLE_DEVICES=all"];
    let out = run(&ctd, &rootfs, "envgpu", &["sh", "-c", script], &env);
    assert_eq!(out.stdout, "0\nall\n", "{out:?}");
    let log = std::fs::read_to_string(&ctd.log).unwrap();
    assert!(
        log.contains("accept_nvidia_visible_devices_env"),
        "the ignored request is logged"
    );
    // Accepted, it is a request like the annotation: bounded by allowed_gpus.
    let cfg = config(
        &ctd,
        "env.toml",
        "[policy]\naccept_nvidia_visible_devices_env = true\n",
    );
    let mut flags = env.to_vec();
    flags.extend(["--runtime-config-path", &cfg]);
    let out = run(&ctd, &rootfs, "envgpu2", &["true"], &flags);
    assert_refused(
        &ctd,
        &before,
        &out,
        &["NVIDIA_VISIBLE_DEVICES", "[policy] allowed_gpus"],
    );
}

/// The refusal reaches containerd as PERMISSION_DENIED (ctr shows only the message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_permission_denied() {
    if !nix::unistd::geteuid().is_root() {
        rund_tests::skip!("needs root");
    }
    let Some(bins) = rund_bins_or_skip("refusals_are_permission_denied") else {
        return;
    };
    let bundle = Bundle::new(&unique_id("deny")).unwrap();
    let mut spec = bundle.spec(shared_busybox_rootfs().unwrap(), &["true"]);
    spec["annotations"] = json!({ "rund.io/grace-period-seconds": "3600" });
    bundle.write_config(&spec).unwrap();
    let d = Direct::start(&bins, bundle).await.unwrap();
    let err = d.create().await.expect_err("refused");
    let (code, msg) = status_of(&err).expect("a status");
    assert_eq!(code, Code::PERMISSION_DENIED, "{msg}");
    assert!(msg.contains("max_grace_period_seconds"), "{msg}");
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
}

/// The allow-lists are checked per resolved device, against the honest doubles of rund_devices
/// (a fake sysfs/dev tree, a fake libnvidia-ml.so): a GPU named by index is allowed by its
/// UUID, another GPU or RDMA device is refused naming it.
#[test]
fn allow_lists_are_checked_per_device() {
    use rund_devices::testutil::{build_fake_nvml, FakeHost, FAKE_GPU_UUIDS};
    let Some((ctd, rootfs)) = start("allow_lists_are_checked_per_device") else {
        return;
    };
    let host = FakeHost::build(&ctd.dir.join("fakehost")).unwrap();
    if let Some(e) = &host.mknod_error {
        panic!("cannot create fake device nodes: {e}");
    }
    let nvml = build_fake_nvml(&ctd.dir.join("nvml")).unwrap();
    let mut t = toml::Table::new();
    let devices = host.config_with_nvml(&nvml);
    t.insert("devices".into(), toml::Value::try_from(&devices).unwrap());
    let table = |k: &str, v: toml::Value| toml::Table::from_iter([(k.to_string(), v)]);
    t.insert("verify".into(), table("verify", "off".into()).into());
    let clamp = table("on_failure", "clamp-with-warning".into());
    t.insert("memlock".into(), clamp.into());
    let mut p = toml::Table::new();
    let list = |v: &str| toml::Value::Array(vec![v.into()]);
    p.insert("allowed_gpus".into(), list(FAKE_GPU_UUIDS[0]));
    p.insert("allowed_rdma_devices".into(), list("mlx5_0"));
    t.insert("policy".into(), p.into());
    let cfg = config(&ctd, "lists.toml", &toml::to_string(&t).unwrap());
    let before = LeakSnapshot::take(&ctd);
    let with = |ann: &str| ["--runtime-config-path", &cfg, "--annotation", ann].map(String::from);
    let flags = with("rund.io/gpus=0");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = run(
        &ctd,
        &rootfs,
        "gpu0",
        &["sh", "-c", "ls /dev/nvidia3"],
        &flags,
    );
    assert!(out.success(), "GPU 0 is allowed by its UUID: {out:?}");
    let refused = [
        ("gpu1", "rund.io/gpus=1", "GPU 1 (", "[policy] allowed_gpus"),
        (
            "gpuall",
            "rund.io/gpus=all",
            "\"all\" is not listed",
            "[policy] allowed_gpus",
        ),
        (
            "ib1",
            "rund.io/rdma-devices=mlx5_1",
            "RDMA device mlx5_1",
            "allowed_rdma_devices",
        ),
    ];
    for (id, ann, what, key) in refused {
        let flags = with(ann);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let out = run(&ctd, &rootfs, id, &["true"], &flags);
        assert_refused(&ctd, &before, &out, &[what, key]);
    }
    let flags = with("rund.io/rdma-devices=mlx5_0");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = run(
        &ctd,
        &rootfs,
        "ib0",
        &["sh", "-c", "ls /dev/infiniband/uverbs0"],
        &flags,
    );
    assert!(out.success(), "mlx5_0 is listed: {out:?}");
    assert_no_leaks_within(&ctd, &before, SETTLE);
}
