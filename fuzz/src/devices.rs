//! Device requests: `rund.io/gpus`, `rund.io/rdma-devices`, `cdi.k8s.io/*`
//! and `NVIDIA_VISIBLE_DEVICES`, then the policy's admission of them.

use std::collections::HashSet;

use rund_devices::select::{CdiName, DeviceRequest, GpuId, GpuSelection, RdmaId, RdmaSelection};
use rund_shim::policy::devices::admit;
use rund_shim::policy::PolicyConfig;

use crate::grammar::is_cdi_name;
use crate::scenario::{self, Scenario};

/// A name safe to put in a sysfs path or match against one.
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_graphic() && c != b'/' && c != b',')
}

fn check_request(r: &DeviceRequest) {
    let mut seen = HashSet::new();
    for n in &r.cdi_devices {
        let text = n.to_string();
        assert!(is_cdi_name(&text), "{text:?} accepted as a CDI name");
        assert_eq!(CdiName::parse(&text).as_ref(), Ok(n), "{text:?}");
        assert!(seen.insert(text), "duplicate CDI device");
    }
    if let GpuSelection::List(ids) = &r.gpus {
        assert!(!ids.is_empty());
        assert_eq!(
            ids.iter()
                .map(|i| i.to_string())
                .collect::<HashSet<_>>()
                .len(),
            ids.len()
        );
        for id in ids {
            if let GpuId::Uuid(u) = id {
                assert!(u.starts_with("GPU-") && plain(u), "GPU id {u:?}");
            }
        }
    }
    if let RdmaSelection::List(ids) = &r.rdma {
        assert!(!ids.is_empty());
        for id in ids {
            match id {
                RdmaId::Device(d) => assert!(plain(d) && !d.contains(':'), "device {d:?}"),
                // IFNAMSIZ is 16 with the NUL.
                RdmaId::Netdev(n) => assert!(plain(n) && n.len() < 16, "netdev {n:?}"),
            }
        }
    }
}

fn allows_cdi(policy: &PolicyConfig, n: &CdiName) -> bool {
    let any = format!("{}/{}=*", n.vendor, n.class);
    policy
        .allowed_cdi_devices
        .iter()
        .any(|a| *a == n.to_string() || *a == any)
}

fn check_admission(s: &Scenario, req: &DeviceRequest) {
    let policy = &s.policy;
    let Ok(a) = admit(policy, &s.spec, s.pod.as_ref(), req.clone()) else {
        return;
    };
    let listed = |l: &[String], x: &str| l.iter().any(|e| e == x);
    let ann = s.spec.annotations().clone().unwrap_or_default();
    let from_env = !ann.contains_key(rund_annotations::GPUS);
    if req.gpus != GpuSelection::Nothing && from_env && !policy.accept_nvidia_visible_devices_env {
        assert_eq!(
            a.request.gpus,
            GpuSelection::Nothing,
            "env GPUs not ignored"
        );
        assert!(!a.notes.is_empty(), "an ignored request is logged");
    }
    match &a.request.gpus {
        GpuSelection::Nothing => {}
        g => {
            let gpus = &policy.allowed_gpus;
            assert!(!gpus.is_empty(), "GPUs {g:?} under an empty allowed_gpus");
            if *g == GpuSelection::All {
                assert!(listed(gpus, "all"));
            }
            if *g == GpuSelection::DriverOnly {
                assert!(listed(gpus, "all") || listed(gpus, "none"));
            }
        }
    }
    match &a.request.rdma {
        RdmaSelection::Nothing => {}
        r => {
            let rdma = &policy.allowed_rdma_devices;
            assert!(
                !rdma.is_empty(),
                "RDMA {r:?} under an empty allowed_rdma_devices"
            );
            assert!(*r != RdmaSelection::All || listed(rdma, "all"));
        }
    }
    assert_eq!(a.request.cdi_devices, req.cdi_devices);
    let Some(pod) = &s.pod else {
        return;
    };
    for (key, value) in &ann {
        if key.starts_with(rund_annotations::CDI_PREFIX) && pod.get(key) == Some(value) {
            for raw in value.split(',') {
                let n = CdiName::parse(raw.trim()).expect("from_spec parsed it");
                assert!(allows_cdi(policy, &n), "pod's CDI device {n} let through");
            }
        }
    }
}

pub fn run(data: &[u8]) {
    let Some(s) = scenario::parse(data) else {
        return;
    };
    let Ok(req) = DeviceRequest::from_spec(&s.spec) else {
        return;
    };
    check_request(&req);
    check_admission(&s, &req);
}
