//! Device memory: the `cudaMalloc` layer.
//!
//! Each device owns one contiguous virtual address range reserved with
//! `mmap(MAP_NORESERVE)`; pages are committed by the kernel on first touch.
//! Because the ranges never overlap, "which device owns this pointer" is a
//! range check, and no device pointer can alias a host allocation.
//! Inside the range an address-ordered first-fit free list hands out
//! [`ALIGNMENT`]-aligned blocks and coalesces neighbours on free. Freed pages
//! are given back to the OS with `MADV_DONTNEED`, so device memory that is
//! not reserved does not cost host RAM.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Alignment of every device allocation in bytes (matches the 512-byte
/// rounding of CUDA's caching allocator, enough for any SIMD width).
pub const ALIGNMENT: usize = 512;

/// Size of an x86-64 transparent huge page (2 MiB); device ranges start on one.
pub const HUGE_PAGE: usize = 2 << 20;

/// Rounds `bytes` up to a multiple of [`ALIGNMENT`] (0 stays 0).
pub fn round_up(bytes: usize) -> usize {
    bytes.div_ceil(ALIGNMENT).saturating_mul(ALIGNMENT)
}

/// One device's address range and its allocation map. Not thread-safe on its
/// own: the owning [`crate::Device`] wraps it in a mutex.
pub struct DeviceMemory {
    device: usize,
    /// The mapping as `mmap` returned it (`raw`, `mapped` bytes); `base` is inside it.
    raw: usize,
    mapped: usize,
    base: usize,
    capacity: usize,
    /// Free extents, keyed by offset from `base`, value = length.
    free: BTreeMap<usize, usize>,
    /// Live allocations, keyed by offset from `base`, value = length.
    live: BTreeMap<usize, usize>,
    used: usize,
}

// SAFETY: the raw range is only touched through offsets guarded by the owner's mutex.
unsafe impl Send for DeviceMemory {}

