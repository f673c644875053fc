//! A Unix stream socket that the runtime watches for reads only.
//!
//! tokio registers a `UnixStream` for readability and writability, edge
//! triggered. Each time the peer reads a response, the socket turns writable
//! again (an `EPOLLOUT` edge), and the runtime wakes once more for nothing:
//! one more `epoll_wait`, and the stack release that comes before it, per
//! request. [`Quiet`] registers for reads only and writes straight to the
//! socket. Only a write that would block registers a duplicate of the fd for
//! writability, until a write goes through again.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use nix::errno::Errno;
use nix::sys::socket::{self, MsgFlags, Shutdown};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// See the module doc.
#[derive(Debug)]
pub struct Quiet {
    read: AsyncFd<OwnedFd>,
    /// A duplicate of the fd, registered for writability while a write
    /// waits for room.
    write: Option<AsyncFd<OwnedFd>>,
}

impl Quiet {
    /// Takes a connected stream socket; it is made non-blocking.
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        let std = std::os::unix::net::UnixStream::from(fd);
        std.set_nonblocking(true)?;
        Ok(Quiet {
            read: register(OwnedFd::from(std), Interest::READABLE)?,
            write: None,
        })
    }

    /// Takes a stream accepted by tokio (registered for both, so handed back
    /// first: the same fd cannot be registered twice).
    pub fn from_tokio(s: tokio::net::UnixStream) -> io::Result<Self> {
        Self::new(OwnedFd::from(s.into_std()?))
    }

    /// Writes with `op` now, or, once the socket has room, with the waker
    /// registered in the meantime.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        op: impl Fn(&OwnedFd) -> nix::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if let Some(w) = &self.write {
                let mut guard = ready!(w.poll_write_ready(cx))?;
                match guard.try_io(|fd| op(fd.get_ref()).map_err(io::Error::from)) {
                    Ok(r) => {
                        // Room again: stop watching for it.
                        self.write = None;
                        return Poll::Ready(r);
                    }
                    Err(_would_block) => continue,
                }
            }
            match op(self.read.get_ref()) {
                Err(Errno::EAGAIN) => {
                    let dup = self.read.get_ref().try_clone()?;
                    self.write = Some(register(dup, Interest::WRITABLE)?);
                }
                r => return Poll::Ready(r.map_err(io::Error::from)),
            }
        }
    }
}

fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd owns the fd, so it stays open and the same until
    // the AsyncFd is dropped, which deregisters it first.
    unsafe { AsyncFd::register_with_interest(fd, interest) }
        .map_err(|e| io::Error::other(e.to_string()))
}

impl AsFd for Quiet {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.read.get_ref().as_fd()
    }
}

impl AsyncRead for Quiet {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.read.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard
                .try_io(|fd| nix::unistd::read(fd.get_ref(), unfilled).map_err(io::Error::from))
            {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Quiet {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        // MSG_NOSIGNAL: a gone peer is an EPIPE error, never a SIGPIPE.
        self.poll_write_with(cx, |fd| {
            socket::send(fd.as_raw_fd(), data, MsgFlags::MSG_NOSIGNAL)
        })
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |fd| {
            socket::sendmsg::<()>(fd.as_raw_fd(), bufs, &[], MsgFlags::MSG_NOSIGNAL, None)
        })
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let fd = self.read.get_ref().as_raw_fd();
        Poll::Ready(match socket::shutdown(fd, Shutdown::Write) {
            Ok(()) | Err(Errno::ENOTCONN) => Ok(()),
            Err(e) => Err(e.into()),
        })
    }
}

#[cfg(test)]
#[path = "quiet_tests.rs"]
mod tests;
