//! Per-thread reusable scratch buffers for kernel temporaries.
//!
//! Why: glibc's malloc serves blocks above its mmap threshold (128 KiB to start)
//! with fresh pages, and trims freed memory back to the system, so a kernel that
//! allocates a large temporary on every call (attention's packed key/value tiles,
//! 512 KiB each at GPT-2's (4, 4, 128, 64)) paid a page fault per 4 KiB on every
//! call: 6% of the attention forward in `perf`. Each thread keeps its last few
//! buffers instead.

use std::cell::RefCell;

/// Buffers a thread keeps, and the largest it keeps (bytes): a kernel may use
/// more, but a one-off giant temporary is returned to the allocator.
const KEEP: usize = 4;
const KEEP_BYTES: usize = 64 << 20;

thread_local! {
    static FREE: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
}

/// Element types for which every bit pattern is a valid value, so a reused
/// buffer can be viewed as them whatever it held before.
///
/// # Safety
/// Implementors have no invalid bit patterns, no padding and an alignment of at most 8.
pub(crate) unsafe trait Plain: Copy {}
// SAFETY: plain numbers: every bit pattern is a value, alignment <= 8.
unsafe impl Plain for f32 {}
// SAFETY: as above.
unsafe impl Plain for f64 {}
// SAFETY: as above (integers: every bit pattern is a value too).
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for i8 {}
// SAFETY: as above.
unsafe impl Plain for i16 {}
// SAFETY: as above.
unsafe impl Plain for i32 {}
// SAFETY: as above.
unsafe impl Plain for i64 {}

/// Runs `f` on a buffer of `len` elements of `C` whose contents are unspecified
/// (values left by an earlier use on this thread, or zeros): callers write
/// every element they read. Nested calls get distinct buffers.
pub(crate) fn with<C: Plain, R>(len: usize, f: impl FnOnce(&mut [C]) -> R) -> R {
    const { assert!(std::mem::align_of::<C>() <= 8) };
    let words = (len * std::mem::size_of::<C>()).div_ceil(8);
    let mut buf = FREE.with(|free| free.borrow_mut().pop()).unwrap_or_default();
    if buf.len() < words {
        buf.resize(words, 0);
    }
    // SAFETY: `buf` holds at least `len * size_of::<C>()` initialised bytes, aligned to
    // 8 >= align_of::<C>(); `C: Plain` makes every bit pattern a valid `C`; the slice
    // is the only reference to `buf` while it lives.
    let view = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut C, len) };
    let result = f(view);
    if buf.len() * 8 <= KEEP_BYTES {
        FREE.with(|free| {
            let mut free = free.borrow_mut();
            if free.len() < KEEP {
                free.push(buf);
            }
        });
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_buffers_are_distinct_and_reused() {
        let (outer, inner) = with::<f32, _>(1000, |a| {
            a.fill(1.0);
            let inner = with::<f64, _>(300, |b| {
                b.fill(2.0);
                b.as_ptr() as usize
            });
            assert!(a.iter().all(|&v| v == 1.0), "a nested buffer overlapped the outer one");
            (a.as_ptr() as usize, inner)
        });
        assert_ne!(outer, inner);
        // Both went back to this thread's free list, and a fitting request reuses one.
        let again = with::<f32, _>(500, |a| a.as_ptr() as usize);
        assert!(again == outer || again == inner, "the buffer was not reused");
        assert_eq!(with::<f64, _>(0, |a| a.len()), 0);
    }
}
