//! Argument parsing of `rund`.

use std::path::Path;

use clap::Parser;

use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("rund").chain(args.iter().copied()))
}

#[test]
fn config_is_global_on_either_side_of_the_subcommand() {
    let c = parse(&["--config", "/a.toml", "doctor"]).unwrap();
    assert_eq!(c.config.as_deref(), Some(Path::new("/a.toml")));
    let c = parse(&["pool", "status", "--config", "/b.toml"]).unwrap();
    assert_eq!(c.config.as_deref(), Some(Path::new("/b.toml")));
    assert!(parse(&["doctor"]).unwrap().config.is_none());
}

#[test]
fn doctor_flags() {
    let c = parse(&["doctor", "--json", "--pid", "42"]).unwrap();
    assert!(matches!(
        c.command,
        Command::Doctor {
            json: true,
            pid: Some(42)
        }
    ));
    assert!(matches!(
        parse(&["doctor"]).unwrap().command,
        Command::Doctor {
            json: false,
            pid: None
        }
    ));
    assert!(parse(&["doctor", "--pid", "x"]).is_err());
}

#[test]
fn pool_subcommands() {
    let c = parse(&["pool", "status", "--json"]).unwrap();
    assert!(matches!(
        c.command,
        Command::Pool(PoolCommand::Status { json: true })
    ));
    let c = parse(&["pool", "gc", "--drain"]).unwrap();
    assert!(matches!(
        c.command,
        Command::Pool(PoolCommand::Gc { drain: true })
    ));
    let c = parse(&["pool", "gc"]).unwrap();
    assert!(matches!(
        c.command,
        Command::Pool(PoolCommand::Gc { drain: false })
    ));
    let c = parse(&["pool", "warm", "/k8s.io", "--slots", "256"]).unwrap();
    assert!(matches!(
        c.command,
        Command::Pool(PoolCommand::Warm { ref parent, slots: 256 }) if parent == "/k8s.io"
    ));
    assert!(parse(&["pool", "warm"]).is_err(), "warm needs a parent");
    assert!(parse(&["pool"]).is_err(), "pool needs a subcommand");
    assert!(parse(&["pool", "status", "--drain"]).is_err());
}

#[test]
fn devices_and_cdi() {
    assert!(matches!(
        parse(&["devices", "--json"]).unwrap().command,
        Command::Devices { json: true }
    ));
    let Command::Cdi(CdiCommand::Generate(a)) = parse(&["cdi", "generate"]).unwrap().command else {
        panic!("not cdi generate");
    };
    assert_eq!(a.output_dir, Path::new("/var/run/cdi"));
    let Command::Cdi(CdiCommand::Generate(a)) =
        parse(&["cdi", "generate", "--output-dir", "/tmp/x"])
            .unwrap()
            .command
    else {
        panic!("not cdi generate");
    };
    assert_eq!(a.output_dir, Path::new("/tmp/x"));
}

#[test]
fn check_write_bw_forwards_perftest_options() {
    let c = parse(&[
        "check",
        "write-bw",
        "-d",
        "mlx5_0",
        "-s",
        "4096",
        "-n",
        "100",
        "-a",
        "--limit-bw",
        "9000",
        "--json",
    ])
    .unwrap();
    let Command::Check(CheckCommand::WriteBw(a)) = c.command else {
        panic!("not write-bw");
    };
    assert_eq!(a.device, "mlx5_0");
    assert_eq!(
        (a.size, a.iters, a.all_sizes, a.json),
        (Some(4096), Some(100), true, true)
    );
    assert_eq!(a.limit_bw, Some(9000.0));
    let r = a.request();
    assert_eq!((r.device.as_str(), r.json), ("mlx5_0", true));
    assert_eq!(
        (r.params.size, r.params.iters, r.params.run_all),
        (4096, 100, true)
    );
    assert_eq!(
        (r.params.limit_bw, r.params.gid_index),
        (Some(9000.0), None)
    );
    let Command::Check(CheckCommand::WriteBw(a)) = parse(&["check", "write-bw"]).unwrap().command
    else {
        panic!("not write-bw");
    };
    assert_eq!(a.device, "all");
    let r = a.request();
    assert_eq!(
        (r.params.size, r.params.iters),
        (65536, 5000),
        "perftest's defaults"
    );
    // perftest's spellings: -x for the GID index, -D for a duration, --limit_bw.
    let c = parse(&["check", "write-bw", "-x", "3", "-D", "2", "--limit_bw", "1"]).unwrap();
    let Command::Check(CheckCommand::WriteBw(a)) = c.command else {
        panic!("not write-bw");
    };
    let r = a.request();
    assert_eq!(
        (r.params.gid_index, r.params.duration, r.params.limit_bw),
        (Some(3), Some(2), Some(1.0))
    );
    assert!(parse(&["check", "write-bw", "-s", "big"]).is_err());
}

#[test]
fn unknown_and_missing_commands_are_errors() {
    assert!(parse(&[]).is_err());
    assert!(parse(&["frobnicate"]).is_err());
    assert!(parse(&["--config"]).is_err());
}

#[test]
fn missing_explicit_config_is_a_clear_error() {
    let cli = parse(&["--config", "/nonexistent/rund.toml", "devices"]).unwrap();
    let e = run(cli, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/rund.toml"), "{e}");
}

#[test]
fn userns_leases_list_from_a_private_state_dir() {
    assert!(matches!(
        parse(&["userns", "list", "--json"]).unwrap().command,
        Command::Userns(UsernsCommand::List { json: true })
    ));
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, format!("state_dir = {:?}\n", dir.path())).unwrap();
    let cli = parse(&[
        "--config",
        cfg.to_str().unwrap(),
        "userns",
        "list",
        "--json",
    ])
    .unwrap();
    let mut out = Vec::new();
    assert_eq!(run(cli, &mut out).unwrap(), 0);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, serde_json::json!([]));
    assert!(
        dir.path().join("userns").exists(),
        "leases live under the configured state dir"
    );
}

#[test]
fn install_and_uninstall_flags() {
    let c = parse(&[
        "install",
        "--prefix",
        "/opt/r",
        "--containerd-config",
        "/e/c.toml",
        "--dry-run",
        "--restart",
    ])
    .unwrap();
    let Command::Install(a) = c.command else {
        panic!("install")
    };
    assert_eq!(a.prefix, Path::new("/opt/r"));
    assert_eq!(a.containerd_config, Path::new("/e/c.toml"));
    assert!(a.dry_run && a.restart);
    assert_eq!(a.rund_config, None);
    let d = parse(&["install"]).unwrap();
    let Command::Install(d) = d.command else {
        panic!("install")
    };
    assert_eq!(d.prefix, Path::new("/usr/local"));
    assert_eq!(
        d.containerd_config,
        Path::new("/etc/containerd/config.toml")
    );
    assert_eq!(d.manifest, Path::new("/var/lib/rund/install-manifest.json"));
    assert!(!d.dry_run && !d.restart);
    assert!(parse(&["install", "--prefx", "/x"]).is_err());
    let u = parse(&["uninstall", "--dry-run"]).unwrap();
    assert!(matches!(u.command, Command::Uninstall(ref a) if a.dry_run && !a.restart));
}
