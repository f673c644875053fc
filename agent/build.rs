//! Builds rund-init (crate `init/`) as a static executable and embeds it:
//! containers that opt into an init run it from a sealed memfd, and it must
//! work in images without a libc. A nested cargo, with its own target dir,
//! is the one way to give one crate `crt-static` whatever the outer build.

use std::path::PathBuf;
use std::process::Command;

// Release link arguments: relocations packed, hot functions first.
include!("../linkorder/link_args.rs");

fn main() {
    link_release("rund-agent");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"))
        .join("../init/Cargo.toml");
    let target_dir = out.join("init-target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--quiet",
        "--bin",
        "rund-init",
        "--manifest-path",
    ])
    .arg(&manifest)
    .arg("--target-dir")
    .arg(&target_dir)
    .env(
        "RUSTFLAGS",
        "-C target-feature=+crt-static -C strip=symbols",
    )
    .env_remove("CARGO_ENCODED_RUSTFLAGS")
    .env_remove("CARGO_TARGET_DIR")
    .env_remove("CARGO_BUILD_TARGET_DIR");
    let status = cmd.status().expect("run cargo for rund-init");
    assert!(status.success(), "building rund-init (static) failed");
    let bin = target_dir.join("release/rund-init");
    println!("cargo:rustc-env=RUND_INIT_BIN={}", bin.display());
    for f in [
        "../init/src/main.rs",
        "../init/src/forward.rs",
        "../init/src/privs.rs",
        "../init/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
}
