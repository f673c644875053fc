//! The runtimes under test and how ctr selects them.

use std::path::PathBuf;

use serde::Serialize;

/// containerd resolves it to [`NOOP_SHIM_BIN`].
pub const NOOP_RUNTIME: &str = "io.containerd.rundbench-noop.v2";
pub const NOOP_SHIM_BIN: &str = "containerd-shim-rundbench-noop-v2";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// io.containerd.rund.v2 (this project)
    Rund,
    /// io.containerd.runc.v2 (Debian's shim + runc)
    Runc,
    /// The floor: the bench's no-op shim (containerd + ctr + one shim
    /// process, no container). Measured alongside, never chosen by flag.
    #[value(skip)]
    Noop,
}

impl RuntimeKind {
    /// Column label in reports.
    pub fn label(self) -> &'static str {
        match self {
            RuntimeKind::Rund => "rund",
            RuntimeKind::Runc => "runc-v2",
            RuntimeKind::Noop => "floor",
        }
    }

    /// Short tag used in container ids.
    pub fn tag(self) -> &'static str {
        match self {
            RuntimeKind::Rund => "rund",
            RuntimeKind::Runc => "runc",
            RuntimeKind::Noop => "noop",
        }
    }

    /// The runtime name containerd resolves to `containerd-shim-<x>-v2`.
    pub fn containerd_name(self) -> &'static str {
        match self {
            RuntimeKind::Rund => "io.containerd.rund.v2",
            RuntimeKind::Runc => "io.containerd.runc.v2",
            RuntimeKind::Noop => NOOP_RUNTIME,
        }
    }
}

/// A runtime plus the per-container options ctr sends with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Runtime {
    pub kind: RuntimeKind,
    /// Sent as the runtime options' `ConfigPath` (`ctr run --runtime-config-path`).
    /// ctr only forwards it for runtimes other than runc.v2.
    pub config_path: Option<PathBuf>,
}

impl Runtime {
    pub fn plain(kind: RuntimeKind) -> Self {
        Runtime {
            kind,
            config_path: None,
        }
    }

    /// The `ctr run` flags that select this runtime.
    pub fn ctr_flags(&self) -> Vec<String> {
        let mut v = vec![
            "--runtime".to_string(),
            self.kind.containerd_name().to_string(),
        ];
        if let Some(p) = &self.config_path {
            v.push("--runtime-config-path".into());
            v.push(p.display().to_string());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_path_is_forwarded() {
        let mut r = Runtime::plain(RuntimeKind::Rund);
        assert_eq!(r.ctr_flags(), ["--runtime", "io.containerd.rund.v2"]);
        r.config_path = Some("/x/c.toml".into());
        assert_eq!(
            r.ctr_flags(),
            [
                "--runtime",
                "io.containerd.rund.v2",
                "--runtime-config-path",
                "/x/c.toml"
            ]
        );
    }
}
