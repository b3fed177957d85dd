//! Heap bytes held by chosen threads, for tests that bound the memory a
//! proxy keeps (per idle connection, say). A test binary installs
//! [`CountingAllocator`] as its global allocator, marks the threads that run
//! the code under test with [`count_this_thread`] (a runtime's
//! `on_thread_start`, or the thread itself), and reads [`live_bytes`] before
//! and after. Allocations of other threads (the test's clients) are not
//! counted, so they cannot blur the figure; the count is of bytes asked for,
//! so it does not depend on the allocator's caching or on machine load.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOCATOR: weir_testkit::memory::CountingAllocator =
//!     weir_testkit::memory::CountingAllocator;
//! ```

// The one place in the workspace with unsafe code: a `GlobalAlloc` must be an
// `unsafe impl`. Every method forwards to `System` unchanged and only adds
// to or subtracts from a counter; nothing here touches the memory itself.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};

/// The system allocator, counting the bytes that counted threads hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

static LIVE: AtomicI64 = AtomicI64::new(0);

thread_local! {
    // `const` and without a destructor: readable from inside the allocator,
    // even while the thread is being torn down, without allocating.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Counts what this thread allocates and frees from now on.
pub fn count_this_thread() {
    COUNTED.with(|counted| counted.set(true));
}

/// Bytes allocated and not yet freed by counted threads (frees of memory that
/// an uncounted thread allocated count too, so keep the threads apart).
pub fn live_bytes() -> i64 {
    LIVE.load(Ordering::SeqCst)
}

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

fn add(bytes: usize) {
    if counted() {
        LIVE.fetch_add(bytes as i64, Ordering::Relaxed);
    }
}

fn sub(bytes: usize) {
    if counted() {
        LIVE.fetch_sub(bytes as i64, Ordering::Relaxed);
    }
}

// SAFETY: every method calls `System`'s with the caller's arguments, whose
// contract is the same as ours, and returns its result unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            add(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            add(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            sub(layout.size());
            add(new_size);
        }
        new
    }
}
