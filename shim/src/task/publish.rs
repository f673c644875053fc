//! The connection that forwards events to containerd (`TTRPC_ADDRESS`).
//!
//! Events go through one queue, sent one at a time in order; a failed send
//! is retried in place with a growing pause and a fresh connection (a
//! restarting containerd), so order holds, and dropped after a few tries.
//! Before the shim exits, [`Publisher::flush`] waits for every queued event
//! to be answered, so the connection closes with nothing in flight (else
//! containerd logs a broken pipe writing the last answer).

use std::sync::Arc;
use std::time::Duration;

use containerd_shim_protos::api::ForwardRequest;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::shim::event::Envelope;
use containerd_shim_protos::shim_async::{Client, EventsClient};
use containerd_shim_protos::ttrpc::context;
use tokio::sync::{mpsc, watch};

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("connecting to {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    #[error("encoding {topic}: {source}")]
    Encode {
        topic: String,
        source: containerd_shim_protos::protobuf::Error,
    },
    #[error("{0}: the event queue is closed")]
    Closed(String),
}

/// Tries per event: about fifteen seconds of a containerd outage.
const TRIES: u64 = 5;

#[derive(Clone)]
pub struct Publisher {
    tx: mpsc::UnboundedSender<Envelope>,
    /// Events queued and not yet answered (or given up).
    pending: Arc<watch::Sender<usize>>,
}

async fn connect(address: &str) -> Result<EventsClient, PublishError> {
    rund_proto::coalesce::connect(address)
        .map(|s| EventsClient::new(Client::new(s)))
        .map_err(|source| PublishError::Connect {
            address: address.to_string(),
            source,
        })
}

impl Publisher {
    /// Connects to containerd and starts the sending task.
    pub async fn connect(address: &str) -> Result<Publisher, PublishError> {
        let client = connect(address).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = Arc::new(watch::channel(0usize).0);
        tokio::spawn(send_all(address.to_string(), client, rx, pending.clone()));
        Ok(Publisher { tx, pending })
    }

    /// Queues one event.
    pub fn publish<M: Message>(
        &self,
        topic: &str,
        namespace: &str,
        ev: &M,
    ) -> Result<(), PublishError> {
        let value = ev.write_to_bytes().map_err(|source| PublishError::Encode {
            topic: topic.to_string(),
            source,
        })?;
        let envelope = Envelope {
            timestamp: Some(super::events::timestamp_ns(crate::clock::now_ns())).into(),
            namespace: namespace.to_string(),
            topic: topic.to_string(),
            event: Some(Any {
                type_url: type_url::<M>(),
                value,
                ..Default::default()
            })
            .into(),
            ..Default::default()
        };
        self.pending.send_modify(|n| *n += 1);
        self.tx.send(envelope).map_err(|_| {
            self.pending.send_modify(|n| *n -= 1);
            PublishError::Closed(topic.to_string())
        })
    }

    /// Waits (at most `limit`) until every queued event has been answered.
    pub async fn flush(&self, limit: Duration) {
        let mut rx = self.pending.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await;
    }
}

async fn send_all(
    address: String,
    mut client: EventsClient,
    mut rx: mpsc::UnboundedReceiver<Envelope>,
    pending: Arc<watch::Sender<usize>>,
) {
    while let Some(envelope) = rx.recv().await {
        let req = ForwardRequest {
            envelope: Some(envelope).into(),
            ..Default::default()
        };
        for attempt in 1..=TRIES {
            let ctx = context::with_timeout(Duration::from_secs(10).as_nanos() as i64);
            match client.forward(ctx, &req).await {
                Ok(_) => break,
                Err(e) if attempt == TRIES => {
                    tracing::warn!(topic = %req.envelope.topic, "event dropped after {TRIES} tries: {e}");
                }
                Err(e) => {
                    tracing::debug!(topic = %req.envelope.topic, "forwarding event: {e}; retrying");
                    tokio::time::sleep(Duration::from_secs(attempt)).await;
                    if let Ok(c) = connect(&address).await {
                        client = c;
                    }
                }
            }
        }
        pending.send_modify(|n| *n -= 1);
    }
}

/// The event's full protobuf name. From the type's name, not its
/// descriptor: building a descriptor parses the whole file set it lives in,
/// about as much heap as the rest of an idle shim.
fn type_url<M: Message>() -> String {
    format!("containerd.events.{}", M::NAME)
}

#[cfg(test)]
mod tests {
    use containerd_shim_protos::events::task::{
        TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskIO, TaskOOM,
        TaskPaused, TaskResumed, TaskStart,
    };
    use containerd_shim_protos::protobuf::MessageFull;

    use super::type_url;

    fn same<M: MessageFull>() {
        assert_eq!(type_url::<M>(), M::descriptor().full_name());
    }

    #[test]
    fn type_urls_are_the_descriptors_full_names() {
        same::<TaskCreate>();
        same::<TaskStart>();
        same::<TaskExit>();
        same::<TaskDelete>();
        same::<TaskExecAdded>();
        same::<TaskExecStarted>();
        same::<TaskOOM>();
        same::<TaskPaused>();
        same::<TaskResumed>();
        same::<TaskIO>();
    }
}
