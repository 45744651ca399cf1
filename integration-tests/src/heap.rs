//! Counting the heap a piece of work adds: client memory per waiting task, for the benchmark's
//! scenario 6 and for `tests/waiter_memory.rs`.
//!
//! Install [`Counting`] as the binary's global allocator, then open a [`Window`] around the
//! work:
//!
//! ```text
//! #[global_allocator]
//! static ALLOCATOR: redisync_test_harness::heap::Counting = redisync_test_harness::heap::Counting;
//! let window = redisync_test_harness::heap::Window::open();
//! // ... the work ...
//! println!("{} bytes", window.net());
//! ```
//!
//! Resident memory (RSS) says little about a few thousand small allocations: the allocator
//! reuses what earlier scenarios freed, and keeps pages it no longer needs. The global
//! allocator below counts bytes allocated minus bytes freed while a window is open, which is
//! exactly the heap the work in the window added. Outside a window it costs one relaxed load
//! of a flag per allocation, so the timed scenarios are not slowed down.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// The system allocator, counting while [`Window`] is open.
pub struct Counting;

static OPEN: AtomicBool = AtomicBool::new(false);
static NET: AtomicI64 = AtomicI64::new(0);

fn count(bytes: i64) {
    if OPEN.load(Ordering::Relaxed) {
        NET.fetch_add(bytes, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to `System` unchanged; counting has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// While alive, the heap bytes allocated minus freed are counted (by every thread).
pub struct Window(());

impl Window {
    /// Starts counting from zero. One window at a time: the counter is the process's.
    pub fn open() -> Window {
        NET.store(0, Ordering::SeqCst);
        OPEN.store(true, Ordering::SeqCst);
        Window(())
    }

    /// Heap bytes added since [`open`](Self::open) (negative if more was freed).
    pub fn net(&self) -> i64 {
        NET.load(Ordering::SeqCst)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        OPEN.store(false, Ordering::SeqCst);
    }
}
