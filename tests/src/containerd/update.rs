//! Tasks.Update over containerd's gRPC API: ctr 1.6 has no `task update`, so the tests speak
//! the one call they need as nerdctl and CRI do (`containerd.services.tasks.v1.Tasks/Update`,
//! resources as the OCI `LinuxResources` JSON in an Any).

use tonic::codegen::http::uri::PathAndQuery;

use super::Containerd;
use crate::error::{Error, Result};

const UPDATE_PATH: &str = "/containerd.services.tasks.v1.Tasks/Update";
/// containerd's typeurl for `specs.LinuxResources`.
const RESOURCES_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources";

/// google.protobuf.Any.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// containerd.services.tasks.v1.UpdateTaskRequest (annotations left out: unused).
#[derive(Clone, PartialEq, prost::Message)]
struct UpdateTaskRequest {
    #[prost(string, tag = "1")]
    container_id: String,
    #[prost(message, optional, tag = "2")]
    resources: Option<Any>,
}

/// google.protobuf.Empty.
#[derive(Clone, PartialEq, prost::Message)]
struct Empty {}

fn harness(detail: String) -> Error {
    Error::Command {
        cmd: format!("gRPC {UPDATE_PATH}"),
        status: "harness failure".into(),
        stderr: detail,
    }
}

impl Containerd {
    /// Update task `id`'s resources to `resources` (OCI `LinuxResources` JSON). The outer
    /// `Result` is a harness failure; the inner one is containerd's (and so the shim's) answer.
    pub fn task_update(
        &self,
        id: &str,
        resources: &serde_json::Value,
    ) -> Result<std::result::Result<(), tonic::Status>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| harness(format!("tokio runtime: {e}")))?;
        let socket = self.layout.grpc.clone();
        let req = UpdateTaskRequest {
            container_id: id.to_owned(),
            resources: Some(Any {
                type_url: RESOURCES_TYPE_URL.into(),
                value: serde_json::to_vec(resources)?,
            }),
        };
        let ns = self
            .namespace
            .parse()
            .map_err(|e| harness(format!("namespace as metadata: {e}")))?;
        rt.block_on(async move {
            let channel = crate::grpc::unix_channel(socket)
                .await
                .map_err(|e| harness(format!("connect: {e}")))?;
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready()
                .await
                .map_err(|e| harness(format!("channel not ready: {e}")))?;
            let mut request = tonic::Request::new(req);
            request.metadata_mut().insert("containerd-namespace", ns);
            let codec = tonic_prost::ProstCodec::<UpdateTaskRequest, Empty>::new();
            let answer = grpc
                .unary(request, PathAndQuery::from_static(UPDATE_PATH), codec)
                .await;
            Ok(answer.map(drop))
        })
    }
}
