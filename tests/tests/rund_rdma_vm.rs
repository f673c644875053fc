//! RDMA on real verbs: soft-RoCE (rxe0 on dummy0) inside the Debian-kernel VM that
//! `make test-rdma-vm` boots (tests/vm/soft-roce.sh exports the device). Discovery against
//! sysfs, rund's write_bw against Debian's ib_write_bw with the same parameters, a rund
//! container running ib_write_bw -a against a server on the VM host (and runc failing to
//! register the same memory), and the write_bw gate on real measurements.
//!
//! Elsewhere (no soft-RoCE device exported) every test skips; tests/skips/host.txt allows it.

mod rdma_vm;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rdma_vm::{
    calibration_failed, entry_id, ib_write_bw_pair, major_minor, perftest_lines,
    perftest_local_gid, perftest_rootfs, rund_write_bw, sh, sysfs_gid, uverbs_of, wait_listening,
    LinkGuard, Server, SoftRoce,
};
use rund_tests::inside::{
    assert_allowed, assert_denied, locked_memory, mknod_probe, open_probe, parse_stat, stat_script,
};
use rund_tests::{
    assert_no_leaks_within, rund_bins_or_skip, runtime_under_test, CmdOutput, Containerd,
    ContainerdOpts, LeakSnapshot, RunSpec, RUNC_RUNTIME,
};

const GRACE: Duration = Duration::from_secs(15);
const IB_MAJOR: i64 = 231;

fn soft_roce() -> Option<SoftRoce> {
    if runtime_under_test() == RUNC_RUNTIME {
        rund_tests::skip!("rund's device discovery, injection and gate (runc has none)");
    }
    match SoftRoce::from_env() {
        Some(s) => Some(s),
        None => rund_tests::skip!(
            "no soft-RoCE device exported ({}): make test-rdma-vm brings up rxe0",
            rdma_vm::DEV_ENV
        ),
    }
}

fn rund_cli(test: &str) -> Option<PathBuf> {
    rund_bins_or_skip(test).map(|b| b.path("rund"))
}

