// Included by the shim's and the agent's build.rs: link arguments for a
// release build of one binary.
//
// - `-z pack-relative-relocs` (DT_RELR; glibc >= 2.36, musl >= 1.2.4): the
//   start-up code reads a few kB of relocations instead of ~250 kB at every
//   exec.
// - lld's `--symbol-ordering-file` with `linkorder/<bin>.order`
//   (`make link-order`): the functions a pod runs sit together, so page
//   faults map hot code. lld is rustc's linker on x86_64-unknown-linux-gnu
//   since 1.90; for the musl target (the agent) cc is told to use the
//   toolchain's own lld, as rustc does for gnu. Another linker would reject
//   the option, so it is given only then and when nothing names another
//   linker.
fn link_release(bin: &str) {
    if std::env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,-z,pack-relative-relocs");
    let order = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"))
        .join("../linkorder")
        .join(format!("{bin}.order"));
    // A missing file named here would rerun this script, and so rebuild the
    // crate, on every build: watch the folder until the file exists.
    let watched = if order.exists() { order.clone() } else { order.with_file_name("") };
    println!("cargo:rerun-if-changed={}", watched.display());
    // `RUND_LINK_ORDER=off`: an unordered link, to compare layouts by hand.
    println!("cargo:rerun-if-env-changed=RUND_LINK_ORDER");
    let wanted = std::env::var("RUND_LINK_ORDER").as_deref() != Ok("off");
    let Some(use_lld) = lld_args() else { return };
    if wanted && order.exists() {
        for arg in use_lld {
            println!("cargo:rustc-link-arg-bin={bin}={arg}");
        }
        println!(
            "cargo:rustc-link-arg-bin={bin}=-Wl,--symbol-ordering-file={},--no-warn-symbol-ordering",
            order.display()
        );
    }
}

/// The link arguments that make the link lld's, if it can be: none on
/// x86_64 gnu (rustc's own choice), cc's `-fuse-ld=lld` pointed at the
/// toolchain's lld on x86_64 musl; `None` when another linker is named.
fn lld_args() -> Option<Vec<String>> {
    let target = std::env::var("TARGET").unwrap_or_default();
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = |args: &[&str]| {
        std::process::Command::new(&rustc)
            .args(args)
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .unwrap_or_default()
    };
    let minor = out(&["--version"])
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1)?.parse::<u32>().ok())
        .unwrap_or(0);
    let linker_env = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace('-', "_")
    );
    if minor < 90 || flags.contains("link") || std::env::var_os(linker_env).is_some() {
        return None;
    }
    match target.as_str() {
        "x86_64-unknown-linux-gnu" => Some(Vec::new()),
        "x86_64-unknown-linux-musl" => {
            let host = std::env::var("HOST").unwrap_or_default();
            let gcc_ld = std::path::Path::new(out(&["--print", "sysroot"]).trim_end())
                .join(format!("lib/rustlib/{host}/bin/gcc-ld"));
            gcc_ld.join("ld.lld").exists().then(|| {
                vec!["-fuse-ld=lld".to_string(), format!("-B{}", gcc_ld.display())]
            })
        }
        _ => None,
    }
}
