//! A minimal OCI image tarball of the busybox rootfs, built offline, importable with
//! `ctr images import` and usable as the CRI sandbox (pause) image.

use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};

/// The reference the tarball carries (`io.containerd.image.name`).
pub const BUSYBOX_IMAGE: &str = "docker.io/library/rund-busybox:latest";

/// Default command: sleep "forever", so the image also serves as a pause image.
pub const DEFAULT_CMD: &[&str] = &["/bin/sleep", "2147483647"];

const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MT_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MT_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// OCI architecture name of this machine.
pub fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Write the busybox image as an OCI tarball at `path`, named `name`, with [`DEFAULT_CMD`].
pub fn oci_image_tarball(path: &Path, name: &str) -> Result<()> {
    oci_image_tarball_with_cmd(path, name, DEFAULT_CMD)
}

/// Same, with a chosen default command.
pub fn oci_image_tarball_with_cmd(path: &Path, name: &str, cmd: &[&str]) -> Result<()> {
    let work = tempfile::Builder::new()
        .prefix("img")
        .tempdir()
        .ctx("create temp dir", std::env::temp_dir())?;
    let rootfs = work.path().join("rootfs");
    crate::rootfs::busybox_rootfs(&rootfs)?;
    let layer = tar_dir(&rootfs)?;
    let layer_digest = sha256(&layer);

    let config = serde_json::to_vec(&json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": cmd,
            "WorkingDir": "/",
        },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
        "history": [{ "created_by": "rund-tests busybox_rootfs" }],
    }))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": { "mediaType": MT_CONFIG, "digest": sha256(&config), "size": config.len() },
        "layers": [{ "mediaType": MT_LAYER, "digest": layer_digest, "size": layer.len() }],
    }))?;
    let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [{
            "mediaType": MT_MANIFEST,
            "digest": sha256(&manifest),
            "size": manifest.len(),
            "platform": { "architecture": oci_arch(), "os": "linux" },
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))?;

    let file = std::fs::File::create(path).ctx("create image tarball", path)?;
    let mut tb = tar::Builder::new(file);
    let mut add = |name: &str, data: &[u8]| -> Result<()> {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        tb.append_data(&mut h, name, data)
            .map_err(|e| Error::Image(format!("add {name}: {e}")))
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json", &index)?;
    for blob in [&layer, &config, &manifest] {
        let hex = sha256(blob);
        let hex = hex.trim_start_matches("sha256:");
        add(&format!("blobs/sha256/{hex}"), blob)?;
    }
    tb.into_inner()
        .map_err(|e| Error::Image(format!("finish tarball: {e}")))?;
    Ok(())
}

/// `sha256:<hex>` of `data`.
fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// An uncompressed, deterministic tar of `dir` (owner root, symlinks kept as symlinks).
fn tar_dir(dir: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.mode(tar::HeaderMode::Deterministic);
    b.follow_symlinks(false);
    b.append_dir_all(".", dir)
        .map_err(|e| Error::Image(format!("tar {}: {e}", dir.display())))?;
    b.into_inner()
        .map_err(|e| Error::Image(format!("finish layer: {e}")))
}

impl crate::containerd::Containerd {
    /// Build the busybox image tarball in the instance dir and import it into namespace `ns`
    /// (use [`crate::containerd::K8S_NAMESPACE`] for the CRI sandbox image). Returns its name.
    pub fn import_busybox_image(&self, ns: &str) -> Result<&'static str> {
        let tarball = self.dir.join("busybox-oci.tar");
        if !tarball.exists() {
            let tmp = self.dir.join("busybox-oci.tar.tmp");
            oci_image_tarball(&tmp, BUSYBOX_IMAGE)?;
            std::fs::rename(&tmp, &tarball).ctx("rename image tarball", &tarball)?;
        }
        self.import_image(ns, &tarball)?;
        Ok(BUSYBOX_IMAGE)
    }
}
