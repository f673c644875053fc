//! Every annotation key rund reads from a container's spec: rund's own
//! (`rund.io/*`, the API pods and admins use), and the CRI and CDI ones it
//! interprets. Whether a pod may use a privileged one is `[policy]`'s call.

/// `true`/`false`: run the workload under rund-init (signal forwarding, reaping).
pub const INIT: &str = "rund.io/init";
/// Seconds between TERM and KILL when the container is stopped.
pub const GRACE_PERIOD: &str = "rund.io/grace-period-seconds";
/// `pod` asks for a user namespace; `host` opts out.
pub const USERNS: &str = "rund.io/userns";
/// How binds are remapped in a user namespace: `idmap` (default) or `plain`.
pub const USERNS_BINDS: &str = "rund.io/userns-binds";
/// RLIMIT_MEMLOCK: `unlimited` or bytes.
pub const MEMLOCK: &str = "rund.io/memlock";
/// GPUs (same syntax as `NVIDIA_VISIBLE_DEVICES`; wins over the env).
pub const GPUS: &str = "rund.io/gpus";
/// RDMA devices: `all`, `mlx5_0,mlx5_1`, `netdev:eth1`.
pub const RDMA_DEVICES: &str = "rund.io/rdma-devices";
/// Prefix of CDI device annotations (CRI).
pub const CDI_PREFIX: &str = "cdi.k8s.io/";

/// CRI: the pod sandbox a container belongs to.
pub const CRI_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
/// CRI: `sandbox` or `container`.
pub const CRI_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
pub const CRI_SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
pub const CRI_SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
pub const CRI_SANDBOX_UID: &str = "io.kubernetes.cri.sandbox-uid";
pub const CRI_SANDBOX_LOG_DIRECTORY: &str = "io.kubernetes.cri.sandbox-log-directory";
