//! The buffers a client connection uses while it has requests in progress,
//! lent from a small per-thread pool. A connection between requests holds
//! none, so an idle keep-alive connection costs its task and its socket only.

use std::cell::RefCell;

use bytes::BytesMut;

/// Bundles kept per thread for reuse. Enough for the requests one thread has in
/// flight at once in the usual case; past it, bundles are freed.
const POOLED_PER_THREAD: usize = 32;
/// A buffer that grew past this (a large pipelined burst, a long chunked body)
/// is freed rather than pooled, so the pool never pins much memory.
const MAX_POOLED_CAPACITY: usize = 64 * 1024;

/// The four buffers of a connection with a request in progress.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    /// Bytes read from the client and not yet used.
    pub read: BytesMut,
    /// What goes to the client.
    pub write: BytesMut,
    /// What goes to the node.
    pub upstream_out: BytesMut,
    /// What comes from the node.
    pub upstream_in: BytesMut,
}

thread_local! {
    static POOL: RefCell<Vec<Buffers>> = const { RefCell::new(Vec::new()) };
}

impl Buffers {
    /// A bundle from this thread's pool, or a new empty one (which allocates on first use).
    pub(crate) fn take() -> Buffers {
        POOL.with_borrow_mut(Vec::pop).unwrap_or_default()
    }

    /// Returns the bundle to this thread's pool, emptied. Oversized buffers
    /// are freed; so is the whole bundle when the pool is full.
    pub(crate) fn give_back(mut self) {
        for buf in [
            &mut self.read,
            &mut self.write,
            &mut self.upstream_out,
            &mut self.upstream_in,
        ] {
            if buf.capacity() > MAX_POOLED_CAPACITY {
                *buf = BytesMut::new();
            } else {
                buf.clear();
            }
        }
        POOL.with_borrow_mut(|pool| {
            if pool.len() < POOLED_PER_THREAD {
                pool.push(self);
            }
        });
    }
}

/// Bundles in this thread's pool now (for tests).
#[cfg(test)]
pub(crate) fn pooled() -> usize {
    POOL.with_borrow(Vec::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_given_back_is_lent_again_empty_with_its_allocation() {
        let mut buffers = Buffers::take();
        buffers.read.reserve(4096);
        buffers.read.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let address = buffers.read.as_ptr();
        let before = pooled();
        buffers.give_back();
        assert_eq!(pooled(), before + 1);
        let again = Buffers::take();
        assert_eq!(pooled(), before);
        assert!(again.read.is_empty());
        assert!(again.read.capacity() >= 4096);
        assert_eq!(again.read.as_ptr(), address);
    }

    #[test]
    fn oversized_buffers_are_freed_not_pooled() {
        let mut buffers = Buffers::take();
        buffers.write.reserve(MAX_POOLED_CAPACITY + 1);
        buffers.read.reserve(100);
        buffers.give_back();
        let again = Buffers::take();
        assert_eq!(again.write.capacity(), 0);
        assert!(again.read.capacity() >= 100);
    }

    #[test]
    fn the_pool_is_bounded() {
        let bundles: Vec<Buffers> = (0..POOLED_PER_THREAD + 5)
            .map(|_| Buffers::take())
            .collect();
        for bundle in bundles {
            bundle.give_back();
        }
        assert_eq!(pooled(), POOLED_PER_THREAD);
    }
}
