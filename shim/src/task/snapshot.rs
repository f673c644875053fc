//! Per-node mode: what a pod's `Service` knows, written to the node's state
//! directory after each change, so that a node shim started after a crash can
//! serve the pod on (see `entry::node::keeper`). The agent holds the truth
//! about processes (their exits wait there until DeleteProcess); this record
//! holds what only the shim knew: which containers, bundles, cgroups, pids.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::state::{Container, ExitInfo, Process};
use super::Service;
use crate::io::pty::Pty;
use crate::io::stdin::StdinFeeder;
use crate::io::{AdoptedIo, Stdio};
use crate::sandbox::{fostered::Fostered, About, Agent, Sandbox, UsernsInfo};

pub use crate::io::KeepGuard;

/// Has the keeper hold an agent's sockets.
pub type KeepAgent = Box<dyn Fn(&Agent) -> Option<KeepGuard> + Send + Sync>;

/// The keeper for one process's stdio, by container id and exec id.
pub type KeepIoOf = Box<dyn Fn(&str, &str) -> crate::io::KeepIo + Send + Sync>;

/// A pod's agent as the next node shim finds it.
pub enum AdoptedAgent {
    /// Served on; the keeper holds its sockets again.
    Live(Agent, KeepGuard),
    /// It died while no node shim ran, and the keeper reaped it with this
    /// status: the pod is served as ended, as if its agent had just died.
    Gone(u32),
    /// The keeper held none: the last shim had let the agent go (or the
    /// pod had no sandbox yet).
    None,
}

/// How a pod's `Service` reaches its node: where its record goes, and how
/// its agent's sockets are kept.
pub struct NodeLink {
    pub record: PathBuf,
    pub pod: PodMeta,
    /// Has the keeper hold the agent's sockets; the guard gives them back.
    pub keep_agent: KeepAgent,
    /// The keeper for one process's stdio (container id, exec id).
    pub keep_io: KeepIoOf,
    /// One snapshot and write of the record at a time, so the last snapshot
    /// taken is the one left (taking one awaits the containers' lock).
    pub writing: tokio::sync::Mutex<()>,
}

/// The pod as containerd's `start` handed it to the node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodMeta {
    pub socket: String,
    pub namespace: String,
    pub config_path: Option<String>,
    pub debug: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PodRecord {
    pub pod: PodMeta,
    /// The config the first container's options named, if another.
    pub config_in_force: Option<PathBuf>,
    pub sandbox: Option<SandboxRecord>,
    pub containers: Vec<ContainerRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    pub pid: i32,
    pub grace_ms: u64,
    pub userns: bool,
    pub host_root: Option<u32>,
    pub owns_net: bool,
    pub host_pid: bool,
    /// The agent's exit status once it has ended: the next node shim then
    /// serves the pod as ended, without reaching for a pid that is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<u32>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub bundle: PathBuf,
    pub is_pod_sandbox: bool,
    pub rootfs_mounted: bool,
    pub cgroup: Option<String>,
    pub paused: bool,
    pub init: ProcessRecord,
    pub execs: Vec<ProcessRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub exec_id: String,
    pub pid: i32,
    pub inner_pid: u32,
    pub started: bool,
    pub exit: Option<(u32, i64)>,
    pub stdin: String,
    pub stdout: String,
    pub stderr: String,
    pub terminal: bool,
}

impl ProcessRecord {
    fn of(p: &Process) -> Self {
        ProcessRecord {
            exec_id: p.exec_id.clone(),
            pid: p.pid() as i32,
            inner_pid: p.inner_pid,
            started: p.started.load(Ordering::SeqCst),
            exit: p.exit().map(|e| (e.status, e.at_ns)),
            stdin: p.stdio.stdin.clone(),
            stdout: p.stdio.stdout.clone(),
            stderr: p.stdio.stderr.clone(),
            terminal: p.stdio.terminal,
        }
    }

    /// The process again, its terminal or stdin copied on from the fds the
    /// keeper held (`io`).
    fn restore(&self, io: Option<AdoptedIo>) -> Arc<Process> {
        let stdio = Stdio::of(&self.stdin, &self.stdout, &self.stderr, self.terminal);
        let (mut stdin, mut pty) = (None, None);
        if let Some(mut io) = io.filter(|_| self.exit.is_none()) {
            if self.terminal {
                pty = Pty::adopt(&mut io);
            } else {
                stdin = StdinFeeder::adopt(&mut io);
            }
        }
        let p = Process::new(&self.exec_id, self.pid, self.inner_pid, stdio, stdin, pty);
        p.started.store(self.started, Ordering::SeqCst);
        if let Some((status, at_ns)) = self.exit {
            p.set_exit(ExitInfo { status, at_ns });
        }
        Arc::new(p)
    }
}

