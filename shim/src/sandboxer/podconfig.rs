//! The CRI `runtime.v1.PodSandboxConfig` containerd 2.x passes with
//! CreateSandbox (`sandboxer = "shim"`): the fields rund builds the pod's
//! sandbox from. Field numbers are the CRI's (k8s.io/cri-api).

use std::collections::BTreeMap;

use crate::protowire::{self, map_entry, WireError};

/// CRI's NamespaceMode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Shared by the pod (the default: 0).
    #[default]
    Pod,
    /// One per container.
    Container,
    /// The node's.
    Node,
    /// Another container's.
    Target,
}

impl Mode {
    fn of(v: u64) -> Mode {
        match v {
            1 => Mode::Container,
            2 => Mode::Node,
            3 => Mode::Target,
            _ => Mode::Pod,
        }
    }
}

/// One uid or gid range of a pod user namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdRange {
    pub host_id: u32,
    pub container_id: u32,
    pub length: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodConfig {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub attempt: u32,
    pub hostname: String,
    pub log_directory: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub cgroup_parent: String,
    pub sysctls: BTreeMap<String, String>,
    pub network: Mode,
    pub pid: Mode,
    pub ipc: Mode,
    /// `hostUsers: false`: the pod's user namespace mappings.
    pub userns: Option<IdMaps>,
}

const WHAT: &str = "CRI PodSandboxConfig";

