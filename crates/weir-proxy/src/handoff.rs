//! Handing listening sockets from a running weir to the process replacing it (a binary
//! upgrade), over a Unix stream socket with `SCM_RIGHTS`: the same sockets keep listening
//! in the new process, so no port is ever closed and no `SO_REUSEPORT` race exists.
//!
//! The exchange, after the new process connected and sent [`HELLO`]:
//!
//! ```text
//! old → new   "weir-handoff/1\n", count (u32 BE), length (u32 BE), names ('\n'-separated)
//! old → new   one byte per batch of up to 200 descriptors, the batch as SCM_RIGHTS
//! new → old   READY  once it accepts on them          (old: stop accepting, drain, exit)
//! old → new   STOPPING
//! ```
//!
//! If the new process goes away before `READY`, the old one keeps serving.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// The new process asks for the sockets.
pub const HELLO: &[u8] = b"weir-upgrade/1 hello\n";
/// The new process accepts on the sockets: the old one may stop.
pub const READY: &[u8] = b"ready\n";
/// The old process stops accepting and drains.
pub const STOPPING: &[u8] = b"stopping\n";

const MAGIC: &[u8] = b"weir-handoff/1\n";
/// Descriptors per message (the kernel takes at most 253).
const BATCH: usize = 200;
/// Bounds on what a peer may make us allocate.
const MAX_SOCKETS: u32 = 100_000;
const MAX_NAMES_BYTES: u32 = 16 * 1024 * 1024;

/// Sends `sockets` (a name each, such as `listen 127.0.0.1:80`) over `stream`.
pub fn send_sockets(stream: &UnixStream, sockets: &[(String, OwnedFd)]) -> io::Result<()> {
    let names = sockets
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let count = u32::try_from(sockets.len()).map_err(|_| invalid("too many sockets"))?;
    let length = u32::try_from(names.len()).map_err(|_| invalid("names too long"))?;
    let mut head = Vec::with_capacity(MAGIC.len() + 8 + names.len());
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&count.to_be_bytes());
    head.extend_from_slice(&length.to_be_bytes());
    head.extend_from_slice(names.as_bytes());
    (&mut &*stream).write_all(&head)?;
    for batch in sockets.chunks(BATCH) {
        let fds: Vec<BorrowedFd<'_>> = batch.iter().map(|(_, fd)| fd.as_fd()).collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(invalid("ancillary buffer too small"));
        }
        sendmsg(
            stream,
            &[IoSlice::new(b"F")],
            &mut control,
            SendFlags::empty(),
        )?;
    }
    Ok(())
}

/// Receives the sockets [`send_sockets`] sent, by name.
pub fn receive_sockets(stream: &UnixStream) -> io::Result<Vec<(String, OwnedFd)>> {
    let mut magic = [0u8; MAGIC.len()];
    (&mut &*stream).read_exact(&mut magic)?;
    if magic != MAGIC {
        return Err(invalid("not a weir socket handoff"));
    }
    let mut numbers = [0u8; 8];
    (&mut &*stream).read_exact(&mut numbers)?;
    let [c0, c1, c2, c3, l0, l1, l2, l3] = numbers;
    let count = u32::from_be_bytes([c0, c1, c2, c3]);
    let length = u32::from_be_bytes([l0, l1, l2, l3]);
    if count > MAX_SOCKETS || length > MAX_NAMES_BYTES {
        return Err(invalid("handoff larger than any weir sends"));
    }
    let mut names = vec![0u8; length as usize];
    (&mut &*stream).read_exact(&mut names)?;
    let names = String::from_utf8(names).map_err(|_| invalid("socket names not UTF-8"))?;
    let names: Vec<String> = if count == 0 {
        Vec::new()
    } else {
        names.split('\n').map(str::to_owned).collect()
    };
    if names.len() != count as usize {
        return Err(invalid("socket names and count disagree"));
    }
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(names.len());
    while fds.len() < names.len() {
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(BATCH))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut byte = [0u8; 1];
        let received = recvmsg(
            stream,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        if received.bytes == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
    }
    if fds.len() != names.len() {
        return Err(invalid("more descriptors than names"));
    }
    Ok(names.into_iter().zip(fds).collect())
}

/// Reads one line (up to 64 bytes) and checks it is `expected`.
pub fn expect_line(stream: &UnixStream, expected: &[u8]) -> io::Result<()> {
    let mut line = Vec::with_capacity(expected.len());
    let mut byte = [0u8; 1];
    while line.len() < 64 {
        if (&mut &*stream).read(&mut byte)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        line.push(byte[0]);
        if byte[0] == b'\n' {
            break;
        }
    }
    if line == expected {
        Ok(())
    } else {
        Err(invalid("unexpected message from the other weir process"))
    }
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_cross_with_their_names() {
        let (old, new) = UnixStream::pair().unwrap();
        let listeners: Vec<std::net::TcpListener> = (0..250)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let sockets: Vec<(String, OwnedFd)> = listeners
            .iter()
            .map(|l| {
                (
                    format!("listen {}", l.local_addr().unwrap()),
                    l.as_fd().try_clone_to_owned().unwrap(),
                )
            })
            .collect();
        let sender = std::thread::spawn(move || send_sockets(&old, &sockets));
        let received = receive_sockets(&new).unwrap();
        sender.join().unwrap().unwrap();
        assert_eq!(received.len(), 250);
        for ((name, fd), original) in received.into_iter().zip(&listeners) {
            let address = original.local_addr().unwrap();
            assert_eq!(name, format!("listen {address}"));
            // The received descriptor is the same listening socket.
            let socket = std::net::TcpListener::from(fd);
            assert_eq!(socket.local_addr().unwrap(), address);
        }
    }

    #[test]
    fn garbage_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        drop(a);
        assert!(receive_sockets(&b).is_err());
    }
}
