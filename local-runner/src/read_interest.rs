//! A socket registered with the event loop for *readability only*.
//!
//! tokio registers every `UnixStream`/`TcpStream` for read and write readiness, edge-triggered.
//! On a Unix socket the kernel signals write space (`unix_write_space`) each time the peer reads
//! what was sent, so an API behind HAProxy was woken twice per request: once for the request,
//! and once more, for nothing, at the moment HAProxy read the answer, which is exactly when
//! HAProxy needs the CPU to forward it (strace of an API at 500 req/s: 2 `epoll_wait` per
//! `recvfrom`/`sendto` pair). Answers are ~150 bytes and go out in one `send` that never blocks
//! in practice, so this stream asks only for readability and writes straight to the socket.
//! Only if a write would block (a client that does not read its answers) is the socket
//! re-registered for both directions, for the rest of its life; the write deadline of
//! `serve` then still applies.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// What a stream must offer to be wrapped: non-blocking reads and writes through a shared
/// reference (as std's sockets do) and a half-close.
///
/// Implemented only for std's socket types: each owns its file descriptor, which stays open and
/// the same for the value's whole life, as [`AsyncFd::register_with_interest`] requires.
pub trait RawSocket: AsRawFd + Sized + Unpin
where
    for<'a> &'a Self: Read + Write,
{
    /// Shuts the write half down (FIN after the last answer).
    fn shutdown_write(&self) -> io::Result<()>;
}

impl RawSocket for std::os::unix::net::UnixStream {
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl RawSocket for std::net::TcpStream {
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

/// A non-blocking socket registered for readability; see the module docs.
pub struct ReadInterest<T: RawSocket>
where
    for<'a> &'a T: Read + Write,
{
    // `None` only transiently, while being re-registered for writability.
    fd: Option<AsyncFd<T>>,
    writable: bool,
}

impl<T: RawSocket> ReadInterest<T>
where
    for<'a> &'a T: Read + Write,
{
    /// Wraps a socket that is already in non-blocking mode. Must be called on a tokio runtime.
    pub fn new(socket: T) -> io::Result<ReadInterest<T>> {
        Ok(ReadInterest {
            fd: Some(register(socket, Interest::READABLE)?),
            writable: false,
        })
    }

    fn fd(&self) -> io::Result<&AsyncFd<T>> {
        self.fd
            .as_ref()
            .ok_or_else(|| io::Error::other("socket lost while re-registering"))
    }

    /// From now on also wake on write space (a write has just blocked).
    fn register_writable(&mut self) -> io::Result<()> {
        if let Some(fd) = self.fd.take() {
            let socket = fd.into_inner();
            self.fd = Some(register(socket, Interest::READABLE | Interest::WRITABLE)?);
            self.writable = true;
        }
        Ok(())
    }
}

fn register<T: RawSocket>(socket: T, interest: Interest) -> io::Result<AsyncFd<T>>
where
    for<'a> &'a T: Read + Write,
{
    // SAFETY: `RawSocket` types own their descriptor (see the trait), so it is valid, open and
    // unchanged until the `AsyncFd` is dropped or `into_inner` returns the socket.
    Ok(unsafe { AsyncFd::register_with_interest(socket, interest) }?)
}

impl<T: RawSocket> AsyncRead for ReadInterest<T>
where
    for<'a> &'a T: Read + Write,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let fd = self.get_mut().fd()?;
        loop {
            let mut guard = ready!(fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            match guard.try_io(|s| s.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // A short read drained the socket: wait for the next edge instead of
                    // paying a read that returns EAGAIN (tokio's own streams do the same).
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // WouldBlock: readiness cleared by try_io; wait for the next edge.
                Err(_would_block) => continue,
            }
        }
    }
}

impl<T: RawSocket> AsyncWrite for ReadInterest<T>
where
    for<'a> &'a T: Read + Write,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            if !this.writable {
                match this.fd()?.get_ref().write(data) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => this.register_writable()?,
                    done => return Poll::Ready(done),
                }
                continue;
            }
            let fd = this.fd()?;
            let mut guard = ready!(fd.poll_write_ready(cx))?;
            match guard.try_io(|s| s.get_ref().write(data)) {
                Ok(done) => return Poll::Ready(done),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket: nothing is buffered here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().fd()?.get_ref().shutdown_write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> (
        ReadInterest<std::os::unix::net::UnixStream>,
        std::os::unix::net::UnixStream,
    ) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        (ReadInterest::new(a).unwrap(), b)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_writes_and_half_closes() {
        let (mut s, mut peer) = pair();
        peer.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        s.write_all(b"pong").await.unwrap();
        s.shutdown().await.unwrap();
        let mut back = Vec::new();
        peer.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"pong");
        drop(peer);
        assert_eq!(s.read(&mut got).await.unwrap(), 0, "EOF after the peer closed");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_write_that_blocks_waits_for_the_reader() {
        let (mut s, peer) = pair();
        // Far more than a Unix socket buffer: the writes must block, re-register for write
        // space and finish once the reader drains them.
        let data = vec![7u8; 4 << 20];
        let reader = std::thread::spawn(move || {
            let mut peer = peer;
            std::thread::sleep(std::time::Duration::from_millis(50));
            let mut all = Vec::new();
            peer.read_to_end(&mut all).unwrap();
            all.len()
        });
        s.write_all(&data).await.unwrap();
        assert!(s.writable, "a blocked write switches to write interest");
        s.shutdown().await.unwrap();
        assert_eq!(reader.join().unwrap(), data.len());
    }
}
