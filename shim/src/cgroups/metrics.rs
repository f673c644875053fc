//! rund-cgroup stats as containerd's cgroups Metrics protobufs (v1 or v2),
//! wrapped in the Any that `ctr task metrics` decodes.

use containerd_shim_protos::cgroups::metrics as v1;
use containerd_shim_protos::cgroups_v2::metrics as v2;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use rund_cgroup::Stats;

pub const V1_TYPE_URL: &str = "io.containerd.cgroups.v1.Metrics";
pub const V2_TYPE_URL: &str = "io.containerd.cgroups.v2.Metrics";

pub fn to_any(s: &Stats) -> Result<Any, String> {
    let (type_url, value) = if s.v2 {
        (V2_TYPE_URL, to_v2(s).write_to_bytes())
    } else {
        (V1_TYPE_URL, to_v1(s).write_to_bytes())
    };
    Ok(Any {
        type_url: type_url.into(),
        value: value.map_err(|e| e.to_string())?,
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
    v1::Metrics {
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

pub fn to_v2(s: &Stats) -> v2::Metrics {
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
            ..Default::default()
        })
        .into(),
        memory: Some(v2::MemoryStat {
            anon: s.memory.rss,
            file: s.memory.cache,
            usage: s.memory.usage,
            usage_limit: s.memory.limit,
            swap_usage: s.memory.swap_usage,
            swap_limit: s.memory.swap_limit,
            ..Default::default()
        })
        .into(),
        memory_events: Some(v2::MemoryEvents {
            oom_kill: s.oom_kills,
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
    fn v2_metrics_use_microseconds() {
        let mut s = Stats {
            v2: true,
            ..Default::default()
        };
        s.cpu.usage_total = 5_000;
        let any = to_any(&s).unwrap();
        assert_eq!(any.type_url, V2_TYPE_URL);
        let m = v2::Metrics::parse_from_bytes(&any.value).unwrap();
        assert_eq!(m.cpu.usage_usec, 5);
    }
}
