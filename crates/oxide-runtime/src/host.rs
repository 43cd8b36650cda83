//! Pinned host memory (the `cudaMallocHost` layer).
//!
//! The emulated device reads host memory directly, so "pinned" means
//! allocated here, page-aligned and tracked: [`HostMemory::contains`]
//! answers `is_pinned` for any pointer inside a live pinned block.
//!
//! Copies between pinned memory and a device are queued on a stream (the host
//! does not wait), so a block freed while such a copy is queued must outlive
//! it: [`HostMemory::record`] attaches a [`Fence`] to the block (CUDA's
//! caching host allocator records an event), and a freed block with fences
//! still pending is released only once they have passed.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::stream::Fence;

const PAGE: usize = 4096;

/// A live pinned block: its length and the fences of the copies queued on it.
#[derive(Default)]
struct Block {
    len: usize,
    fences: Vec<Fence>,
}

/// Registry of live pinned host allocations.
#[derive(Default)]
pub struct HostMemory {
    live: Mutex<BTreeMap<usize, Block>>,
    /// Freed blocks whose queued copies have not all run: (address, length, fences).
    pending: Mutex<Vec<(usize, usize, Vec<Fence>)>>,
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
        self.reclaim();
        let layout = Layout::from_size_align(bytes, PAGE).map_err(|_| self.oom(bytes))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) } as usize;
        if ptr == 0 {
            return Err(self.oom(bytes));
        }
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(ptr, Block { len: bytes, fences: Vec::new() });
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
        self.reclaim();
        let block =
            self.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&ptr).ok_or(Error::InvalidPointer { ptr })?;
        if block.fences.iter().all(Fence::passed) {
            self.release(ptr, block.len);
        } else {
            self.pending.lock().unwrap_or_else(|e| e.into_inner()).push((ptr, block.len, block.fences));
        }
        Ok(())
    }

    /// Attaches `fence` (a copy queued on a stream) to the live block holding
    /// `ptr`: the block is not released before the fence has passed. A pointer
    /// outside every pinned block is ignored.
    pub fn record(&self, ptr: usize, fence: Fence) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, block)) = live.range_mut(..=ptr).next_back().filter(|(&start, b)| ptr < start + b.len) {
            block.fences.retain(|f| !f.passed());
            block.fences.push(fence);
        }
    }

    /// Releases the freed blocks whose fences have all passed.
    fn reclaim(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.is_empty() {
            return;
        }
        let (done, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut *pending).into_iter().partition(|(_, _, fences)| fences.iter().all(Fence::passed));
        *pending = waiting;
        drop(pending);
        for (ptr, len, _) in done {
            self.release(ptr, len);
        }
    }

    fn release(&self, ptr: usize, bytes: usize) {
        self.bytes.fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `ptr` came from `malloc` with this size and alignment, was removed from
        // the registry (so it is released once), and no queued copy uses it any more.
        unsafe { std::alloc::dealloc(ptr as *mut u8, Layout::from_size_align_unchecked(bytes, PAGE)) };
    }

    /// True when `ptr` lies inside a live pinned block.
    pub fn contains(&self, ptr: usize) -> bool {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.range(..=ptr).next_back().is_some_and(|(&start, b)| ptr < start + b.len)
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

    #[test]
    fn a_block_with_a_queued_copy_outlives_its_free() {
        use crate::stream::{Record, Streams};
        let (h, streams) = (HostMemory::default(), Streams::new(0));
        let gate = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let g = std::sync::Arc::clone(&gate);
        streams
            .enqueue(
                1,
                Record::Work(crate::stream::Work::new(move || {
                    while !g.load(std::sync::atomic::Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    Ok(())
                })),
            )
            .unwrap();
        let p = h.malloc(8192).unwrap();
        h.record(p + 100, streams.fence(1).unwrap());
        h.free(p).unwrap();
        assert!(!h.contains(p), "freed for its user");
        assert_eq!(h.pinned_bytes(), 8192, "but kept while the copy is queued");
        gate.store(true, std::sync::atomic::Ordering::Release);
        streams.synchronize(1).unwrap();
        h.malloc(0).unwrap();
        let q = h.malloc(16).unwrap();
        assert_eq!(h.pinned_bytes(), 16, "released once the fence passed");
        h.free(q).unwrap();
    }
}
