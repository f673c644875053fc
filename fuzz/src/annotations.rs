//! `rund.io/*` annotations that are not device requests: the user
//! namespace decision (`rund.io/userns`, `rund.io/userns-binds`, spec id
//! mappings), `rund.io/memlock` and `rund.io/grace-period-seconds`, each
//! under the node's `[policy]`.

use oci_spec::runtime::{LinuxIdMapping, PosixRlimitType};
use rund_shim::config::RemapMode;
use rund_shim::policy::limits::{check_memlock, grace_seconds, LimitError};
use rund_shim::rlimit::memlock::{parse_limit, with_default};
use rund_shim::spec;
use rund_shim::userns::idmap::IdMapping;
use rund_shim::userns::{decide, pod_asks, BindsMode, UsernsError, UsernsMode};

use crate::scenario::{self, Scenario};

/// What the kernel accepts in uid_map/gid_map (user_namespace.c): at most
/// 340 extents, none containing id 2^32-1, none overlapping on either side.
fn kernel_accepts(map: &[IdMapping]) -> bool {
    let end = |first: u32, size: u32| first as u64 + size as u64;
    let ok = |m: &IdMapping| {
        m.size > 0
            && end(m.container_id, m.size) <= u32::MAX as u64
            && end(m.host_id, m.size) <= u32::MAX as u64
    };
    let apart = |a: u32, b: u32, sa: u32, sb: u32| end(a, sa) <= b as u64 || end(b, sb) <= a as u64;
    map.len() <= 340
        && map.iter().all(ok)
        && map.iter().enumerate().all(|(i, m)| {
            map[..i].iter().all(|o| {
                apart(m.container_id, o.container_id, m.size, o.size)
                    && apart(m.host_id, o.host_id, m.size, o.size)
            })
        })
}

fn same(list: &[IdMapping], spec: &Option<Vec<LinuxIdMapping>>) -> bool {
    let spec = spec.as_deref().unwrap_or_default();
    list.len() == spec.len()
        && list.iter().zip(spec).all(|(a, b)| {
            (a.container_id, a.host_id, a.size) == (b.container_id(), b.host_id(), b.size())
        })
}

fn userns(s: &Scenario) {
    let spec = &s.spec;
    let ask = spec::annotation(spec, rund_annotations::USERNS);
    let allow_host = s.policy.allow_userns_host;
    let d = match decide(spec, &s.userns, allow_host) {
        Ok(d) => d,
        Err(e) => {
            if let UsernsError::Refused(_) = e {
                assert_eq!(ask, Some("host"));
                assert!(s.userns.mode == RemapMode::Always && !allow_host);
            }
            return;
        }
    };
    assert!(
        matches!(ask, None | Some("pod") | Some("host")),
        "{ask:?} accepted"
    );
    let binds = match spec::annotation(spec, rund_annotations::USERNS_BINDS) {
        None | Some("idmap") => BindsMode::Idmap,
        Some("plain") => BindsMode::Plain,
        Some(v) => panic!("{}={v:?} accepted", rund_annotations::USERNS_BINDS),
    };
    assert_eq!(d.binds, binds);
    let asks = pod_asks(spec);
    match &d.mode {
        UsernsMode::Off => {
            assert!(!asks, "the pod asked for a user namespace and got none");
            if s.userns.mode == RemapMode::Always {
                assert!(
                    ask == Some("host") && allow_host,
                    "mode always gave no userns"
                );
            }
        }
        UsernsMode::FromSpec { uid, gid } => {
            let linux = spec.linux().as_ref().expect("mappings come from linux");
            assert!(!uid.is_empty() && !gid.is_empty());
            assert!(same(uid, linux.uid_mappings()) && same(gid, linux.gid_mappings()));
            assert!(kernel_accepts(uid), "uid map the kernel refuses: {uid:?}");
            assert!(kernel_accepts(gid), "gid map the kernel refuses: {gid:?}");
        }
        UsernsMode::Allocate => {}
    }
    if d.by_mode {
        assert!(d.mode == UsernsMode::Allocate && !asks);
        assert_eq!(s.userns.mode, RemapMode::Always);
    }
}

fn memlock(s: &Scenario) {
    let spec = &s.spec;
    let value = spec::annotation(spec, rund_annotations::MEMLOCK);
    if let Some(v) = value {
        if let Ok(n) = parse_limit(rund_annotations::MEMLOCK, v) {
            let named = matches!(v, "unlimited" | "infinity") && n == libc::RLIM_INFINITY;
            assert!(named || v.parse::<u64>() == Ok(n), "{v:?} read as {n}");
        }
    }
    let limits = spec
        .process()
        .as_ref()
        .and_then(|p| p.rlimits().clone())
        .unwrap_or_default();
    let explicit = limits
        .iter()
        .any(|l| l.typ() == PosixRlimitType::RlimitMemlock);
    for wants_rdma in [false, true] {
        let out = match with_default(&limits, value, wants_rdma, &s.rdma_default) {
            Ok(out) => out,
            Err(e) => {
                assert!(!explicit, "an explicit limit needs no default: {e}");
                if value.is_some() {
                    assert!(e.to_string().contains(rund_annotations::MEMLOCK), "{e}");
                }
                continue;
            }
        };
        if explicit || (value.is_none() && !wants_rdma) {
            assert_eq!(out, limits);
            continue;
        }
        assert_eq!(out.len(), limits.len() + 1);
        let added = out.last().expect("one added");
        let want = parse_limit("", value.unwrap_or(&s.rdma_default)).expect("it was applied");
        assert_eq!(added.typ(), PosixRlimitType::RlimitMemlock);
        assert_eq!((added.soft(), added.hard()), (want, want));
    }
    let max = s
        .policy
        .max_memlock
        .as_deref()
        .map(|m| parse_limit("", m).expect("policy validated"));
    match (check_memlock(&s.policy, value, s.inherited), value) {
        (Ok(()), None) => {}
        (Ok(()), Some(v)) => {
            let want = parse_limit("", v).expect("accepted");
            assert!(
                want <= s.inherited || max.is_some_and(|m| want <= m),
                "{v} let through"
            );
        }
        (Err(LimitError::Refused(e)), Some(v)) => {
            let want = parse_limit("", v).expect("a refusal is of a valid value");
            assert!(
                want > s.inherited && max.is_none_or(|m| want > m),
                "{v} refused"
            );
            assert!(e.to_string().contains("[policy] max_memlock"), "{e}");
        }
        (Err(LimitError::Bad(_)), Some(v)) => assert!(parse_limit("", v).is_err()),
        (Err(e), None) => panic!("no annotation, yet {e}"),
    }
}

fn grace(s: &Scenario) {
    let Ok(requested) = spec::grace_seconds(&s.spec) else {
        return;
    };
    let bound = s.policy.max_grace_period_seconds.max(s.default_grace);
    match (
        grace_seconds(&s.policy, requested, s.default_grace),
        requested,
    ) {
        (Ok(g), None) => assert_eq!(g, s.default_grace),
        (Ok(g), Some(r)) => assert!(g == r && g <= bound, "{r} s allowed, bound {bound} s"),
        (Err(e), Some(r)) => {
            assert!(r > bound);
            assert!(
                e.to_string().contains(rund_annotations::GRACE_PERIOD),
                "{e}"
            );
        }
        (Err(e), None) => panic!("nothing requested, yet {e}"),
    }
}

pub fn run(data: &[u8]) {
    let Some(s) = scenario::parse(data) else {
        return;
    };
    userns(&s);
    memlock(&s);
    grace(&s);
}
