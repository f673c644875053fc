//! Runs the built `rund` binary. Every run gets an explicit config file so the
//! host's /etc/rund/config.toml and /run/rund are never used.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    dir: tempfile::TempDir,
    config: PathBuf,
}

/// A temp dir with a config whose state lives in it.
fn env(extra: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let state = dir.path().join("state");
    let text = format!(
        "state_dir = {s:?}\n{extra}\n[cgroup]\nstate_dir = {p:?}\n[checks]\nstate_dir = {c:?}\n",
        s = state,
        p = state.join("cgroup-pool"),
        c = state.join("checks"),
    );
    std::fs::write(&config, text).unwrap();
    Env { dir, config }
}

fn rund(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rund"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("RUND_CONFIG")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json_of(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{:?} {}", o.status, text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)))
}

fn memlock_hard() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) }, 0);
    rl.rlim_max
}

#[test]
fn doctor_reports_the_memlock_hard_limit_in_force() {
    let e = env("");
    let hard = memlock_hard();
    // Lower the soft limit first so a soft/hard mix-up shows; print `ulimit -Hl`
    // (KiB or "unlimited") from the very shell that execs rund.
    let o = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -Sl 64 && ulimit -Hl >&2 && exec "$0" --config "$1" doctor --json"#)
        .arg(env!("CARGO_BIN_EXE_rund"))
        .arg(&e.config)
        .env_remove("RUND_CONFIG")
        .output()
        .unwrap();
    let ulimit = text(&o.stderr).trim().to_string();
    let expected = if hard == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        (hard / 1024).to_string()
    };
    assert_eq!(ulimit, expected, "getrlimit and ulimit -Hl disagree");
    let v = json_of(&o);
    let got = &v["memlock"]["hard"];
    let got_ulimit = match got.as_u64() {
        Some(b) => (b / 1024).to_string(),
        None => got.as_str().unwrap().to_string(),
    };
    assert_eq!(got_ulimit, ulimit, "{v}");
    assert_eq!(v["memlock"]["soft"], serde_json::json!(64 * 1024), "{v}");
    let verdict = v["rdma_pods"]["outcome"].as_str().unwrap();
    let cap = v["memlock"]["cap_sys_resource_effective"]
        .as_bool()
        .unwrap();
    // Default policy: unlimited, on_failure = error.
    let expect = match (hard == libc::RLIM_INFINITY, cap) {
        (true, _) => "fits",
        (false, true) => "raised",
        (false, false) => "create-fails",
    };
    assert_eq!(verdict, expect, "{v}");

    let o = rund(&e.config, &["doctor"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let line = out.lines().find(|l| l.contains("RLIMIT_MEMLOCK")).unwrap();
    let shown = rund_shim::cli::doctor::memlock::Limit::from_raw(hard).to_string();
    assert!(line.ends_with(&format!("hard {shown}")), "{line}");
    for key in [
        "cgroup:",
        "user namespaces:",
        "idmapped mounts:",
        "NVML:",
        "RDMA:",
        "mode requested",
        "policy ([policy]",
        "allowed_gpus                        none",
    ] {
        assert!(out.contains(key), "missing {key}: {out}");
    }
    if expect == "create-fails" {
        assert!(out.contains("LimitMEMLOCK=infinity"), "{out}");
    }
}

#[test]
fn doctor_prints_the_policy_in_force() {
    let e = env("[policy]\nallowed_rdma_devices = [\"mlx5_0\"]\nallow_userns_host = true\n[userns]\nmode = \"always\"");
    let out = text(&rund(&e.config, &["doctor"]).stdout);
    for needle in [
        "mode always (every pod)",
        "allow_userns_host                   honoured",
        "allowed_rdma_devices                mlx5_0",
    ] {
        assert!(out.contains(needle), "missing {needle}: {out}");
    }
    let v = json_of(&rund(&e.config, &["doctor", "--json"]));
    assert_eq!(v["policy"]["allowed_rdma_devices"][0], "mlx5_0", "{v}");
    assert_eq!(v["userns"]["mode"], "always", "{v}");
    // A bad policy value is an error naming the key.
    let e = env("[policy]\nallowed_gpus = [\"first\"]");
    let o = rund(&e.config, &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("allowed_gpus"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn doctor_refuses_a_bad_memlock_policy() {
    let e = env("[memlock]\non_failure = \"shrug\"");
    let o = rund(&e.config, &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("rund: ") && err.contains("on_failure"),
        "{err}"
    );
}

#[test]
fn check_write_bw_without_rdma_fails_clearly() {
    let has_rdma = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    if has_rdma {
        rund_skip::skip!("this host has RDMA devices");
    }
    let e = env("");
    let o = rund(&e.config, &["check", "write-bw"]);
    assert!(!o.status.success());
    let all = text(&o.stdout) + &text(&o.stderr);
    assert!(all.contains("no RDMA devices found"), "{all}");
}

#[test]
fn devices_json_is_json() {
    let e = env("");
    let v = json_of(&rund(&e.config, &["devices", "--json"]));
    assert!(v["rdma"].is_array(), "{v}");
    assert!(v["gpus"]["devices"].is_array(), "{v}");
}

#[test]
fn pool_status_and_gc_use_the_configured_state_dir() {
    let e = env("");
    let v = json_of(&rund(&e.config, &["pool", "status", "--json"]));
    let state = e.dir.path().join("state/cgroup-pool");
    assert_eq!(
        v["state_dir"].as_str().map(Path::new),
        Some(state.as_path())
    );
    assert_eq!(
        v["pools"],
        serde_json::json!([]),
        "a fresh state dir has no pools"
    );
    let o = rund(&e.config, &["pool", "gc"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("in 0 pool(s)"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn cdi_generate_writes_only_what_it_reports() {
    let e = env("");
    let out_dir = e.dir.path().join("cdi");
    let o = rund(
        &e.config,
        &["cdi", "generate", "--output-dir", out_dir.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let wrote: Vec<PathBuf> = text(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("wrote ").map(PathBuf::from))
        .collect();
    let on_disk: Vec<PathBuf> = std::fs::read_dir(&out_dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert_eq!(wrote.len(), on_disk.len(), "{wrote:?} vs {on_disk:?}");
    assert!(wrote.iter().all(|p| p.exists()));
}

#[test]
fn missing_or_bad_config_fails_clearly() {
    let o = rund(Path::new("/nonexistent"), &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("rund: reading rund config /nonexistent"),
        "{err}"
    );
    assert!(o.stdout.is_empty());

    let o = rund(Path::new("/nonexistent"), &[]);
    assert_eq!(o.status.code(), Some(2), "no subcommand is a usage error");
    assert!(text(&o.stderr).starts_with("rund: "), "{}", text(&o.stderr));

    let e = env("");
    std::fs::write(&e.config, "bogus = 1\n").unwrap();
    let o = rund(&e.config, &["devices"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("malformed"), "{}", text(&o.stderr));
}

/// `cmd` run as on a node without rdma-core: an empty libibverbs.so.1 in
/// `dir` comes first on the loader's path.
fn without_libibverbs(mut cmd: Command, dir: &Path) -> Output {
    std::fs::write(dir.join("libibverbs.so.1"), b"").unwrap();
    cmd.env("LD_LIBRARY_PATH", dir).output().unwrap()
}

#[test]
fn a_node_without_libibverbs_runs_rund_and_says_why_there_is_no_rdma() {
    let e = env("");
    let libs = e.dir.path().join("libs");
    std::fs::create_dir(&libs).unwrap();

    let mut shim = Command::new(env!("CARGO_BIN_EXE_containerd-shim-rund-v2"));
    shim.arg("-v");
    let o = without_libibverbs(shim, &libs);
    assert!(
        o.status.success(),
        "the shim needs libibverbs to start: {}",
        text(&o.stderr)
    );

    let mut check = Command::new(env!("CARGO_BIN_EXE_rund"));
    check
        .arg("--config")
        .arg(&e.config)
        .args(["check", "write-bw"])
        .env_remove("RUND_CONFIG");
    let o = without_libibverbs(check, &libs);
    assert!(!o.status.success());
    let all = text(&o.stdout) + &text(&o.stderr);
    assert!(
        all.contains("no RDMA devices found: ") && all.contains("libibverbs.so.1: file too short"),
        "{all}"
    );
}
