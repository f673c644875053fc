//! ttrpc over a pre-connected socketpair: the agent serves exactly the one
//! connection it inherited, the shim is a client on the other end. Nothing
//! listens, so no other process can connect.

use std::os::fd::OwnedFd;

use futures::stream::{self, StreamExt};
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::Client;

use crate::coalesce::Coalesced;
use crate::quiet::Quiet;

fn tokio_stream(fd: OwnedFd) -> std::io::Result<Coalesced<Quiet>> {
    Quiet::new(fd).map(Coalesced::new)
}

/// A "listener" that yields the one connected stream, then nothing.
pub fn single_listener(fd: OwnedFd) -> std::io::Result<Listener> {
    let conn = tokio_stream(fd)?;
    let once = stream::once(async move { Ok::<_, std::io::Error>(conn) });
    Ok(Listener::new(once.chain(stream::pending())))
}

/// A "listener" that yields the inherited stream, then each connection a
/// restarted shim sends on the fd side channel ([`crate::fdpass::FdKind::Conn`]).
pub fn listener_with_more(
    fd: OwnedFd,
    more: tokio::sync::mpsc::UnboundedReceiver<OwnedFd>,
) -> std::io::Result<Listener> {
    let conn = tokio_stream(fd)?;
    let first = stream::once(async move { Ok::<_, std::io::Error>(conn) });
    let rest = stream::unfold(more, |mut rx| async move {
        let fd = rx.recv().await?;
        Some((tokio_stream(fd), rx))
    });
    Ok(Listener::new(first.chain(rest).chain(stream::pending())))
}

/// A ttrpc client on the shim's end of the socketpair.
pub fn client(fd: OwnedFd) -> std::io::Result<Client> {
    Ok(Client::new(Socket::new(tokio_stream(fd)?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{PingRequest, PingResponse};
    use async_trait::async_trait;
    use std::sync::Arc;

    struct Pinger;

    #[async_trait]
    impl crate::Agent for Pinger {
        async fn ping(
            &self,
            _ctx: &ttrpc::r#async::TtrpcContext,
            req: PingRequest,
        ) -> ttrpc::Result<PingResponse> {
            Ok(PingResponse {
                protocol_version: req.protocol_version + 1,
                ..Default::default()
            })
        }
    }

    #[tokio::test]
    async fn a_socketpair_carries_ttrpc() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut server = ttrpc::r#async::Server::new()
            .add_listener(single_listener(a.into()).unwrap())
            .register_service(crate::create_agent(Arc::new(Pinger)));
        server.start().await.unwrap();
        let c = crate::AgentClient::new(client(b.into()).unwrap());
        let resp = c
            .ping(
                ttrpc::context::with_timeout(5_000_000_000),
                &PingRequest {
                    protocol_version: 41,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(resp.protocol_version, 42);
    }
}
