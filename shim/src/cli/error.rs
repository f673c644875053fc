//! Errors of the `rund` CLI; `main` prints them as `rund: <message>`.

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A config value the CLI cannot interpret (the file itself parsed).
    #[error("config: {0}")]
    ConfigValue(String),
    #[error("cgroup: {0}")]
    Cgroup(#[from] rund_cgroup::Error),
    #[error("devices: {0}")]
    Devices(#[from] rund_devices::DeviceError),
    #[error(transparent)]
    Rlimit(#[from] crate::rlimit::RlimitError),
    #[error("reading {what}: {source}")]
    Probe {
        what: String,
        source: std::io::Error,
    },
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Install(#[from] super::install::InstallError),
}