impl DeviceMemory {
    /// Reserves `capacity` bytes of address space for `device`.
    ///
    /// Errors: [`Error::Reserve`] when the OS refuses the mapping.
    pub fn reserve(device: usize, capacity: usize) -> Result<DeviceMemory> {
        let capacity = capacity / ALIGNMENT * ALIGNMENT;
        // One huge page more than asked, so that the range can start on a huge-page boundary.
        let mapped = capacity + HUGE_PAGE;
        // SAFETY: anonymous private mapping with no fixed address; the result is checked.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(Error::Reserve {
                device,
                bytes: capacity,
                reason: std::io::Error::last_os_error().to_string(),
            });
        }
        let base = (raw as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // Transparent huge pages for the device range, as a GPU maps its memory in
        // large pages: a kernel streaming a 40 MB tensor otherwise takes a TLB miss
        // every 4 KiB. Only a hint: where THP is off, the call fails or is ignored
        // and the range keeps 4 KiB pages.
        // SAFETY: [base, base + capacity) lies inside the mapping just made.
        unsafe { libc::madvise(base as *mut libc::c_void, capacity, libc::MADV_HUGEPAGE) };
        let mut free = BTreeMap::new();
        free.insert(0, capacity);
        Ok(DeviceMemory { device, raw: raw as usize, mapped, base, capacity, free, live: BTreeMap::new(), used: 0 })
    }

    /// First address of the device's range.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Capacity of the device in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes currently handed out by [`DeviceMemory::malloc`].
    pub fn used(&self) -> usize {
        self.used
    }

    /// True when `ptr` lies anywhere inside this device's address range.
    pub fn contains(&self, ptr: usize) -> bool {
        ptr >= self.base && ptr < self.base + self.capacity
    }

    /// Allocates `bytes` (rounded up to [`ALIGNMENT`], at least one unit).
    /// Returns the device pointer.
    ///
    /// Errors: [`Error::OutOfMemory`] (with `allocated`/`reserved` left 0 for
    /// the caching layer to fill) when no free extent is large enough.
    pub fn malloc(&mut self, bytes: usize) -> Result<usize> {
        let size = round_up(bytes.max(1));
        let found = self.free.iter().find(|(_, &len)| len >= size).map(|(&off, &len)| (off, len));
        let Some((off, len)) = found else {
            return Err(Error::OutOfMemory {
                device: self.device,
                requested: bytes,
                allocated: 0,
                reserved: self.used,
                capacity: self.capacity,
            });
        };
        self.free.remove(&off);
        if len > size {
            self.free.insert(off + size, len - size);
        }
        self.live.insert(off, size);
        self.used += size;
        Ok(self.base + off)
    }

    /// Returns the allocation starting at `ptr` to the free list.
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not the start of a live allocation.
    pub fn free(&mut self, ptr: usize) -> Result<()> {
        let off = ptr.checked_sub(self.base).ok_or(Error::InvalidPointer { ptr })?;
        let size = self.live.remove(&off).ok_or(Error::InvalidPointer { ptr })?;
        self.used -= size;
        self.release_pages(off, size);
        let (mut start, mut len) = (off, size);
        if let Some((&prev, &plen)) = self.free.range(..start).next_back() {
            if prev + plen == start {
                self.free.remove(&prev);
                start = prev;
                len += plen;
            }
        }
        if let Some(&nlen) = self.free.get(&(off + size)) {
            self.free.remove(&(off + size));
            len += nlen;
        }
        self.free.insert(start, len);
        Ok(())
    }

    /// Start and length of the live allocation containing `ptr`, if any.
    pub fn allocation_of(&self, ptr: usize) -> Option<(usize, usize)> {
        let off = ptr.checked_sub(self.base)?;
        let (&start, &len) = self.live.range(..=off).next_back()?;
        (off < start + len).then_some((self.base + start, len))
    }

    /// Gives whole pages inside a freed extent back to the OS so that freed
    /// device memory stops counting against host RAM.
    fn release_pages(&self, off: usize, size: usize) {
        const PAGE: usize = 4096;
        let start = (self.base + off).div_ceil(PAGE) * PAGE;
        let end = (self.base + off + size) / PAGE * PAGE;
        if end > start && end - start >= 64 * PAGE {
            // SAFETY: [start, end) lies inside our own mapping and is no longer handed out.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range mmap returned.
        unsafe { libc::munmap(self.raw as *mut libc::c_void, self.mapped) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_range_starts_on_a_huge_page_and_is_usable() {
        let mut m = DeviceMemory::reserve(0, 8 << 20).unwrap();
        assert_eq!(m.base() % HUGE_PAGE, 0);
        assert!(m.raw <= m.base() && m.base() + m.capacity() <= m.raw + m.mapped);
        let p = m.malloc(4 << 20).unwrap();
        // SAFETY: p..p + 4 MiB was just allocated inside the mapping.
        unsafe {
            std::ptr::write_bytes(p as *mut u8, 7, 4 << 20);
            assert_eq!(*((p + (4 << 20) - 1) as *const u8), 7);
        }
        m.free(p).unwrap();
    }

    #[test]
    fn malloc_free_coalesce_and_lookup() {
        let mut m = DeviceMemory::reserve(0, 1 << 20).unwrap();
        let a = m.malloc(100).unwrap();
        let b = m.malloc(1000).unwrap();
        let c = m.malloc(ALIGNMENT).unwrap();
        assert_eq!(a % ALIGNMENT, 0);
        assert_eq!(b - a, ALIGNMENT);
        assert_eq!(c - b, 2 * ALIGNMENT);
        assert_eq!(m.used(), 4 * ALIGNMENT);
        assert_eq!(m.allocation_of(b + 999), Some((b, 2 * ALIGNMENT)));
        assert_eq!(m.allocation_of(c + ALIGNMENT), None);
        m.free(b).unwrap();
        assert_eq!(m.allocation_of(b), None);
        m.free(a).unwrap();
        m.free(c).unwrap();
        assert_eq!(m.used(), 0);
        assert_eq!(m.free.len(), 1, "free list must coalesce back to one extent");
        assert!(matches!(m.free(a), Err(Error::InvalidPointer { .. })));
    }

    #[test]
    fn out_of_memory_reports_sizes() {
        let mut m = DeviceMemory::reserve(1, 1 << 20).unwrap();
        let _a = m.malloc(1 << 19).unwrap();
        match m.malloc(1 << 20) {
            Err(Error::OutOfMemory { device, requested, reserved, capacity, .. }) => {
                assert_eq!((device, requested, reserved, capacity), (1, 1 << 20, 1 << 19, 1 << 20));
            }
            other => panic!("expected OOM, got {other:?}"),
        }
    }

    #[test]
    fn memory_is_writable_and_released() {
        let mut m = DeviceMemory::reserve(0, 8 << 20).unwrap();
        let p = m.malloc(4 << 20).unwrap();
        // SAFETY: p points to 4 MiB we own.
        unsafe {
            std::ptr::write_bytes(p as *mut u8, 7, 4 << 20);
            assert_eq!(*((p + 12345) as *const u8), 7);
        }
        m.free(p).unwrap();
        assert!(m.contains(p));
    }
}