/// Decodes the `Any` value (type `runtime.v1.PodSandboxConfig`).
pub fn decode(buf: &[u8]) -> Result<PodConfig, WireError> {
    let mut c = PodConfig::default();
    protowire::fields(WHAT, buf, |n, v| {
        match n {
            1 => metadata(&mut c, v.bytes(WHAT)?)?,
            2 => c.hostname = v.string(WHAT)?,
            3 => c.log_directory = v.string(WHAT)?,
            6 => {
                let (k, val) = map_entry(WHAT, v.bytes(WHAT)?)?;
                c.labels.insert(k, val);
            }
            7 => {
                let (k, val) = map_entry(WHAT, v.bytes(WHAT)?)?;
                c.annotations.insert(k, val);
            }
            8 => linux(&mut c, v.bytes(WHAT)?)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(c)
}

fn metadata(c: &mut PodConfig, buf: &[u8]) -> Result<(), WireError> {
    protowire::fields(WHAT, buf, |n, v| {
        match n {
            1 => c.name = v.string(WHAT)?,
            2 => c.uid = v.string(WHAT)?,
            3 => c.namespace = v.string(WHAT)?,
            4 => c.attempt = v.number(WHAT)? as u32,
            _ => {}
        }
        Ok(())
    })
}

fn linux(c: &mut PodConfig, buf: &[u8]) -> Result<(), WireError> {
    protowire::fields(WHAT, buf, |n, v| {
        match n {
            1 => c.cgroup_parent = v.string(WHAT)?,
            2 => security_context(c, v.bytes(WHAT)?)?,
            3 => {
                let (k, val) = map_entry(WHAT, v.bytes(WHAT)?)?;
                c.sysctls.insert(k, val);
            }
            _ => {}
        }
        Ok(())
    })
}

fn security_context(c: &mut PodConfig, buf: &[u8]) -> Result<(), WireError> {
    protowire::fields(WHAT, buf, |n, v| {
        if n == 1 {
            namespace_options(c, v.bytes(WHAT)?)?;
        }
        Ok(())
    })
}

fn namespace_options(c: &mut PodConfig, buf: &[u8]) -> Result<(), WireError> {
    protowire::fields(WHAT, buf, |n, v| {
        match n {
            1 => c.network = Mode::of(v.number(WHAT)?),
            2 => c.pid = Mode::of(v.number(WHAT)?),
            3 => c.ipc = Mode::of(v.number(WHAT)?),
            5 => c.userns = user_namespace(v.bytes(WHAT)?)?,
            _ => {}
        }
        Ok(())
    })
}

/// (uid ranges, gid ranges) of a pod user namespace.
pub type IdMaps = (Vec<IdRange>, Vec<IdRange>);

/// `UserNamespace{mode, uids, gids}`: a pod user namespace when the mode is
/// POD (hostUsers: false); NODE means the host's.
fn user_namespace(buf: &[u8]) -> Result<Option<IdMaps>, WireError> {
    let (mut mode, mut uids, mut gids) = (Mode::Pod, Vec::new(), Vec::new());
    protowire::fields(WHAT, buf, |n, v| {
        match n {
            1 => mode = Mode::of(v.number(WHAT)?),
            2 => uids.push(id_range(v.bytes(WHAT)?)?),
            3 => gids.push(id_range(v.bytes(WHAT)?)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok((mode == Mode::Pod).then_some((uids, gids)))
}

fn id_range(buf: &[u8]) -> Result<IdRange, WireError> {
    let mut r = IdRange::default();
    protowire::fields(WHAT, buf, |n, v| {
        match n {
            1 => r.host_id = v.number(WHAT)? as u32,
            2 => r.container_id = v.number(WHAT)? as u32,
            3 => r.length = v.number(WHAT)? as u32,
            _ => {}
        }
        Ok(())
    })?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protowire::encode::{map, msg};

    /// A kubelet-shaped pod: hostPID, its own network, sysctls, a user
    /// namespace, labels and annotations.
    pub fn sample() -> Vec<u8> {
        msg(|o| {
            let meta = msg(|m| {
                m.write_string(1, "web").unwrap();
                m.write_string(2, "uid-1").unwrap();
                m.write_string(3, "default").unwrap();
                m.write_uint32(4, 2).unwrap();
            });
            o.write_bytes(1, &meta).unwrap();
            o.write_string(2, "web-host").unwrap();
            o.write_string(3, "/var/log/pods/x").unwrap();
            map(o, 6, "app", "web");
            map(o, 7, "rund.io/init", "true");
            let range = |h: u32| {
                msg(|r| {
                    r.write_uint32(1, h).unwrap();
                    r.write_uint32(2, 0).unwrap();
                    r.write_uint32(3, 65536).unwrap();
                })
            };
            let userns = msg(|u| {
                u.write_enum(1, 0).unwrap();
                u.write_bytes(2, &range(100_000)).unwrap();
                u.write_bytes(3, &range(200_000)).unwrap();
            });
            let nsopts = msg(|n| {
                n.write_enum(1, 0).unwrap();
                n.write_enum(2, 2).unwrap();
                n.write_enum(3, 0).unwrap();
                n.write_bytes(5, &userns).unwrap();
            });
            let sc = msg(|s| s.write_bytes(1, &nsopts).unwrap());
            let linux = msg(|l| {
                l.write_string(1, "/kubepods/besteffort/poduid-1").unwrap();
                l.write_bytes(2, &sc).unwrap();
                map(l, 3, "kernel.shm_rmid_forced", "1");
            });
            o.write_bytes(8, &linux).unwrap();
        })
    }

    #[test]
    fn a_kubelet_pod_config_decodes() {
        let c = decode(&sample()).unwrap();
        assert_eq!(
            (c.name.as_str(), c.uid.as_str(), c.attempt),
            ("web", "uid-1", 2)
        );
        assert_eq!(c.hostname, "web-host");
        assert_eq!(c.labels["app"], "web");
        assert_eq!(c.annotations["rund.io/init"], "true");
        assert_eq!(c.cgroup_parent, "/kubepods/besteffort/poduid-1");
        assert_eq!(c.sysctls["kernel.shm_rmid_forced"], "1");
        assert_eq!(
            (c.network, c.pid, c.ipc),
            (Mode::Pod, Mode::Node, Mode::Pod)
        );
        let (u, g) = c.userns.unwrap();
        assert_eq!(u[0].host_id, 100_000);
        assert_eq!(g[0].length, 65536);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(&[0x0a, 0x7f, 1]).is_err());
        assert!(decode(&[0x17]).is_err());
        assert_eq!(decode(&[]).unwrap(), PodConfig::default());
    }
}
