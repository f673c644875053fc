// Included by the shim's and the agent's build.rs: link arguments for a
// release build of one binary.
//
// - `-z pack-relative-relocs` (DT_RELR, glibc >= 2.36): ld.so reads a few kB
//   of relocations instead of ~250 kB at every exec.
// - lld's `--symbol-ordering-file` with `linkorder/<bin>.order`
//   (`make link-order`): the functions a pod runs sit together, so page
//   faults map hot code. lld is rustc's linker on x86_64-unknown-linux-gnu
//   since 1.90; another linker would reject the option, so it is given only
//   there and when nothing names another linker.
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
    if wanted && order.exists() && rustc_links_with_lld() {
        println!(
            "cargo:rustc-link-arg-bin={bin}=-Wl,--symbol-ordering-file={},--no-warn-symbol-ordering",
            order.display()
        );
    }
}

fn rustc_links_with_lld() -> bool {
    let target = std::env::var("TARGET").unwrap_or_default();
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let minor = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1)?.split('.').nth(1)?.parse::<u32>().ok())
        .unwrap_or(0);
    target == "x86_64-unknown-linux-gnu"
        && minor >= 90
        && !flags.contains("link")
        && std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_none()
}
