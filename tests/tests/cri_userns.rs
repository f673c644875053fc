//! CRI user namespaces as Kubernetes defines them (`hostUsers: false`), both handlers (runc the
//! reference, rund in podsandbox mode): the pod config's `userns_options` (mode POD, uid and
//! gid mappings) reach the specs through containerd, and the pod's containers run in that user
//! namespace:
//!
//! - `/proc/self/uid_map` and `gid_map` inside show exactly the mapping asked for;
//! - the container runs as root inside and as the mapped host uid on the node;
//! - the rootfs' files appear owned by root inside (the rootfs is remapped, not chowned).
//!
//! containerd 1.6's CRI does not know `userns_options` (1.7 added it): there the tests skip,
//! and the 2.1 line runs them. On 2.x, runc needs idmapped mounts (runc >= 1.2): with Debian
//! 12's runc 1.1.5 the runc case skips, naming it.

use rund_tests::containerd::line;
use rund_tests::cri::{CriFixture, Handler, IdRange};
use rund_tests::{per_handler, ContainerSpec, ContainerdOpts, BUSYBOX_IMAGE};

/// The pod's range: far from rund's own pool (which starts at 1 000 000), a multiple of 65536
/// as the kubelet allocates.
const RANGE: IdRange = IdRange {
    host: 0x7000_0000,
    len: 65536,
};

fn start(h: Handler, test: &str) -> Option<CriFixture> {
    let bins = line::selected().expect("the selected containerd line");
    if !bins.is_v2() {
        rund_tests::skip!(
            "{test}: containerd 1.6's CRI ignores userns_options (hostUsers: false); the 2.1 line runs it"
        );
    }
    if h == Handler::Runc && !runc_has_idmap_mounts() {
        // containerd 2.x checks `runc features` before it creates a task with idmapped mounts.
        rund_tests::skip!(
            "{test}: this runc has no idmap mounts (`runc features` lacks mountExtensions.idmap: \
             runc >= 1.2 needed, Debian 12 ships 1.1.5)"
        );
    }
    // Kubernetes allows hostUsers: false only with the pod's own network. containerd 2.x reads
    // the handler's runtime options as runc's for such a container ("can't unmarshal type
    // runtimeoptions.v1.Options"): rund's config goes through RUND_CONFIG instead.
    let mut opts = ContainerdOpts::new().pod_network();
    opts.rund_config_env = true;
    CriFixture::start(h, test, opts)
}

/// Whether the host's runc says it supports idmapped mounts (`runc features`).
fn runc_has_idmap_mounts() -> bool {
    let out = std::process::Command::new("runc").arg("features").output();
    let Ok(out) = out else { return false };
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .is_ok_and(|f| f["linux"]["mountExtensions"]["idmap"]["enabled"] == true)
}

/// Pids whose command line is exactly `args` (host view).
fn pids_running(args: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// The real uid (and gid) of `pid` as the host sees it, from `/proc/<pid>/status`.
fn host_ids(pid: u32) -> (String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_default()
            .to_owned()
    };
    (field("Uid:"), field("Gid:"))
}

fn host_users_false(h: Handler) {
    let test = format!("host_users_false ({})", h.name());
    let Some(mut fx) = start(h, &test) else {
        return;
    };
    let mut pod = fx.pod_spec("userns");
    pod.host_network = false;
    pod.user_namespace = Some(RANGE);
    let pod_id = fx
        .run_pod(&pod)
        .unwrap_or_else(|e| panic!("{}: RunPodSandbox: {e}\n{}", h.name(), fx.ctd.log_tail(40)));
    let marker = format!("{}", 700_000 + std::process::id() % 100_000);
    let args = ["sleep", marker.as_str()];
    let id = fx
        .run(
            &pod_id,
            &ContainerSpec::new("c", BUSYBOX_IMAGE, &args),
            &pod,
        )
        .unwrap_or_else(|e| panic!("{}: container: {e}\n{}", h.name(), fx.ctd.log_tail(40)));

    let want = format!("0 {} {}", RANGE.host, RANGE.len);
    for map in ["uid_map", "gid_map"] {
        let got = fx.sh_ok(&id, &format!("cat /proc/self/{map}"));
        let got: Vec<&str> = got.split_whitespace().collect();
        assert_eq!(got.join(" "), want, "{}: {map}", h.name());
    }
    assert_eq!(
        fx.sh_ok(&id, "id -u; id -g")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "0"]
    );
    let owners = fx.sh_ok(&id, "stat -c '%u:%g %n' / /bin/busybox /etc/passwd");
    for line in owners.lines() {
        assert!(
            line.starts_with("0:0 "),
            "{}: rootfs files are root's inside: {owners}",
            h.name()
        );
    }
    // The workload itself, seen from the node: the mapped host ids, not root.
    let pids = pids_running(&args);
    assert_eq!(
        pids.len(),
        1,
        "{}: one `sleep {marker}`: {pids:?}",
        h.name()
    );
    let host = RANGE.host.to_string();
    assert_eq!(
        host_ids(pids[0]),
        (host.clone(), host),
        "{}: the workload runs as the mapped host ids",
        h.name()
    );
    fx.finish();
}

per_handler!(host_users_false);
