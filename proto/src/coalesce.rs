//! One write per ttrpc frame. ttrpc 0.9 writes a frame's 10-byte header as
//! four writes and a flush, then its payload: five syscalls, and a peer that
//! may wake for each. [`Coalesced`] holds the header until its payload comes
//! and sends both in one vectored write; a frame with no payload goes out as
//! its header completes. Reads pass through untouched: bytes a dying shim
//! had not read stay in the socket for its successor (per-node mode).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use ttrpc::r#async::transport::{Listener, Socket};

use crate::quiet::Quiet;

/// A ttrpc frame header: length (4), stream id (4), type (1), flags (1).
const HEADER: usize = 10;

#[derive(Debug)]
enum State {
    /// `held` bytes of the next header taken, `sent` of them written.
    Head {
        buf: [u8; HEADER],
        held: usize,
        sent: usize,
    },
    /// Payload bytes still to pass through.
    Body { left: usize },
}

const EMPTY: State = State::Head {
    buf: [0; HEADER],
    held: 0,
    sent: 0,
};

/// A stream that writes each ttrpc frame whole (see the module doc).
#[derive(Debug)]
pub struct Coalesced<S> {
    inner: S,
    state: State,
}

impl<S> Coalesced<S> {
    pub fn new(inner: S) -> Self {
        Coalesced {
            inner,
            state: EMPTY,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

fn body_len(buf: &[u8; HEADER]) -> usize {
    u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize
}

fn write_zero() -> io::Error {
    io::Error::new(io::ErrorKind::WriteZero, "the socket took no bytes")
}

impl<S: AsyncWrite + Unpin> Coalesced<S> {
    /// Writes what is held of the header.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let State::Head { buf, held, sent } = &mut self.state else {
            return Poll::Ready(Ok(()));
        };
        while *sent < *held {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &buf[*sent..*held]))?;
            if n == 0 {
                return Poll::Ready(Err(write_zero()));
            }
            *sent += n;
        }
        if *held == HEADER && body_len(buf) == 0 {
            self.state = EMPTY;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S> Coalesced<S> {
    /// An empty frame's header whose drain went pending, with `before` of
    /// its bytes taken by earlier writes: takes only the bytes that are out.
    fn take_sent(&mut self, before: usize) -> Poll<io::Result<usize>> {
        let State::Head { held, sent, .. } = &mut self.state else {
            unreachable!("a header is being drained");
        };
        if *sent > before {
            *held = *sent;
            return Poll::Ready(Ok(*sent - before));
        }
        *held = before;
        Poll::Pending
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalesced<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            match &mut me.state {
                State::Body { left } => {
                    let k = data.len().min(*left);
                    let n = ready!(Pin::new(&mut me.inner).poll_write(cx, &data[..k]))?;
                    if n == 0 {
                        return Poll::Ready(Err(write_zero()));
                    }
                    *left -= n;
                    if *left == 0 {
                        me.state = EMPTY;
                    }
                    return Poll::Ready(Ok(n));
                }
                State::Head { buf, held, .. } if *held < HEADER => {
                    let k = (HEADER - *held).min(data.len());
                    buf[*held..*held + k].copy_from_slice(&data[..k]);
                    *held += k;
                    if *held == HEADER && body_len(buf) == 0 {
                        // Nothing follows: out now, and its last bytes taken
                        // only as far as they are out, so whoever counts what
                        // was written (the node keeper) sees the frame whole
                        // only once it is.
                        let before = HEADER - k;
                        return match me.poll_drain(cx) {
                            Poll::Ready(r) => Poll::Ready(r.map(|()| k)),
                            Poll::Pending => me.take_sent(before),
                        };
                    }
                    return Poll::Ready(Ok(k));
                }
                State::Head { buf, .. } if body_len(buf) == 0 => {
                    // Not reached: an empty frame is taken only once out.
                    ready!(me.poll_drain(cx))?;
                }
                State::Head { buf, sent, .. } => {
                    // The payload: header and payload in one write.
                    let want = body_len(buf);
                    let k = data.len().min(want);
                    let head = &buf[*sent..];
                    let slices = [IoSlice::new(head), IoSlice::new(&data[..k])];
                    let n = ready!(Pin::new(&mut me.inner).poll_write_vectored(cx, &slices))?;
                    if n == 0 {
                        return Poll::Ready(Err(write_zero()));
                    }
                    if n <= head.len() {
                        *sent += n;
                        continue;
                    }
                    let taken = n - head.len();
                    me.state = if taken == want {
                        EMPTY
                    } else {
                        State::Body { left: want - taken }
                    };
                    return Poll::Ready(Ok(taken));
                }
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        // ttrpc flushes between a header and its payload: that header waits
        // for the payload's write. Anything else held goes out.
        let waits_for_payload = matches!(&me.state, State::Head { buf, held, .. } if *held == HEADER && body_len(buf) > 0);
        if !waits_for_payload {
            ready!(me.poll_drain(cx))?;
        }
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalesced<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// A ttrpc listener whose connections write whole frames.
pub fn listener(l: tokio::net::UnixListener) -> Listener {
    Listener::new(futures::stream::unfold(l, |l| async move {
        let conn = l
            .accept()
            .await
            .and_then(|(s, _)| Quiet::from_tokio(s))
            .map(Coalesced::new);
        Some((conn, l))
    }))
}

/// A ttrpc client socket that writes whole frames.
pub fn socket(s: std::os::unix::net::UnixStream) -> io::Result<Socket> {
    Ok(Socket::new(Coalesced::new(Quiet::new(s.into())?)))
}

/// Connects to a ttrpc server at `unix://path`, `path` or `@abstract`.
pub fn connect(address: &str) -> io::Result<Socket> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let path = address.strip_prefix("unix://").unwrap_or(address);
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(path)?,
    };
    socket(UnixStream::connect_addr(&addr)?)
}

#[cfg(test)]
mod tests;
