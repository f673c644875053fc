//! OCI hooks that run in the runtime namespace, from the shim: prestart,
//! createRuntime, createContainer, poststart and poststop. Each gets the
//! container's state JSON on stdin, with the host pid and the bundle path.
//!
//! createContainer hooks run here too, though the runtime spec places them
//! in the container's namespaces: rund's container mount namespace never
//! contains host paths, so a hook binary (and the bundle it reads, as
//! nvidia-ctk's hooks do) is only reachable from the host. They run at the
//! same point as in runc — after the mounts, before pivot_root — and can
//! enter the container through /proc/<pid>/ns.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use oci_spec::runtime::{Hook, Spec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{kind} hook {index} ({path}): {reason}")]
    Failed {
        kind: &'static str,
        index: usize,
        path: String,
        reason: HookRunError,
    },
}

/// Why one hook did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HookRunError {
    #[error("start: {0}")]
    Start(std::io::Error),
    #[error("timed out after {0}s")]
    TimedOut(i64),
    #[error("wait: {0}")]
    Wait(std::io::Error),
    /// The exit status, and the head of what the hook wrote to stderr.
    #[error("{status}{}", if .stderr.is_empty() { String::new() } else { format!(": {}", .stderr) })]
    Exited {
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// The hook lists of a spec, by kind.
pub fn list<'a>(spec: &'a Spec, kind: &'static str) -> &'a [Hook] {
    let Some(h) = spec.hooks().as_ref() else {
        return &[];
    };
    #[allow(deprecated)]
    let v = match kind {
        "prestart" => h.prestart(),
        "createRuntime" => h.create_runtime(),
        "createContainer" => h.create_container(),
        "poststart" => h.poststart(),
        "poststop" => h.poststop(),
        _ => &None,
    };
    v.as_deref().unwrap_or_default()
}

/// The runtime-namespace hooks that must run before pivot_root.
pub const BEFORE_PIVOT: [&str; 3] = ["prestart", "createRuntime", "createContainer"];

/// Whether Create must pause the container before pivot_root for hooks.
pub fn needs_pause(spec: &Spec) -> bool {
    BEFORE_PIVOT.iter().any(|k| !list(spec, k).is_empty())
}

/// The OCI state JSON handed to hooks.
pub fn state_json(spec: &Spec, id: &str, status: &str, pid: i32, bundle: &Path) -> String {
    serde_json::json!({
        "ociVersion": spec.version(),
        "id": id,
        "status": status,
        "pid": pid,
        "bundle": bundle.display().to_string(),
        "annotations": spec.annotations().clone().unwrap_or_default(),
    })
    .to_string()
}

/// Runs every hook of `kind` in order; the first failure stops and is returned.
pub async fn run(spec: &Spec, kind: &'static str, state: &str) -> Result<(), HookError> {
    for (index, h) in list(spec, kind).iter().enumerate() {
        let fail = |reason: HookRunError| HookError::Failed {
            kind,
            index,
            path: h.path().display().to_string(),
            reason,
        };
        run_one(h, state).await.map_err(fail)?;
    }
    Ok(())
}

async fn run_one(h: &Hook, state: &str) -> Result<(), HookRunError> {
    let args = h.args().clone().unwrap_or_default();
    let mut cmd = tokio::process::Command::new(h.path());
    if let Some(arg0) = args.first() {
        cmd.arg0(arg0);
    }
    cmd.args(args.iter().skip(1))
        .env_clear()
        .envs(h.env().iter().flatten().filter_map(|kv| kv.split_once('=')))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(HookRunError::Start)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook may not read its stdin: a broken pipe is not an error.
        let _ = stdin.write_all(state.as_bytes()).await;
    }
    let mut stderr = child.stderr.take();
    let wait = async {
        let mut err = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.take(4096).read_to_string(&mut err).await;
        }
        (child.wait().await, err)
    };
    let (status, err) = match h.timeout() {
        Some(t) => tokio::time::timeout(Duration::from_secs(t.max(1) as u64), wait)
            .await
            .map_err(|_| HookRunError::TimedOut(t.max(1)))?,
        None => wait.await,
    };
    let status = status.map_err(HookRunError::Wait)?;
    if status.success() {
        return Ok(());
    }
    Err(HookRunError::Exited {
        status,
        stderr: err.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(hooks: &str) -> Spec {
        let text = format!(
            r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},"hooks":{hooks},"annotations":{{"a":"b"}}}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    #[tokio::test]
    async fn hooks_get_the_state_and_failures_stop_the_step() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("state");
        let s = spec(&format!(
            r#"{{"createRuntime":[{{"path":"/bin/sh","args":["sh","-c","cat > {}; echo $X"],"env":["X=1"]}}],
                "poststart":[{{"path":"/bin/sh","args":["sh","-c","echo boom >&2; exit 3"]}}],
                "poststop":[{{"path":"/bin/sleep","args":["sleep","5"],"timeout":1}}]}}"#,
            out.display()
        ));
        assert!(needs_pause(&s));
        let state = state_json(&s, "c1", "creating", 4242, Path::new("/b"));
        run(&s, "createRuntime", &state).await.unwrap();
        let got: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(got["pid"], 4242);
        assert_eq!(got["bundle"], "/b");
        assert_eq!(got["annotations"]["a"], "b");
        let e = run(&s, "poststart", &state).await.unwrap_err().to_string();
        assert!(e.contains("poststart hook 0") && e.contains("boom"), "{e}");
        let e = run(&s, "poststop", &state).await.unwrap_err().to_string();
        assert!(e.contains("timed out"), "{e}");
        assert!(!needs_pause(&spec("{}")));
    }
}
