//! Translating pids from the agent's pid namespace to the host's.
//!
//! Every process the agent creates is its child (exec grandchildren are
//! reparented to it, as it is PID 1 or a subreaper), so the candidates are the
//! agent's children, and `NSpid:` in their status gives the pid at every level.
//! The agent's own pid namespace is one level down, or the host's in a hostPID
//! sandbox: the agent's `NSpid:` tells which.

use std::path::Path;

use super::SandboxError;

/// Why a pid of the agent's namespace has no host pid.
#[derive(Debug, thiserror::Error)]
pub enum PidMapError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: the agent is gone")]
    AgentGone(String),
    #[error("no child of agent {agent} has that pid at level {level} (children: {seen:?})")]
    NoSuchChild {
        agent: i32,
        level: usize,
        seen: Vec<String>,
    },
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> PidMapError + '_ {
    move |source| PidMapError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// Host pid of the agent's child whose pid in the agent's namespace is `inner`.
pub fn host_pid(proc_root: &Path, agent_host_pid: i32, inner: u32) -> Result<i32, SandboxError> {
    let err = |e: PidMapError| SandboxError::PidLookup(inner, e);
    let level = agent_level(proc_root, agent_host_pid).map_err(err)?;
    let tasks = proc_root.join(agent_host_pid.to_string()).join("task");
    let entries = std::fs::read_dir(&tasks).map_err(|e| err(read_err(&tasks)(e)))?;
    let mut seen = Vec::new();
    for task in entries.flatten() {
        let Some(children) = read_proc(&task.path().join("children")).map_err(err)? else {
            continue;
        };
        for child in children.split_whitespace() {
            let Ok(pid) = child.parse::<i32>() else {
                continue;
            };
            let status = read_proc(&proc_root.join(child).join("status")).map_err(err)?;
            let at = status
                .as_deref()
                .and_then(|s| parse_nspid(s)?.get(level).copied());
            if at == Some(inner) {
                return Ok(pid);
            }
            seen.push(format!("{pid}->{at:?}"));
        }
    }
    Err(err(PidMapError::NoSuchChild {
        agent: agent_host_pid,
        level,
        seen,
    }))
}

/// The depth of the agent's pid namespace below ours.
fn agent_level(proc_root: &Path, agent_host_pid: i32) -> Result<usize, PidMapError> {
    let path = proc_root.join(agent_host_pid.to_string()).join("status");
    let status =
        read_proc(&path)?.ok_or_else(|| PidMapError::AgentGone(path.display().to_string()))?;
    let nspid = parse_nspid(&status).unwrap_or_default();
    Ok(nspid.len().saturating_sub(1))
}

/// A /proc file; `None` if its process or thread is gone. Any other error
/// (out of fds, say) is the caller's: it must not read as "no such pid".
fn read_proc(path: &Path) -> Result<Option<String>, PidMapError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(e) => Err(read_err(path)(e)),
    }
}

fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line["NSpid:".len()..]
        .split_whitespace()
        .map(|p| p.parse().ok())
        .collect()
}

/// Host pids of the agent's descendants whose pid in the agent's namespace
/// is in `inner`, found with one scan of `/proc`.
pub fn host_pids_of(
    proc_root: &Path,
    agent_host_pid: i32,
    inner: &[u32],
) -> std::collections::HashMap<u32, i32> {
    use std::collections::HashMap;
    let Ok(level) = agent_level(proc_root, agent_host_pid) else {
        return HashMap::new();
    };
    let mut parent: HashMap<i32, i32> = HashMap::new();
    let mut in_agent_ns: HashMap<i32, u32> = HashMap::new();
    for entry in std::fs::read_dir(proc_root).into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        parent.insert(pid, ppid);
        if let Some(ns) = parse_nspid(&status).and_then(|v| v.get(level).copied()) {
            in_agent_ns.insert(pid, ns);
        }
    }
    let descends = |mut p: i32| {
        for _ in 0..64 {
            match parent.get(&p) {
                Some(&pp) if pp == agent_host_pid => return true,
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    in_agent_ns
        .iter()
        .filter(|(pid, ns)| inner.contains(ns) && descends(**pid))
        .map(|(pid, ns)| (*ns, *pid))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nspid() {
        let s = "Name:\tsh\nNSpid:\t4242\t7\t1\nPPid:\t1\n";
        assert_eq!(parse_nspid(s), Some(vec![4242, 7, 1]));
        assert_eq!(parse_nspid("Name: x\n"), None);
    }

    #[test]
    fn finds_child_in_fake_proc() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("100/task/100")).unwrap();
        std::fs::write(root.join("100/status"), "NSpid:\t100\t1\n").unwrap();
        std::fs::write(root.join("100/task/100/children"), "200 201 ").unwrap();
        for (pid, ns) in [(200, 5), (201, 9)] {
            std::fs::create_dir_all(root.join(pid.to_string())).unwrap();
            std::fs::write(
                root.join(format!("{pid}/status")),
                format!("NSpid:\t{pid}\t{ns}\n"),
            )
            .unwrap();
        }
        assert_eq!(host_pid(root, 100, 9).unwrap(), 201);
        assert!(host_pid(root, 100, 4).is_err());
    }

    #[test]
    fn host_pid_sandbox_children_are_at_the_readers_level() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("100/task/100")).unwrap();
        std::fs::write(root.join("100/status"), "NSpid:\t100\nPPid:\t1\n").unwrap();
        std::fs::write(root.join("100/task/100/children"), "200 ").unwrap();
        std::fs::create_dir_all(root.join("200")).unwrap();
        std::fs::write(root.join("200/status"), "NSpid:\t200\nPPid:\t100\n").unwrap();
        assert_eq!(host_pid(root, 100, 200).unwrap(), 200);
        assert!(host_pid(root, 100, 201).is_err());
        let found = host_pids_of(root, 100, &[200]);
        assert_eq!(found.get(&200), Some(&200), "{found:?}");
    }
}
