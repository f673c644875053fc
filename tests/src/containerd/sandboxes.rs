//! containerd 2.x's sandbox Controller over its gRPC API
//! (`containerd.services.sandbox.v1.Controller`): the calls CRI makes of a sandboxer, and
//! those it never makes (Metrics, Stop with a timeout), reach the shim's Sandbox service this
//! way, through containerd. Messages are written out here, as in `update.rs`. containerd 2.1
//! serves no Platform here (CRI asks the sandboxer itself, at CreateContainer).

use std::collections::HashMap;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Endpoint, Uri};

use super::Containerd;
use crate::error::{Error, Result};

const SERVICE: &str = "/containerd.services.sandbox.v1.Controller";

/// google.protobuf.Any.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// google.protobuf.Timestamp.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// ControllerStopRequest, ControllerMetricsRequest and ControllerStatusRequest share this shape (`timeout_secs` and `verbose` are both field 2,
/// a varint; only the call that has it sets it).
#[derive(Clone, PartialEq, prost::Message)]
struct Request {
    #[prost(string, tag = "1")]
    sandbox_id: String,
    #[prost(uint32, tag = "2")]
    field2: u32,
    #[prost(string, tag = "10")]
    sandboxer: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Empty {}

/// ControllerStatusResponse (address and version left out).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxStatus {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
    #[prost(uint32, tag = "2")]
    pub pid: u32,
    #[prost(string, tag = "3")]
    pub state: String,
    #[prost(map = "string, string", tag = "4")]
    pub info: HashMap<String, String>,
    #[prost(message, optional, tag = "5")]
    pub created_at: Option<Timestamp>,
    #[prost(message, optional, tag = "6")]
    pub exited_at: Option<Timestamp>,
}

/// containerd.types.Metric.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(message, optional, tag = "1")]
    pub timestamp: Option<Timestamp>,
    #[prost(string, tag = "2")]
    pub id: String,
    #[prost(message, optional, tag = "3")]
    pub data: Option<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MetricsResponse {
    #[prost(message, optional, tag = "1")]
    metrics: Option<Metric>,
}

/// The answer of one call: containerd's (and so the shim's) status on failure.
pub type Answer<T> = std::result::Result<T, tonic::Status>;

fn harness(call: &str, detail: String) -> Error {
    Error::Command {
        cmd: format!("gRPC {SERVICE}/{call}"),
        status: "harness failure".into(),
        stderr: detail,
    }
}

/// A hang guard for one call: a Stop waits its whole grace period.
const CALL_LIMIT: Duration = Duration::from_secs(180);

impl Containerd {
    fn controller_call<R>(&self, call: &'static str, req: Request) -> Result<Answer<R>>
    where
        R: prost::Message + Default + Send + 'static,
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| harness(call, format!("tokio runtime: {e}")))?;
        let socket = self.layout.grpc.clone();
        let ns = super::K8S_NAMESPACE
            .parse()
            .map_err(|e| harness(call, format!("namespace as metadata: {e}")))?;
        let path = PathAndQuery::try_from(format!("{SERVICE}/{call}"))
            .map_err(|e| harness(call, e.to_string()))?;
        rt.block_on(async move {
            // The URI is a placeholder: the connector always dials the unix socket.
            let channel =
                Endpoint::from_static("http://[::]:50051")
                    .timeout(CALL_LIMIT)
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let p = socket.clone();
                        async move {
                            Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?))
                        }
                    }))
                    .await
                    .map_err(|e| harness(call, format!("connect: {e}")))?;
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready()
                .await
                .map_err(|e| harness(call, format!("channel not ready: {e}")))?;
            let mut request = tonic::Request::new(req);
            request.metadata_mut().insert("containerd-namespace", ns);
            let codec = tonic_prost::ProstCodec::<Request, R>::new();
            Ok(grpc
                .unary(request, path, codec)
                .await
                .map(|r| r.into_inner()))
        })
    }

    fn request(id: &str, sandboxer: &str, field2: u32) -> Request {
        Request {
            sandbox_id: id.to_owned(),
            field2,
            sandboxer: sandboxer.to_owned(),
        }
    }

    /// Controller.Stop of CRI sandbox `id` with `timeout_secs` (0: the sandboxer's own).
    pub fn sandbox_stop(&self, sandboxer: &str, id: &str, timeout_secs: u32) -> Result<Answer<()>> {
        let r =
            self.controller_call::<Empty>("Stop", Self::request(id, sandboxer, timeout_secs))?;
        Ok(r.map(drop))
    }

    /// Controller.Status of CRI sandbox `id`.
    pub fn sandbox_status(
        &self,
        sandboxer: &str,
        id: &str,
        verbose: bool,
    ) -> Result<Answer<SandboxStatus>> {
        self.controller_call("Status", Self::request(id, sandboxer, verbose.into()))
    }

    /// Controller.Metrics of CRI sandbox `id`.
    pub fn sandbox_metrics(&self, sandboxer: &str, id: &str) -> Result<Answer<Option<Metric>>> {
        let r =
            self.controller_call::<MetricsResponse>("Metrics", Self::request(id, sandboxer, 0))?;
        Ok(r.map(|m| m.metrics))
    }
}