fn devices_json(rund: &Path, dev: &str) -> (serde_json::Value, serde_json::Value) {
    let out = sh(&[&rund.display().to_string(), "devices", "--json"]);
    assert!(out.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let d = v["rdma"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == dev)
        .unwrap_or_else(|| panic!("{dev} not listed: {v}"))
        .clone();
    (d, v)
}

#[test]
fn soft_roce_is_listed_as_the_kernel_describes_it() {
    let Some(sr) = soft_roce() else { return };
    let Some(rund) = rund_cli("soft_roce_is_listed_as_the_kernel_describes_it") else {
        return;
    };
    let (d, all) = devices_json(&rund, &sr.dev);
    let port = &d["ports"][0];
    let sysfs = |f: &str| {
        std::fs::read_to_string(sr.port_dir().join(f))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(port["number"], 1, "{d}");
    assert_eq!(port["state"], "ACTIVE", "{d}");
    assert_eq!(port["link_layer"], "Ethernet", "{d}");
    assert_eq!(port["link_layer"], sysfs("link_layer").as_str());
    assert_eq!(port["rate"], sysfs("rate").as_str(), "{d}");
    assert!(
        d["netdevs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == sr.netdev.as_str()),
        "{d}"
    );
    // Every listed GID is the kernel's, and the IPv4-mapped RoCE v2 one is there.
    let gids = port["gids"].as_array().unwrap();
    for g in gids {
        let idx = g["index"].as_u64().unwrap();
        assert_eq!(g["gid"], sysfs(&format!("gids/{idx}")).as_str(), "{g}");
        assert_eq!(
            g["gid_type"],
            sysfs(&format!("gid_attrs/types/{idx}")).as_str()
        );
    }
    assert!(
        gids.iter().any(|g| g["ipv4"] == sr.addr.as_str()
            && g["gid_type"] == "RoCE v2"
            && g["ndev"] == sr.netdev.as_str()),
        "no RoCE v2 GID for {}: {d}",
        sr.addr
    );
    let uverbs = uverbs_of(&sr.dev);
    let (ma, mi) = major_minor(&uverbs);
    assert_eq!(d["uverbs"]["path"], uverbs.as_str(), "{d}");
    assert_eq!(
        (d["uverbs"]["major"].as_i64(), d["uverbs"]["minor"].as_i64()),
        (Some(ma), Some(mi))
    );
    let (cma, cmi) = major_minor("/dev/infiniband/rdma_cm");
    assert_eq!(all["rdma_cm"]["path"], "/dev/infiniband/rdma_cm");
    assert_eq!(
        (
            all["rdma_cm"]["major"].as_i64(),
            all["rdma_cm"]["minor"].as_i64()
        ),
        (Some(cma), Some(cmi))
    );

    // CDI generation covers it: the device's uverbs node, rdma_cm spec-wide.
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("cdi");
    let out = sh(&[
        &rund.display().to_string(),
        "cdi",
        "generate",
        "--output-dir",
        &out_dir.display().to_string(),
    ]);
    assert!(out.success(), "{out:?}");
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("rund-rund.io-rdma.json")).unwrap())
            .unwrap();
    assert_eq!(spec["kind"], "rund.io/rdma");
    let cdi_dev = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == sr.dev.as_str())
        .unwrap_or_else(|| panic!("{} not in {spec}", sr.dev));
    let node = &cdi_dev["containerEdits"]["deviceNodes"][0];
    assert_eq!(node["path"], uverbs.as_str());
    assert_eq!(
        (node["major"].as_i64(), node["minor"].as_i64()),
        (Some(ma), Some(mi))
    );
    assert_eq!(
        spec["containerEdits"]["deviceNodes"][0]["path"],
        "/dev/infiniband/rdma_cm"
    );

    // The port follows its netdev, and so does the listing.
    let _up = LinkGuard(&sr);
    sr.set_link(false);
    let (d, _) = devices_json(&rund, &sr.dev);
    assert_eq!(d["ports"][0]["state"], "DOWN", "{d}");
    sr.set_link(true);
    let (d, _) = devices_json(&rund, &sr.dev);
    assert_eq!(d["ports"][0]["state"], "ACTIVE", "{d}");
}

/// One comparison: the figures go to the log (`FIGURE` lines) for the suite's report.
fn compare(sr: &SoftRoce, rund: &Path, port: u16, case: &str, args: &[&str], log: &Path) {
    let perftest_out = ib_write_bw_pair(sr, port, args, log);
    let perf = perftest_lines(&perftest_out);
    let (ours, gid_index) = rund_write_bw(rund, &sr.dev, args);
    assert!(
        !perf.is_empty(),
        "no result in ib_write_bw's report:\n{perftest_out}"
    );
    assert_eq!(
        perf.iter().map(|l| l.bytes).collect::<Vec<_>>(),
        ours.iter().map(|l| l.bytes).collect::<Vec<_>>(),
        "{case}: the same sizes"
    );
    for (p, o) in perf.iter().zip(&ours) {
        assert!(
            p.bw_average > 0.0 && o.bw_average > 0.0,
            "{case}: {p:?} {o:?}"
        );
        assert!(p.iterations > 0 && o.iterations > 0, "{case}: {p:?} {o:?}");
        if !args.contains(&"-D") {
            assert_eq!(p.iterations, o.iterations, "{case}: -n is honoured by both");
        }
        eprintln!(
            "FIGURE {case} bytes={} perftest={:.2} rund={:.2} ratio={:.3}",
            p.bytes,
            p.bw_average,
            o.bw_average,
            o.bw_average / p.bw_average
        );
    }
    // Both used the same GID: perftest prints its local GID, rund its index.
    let gid_index = gid_index.expect("RoCE: rund reports its GID index");
    let gid_text =
        std::fs::read_to_string(sr.port_dir().join(format!("gids/{gid_index}"))).unwrap();
    assert_eq!(
        perftest_local_gid(&perftest_out),
        Some(sysfs_gid(&gid_text)),
        "{case}: rund used GID {gid_index} ({}), perftest:\n{perftest_out}",
        gid_text.trim()
    );
}

