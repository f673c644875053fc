//! Volume propagation through containerd's CRI, for handler `runc` (the reference) and `rund`
//! in one private containerd: a PROPAGATION_BIDIRECTIONAL volume carries mounts both ways
//! (containerd then asks for rootfsPropagation rshared), a PROPAGATION_HOST_TO_CONTAINER one
//! (rslave) only into the container. rund's pod opts out of its user namespace
//! (`rund.io/userns: host`): with one, shared propagation is refused (see rund_mounts.rs).

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_cri::v1::{Mount, MountPropagation};
use rund_tests::fsview::SharedVol;
use rund_tests::{
    assert_no_leaks_within, ContainerSpec, Containerd, ContainerdOpts, LeakSnapshot, PodSpec,
    BUSYBOX_IMAGE,
};

fn volume(container: &str, host: &Path, p: MountPropagation) -> Mount {
    Mount {
        container_path: container.into(),
        host_path: host.display().to_string(),
        propagation: p as i32,
        ..Default::default()
    }
}

const SCRIPT: &str = "while [ ! -e /bi/go ]; do sleep 0.05; done; \
    s=''; for v in bi h2c; do if [ -e /$v/fromhost/flag ]; then s=\"$s yes\"; else s=\"$s no\"; fi; done; \
    echo $s > /bi/saw; \
    for v in bi h2c; do mount -t tmpfs ctr /$v/fromctr && touch /$v/fromctr/ok || exit 3; done; \
    touch /bi/done; exec sleep 1000";

#[test]
fn cri_bidirectional_and_host_to_container_volumes() {
    let Some(ctd) = Containerd::start_rund_or_skip(
        "cri_bidirectional_and_host_to_container_volumes",
        ContainerdOpts::new().cri().with_runc(),
    ) else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    for handler in ["runc", "rund"] {
        let bi = SharedVol::new(ctd.dir.join(format!("bi-{handler}")));
        let h2c = SharedVol::new(ctd.dir.join(format!("h2c-{handler}")));
        bi.mount_from_host();
        h2c.mount_from_host();
        let before = LeakSnapshot::take(&ctd);
        let mut pod = PodSpec::new(&format!("prop-{handler}"), &ctd.cgroup_parent);
        pod.annotations
            .insert("rund.io/userns".into(), "host".into());
        let pod_id = cri.run_pod_sandbox(&pod, handler).expect("RunPodSandbox");
        let mut c = ContainerSpec::new("vols", BUSYBOX_IMAGE, &["sh", "-c", SCRIPT]);
        c.mounts = vec![
            volume("/bi", &bi.0, MountPropagation::PropagationBidirectional),
            volume("/h2c", &h2c.0, MountPropagation::PropagationHostToContainer),
        ];
        c.add_capabilities = vec!["SYS_ADMIN".into()];
        let id = cri.create_and_start(&pod_id, &c, &pod).expect(handler);
        std::fs::write(bi.0.join("go"), "").unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !bi.0.join("done").exists() {
            let st = cri.container_status(&id).unwrap();
            assert!(
                Instant::now() < deadline,
                "{handler}: the container never got its mounts done: {st:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let saw = std::fs::read_to_string(bi.0.join("saw")).unwrap();
        assert_eq!(
            saw.trim(),
            "yes yes",
            "{handler}: host mounts seen (bi, h2c)"
        );
        assert!(
            bi.0.join("fromctr/ok").exists(),
            "{handler}: a bidirectional volume must carry the container's mount to the host"
        );
        assert!(
            !h2c.0.join("fromctr/ok").exists(),
            "{handler}: a host-to-container volume must not carry mounts back"
        );
        cri.remove_pod(&pod_id);
        drop((bi, h2c));
        assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
    }
}