impl Service {
    /// Writes the pod's record (per-node mode only), replacing the last.
    pub(crate) async fn persist(&self) {
        let Some(link) = self.node.get() else { return };
        let _one = link.writing.lock().await;
        let record = self.record(&link.pod).await;
        let path = link.record.clone();
        if let Err(e) = write_record(&path, &record) {
            tracing::warn!(path = %path.display(), "pod record: {e}");
        }
    }

    async fn record(&self, pod: &PodMeta) -> PodRecord {
        let sandbox = self.sandbox().map(|sb| SandboxRecord {
            id: sb.id.clone(),
            pid: sb.pid(),
            grace_ms: sb.grace.as_millis() as u64,
            userns: sb.userns,
            host_root: sb.userns_info.as_ref().map(|u| u.host_root),
            owns_net: sb.owns_net,
            host_pid: sb.host_pid,
            exit: sb.exited().map(|(status, _)| status),
        });
        let containers = self
            .containers
            .lock()
            .await
            .values()
            .map(|c| ContainerRecord {
                id: c.id.clone(),
                bundle: c.bundle.clone(),
                is_pod_sandbox: c.is_pod_sandbox,
                rootfs_mounted: c.rootfs_mounted,
                cgroup: c.cgroup.as_ref().map(|cg| cg.path().to_string()),
                paused: c.is_paused(),
                init: ProcessRecord::of(&c.init),
                execs: c
                    .execs
                    .lock()
                    .expect("execs")
                    .values()
                    .flatten()
                    .map(|p| ProcessRecord::of(p))
                    .collect(),
            })
            .collect();
        PodRecord {
            pod: pod.clone(),
            config_in_force: self.config_in_force(),
            sandbox,
            containers,
        }
    }

    /// Per-node mode: keeps the stdio fds of process (`id`, `exec_id`) that
    /// the shim copies through with the node's keeper.
    pub(crate) fn keep_io(&self, id: &str, exec_id: &str) -> Option<crate::io::KeepIo> {
        self.node.get().map(|link| (link.keep_io)(id, exec_id))
    }

    /// Keeps the new sandbox's agent sockets with the node's keeper.
    pub(crate) fn keep_agent(self: &Arc<Self>, sb: &Arc<Sandbox>) {
        if let Some(link) = self.node.get() {
            *sb.kept.lock().unwrap_or_else(|e| e.into_inner()) = (link.keep_agent)(&sb.agent);
            self.record_end_of(sb);
        }
    }

    /// Per-node mode: the agent's end goes into the record when it comes
    /// (its processes' exits may be written before it), so the next node
    /// shim serves the pod as ended. Not once the pod has let it go.
    fn record_end_of(self: &Arc<Self>, sb: &Arc<Sandbox>) {
        let (svc, sb) = (self.clone(), sb.clone());
        tokio::spawn(async move {
            sb.wait_exit().await;
            if svc.sandbox().is_some_and(|s| Arc::ptr_eq(&s, &sb)) {
                svc.persist().await;
            }
        });
    }

    /// Serves the pod `record` describes again, on `agent` (already adopted),
    /// after a node shim restart: the containers, their cgroups, and a
    /// watcher for each process that was running.
    pub async fn restore(
        self: &Arc<Self>,
        record: &PodRecord,
        agent: AdoptedAgent,
        fostered: Arc<Fostered>,
        mut io: HashMap<(String, String), AdoptedIo>,
    ) -> Result<(), String> {
        if let Some(path) = &record.config_in_force {
            let config = crate::config::RundConfig::load(Some(path)).map_err(|e| e.to_string())?;
            self.use_config(config);
            self.set_config_in_force(path.clone());
        }
        let sb = match (&record.sandbox, agent) {
            (Some(r), AdoptedAgent::Live(agent, kept)) => {
                let sb = Sandbox::adopt(agent, about(r), self.userns_info(r), fostered)
                    .map_err(|e| e.to_string())?;
                *sb.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(kept);
                Some(sb)
            }
            (Some(r), gone) => {
                // None kept: the last shim let the agent go, so it is gone
                // too, with no word of how it ended.
                let status = match gone {
                    AdoptedAgent::Gone(status) => status,
                    _ => 255,
                };
                let agent = Agent::gone(r.pid).map_err(|e| e.to_string())?;
                Some(Sandbox::gone(agent, about(r), self.userns_info(r), status))
            }
            _ => None,
        };
        if let Some(sb) = &sb {
            *super::pod::lock(&self.sandbox) = super::pod::Slot::Ready(sb.clone());
            if sb.exited().is_none() {
                self.record_end_of(sb);
            }
        }
        for r in &record.containers {
            let c = Arc::new(self.restore_container(r, &mut io).await?);
            self.containers.lock().await.insert(c.id.clone(), c.clone());
            let Some(sb) = &sb else { continue };
            for p in c.processes() {
                if p.started.load(Ordering::SeqCst) && p.exit().is_none() {
                    if p.exec_id.is_empty() && !c.is_pod_sandbox {
                        super::resources::arm_oom(&c);
                        super::resources::watch_oom(self.clone(), c.clone());
                    }
                    super::lifecycle::spawn_exit_watch(self.clone(), c.clone(), p, sb.clone());
                }
            }
        }
        Ok(())
    }