#[test]
fn write_bw_against_ib_write_bw_with_the_same_parameters() {
    let Some(sr) = soft_roce() else { return };
    let Some(rund) = rund_cli("write_bw_against_ib_write_bw_with_the_same_parameters") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 4] = [
        ("s64k-n100", &["-s", "65536", "-n", "100"]),
        ("a-n10", &["-a", "-n", "10"]),
        ("D2", &["-D", "2"]),
        ("x1-s4k-n100", &["-x", "1", "-s", "4096", "-n", "100"]),
    ];
    for (i, (case, args)) in cases.iter().enumerate() {
        compare(&sr, &rund, 18600 + i as u16, case, args, tmp.path());
    }
    // Without -x both picked the IPv4-mapped RoCE v2 GID.
    let (_, gid) = rund_write_bw(&rund, &sr.dev, &["-s", "4096", "-n", "50"]);
    let idx = gid.unwrap();
    let attr = |f: &str| {
        std::fs::read_to_string(sr.port_dir().join(f))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(attr(&format!("gid_attrs/types/{idx}")), "RoCE v2");
    let g = sysfs_gid(&attr(&format!("gids/{idx}")));
    let want: Vec<u8> = sr.addr.split('.').map(|x| x.parse().unwrap()).collect();
    assert_eq!(&g[10..], &[0xff, 0xff, want[0], want[1], want[2], want[3]]);
}

/// A private containerd (runc beside rund) and a rootfs carrying ib_write_bw.
struct Env {
    ctd: Containerd,
    rootfs: PathBuf,
    sr: SoftRoce,
}

fn start(test: &str) -> Option<Env> {
    let sr = soft_roce()?;
    let ctd = Containerd::start_under_test(test, ContainerdOpts::new().with_runc())?;
    let rootfs = perftest_rootfs(&ctd.dir.join("perftest-rootfs"));
    Some(Env { ctd, rootfs, sr })
}

impl Env {
    /// A rund config: the node's policy allows the device, memlock failures are errors,
    /// `verify` settings as given.
    fn config(&self, name: &str, verify: &[(&str, toml::Value)]) -> PathBuf {
        let mut t = toml::Table::new();
        let mut v = toml::Table::new();
        for (k, val) in verify {
            v.insert((*k).into(), val.clone());
        }
        t.insert("verify".into(), v.into());
        let mut c = toml::Table::new();
        c.insert(
            "state_dir".into(),
            self.ctd.dir.join("checks").display().to_string().into(),
        );
        t.insert("checks".into(), c.into());
        let mut m = toml::Table::new();
        m.insert("on_failure".into(), "error".into());
        t.insert("memlock".into(), m.into());
        let mut u = toml::Table::new();
        u.insert("mode".into(), "requested".into());
        t.insert("userns".into(), u.into());
        let mut p = toml::Table::new();
        p.insert(
            "allowed_rdma_devices".into(),
            toml::Value::Array(vec![self.sr.dev.clone().into()]),
        );
        p.insert("max_memlock".into(), "unlimited".into());
        t.insert("policy".into(), p.into());
        let path = self.ctd.dir.join(format!("{name}.toml"));
        std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
        path
    }

    fn run(&self, id: &str, runtime: &str, flags: &[&str], script: &str) -> CmdOutput {
        self.ctd
            .run_spec(&RunSpec {
                id: id.into(),
                rootfs: Some(self.rootfs.clone()),
                args: vec!["sh".into(), "-c".into(), script.into()],
                flags: flags.iter().map(|s| s.to_string()).collect(),
                timeout: Duration::from_secs(400),
                ..RunSpec::new(runtime)
            })
            .unwrap()
    }

    fn rund_flags<'a>(&self, config: &'a Path, extra: &[&'a str]) -> Vec<String> {
        let mut f = vec![
            "--runtime-config-path".to_string(),
            config.display().to_string(),
            "--annotation".into(),
            format!("rund.io/rdma-devices={}", self.sr.dev),
        ];
        f.extend(extra.iter().map(|s| s.to_string()));
        f
    }
}

