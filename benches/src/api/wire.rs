//! The few containerd v1 API messages the bench sends, as prost structs
//! (fields the bench never sets are left out: protobuf skips them).

/// google.protobuf.Any.
pub use rund_tests::containerd::Any;

/// containerd.services.containers.v1.Container.Runtime.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerRuntime {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub options: Option<Any>,
}

/// containerd.services.containers.v1.Container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "4")]
    pub runtime: Option<ContainerRuntime>,
    #[prost(message, optional, tag = "5")]
    pub spec: Option<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteContainerRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

/// containerd.services.tasks.v1.CreateTaskRequest: no rootfs mounts (the
/// spec's root is a directory) and no stdio (null IO, as `ctr run -d --null-io`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTaskRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// Start, Wait and Delete of a task's init process all take the container id
/// (field 1; the exec id, field 2, stays empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KillRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(uint32, tag = "3")]
    pub signal: u32,
    #[prost(bool, tag = "4")]
    pub all: bool,
}

/// containerd.services.tasks.v1.WaitResponse (exited_at left out).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WaitResponse {
    #[prost(uint32, tag = "1")]
    pub exit_status: u32,
}

/// Any answer whose fields the bench does not read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ignored {}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_container_encodes_its_runtime_and_spec_at_containerds_field_numbers() {
        let c = CreateContainerRequest {
            container: Some(Container {
                id: "a".into(),
                runtime: Some(ContainerRuntime {
                    name: "r".into(),
                    options: None,
                }),
                spec: Some(Any {
                    type_url: "t".into(),
                    value: b"{}".to_vec(),
                }),
            }),
        };
        // container (1) { id (1) "a", runtime (4) { name (1) "r" }, spec (5) { type_url "t", value "{}" } }
        let want = [
            0x0a, 17, 0x0a, 1, b'a', 0x22, 3, 0x0a, 1, b'r', 0x2a, 7, 0x0a, 1, b't', 0x12, 2, b'{',
            b'}',
        ];
        assert_eq!(c.encode_to_vec(), want);
        let k = KillRequest {
            container_id: "a".into(),
            signal: 9,
            all: true,
        };
        assert_eq!(k.encode_to_vec(), [0x0a, 1, b'a', 0x18, 9, 0x20, 1]);
    }
}
