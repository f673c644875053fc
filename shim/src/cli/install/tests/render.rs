//! The registration snippets, and deploy/ being exactly their output.

use std::path::Path;

use crate::cli::install::detect::{self, MainConfig};
use crate::cli::install::snippet::*;

fn parse(s: &str) -> toml::Table {
    toml::from_str(s).unwrap_or_else(|e| panic!("{e}\n{s}"))
}

fn strings(v: &toml::Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

fn paths() -> Paths {
    Paths::new(Path::new("/opt/x"), Path::new("/etc/rund/c.toml"))
}

#[test]
fn v2_file_registers_rund_under_the_1x_cri_plugin() {
    let t = parse(&v2_file(&paths()));
    assert_eq!(t["version"].as_integer(), Some(2));
    let rund = &t["plugins"][CRI_V2]["containerd"]["runtimes"]["rund"];
    assert_eq!(rund["runtime_type"].as_str(), Some("io.containerd.rund.v2"));
    assert_eq!(
        rund["runtime_path"].as_str(),
        Some("/opt/x/bin/containerd-shim-rund-v2")
    );
    assert_eq!(
        strings(&rund["pod_annotations"]),
        [
            "rund.io/init",
            "rund.io/grace-period-seconds",
            "rund.io/userns"
        ]
    );
    assert_eq!(strings(&rund["container_annotations"]), ["cdi.k8s.io/*"]);
    // Also 2.x's drop-in for a version 2 config.toml: no options (see below).
    assert!(rund.get("options").is_none(), "{rund}");
    assert!(rund.get("sandboxer").is_none(), "1.x has no sandboxer");
    // Nothing but the runtime: no global CRI setting (e.g. restrict_oom_score_adj) rides along.
    assert_eq!(t["plugins"][CRI_V2].as_table().unwrap().len(), 1);
    assert_eq!(
        t["plugins"][CRI_V2]["containerd"].as_table().unwrap().len(),
        1
    );
    assert!(!v2_file(&paths()).contains("restrict_oom_score_adj"));
}

#[test]
fn v3_file_registers_rund_under_the_2x_runtime_plugin() {
    let t = parse(&v3_file(&paths()));
    assert_eq!(t["version"].as_integer(), Some(3));
    assert!(t["plugins"].get(CRI_V2).is_none());
    let rund = &t["plugins"][CRI_V3]["containerd"]["runtimes"]["rund"];
    assert_eq!(rund["runtime_type"].as_str(), Some("io.containerd.rund.v2"));
    assert_eq!(rund["sandboxer"].as_str(), Some("podsandbox"));
    assert_eq!(
        strings(&rund["pod_annotations"]),
        [
            "rund.io/init",
            "rund.io/grace-period-seconds",
            "rund.io/userns"
        ]
    );
    assert_eq!(strings(&rund["container_annotations"]), ["cdi.k8s.io/*"]);
    assert!(rund.get("options").is_none(), "{rund}");
    assert_eq!(t["plugins"][CRI_V3].as_table().unwrap().len(), 1);
    assert!(!v3_file(&paths()).contains("restrict_oom_score_adj"));
}

/// containerd 2.1-2.3 read a runtime's options as runc's for a user-namespaced pod and fail
/// it: only 1.x gets `ConfigPath`, and only for a path rund would not read anyway; a 2.x
/// drop-in names a custom path in a comment that says how to pass it.
#[test]
fn only_1x_gets_a_config_path_and_only_a_custom_one() {
    let v1 = parse(&v2_tables(&paths()));
    let rund = &v1["plugins"][CRI_V2]["containerd"]["runtimes"]["rund"];
    assert_eq!(
        rund["options"]["ConfigPath"].as_str(),
        Some("/etc/rund/c.toml")
    );
    let default = parse(&v2_tables(&Paths::default()));
    let rund = &default["plugins"][CRI_V2]["containerd"]["runtimes"]["rund"];
    assert!(rund.get("options").is_none(), "{rund}");
    for text in [v2_file(&paths()), v3_file(&paths())] {
        assert!(!text.contains("ConfigPath"), "{text}");
        assert!(
            text.contains("\n  # RUND_CONFIG=/etc/rund/c.toml\n"),
            "{text}"
        );
    }
    assert!(!v3_file(&Paths::default()).contains("RUND_CONFIG=/"));
}

#[test]
fn no_privileged_annotation_is_forwarded_from_pods() {
    for a in POD_ANNOTATIONS {
        assert!(!a.contains('*'), "no wildcard in pod annotations: {a}");
        for privileged in [
            "rund.io/rdma-devices",
            "rund.io/gpus",
            "rund.io/memlock",
            "cdi.k8s.io",
        ] {
            assert!(!a.starts_with(privileged), "{a}");
        }
    }
}

#[test]
fn the_drop_in_follows_config_toml_s_version() {
    assert_eq!(drop_in(&paths(), 3), v3_file(&paths()));
    assert_eq!(drop_in(&paths(), 2), v2_file(&paths()));
}

#[test]
fn odd_paths_are_quoted_as_toml() {
    let p = Paths::new(Path::new("/opt/a \"b\\c"), Path::new("/etc/r.toml"));
    let t = parse(&v3_file(&p));
    assert_eq!(
        t["plugins"][CRI_V3]["containerd"]["runtimes"]["rund"]["runtime_path"].as_str(),
        Some("/opt/a \"b\\c/bin/containerd-shim-rund-v2")
    );
}

fn deploy(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `RUND_BLESS_DEPLOY=1 cargo test -p rund-shim deploy_files` rewrites deploy/'s generated
/// files from the code.
fn bless(name: &str, content: &str) {
    if std::env::var("RUND_BLESS_DEPLOY").as_deref() == Ok("1") {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy")
            .join(name);
        std::fs::write(p, content).unwrap();
    }
}

#[test]
fn deploy_files_are_what_rund_install_writes() {
    let d = Paths::default();
    bless("containerd-rund.toml", &v2_file(&d));
    bless("containerd-rund-v3.toml", &v3_file(&d));
    assert_eq!(
        deploy("containerd-rund.toml"),
        v2_file(&d),
        "regenerate deploy/containerd-rund.toml from snippet::v2_file"
    );
    assert_eq!(
        deploy("containerd-rund-v3.toml"),
        v3_file(&d),
        "regenerate deploy/containerd-rund-v3.toml from snippet::v3_file"
    );
    // The shipped rund config is the one rund install writes, and it parses.
    assert_eq!(
        deploy("config.toml"),
        crate::cli::install::plan::DEFAULT_RUND_CONFIG
    );
    crate::config::RundConfig::parse(
        crate::cli::install::plan::DEFAULT_RUND_CONFIG,
        Path::new("deploy/config.toml"),
    )
    .unwrap();
}

#[test]
fn containerd_versions_parse() {
    let p = detect::parse_version;
    assert_eq!(
        p("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"),
        Some((1, 6))
    );
    assert_eq!(
        p("containerd github.com/containerd/containerd/v2 2.1.9+unknown"),
        Some((2, 1))
    );
    assert_eq!(
        p("containerd containerd.io v1.7.27 05044ec0a9"),
        Some((1, 7))
    );
    assert_eq!(p("2.1"), Some((2, 1)));
    assert_eq!(p("containerd"), None);
}

#[test]
fn detection_prefers_the_flag_then_the_binary_then_the_config() {
    let cfg =
        |text: &str| MainConfig::parse(Path::new("/e/config.toml"), Some(text.into())).unwrap();
    let none = vec!["/nonexistent/containerd".to_owned(), "--version".to_owned()];
    let d = detect::detect(Some("2.1"), &none, &cfg("version = 2")).unwrap();
    assert_eq!(d.line, detect::Line::Two);
    let d = detect::detect(Some("1.7.27"), &none, &cfg("version = 3")).unwrap();
    assert_eq!(d.line, detect::Line::One);
    assert!(detect::detect(Some("1.5"), &none, &cfg("")).is_err());
    assert!(detect::detect(Some("banana"), &none, &cfg("")).is_err());
    // No binary: version 3 can only be 2.x; anything else gets the edit both lines read.
    let d = detect::detect(None, &none, &cfg("version = 3")).unwrap();
    assert_eq!(d.line, detect::Line::Two);
    assert!(d.how.contains("version = 3"), "{}", d.how);
    let d = detect::detect(None, &none, &cfg("version = 2")).unwrap();
    assert_eq!(d.line, detect::Line::One);
    // A binary that answers.
    let echo = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        "echo containerd github.com/containerd/containerd/v2 2.1.9".to_owned(),
    ];
    let d = detect::detect(None, &echo, &cfg("version = 2")).unwrap();
    assert_eq!(d.line, detect::Line::Two);
}

#[test]
fn main_config_reports_imports_and_an_existing_rund() {
    let c = MainConfig::parse(
        Path::new("/etc/containerd/config.toml"),
        Some("version = 3\nimports = [\"a.toml\", \"conf.d/*.toml\"]\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.rund]\nruntime_type = 'x'\n".into()),
    )
    .unwrap();
    assert_eq!(c.drop_in_dir(), Some("/etc/containerd/conf.d".into()));
    assert_eq!(
        c.rund_table.as_deref(),
        Some("plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.rund")
    );
    let abs = MainConfig::parse(
        Path::new("/etc/containerd/config.toml"),
        Some("version = 2\nimports = [\"/srv/ctrd/*.toml\"]\n".into()),
    )
    .unwrap();
    assert_eq!(abs.drop_in_dir(), Some("/srv/ctrd".into()));
    assert!(abs.rund_table.is_none());
    let none = MainConfig::parse(
        Path::new("/x/config.toml"),
        Some("version = 2\nimports = [\"/x/one.toml\"]\n".into()),
    )
    .unwrap();
    assert_eq!(none.drop_in_dir(), None);
    assert_eq!(none.default_import(), "/x/conf.d/*.toml");
    let e = MainConfig::parse(
        Path::new("/x/config.toml"),
        Some("imports = \"/x/*.toml\"\n".into()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("`imports` must be a list"), "{e}");
    let e =
        MainConfig::parse(Path::new("/x/config.toml"), Some("version = \n".into())).unwrap_err();
    assert!(
        e.to_string().contains("/x/config.toml is not valid TOML"),
        "{e}"
    );
}

/// The commented sandbox-API handler is valid TOML once uncommented, and has no options table
/// (containerd 2.1-2.3 fail every task of a shim sandboxer that has one).
#[test]
fn the_sandbox_api_example_uncomments_into_a_runtime_without_options() {
    let text = v3_file(&Paths::default());
    let uncommented: String = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("# [")
                .map(|r| format!("[{r}"))
                .or_else(|| l.strip_prefix("#   ").map(str::to_string))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let v: toml::Value = toml::from_str(&uncommented).unwrap();
    let rt =
        &v["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["rund-sandbox"];
    assert_eq!(rt["sandboxer"].as_str(), Some("shim"), "{uncommented}");
    assert_eq!(rt["runtime_type"].as_str(), Some(RUNTIME_TYPE));
    assert!(rt.get("options").is_none(), "{uncommented}");
}