#[test]
fn container_runs_ib_write_bw_all_sizes_and_runc_cannot_register() {
    let Some(env) = start("container_runs_ib_write_bw_all_sizes_and_runc_cannot_register") else {
        return;
    };
    let sr = &env.sr;
    let cfg = env.config("rund-rdma", &[("verify", "off".into())]);
    let before = LeakSnapshot::take(&env.ctd);
    let uverbs = uverbs_of(&sr.dev);
    let (uma, umi) = major_minor(&uverbs);
    let cm = major_minor("/dev/infiniband/rdma_cm");
    let client = |port: u16| {
        format!(
            "ib_write_bw -d {} -p {port} -a -n 10 {}; echo \"client rc=$?\"",
            sr.dev, sr.addr
        )
    };

    let flags = env.rund_flags(&cfg, &["--net-host"]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // perftest refuses to report when its clock calibration is noisy under TCG
    // (as in ib_write_bw_pair): that run is repeated, up to three times.
    let mut attempt = 0u16;
    let (out, server_ok, server_out) = loop {
        let port = 18700 + 100 * attempt;
        let server = Server::start(
            &sr.dev,
            port,
            &["-a", "-n", "10"],
            &env.ctd.dir.join(format!("srv-{port}.log")),
        );
        wait_listening(port);
        let script = format!(
            "{}cat /proc/self/limits; {}{}{}{}",
            stat_script(&[&uverbs, "/dev/infiniband/rdma_cm"]),
            open_probe("injected", &uverbs),
            mknod_probe("mk-injected", IB_MAJOR, umi),
            mknod_probe("mk-other", IB_MAJOR, 250),
            client(port),
        );
        let id = format!("rdma-rund-{attempt}");
        let out = env.run(&id, rund_tests::RUND_RUNTIME, &flags, &script);
        let (ok, server_out) = server.finish(Duration::from_secs(120));
        attempt += 1;
        let noisy = [&out.stdout, &out.stderr, &server_out];
        if attempt < 3 && noisy.iter().any(|t| calibration_failed(t)) {
            eprintln!("ib_write_bw -a inside rund: perftest's clock calibration failed; again");
            continue;
        }
        break (out, ok, server_out);
    };
    let o = &out.stdout;
    eprintln!("---- inside rund ----\n{o}\n{}", out.stderr);
    assert!(out.success(), "{out:?}");
    assert_eq!(
        parse_stat(o),
        vec![
            (uverbs.clone(), uma, umi),
            ("/dev/infiniband/rdma_cm".into(), cm.0, cm.1)
        ],
        "the uverbs node and rdma_cm, the host's numbers"
    );
    assert_eq!(
        locked_memory(o),
        ("unlimited".into(), "unlimited".into()),
        "RDMA containers get unlimited memlock"
    );
    assert_allowed(o, "injected");
    assert_allowed(o, "mk-injected");
    assert_denied(o, "mk-other");
    assert!(o.contains("client rc=0"), "ib_write_bw -a inside rund: {o}");
    let lines = perftest_lines(o);
    let sizes: Vec<u64> = lines.iter().map(|l| l.bytes).collect();
    let want: Vec<u64> = (1..=23).map(|i| 1u64 << i).collect();
    assert_eq!(sizes, want, "every size from 2 B to 8 MiB: {o}");
    assert!(lines.iter().all(|l| l.bw_average > 0.0), "{lines:?}");
    assert!(server_ok, "the host's server: {server_out}");

    // runc with the node passed by hand: the default 8 MiB memlock cannot pin -a's 16 MiB.
    let port = 18701;
    let server = Server::start(
        &sr.dev,
        port,
        &["-a", "-n", "10"],
        &env.ctd.dir.join("srv2.log"),
    );
    wait_listening(port);
    let script = format!("cat /proc/self/limits; {}", client(port));
    let out = env.run(
        "rdma-runc",
        RUNC_RUNTIME,
        &["--net-host", "--device", &uverbs],
        &script,
    );
    drop(server);
    let text = format!("{}{}", out.stdout, out.stderr);
    eprintln!("---- inside runc ----\n{text}");
    let (soft, _) = locked_memory(&out.stdout);
    assert_ne!(soft, "unlimited", "runc keeps the inherited limit: {text}");
    assert!(soft.parse::<u64>().unwrap() < 16 << 20, "{text}");
    assert!(
        text.contains("Couldn't allocate MR") && !text.contains("client rc=0"),
        "ib_write_bw -a under runc must fail to register memory: {text}"
    );
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

#[test]
fn write_bw_gate_on_real_measurements() {
    let Some(env) = start("write_bw_gate_on_real_measurements") else {
        return;
    };
    let sr = &env.sr;
    let iters = ("iters", toml::Value::Integer(300));
    let require = ("verify", toml::Value::from("require"));
    let default_cfg = env.config("gate-default", &[require.clone(), iters.clone()]);
    let reachable = env.config(
        "gate-1mib",
        &[require, iters, ("threshold", "1MiB/s".into())],
    );
    let before = LeakSnapshot::take(&env.ctd);
    let cache = env.ctd.dir.join("checks").join(format!("{}.json", sr.dev));
    let rate = std::fs::read_to_string(sr.port_dir().join("rate")).unwrap();
    let gbps: f64 = rate.split_whitespace().next().unwrap().parse().unwrap();
    let rated = gbps * 1e9 / 8.0 / 1_048_576.0;
    let refused = |id: &str, cfg: &Path, needles: &[&str]| {
        let flags = env.rund_flags(cfg, &[]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let out = env.run(id, rund_tests::RUND_RUNTIME, &flags, "true");
        assert!(!out.success(), "{id}: must be refused: {out:?}");
        for n in needles {
            assert!(out.stderr.contains(n), "{id}: {n:?} not in {}", out.stderr);
        }
        let _ = env.ctd.container_delete(id);
        out.stderr
    };

    // The default, half the rated speed: soft-RoCE under TCG is far below it.
    let required = format!(
        "threshold {:.2} MiB/s of rated {rated:.2} MiB/s",
        rated * 0.5
    );
    let err = refused(
        "gate-default",
        &default_cfg,
        &[
            "RDMA device verification failed",
            &sr.dev,
            "BW average",
            &required,
        ],
    );
    eprintln!("FIGURE gate refusal: {err}");
    let measured = entry_id(&cache);

    // An absolute figure the VM meets: the device goes in, from the cached measurement.
    let flags = env.rund_flags(&reachable, &[]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let uverbs = uverbs_of(&sr.dev);
    let out = env.run(
        "gate-pass",
        rund_tests::RUND_RUNTIME,
        &flags,
        &stat_script(&[&uverbs]),
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(parse_stat(&out.stdout).len(), 1, "{out:?}");
    assert_eq!(entry_id(&cache), measured, "within the TTL: measured once");

    // A port that is down is refused by its state, whatever the cache holds.
    let _up = LinkGuard(sr);
    sr.set_link(false);
    refused("gate-down", &reachable, &["port 1 of", &sr.dev, "is DOWN"]);
    sr.set_link(true);
    assert_eq!(entry_id(&cache), measured, "a down port is not measured");
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

#[test]
fn perftest_small_figures_come_from_the_message_rate() {
    let out = " 2          10             0.00               0.00   \t\t   0.004887\n\
               65536      100            40.54              40.54  \t\t   0.000649\n";
    let l = perftest_lines(out);
    assert_eq!(l.len(), 2, "{l:?}");
    // 0.004887 Mpps × 2 bytes = 0.00932 MiB/s, where the printed column says 0.00.
    assert!(
        (l[0].bw_average - 0.004887e6 * 2.0 / 1_048_576.0).abs() < 1e-9,
        "{l:?}"
    );
    assert_eq!(l[1].bw_average, 40.54, "large figures are taken as printed");
}
