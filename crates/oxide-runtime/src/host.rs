//! Pinned host memory (the `cudaMallocHost` layer).
//!
//! The emulated device reads host memory directly, so "pinned" means
//! allocated here, page-aligned and tracked: [`HostMemory::contains`]
//! answers `is_pinned` for any pointer inside a live pinned block.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::{Error, Result};

const PAGE: usize = 4096;

/// Registry of live pinned host allocations.
#[derive(Default)]
pub struct HostMemory {
    live: Mutex<BTreeMap<usize, usize>>,
    /// Bytes currently pinned.
    bytes: std::sync::atomic::AtomicUsize,
}

impl HostMemory {
    /// `cudaMallocHost`: `bytes` of page-aligned host memory (null for 0 bytes).
    ///
    /// Errors: [`Error::HostOutOfMemory`] when the host allocator fails.
    pub fn malloc(&self, bytes: usize) -> Result<usize> {
        if bytes == 0 {
            return Ok(0);
        }
        let layout = Layout::from_size_align(bytes, PAGE).map_err(|_| self.oom(bytes))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) } as usize;
        if ptr == 0 {
            return Err(self.oom(bytes));
        }
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(ptr, bytes);
        self.bytes.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(ptr)
    }

    fn oom(&self, bytes: usize) -> Error {
        Error::HostOutOfMemory { requested: bytes, pinned: self.pinned_bytes() }
    }

    /// `cudaFreeHost`.
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not the start of a pinned block.
    pub fn free(&self, ptr: usize) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let bytes =
            self.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&ptr).ok_or(Error::InvalidPointer { ptr })?;
        self.bytes.fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: ptr was returned by alloc with exactly this layout.
        unsafe { std::alloc::dealloc(ptr as *mut u8, Layout::from_size_align_unchecked(bytes, PAGE)) };
        Ok(())
    }

    /// True when `ptr` lies inside a live pinned block.
    pub fn contains(&self, ptr: usize) -> bool {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.range(..=ptr).next_back().is_some_and(|(&start, &len)| ptr < start + len)
    }

    /// Number of live pinned blocks.
    pub fn live_blocks(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Bytes currently pinned.
    pub fn pinned_bytes(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_lifecycle() {
        let h = HostMemory::default();
        let p = h.malloc(10_000).unwrap();
        assert_eq!(p % PAGE, 0);
        assert!(h.contains(p) && h.contains(p + 9_999) && !h.contains(p + 10_000));
        assert_eq!((h.pinned_bytes(), h.live_blocks()), (10_000, 1));
        h.free(p).unwrap();
        assert!(!h.contains(p));
        assert!(matches!(h.free(p), Err(Error::InvalidPointer { .. })));
        assert_eq!(h.malloc(0).unwrap(), 0);
    }
}