    async fn restore_container(
        &self,
        r: &ContainerRecord,
        io: &mut HashMap<(String, String), AdoptedIo>,
    ) -> Result<Container, String> {
        let mut io_of = |exec_id: &str| io.remove(&(r.id.clone(), exec_id.to_string()));
        let spec = crate::spec::load(&r.bundle).map_err(|e| format!("{}: {e}", r.id))?;
        let cgroup = match &r.cgroup {
            Some(path) => {
                let cgroups = self.cgroups().map_err(|e| e.to_string())?;
                Some(
                    crate::cgroups::ContainerCgroup::load(&cgroups, path)
                        .map_err(|e| format!("{}: {e}", r.id))?,
                )
            }
            None => None,
        };
        let c = Container::new(
            &r.id,
            &r.bundle,
            spec,
            r.is_pod_sandbox,
            r.rootfs_mounted,
            cgroup,
            r.init.restore(io_of("")),
        );
        c.paused.store(r.paused, Ordering::SeqCst);
        for e in &r.execs {
            c.execs
                .lock()
                .expect("execs")
                .insert(e.exec_id.clone(), Some(e.restore(io_of(&e.exec_id))));
        }
        Ok(c)
    }

    fn userns_info(&self, r: &SandboxRecord) -> Option<UsernsInfo> {
        let host_root = r.host_root?;
        let config = self.config();
        let lease = crate::userns::LeaseStore::in_state_dir(&config.state_dir, &config.userns)
            .inspect_err(|e| tracing::warn!(sandbox = %r.id, "userns lease store: {e}"))
            .ok();
        Some(UsernsInfo { host_root, lease })
    }
}

fn about(r: &SandboxRecord) -> About {
    About {
        id: r.id.clone(),
        grace: Duration::from_millis(r.grace_ms),
        userns: r.userns,
        owns_net: r.owns_net,
        host_pid: r.host_pid,
    }
}

/// Atomically: a reader sees the old record or the new one, never half.
pub fn write_record(path: &Path, record: &PodRecord) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?
        .write_all(&serde_json::to_vec(record)?)?;
    std::fs::rename(&tmp, path)
}

pub fn read_record(path: &Path) -> std::io::Result<PodRecord> {
    Ok(serde_json::from_slice(&std::fs::read(path)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pods/p.json");
        let rec = PodRecord {
            pod: PodMeta {
                socket: "unix:///run/x".into(),
                namespace: "k8s.io".into(),
                config_path: Some("/etc/rund/a.toml".into()),
                debug: true,
            },
            config_in_force: None,
            sandbox: Some(SandboxRecord {
                id: "p".into(),
                pid: 42,
                grace_ms: 30_000,
                userns: false,
                host_root: None,
                owns_net: true,
                host_pid: false,
                exit: Some(137),
            }),
            containers: vec![ContainerRecord {
                id: "c".into(),
                bundle: "/b".into(),
                is_pod_sandbox: false,
                rootfs_mounted: true,
                cgroup: Some("/k8s.io/c".into()),
                paused: false,
                init: ProcessRecord {
                    exec_id: String::new(),
                    pid: 43,
                    inner_pid: 2,
                    started: true,
                    exit: Some((3, 9)),
                    stdin: String::new(),
                    stdout: "/o".into(),
                    stderr: "/e".into(),
                    terminal: false,
                },
                execs: vec![],
            }],
        };
        write_record(&path, &rec).unwrap();
        let back = read_record(&path).unwrap();
        assert_eq!(back.pod, rec.pod);
        let sb = back.sandbox.unwrap();
        assert_eq!((sb.pid, sb.exit), (42, Some(137)));
        let p = back.containers[0].init.restore(None);
        assert_eq!((p.pid(), p.inner_pid), (43, 2));
        assert!(p.started.load(Ordering::SeqCst));
        assert_eq!(p.exit().map(|e| e.status), Some(3));
        assert!(!path.with_extension("tmp").exists());
    }
}
