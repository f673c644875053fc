//! rund-cgroup stats as containerd's cgroups Metrics protobufs (v1 or v2),
//! wrapped in the Any that `ctr task metrics` decodes.

use containerd_shim_protos::cgroups::metrics as v1;
use containerd_shim_protos::cgroups_v2::metrics as v2;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use rund_cgroup::Stats;

#[derive(Debug, thiserror::Error)]
#[error("encoding metrics: {0}")]
pub struct MetricsError(containerd_shim_protos::protobuf::Error);

pub const V1_TYPE_URL: &str = "io.containerd.cgroups.v1.Metrics";
pub const V2_TYPE_URL: &str = "io.containerd.cgroups.v2.Metrics";

pub fn to_any(s: &Stats) -> Result<Any, MetricsError> {
    let (type_url, value) = if s.v2 {
        (V2_TYPE_URL, to_v2(s).write_to_bytes())
    } else {
        (V1_TYPE_URL, to_v1(s).write_to_bytes())
    };
    Ok(Any {
        type_url: type_url.into(),
        value: value.map_err(MetricsError)?,
        ..Default::default()
    })
}

fn raw(s: &Stats, k: &str) -> u64 {
    s.memory.raw.get(k).copied().unwrap_or(0)
}

pub fn to_v1(s: &Stats) -> v1::Metrics {
    let mem = v1::MemoryStat {
        cache: raw(s, "cache"),
        rss: raw(s, "rss"),
        mapped_file: raw(s, "mapped_file"),
        pg_fault: raw(s, "pgfault"),
        pg_maj_fault: raw(s, "pgmajfault"),
        inactive_anon: raw(s, "inactive_anon"),
        active_anon: raw(s, "active_anon"),
        inactive_file: raw(s, "inactive_file"),
        active_file: raw(s, "active_file"),
        unevictable: raw(s, "unevictable"),
        hierarchical_memory_limit: raw(s, "hierarchical_memory_limit"),
        total_cache: s.memory.cache,
        total_rss: s.memory.rss,
        usage: Some(v1::MemoryEntry {
            limit: s.memory.limit,
            usage: s.memory.usage,
            max: s.memory.max_usage,
            failcnt: s.memory.failcnt,
            ..Default::default()
        })
        .into(),
        swap: Some(v1::MemoryEntry {
            limit: s.memory.swap_limit,
            usage: s.memory.swap_usage,
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    let cpu = v1::CPUStat {
        usage: Some(v1::CPUUsage {
            total: s.cpu.usage_total,
            kernel: s.cpu.usage_system,
            user: s.cpu.usage_user,
            per_cpu: s.cpu.per_cpu.clone(),
            ..Default::default()
        })
        .into(),
        throttling: Some(v1::Throttle {
            periods: s.cpu.throttling_periods,
            throttled_periods: s.cpu.throttled_periods,
            throttled_time: s.cpu.throttled_time,
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    let entries = |list: &[rund_cgroup::stats::BlkioEntry]| -> Vec<v1::BlkIOEntry> {
        list.iter()
            .map(|e| v1::BlkIOEntry {
                op: e.op.clone(),
                major: e.major,
                minor: e.minor,
                value: e.value,
                ..Default::default()
            })
            .collect()
    };
    let rdma = |list: &[rund_cgroup::stats::RdmaEntry]| -> Vec<v1::RdmaEntry> {
        list.iter()
            .map(|r| v1::RdmaEntry {
                device: r.device.clone(),
                hca_handles: r.hca_handles,
                hca_objects: r.hca_objects,
                ..Default::default()
            })
            .collect()
    };
    v1::Metrics {
        hugetlb: s
            .hugetlb
            .iter()
            .map(|h| v1::HugetlbStat {
                usage: h.usage,
                max: h.max_usage,
                failcnt: h.failcnt,
                pagesize: h.page_size.clone(),
                ..Default::default()
            })
            .collect(),
        rdma: Some(v1::RdmaStat {
            current: rdma(&s.rdma_current),
            limit: rdma(&s.rdma_limit),
            ..Default::default()
        })
        .into(),
        pids: Some(v1::PidsStat {
            current: s.pids.current,
            limit: s.pids.limit,
            ..Default::default()
        })
        .into(),
        cpu: Some(cpu).into(),
        memory: Some(mem).into(),
        blkio: Some(v1::BlkIOStat {
            io_service_bytes_recursive: entries(&s.blkio.io_service_bytes),
            io_serviced_recursive: entries(&s.blkio.io_serviced),
            ..Default::default()
        })
        .into(),
        memory_oom_control: Some(v1::MemoryOomControl {
            oom_kill: s.oom_kills,
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

/// containerd's `io.containerd.cgroups.v2.Metrics`, field by field as its
/// cgroup2 manager fills them (CRI reads usage, inactive_file, anon,
/// pgfault/pgmajfault, usage_usec).
pub fn to_v2(s: &Stats) -> v2::Metrics {
    let m = &s.memory;
    let e = &s.memory_events;
    let rdma = |list: &[rund_cgroup::stats::RdmaEntry]| -> Vec<v2::RdmaEntry> {
        list.iter()
            .map(|r| v2::RdmaEntry {
                device: r.device.clone(),
                hca_handles: r.hca_handles,
                hca_objects: r.hca_objects,
                ..Default::default()
            })
            .collect()
    };
    v2::Metrics {
        pids: Some(v2::PidsStat {
            current: s.pids.current,
            limit: s.pids.limit,
            ..Default::default()
        })
        .into(),
        cpu: Some(v2::CPUStat {
            usage_usec: s.cpu.usage_total / 1000,
            user_usec: s.cpu.usage_user / 1000,
            system_usec: s.cpu.usage_system / 1000,
            nr_periods: s.cpu.throttling_periods,
            nr_throttled: s.cpu.throttled_periods,
            throttled_usec: s.cpu.throttled_time / 1000,
            nr_bursts: s.cpu.bursts,
            burst_usec: s.cpu.burst_time / 1000,
            ..Default::default()
        })
        .into(),
        memory: Some(v2::MemoryStat {
            anon: raw(s, "anon"),
            file: raw(s, "file"),
            kernel_stack: raw(s, "kernel_stack"),
            slab: raw(s, "slab"),
            sock: raw(s, "sock"),
            shmem: raw(s, "shmem"),
            file_mapped: raw(s, "file_mapped"),
            file_dirty: raw(s, "file_dirty"),
            file_writeback: raw(s, "file_writeback"),
            anon_thp: raw(s, "anon_thp"),
            inactive_anon: raw(s, "inactive_anon"),
            active_anon: raw(s, "active_anon"),
            inactive_file: raw(s, "inactive_file"),
            active_file: raw(s, "active_file"),
            unevictable: raw(s, "unevictable"),
            slab_reclaimable: raw(s, "slab_reclaimable"),
            slab_unreclaimable: raw(s, "slab_unreclaimable"),
            pgfault: raw(s, "pgfault"),
            pgmajfault: raw(s, "pgmajfault"),
            // Split into _anon/_file since 5.9; the sum is the old counter.
            workingset_refault: raw(s, "workingset_refault")
                + raw(s, "workingset_refault_anon")
                + raw(s, "workingset_refault_file"),
            workingset_activate: raw(s, "workingset_activate")
                + raw(s, "workingset_activate_anon")
                + raw(s, "workingset_activate_file"),
            workingset_nodereclaim: raw(s, "workingset_nodereclaim"),
            pgrefill: raw(s, "pgrefill"),
            pgscan: raw(s, "pgscan"),
            pgsteal: raw(s, "pgsteal"),
            pgactivate: raw(s, "pgactivate"),
            pgdeactivate: raw(s, "pgdeactivate"),
            pglazyfree: raw(s, "pglazyfree"),
            pglazyfreed: raw(s, "pglazyfreed"),
            thp_fault_alloc: raw(s, "thp_fault_alloc"),
            thp_collapse_alloc: raw(s, "thp_collapse_alloc"),
            usage: m.usage,
            usage_limit: m.limit,
            swap_usage: m.swap_usage,
            swap_limit: m.swap_limit,
            max_usage: m.max_usage,
            swap_max_usage: m.swap_max_usage,
            ..Default::default()
        })
        .into(),
        memory_events: Some(v2::MemoryEvents {
            low: e.low,
            high: e.high,
            max: e.max,
            oom: e.oom,
            oom_kill: e.oom_kill,
            oom_group_kill: e.oom_group_kill,
            ..Default::default()
        })
        .into(),
        io: Some(v2::IOStat {
            usage: s
                .io
                .iter()
                .map(|x| v2::IOEntry {
                    major: x.major,
                    minor: x.minor,
                    rbytes: x.rbytes,
                    wbytes: x.wbytes,
                    rios: x.rios,
                    wios: x.wios,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .into(),
        hugetlb: s
            .hugetlb
            .iter()
            .map(|h| v2::HugeTlbStat {
                current: h.usage,
                max: h.limit,
                pagesize: h.page_size.clone(),
                failcnt: h.failcnt,
                ..Default::default()
            })
            .collect(),
        rdma: Some(v2::RdmaStat {
            current: rdma(&s.rdma_current),
            limit: rdma(&s.rdma_limit),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_metrics_carry_the_numbers() {
        let mut s = Stats::default();
        s.memory.usage = 1234;
        s.memory.limit = 1 << 20;
        s.cpu.usage_total = 99;
        s.pids.current = 3;
        let any = to_any(&s).unwrap();
        assert_eq!(any.type_url, V1_TYPE_URL);
        let m = v1::Metrics::parse_from_bytes(&any.value).unwrap();
        assert_eq!(m.memory.usage.usage, 1234);
        assert_eq!(m.memory.usage.limit, 1 << 20);
        assert_eq!(m.cpu.usage.total, 99);
        assert_eq!(m.pids.current, 3);
    }

    #[test]
    fn v2_metrics_carry_memory_cpu_pids_and_io() {
        let mut s = Stats {
            v2: true,
            ..Default::default()
        };
        s.cpu.usage_total = 5_000;
        s.memory.usage = 4096;
        s.memory.limit = 1 << 20;
        s.memory.raw.insert("inactive_file".into(), 1024);
        s.memory.raw.insert("anon".into(), 2048);
        s.memory.raw.insert("pgfault".into(), 7);
        s.memory_events.oom_kill = 2;
        s.pids.current = 3;
        s.io.push(rund_cgroup::stats::IoEntry {
            major: 8,
            minor: 0,
            rbytes: 10,
            wbytes: 20,
            rios: 1,
            wios: 2,
        });
        s.hugetlb.push(rund_cgroup::stats::HugetlbStats {
            page_size: "2MB".into(),
            usage: 0,
            max_usage: 0,
            limit: 4 << 20,
            failcnt: 1,
        });
        let any = to_any(&s).unwrap();
        assert_eq!(any.type_url, V2_TYPE_URL);
        let m = v2::Metrics::parse_from_bytes(&any.value).unwrap();
        assert_eq!(m.cpu.usage_usec, 5);
        assert_eq!(
            (m.memory.usage, m.memory.usage_limit, m.memory.inactive_file),
            (4096, 1 << 20, 1024)
        );
        assert_eq!((m.memory.anon, m.memory.pgfault), (2048, 7));
        assert_eq!(m.memory_events.oom_kill, 2);
        assert_eq!(m.pids.current, 3);
        assert_eq!((m.io.usage[0].major, m.io.usage[0].wbytes), (8, 20));
        assert_eq!(
            (m.hugetlb[0].pagesize.as_str(), m.hugetlb[0].failcnt),
            ("2MB", 1)
        );
    }
}
