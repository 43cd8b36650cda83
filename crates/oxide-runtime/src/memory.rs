//! Device memory: the `cudaMalloc` layer.
//!
//! Each device owns one contiguous virtual address range reserved with
//! `mmap(MAP_NORESERVE)`, [`ADDRESS_SPACE_FACTOR`] times larger than the
//! device's capacity. The bytes live in a sparse memory file (`memfd`) of the
//! range's size, mapped shared over the range: pages are committed on first
//! touch and punched out of the file when their extent is freed. The file is
//! what lets another process map the same device memory (the IPC of
//! `torch.multiprocessing`, see [`DeviceMemory::map_file`]), as any CUDA
//! allocation can be opened by another process. Capacity is
//! therefore an accounting limit (bytes handed out), not the size of the
//! range, as with CUDA's expandable segments: a request that fits in the
//! free capacity finds a hole in the much larger range even when earlier
//! frees have left the low part of it fragmented, so a program never gets
//! out-of-memory while the device still reports enough free memory (bar
//! address-space fragmentation far beyond what real allocation patterns
//! produce; the error then says so and names the largest free extent).
//! Because the ranges never overlap, "which device owns this pointer" is a
//! range check, and no device pointer can alias a host allocation.
//! Inside the range an address-ordered first-fit free list hands out
//! [`ALIGNMENT`]-aligned blocks and coalesces neighbours on free.
//!
//! A *guarded* range ([`DeviceMemory::reserve_guarded`], the sanitizer's
//! host-access detector) keeps the device addresses inaccessible to the host,
//! as a discrete accelerator's are: the reservation stays `PROT_NONE`, and the
//! memory file is mapped read-write at another address, the *host alias*. Kernels and copies reach a device address through
//! [`DeviceMemory::host_address`] (a constant offset per device); any other host
//! code that dereferences a device pointer faults (see [`crate::guard`]).

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Alignment of every device allocation in bytes (matches the 512-byte
/// rounding of CUDA's caching allocator, enough for any SIMD width).
pub const ALIGNMENT: usize = 512;

/// Size of an x86-64 transparent huge page (2 MiB); device ranges start on one.
pub const HUGE_PAGE: usize = 2 << 20;

/// Size of the address range reserved per device, in multiples of its
/// capacity. The worst case of address-ordered first fit under adversarial
/// patterns grows with the live bytes times `log2(largest / smallest block)`
/// (Robson, 1977); with 512-byte blocks that logarithm stays below 32 for any
/// capacity under 2 TiB. Reserving costs only page-table space for touched
/// pages. Where the OS refuses a range this large, the factor is halved
/// until it accepts one (at least the capacity itself).
pub const ADDRESS_SPACE_FACTOR: usize = 32;

/// Largest address range reserved for one device (16 TiB), so that many
/// large devices still fit a 47-bit user address space.
pub const MAX_SPAN: usize = 1 << 44;

const PAGE: usize = 4096;

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
    /// Bytes of address space usable from `base`.
    span: usize,
    /// Bytes that may be handed out at once (the device's memory size).
    capacity: usize,
    /// Free extents, keyed by offset from `base`, value = length.
    free: BTreeMap<usize, usize>,
    /// Live allocations, keyed by offset from `base`, value = length.
    live: BTreeMap<usize, usize>,
    used: usize,
    /// The memory file holding the range's bytes.
    file: MemoryFile,
    /// Extents mapping another process's memory file ([`DeviceMemory::map_file`]),
    /// keyed by offset from `base`, value = length. Also in `live`, not in `used`.
    imported: BTreeMap<usize, usize>,
}

/// The bytes of a range: a memory file of `span` bytes, mapped read-write at
/// `alias` (the device addresses themselves, unless the range is guarded).
struct MemoryFile {
    fd: libc::c_int,
    alias: usize,
    guarded: bool,
}

// SAFETY: the raw range is only touched through offsets guarded by the owner's mutex.
unsafe impl Send for DeviceMemory {}

impl DeviceMemory {
    /// Reserves address space for a device of `capacity` bytes: up to
    /// [`ADDRESS_SPACE_FACTOR`] times `capacity` (see there).
    ///
    /// Errors: [`Error::Reserve`] when the OS refuses even `capacity` bytes.
    pub fn reserve(device: usize, capacity: usize) -> Result<DeviceMemory> {
        Self::reserve_in(device, capacity, false)
    }

    /// [`DeviceMemory::reserve`] for a guarded range (see the module documentation).
    ///
    /// Errors: [`Error::Reserve`] when the OS refuses the mappings or the memory file.
    pub fn reserve_guarded(device: usize, capacity: usize) -> Result<DeviceMemory> {
        Self::reserve_in(device, capacity, true)
    }

    fn reserve_in(device: usize, capacity: usize, guarded: bool) -> Result<DeviceMemory> {
        let capacity = capacity / ALIGNMENT * ALIGNMENT;
        let mut span = capacity.saturating_mul(ADDRESS_SPACE_FACTOR).min(MAX_SPAN).max(capacity);
        loop {
            match Self::reserve_span(device, capacity, span, guarded) {
                Err(Error::Reserve { .. }) if span / 2 >= capacity && span > capacity => {
                    span = (span / 2).max(capacity)
                }
                other => return other,
            }
        }
    }

    /// Reserves `span` bytes of address space (at least `capacity`) for a
    /// device that may hand out `capacity` bytes at once; `guarded` as for
    /// [`DeviceMemory::reserve_guarded`].
    ///
    /// Errors: [`Error::Reserve`] when the OS refuses the mapping.
    pub fn reserve_span(device: usize, capacity: usize, span: usize, guarded: bool) -> Result<DeviceMemory> {
        let capacity = capacity / ALIGNMENT * ALIGNMENT;
        let span = (span.max(capacity) / ALIGNMENT) * ALIGNMENT;
        let refused = |what: &str| Error::Reserve {
            device,
            bytes: span,
            reason: format!("{what}: {}", std::io::Error::last_os_error()),
        };
        // One huge page more than asked, so that the range can start on a huge-page boundary.
        let mapped = span + HUGE_PAGE;
        // The reservation itself is never accessible: the memory file is mapped over it
        // (or, guarded, at an alias), and the slack around it stays unused.
        // SAFETY: anonymous private mapping with no fixed address; the result is checked.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(refused("mmap"));
        }
        let base = (raw as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let file = match MemoryFile::create(device, span, (!guarded).then_some(base)) {
            Ok(f) => f,
            Err(what) => {
                let e = refused(what);
                // SAFETY: unmapping exactly the range mmap returned above.
                unsafe { libc::munmap(raw, mapped) };
                return Err(e);
            }
        };
        let mut free = BTreeMap::new();
        free.insert(0, span);
        Ok(DeviceMemory {
            device,
            raw: raw as usize,
            mapped,
            base,
            span,
            capacity,
            free,
            live: BTreeMap::new(),
            used: 0,
            file,
            imported: BTreeMap::new(),
        })
    }

    /// True for a guarded range (see the module documentation).
    pub fn is_guarded(&self) -> bool {
        self.file.guarded
    }

    /// The host alias of the range's first byte: where kernels reach device
    /// memory. `base()` itself for a range that is not guarded.
    pub fn alias_base(&self) -> usize {
        self.file.alias
    }

    /// The address at which host code (a kernel, a copy) reads and writes the
    /// device address `ptr` of this range.
    pub fn host_address(&self, ptr: usize) -> usize {
        ptr - self.base + self.alias_base()
    }

    /// Index of the device this memory belongs to.
    pub fn device(&self) -> usize {
        self.device
    }

    /// First address of the device's range.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Bytes of address space in the device's range (at least the capacity).
    pub fn span(&self) -> usize {
        self.span
    }

    /// Capacity of the device in bytes: the most that can be handed out at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes currently handed out by [`DeviceMemory::malloc`].
    pub fn used(&self) -> usize {
        self.used
    }

    /// Length of the largest free extent of the address range.
    pub fn largest_free_extent(&self) -> usize {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// True when `ptr` lies anywhere inside this device's address range.
    pub fn contains(&self, ptr: usize) -> bool {
        ptr >= self.base && ptr < self.base + self.span
    }

    /// Allocates `bytes` (rounded up to [`ALIGNMENT`], at least one unit).
    /// Returns the device pointer.
    ///
    /// Errors: [`Error::OutOfMemory`] (with `allocated`/`reserved` left for
    /// the caching layer to fill) when the request exceeds the free capacity,
    /// or, with `largest_free_block` set, when the capacity would allow it but
    /// no free extent of the address range is large enough.
    pub fn malloc(&mut self, bytes: usize) -> Result<usize> {
        let size = round_up(bytes.max(1));
        let (device, reserved, capacity) = (self.device, self.used, self.capacity);
        let oom = |largest_free_block| Error::OutOfMemory {
            device,
            requested: bytes,
            allocated: 0,
            reserved,
            capacity,
            largest_free_block,
            limit: None,
        };
        if size > self.capacity - self.used {
            return Err(oom(None));
        }
        let Some(off) = self.take(size, ALIGNMENT) else {
            return Err(oom(Some(self.largest_free_extent())));
        };
        self.live.insert(off, size);
        self.used += size;
        Ok(self.base + off)
    }

    /// Takes `size` bytes at an `align`-aligned offset out of the first free
    /// extent that holds them (address-ordered first fit); None when none does.
    fn take(&mut self, size: usize, align: usize) -> Option<usize> {
        let (off, len, start) = self.free.iter().find_map(|(&off, &len)| {
            let start = off.div_ceil(align) * align;
            (start + size <= off + len).then_some((off, len, start))
        })?;
        self.free.remove(&off);
        if start > off {
            self.free.insert(off, start - off);
        }
        if start + size < off + len {
            self.free.insert(start + size, off + len - start - size);
        }
        Some(start)
    }

    /// Puts the extent `[off, off + size)` back on the free list, merged with
    /// free neighbours; returns the merged extent.
    fn give_back(&mut self, off: usize, size: usize) -> (usize, usize) {
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
        (start, len)
    }

    /// Returns the allocation starting at `ptr` to the free list and its
    /// pages to the OS.
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not the start of a live allocation.
    pub fn free(&mut self, ptr: usize) -> Result<()> {
        let off = ptr.checked_sub(self.base).ok_or(Error::InvalidPointer { ptr })?;
        if self.imported.contains_key(&off) {
            return Err(Error::InvalidPointer { ptr });
        }
        let size = self.live.remove(&off).ok_or(Error::InvalidPointer { ptr })?;
        self.used -= size;
        let (start, len) = self.give_back(off, size);
        // The block's pages, plus the pages it shared with now-free neighbours.
        let lo = (off / PAGE * PAGE).max(start);
        let hi = (off + size).div_ceil(PAGE).saturating_mul(PAGE).min(start + len);
        self.release_pages(lo, hi);
        Ok(())
    }

    /// Start and length of the live allocation containing `ptr`, if any.
    pub fn allocation_of(&self, ptr: usize) -> Option<(usize, usize)> {
        let off = ptr.checked_sub(self.base)?;
        let (&start, &len) = self.live.range(..=off).next_back()?;
        (off < start + len).then_some((self.base + start, len))
    }

    /// Gives the whole pages inside the free offsets `[lo, hi)` back to the OS,
    /// so that freed device memory stops counting against host RAM: what the
    /// process holds stays bounded by the bytes in use, however scattered
    /// over the range they are.
    fn release_pages(&self, lo: usize, hi: usize) {
        let start = (self.base + lo).div_ceil(PAGE) * PAGE;
        let end = (self.base + hi) / PAGE * PAGE;
        if end <= start {
            return;
        }
        // MADV_DONTNEED on a shared mapping only drops the page-table entries; the
        // file keeps the pages. Punching a hole gives them back.
        // SAFETY: the file range [start - base, end - base) lies inside the file and no
        // live allocation overlaps it.
        unsafe {
            libc::fallocate(
                self.file.fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (start - self.base) as libc::off_t,
                (end - start) as libc::off_t,
            );
        }
    }

    /// The memory file holding this range's bytes (`cudaIpcGetMemHandle`'s
    /// handle): device address `ptr` is at byte [`DeviceMemory::file_offset`] of it.
    /// The descriptor stays owned by this range.
    pub fn file_descriptor(&self) -> libc::c_int {
        self.file.fd
    }

    /// Where the device address `ptr` of this range lies in its memory file.
    pub fn file_offset(&self, ptr: usize) -> usize {
        ptr - self.base
    }

    /// True when `ptr` lies in an extent mapped by [`DeviceMemory::map_file`].
    pub fn is_imported(&self, ptr: usize) -> bool {
        let Some(off) = ptr.checked_sub(self.base) else { return false };
        self.imported.range(..=off).next_back().is_some_and(|(&start, &len)| off < start + len)
    }

    /// `cudaIpcOpenMemHandle`: maps `bytes` at `file_offset` of another
    /// process's device memory file `fd` into a free extent of this range, and
    /// returns the device address of the byte at `file_offset`. The extent
    /// covers whole pages, does not count against the capacity (the memory is
    /// the other process's), and is a live allocation for copies and kernels
    /// until [`DeviceMemory::unmap_file`]. `fd` may be closed afterwards.
    ///
    /// Errors: [`Error::Ipc`] when no extent of the range is free or the OS
    /// refuses the mapping (a file shorter than `file_offset + bytes`).
    pub fn map_file(&mut self, fd: libc::c_int, file_offset: usize, bytes: usize) -> Result<usize> {
        let lo = file_offset / PAGE * PAGE;
        let len = (file_offset + bytes.max(1)).div_ceil(PAGE) * PAGE - lo;
        let Some(off) = self.take(len, PAGE) else {
            return Err(Error::Ipc {
                reason: format!(
                    "no free extent of {len} bytes left in oxide:{}'s address range to map it",
                    self.device
                ),
            });
        };
        // SAFETY: [alias + off, + len) lies inside this range's mapping of its own file
        // and is free (taken above), so replacing its pages harms no allocation; the
        // kernel checks fd and the file range.
        let r = unsafe {
            libc::mmap(
                (self.file.alias + off) as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                lo as libc::off_t,
            )
        };
        if r == libc::MAP_FAILED {
            let reason = format!("could not map the memory: {}", std::io::Error::last_os_error());
            // A failed MAP_FIXED may have unmapped the extent: map our own file back.
            self.remap_own(off, len);
            self.give_back(off, len);
            return Err(Error::Ipc { reason });
        }
        self.live.insert(off, len);
        self.imported.insert(off, len);
        Ok(self.base + off + (file_offset - lo))
    }

    /// Unmaps the extent [`DeviceMemory::map_file`] mapped around `ptr` (any
    /// address inside it) and returns it to the free list.
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not inside such an extent.
    pub fn unmap_file(&mut self, ptr: usize) -> Result<()> {
        let off = ptr.checked_sub(self.base).ok_or(Error::InvalidPointer { ptr })?;
        let (start, len) = self
            .imported
            .range(..=off)
            .next_back()
            .map(|(&s, &l)| (s, l))
            .filter(|&(s, l)| off < s + l)
            .ok_or(Error::InvalidPointer { ptr })?;
        self.imported.remove(&start);
        self.live.remove(&start);
        self.remap_own(start, len);
        self.give_back(start, len);
        Ok(())
    }

    /// Maps this range's own file back over the page-aligned extent `[off, off + len)`.
    fn remap_own(&self, off: usize, len: usize) {
        // SAFETY: the extent lies inside the range's alias mapping and holds no
        // allocation of this range; its file pages are holes (freed extents are punched).
        unsafe {
            libc::mmap(
                (self.file.alias + off) as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.file.fd,
                off as libc::off_t,
            );
        }
    }
}

impl MemoryFile {
    /// A memory file of `span` bytes (sparse: pages are allocated on first
    /// write), mapped read-write at `at` (the device range, over its
    /// reservation) or, for a guarded range (`at` None), at an alias of the
    /// kernel's choosing. The mapping is left out of a forked child, so that a
    /// child cannot scribble on the parent's device memory through the shared
    /// file. Errors: the name of the call the OS refused.
    fn create(device: usize, span: usize, at: Option<usize>) -> std::result::Result<MemoryFile, &'static str> {
        let name = std::ffi::CString::new(format!("oxide:{device}")).unwrap_or_default();
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err("memfd_create");
        }
        // SAFETY: fd is the memory file just created.
        if unsafe { libc::ftruncate(fd, span as libc::off_t) } != 0 {
            // SAFETY: closing the file we opened.
            unsafe { libc::close(fd) };
            return Err("ftruncate");
        }
        let (addr, fixed) = match at {
            Some(a) => (a as *mut libc::c_void, libc::MAP_FIXED),
            None => (std::ptr::null_mut(), 0),
        };
        // SAFETY: a shared mapping of the whole file, either at an address of the
        // kernel's choosing or over [at, at + span), which lies inside the caller's
        // fresh reservation.
        let alias = unsafe {
            libc::mmap(
                addr,
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE | fixed,
                fd,
                0,
            )
        };
        if alias == libc::MAP_FAILED {
            // SAFETY: closing the file we opened.
            unsafe { libc::close(fd) };
            return Err("mmap of the memory file");
        }
        // Huge pages for the device range, as a GPU maps its memory in large pages: a
        // kernel streaming a 40 MB tensor otherwise takes a TLB miss every 4 KiB. Only a
        // hint, honoured where shared memory may use transparent huge pages
        // (/sys/kernel/mm/transparent_hugepage/shmem_enabled); elsewhere the range keeps
        // 4 KiB pages, as CPU PyTorch's tensors do (ARCHITECTURE.md measures the cost).
        // SAFETY: advice on the mapping just made.
        unsafe {
            libc::madvise(alias, span, libc::MADV_DONTFORK);
            libc::madvise(alias, span, libc::MADV_HUGEPAGE);
        }
        Ok(MemoryFile { fd, alias: alias as usize, guarded: at.is_none() })
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping the alias made in MemoryFile::create (a no-op when it is part
        // of the reservation, unmapped next), closing its file, then unmapping exactly
        // the range mmap returned.
        unsafe {
            if self.file.guarded {
                libc::munmap(self.file.alias as *mut libc::c_void, self.span);
            }
            libc::close(self.file.fd);
            libc::munmap(self.raw as *mut libc::c_void, self.mapped);
        }
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
            Err(Error::OutOfMemory { device, requested, reserved, capacity, largest_free_block, .. }) => {
                assert_eq!((device, requested, reserved, capacity), (1, 1 << 20, 1 << 19, 1 << 20));
                assert_eq!(largest_free_block, None, "over capacity: not a fragmentation failure");
            }
            other => panic!("expected OOM, got {other:?}"),
        }
    }

    #[test]
    fn capacity_is_accounting_and_does_not_fragment() {
        const MIB: usize = 1 << 20;
        let mut m = DeviceMemory::reserve(0, 64 * MIB).unwrap();
        assert!(m.span() >= 2 * m.capacity(), "address range larger than the capacity");
        let a = m.malloc(16 * MIB).unwrap();
        let b = m.malloc(16 * MIB).unwrap();
        let c = m.malloc(16 * MIB).unwrap();
        m.free(b).unwrap();
        // 32 MiB free, no hole of 24 MiB below `c`: a flat 64 MiB range would fail here.
        let d = m.malloc(24 * MIB).unwrap();
        assert!(m.contains(d) && m.contains(d + 24 * MIB - 1));
        assert_eq!(m.used(), 56 * MIB);
        // SAFETY: d..d + 24 MiB was just allocated inside the mapping.
        unsafe { std::ptr::write_bytes(d as *mut u8, 3, 24 * MIB) };
        // Capacity still bounds what is handed out, wherever the holes are.
        match m.malloc(9 * MIB) {
            Err(Error::OutOfMemory { requested, reserved, capacity, largest_free_block: None, .. }) => {
                assert_eq!((requested, reserved, capacity), (9 * MIB, 56 * MIB, 64 * MIB));
            }
            other => panic!("expected OOM, got {other:?}"),
        }
        let e = m.malloc(8 * MIB).unwrap();
        for p in [a, c, d, e] {
            m.free(p).unwrap();
        }
        assert_eq!(m.used(), 0);
        assert_eq!(m.free.len(), 1, "free list coalesces back to the whole range");
        assert_eq!(m.largest_free_extent(), m.span());
    }

    #[test]
    fn address_space_fragmentation_is_reported() {
        // A range no larger than the capacity can still fragment: the error says so.
        let mut m = DeviceMemory::reserve_span(2, 1 << 20, 1 << 20, false).unwrap();
        let a = m.malloc(256 << 10).unwrap();
        let b = m.malloc(256 << 10).unwrap();
        let _c = m.malloc(256 << 10).unwrap();
        m.free(b).unwrap();
        assert!(m.contains(a));
        match m.malloc(384 << 10) {
            Err(e @ Error::OutOfMemory { largest_free_block: Some(262144), device: 2, .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("393216 bytes") && msg.contains("oxide:2"), "{msg}");
                assert!(msg.contains("largest free block is 262144 bytes"), "{msg}");
                assert!(msg.contains("fragment"), "{msg}");
            }
            other => panic!("expected a fragmentation OOM, got {other:?}"),
        }
    }

    #[test]
    fn freed_pages_go_back_to_the_os() {
        let mut m = DeviceMemory::reserve(0, 8 << 20).unwrap();
        let p = m.malloc(64 << 10).unwrap();
        let q = m.malloc(64 << 10).unwrap();
        // SAFETY: both blocks were just allocated inside the mapping.
        unsafe {
            std::ptr::write_bytes(p as *mut u8, 9, 64 << 10);
            std::ptr::write_bytes(q as *mut u8, 9, 64 << 10);
        }
        m.free(p).unwrap();
        let p2 = m.malloc(64 << 10).unwrap();
        assert_eq!(p2, p, "first fit reuses the freed extent");
        // SAFETY: p2 is live; MADV_DONTNEED pages read back as zero, kept pages as 9.
        unsafe {
            assert_eq!(*(p2 as *const u8), 0, "the freed block's pages were released");
            assert_eq!(*(q as *const u8), 9, "the neighbour's data is intact");
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

    #[test]
    fn another_range_maps_the_same_bytes_through_the_memory_file() {
        // Two ranges stand for two processes: the receiver maps the sender's file.
        let mut sender = DeviceMemory::reserve(0, 8 << 20).unwrap();
        let mut receiver = DeviceMemory::reserve_guarded(0, 8 << 20).unwrap();
        let _first = sender.malloc(1000).unwrap();
        let p = sender.malloc(10_000).unwrap();
        // SAFETY: p..p + 10000 was just allocated in the (unguarded) sender.
        unsafe { std::ptr::write_bytes(p as *mut u8, 4, 10_000) };
        let q = receiver.map_file(sender.file_descriptor(), sender.file_offset(p), 10_000).unwrap();
        assert!(receiver.contains(q) && receiver.is_imported(q) && receiver.is_imported(q + 9_999));
        assert_eq!(q % PAGE, p % PAGE, "the offset inside the page is kept");
        assert_eq!(receiver.used(), 0, "mapped memory is the sender's, not the receiver's");
        assert!(receiver.allocation_of(q + 9_999).is_some(), "a live allocation for copies");
        let hq = receiver.host_address(q);
        // SAFETY: hq..hq + 10000 maps the sender's block; p is live in the sender.
        unsafe {
            assert_eq!(*((hq + 9_999) as *const u8), 4, "the receiver reads the sender's bytes");
            *(hq as *mut u8) = 8;
            assert_eq!(*(p as *const u8), 8, "the sender sees the receiver's write");
        }
        assert!(matches!(receiver.free(q), Err(Error::InvalidPointer { .. })), "not the receiver's to free");
        assert!(!sender.is_imported(p));
        receiver.unmap_file(q + 5).unwrap();
        assert!(!receiver.is_imported(q) && receiver.allocation_of(q).is_none());
        assert_eq!(receiver.free.len(), 1, "the extent went back to the free list");
        assert!(receiver.unmap_file(q).is_err());
        // SAFETY: p is still live in the sender.
        unsafe { assert_eq!(*(p as *const u8), 8, "unmapping leaves the sender's memory alone") };
        let r = receiver.malloc(64 << 10).unwrap();
        // SAFETY: r is a fresh block of the receiver; its own file is mapped there again.
        unsafe { std::ptr::write_bytes(receiver.host_address(r) as *mut u8, 1, 64 << 10) };
        // SAFETY: as above.
        unsafe { assert_eq!(*(p as *const u8), 8, "the receiver's own blocks are its own") };
    }

    /// Whether the host can read `len` bytes at `ptr`: `write(2)` to a pipe
    /// reports EFAULT for an inaccessible source instead of faulting.
    fn host_readable(ptr: usize, len: usize) -> bool {
        let mut fds = [0; 2];
        // SAFETY: a pipe for this probe, closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: write(2) checks the source range itself and fails with EFAULT.
        let n = unsafe { libc::write(fds[1], ptr as *const libc::c_void, len) };
        // SAFETY: closing the pipe made above.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        n == len as isize
    }

    #[test]
    fn a_guarded_range_is_reached_only_through_its_host_alias() {
        let mut plain = DeviceMemory::reserve(0, 8 << 20).unwrap();
        let p = plain.malloc(4096).unwrap();
        assert!(!plain.is_guarded());
        assert_eq!(plain.host_address(p), p);
        assert!(host_readable(p, 64));

        let mut m = DeviceMemory::reserve_guarded(1, 8 << 20).unwrap();
        assert!(m.is_guarded());
        let a = m.malloc(64 << 10).unwrap();
        let b = m.malloc(64 << 10).unwrap();
        let (ha, hb) = (m.host_address(a), m.host_address(b));
        assert!(!m.contains(ha), "the alias lies outside the device range");
        assert_eq!(hb - ha, b - a, "one constant offset per device");
        assert_eq!(ha % ALIGNMENT, 0, "blocks keep their alignment in the alias");
        assert!(!host_readable(a, 64), "device addresses are not host memory");
        assert!(host_readable(ha, 64));
        // SAFETY: both aliases cover 64 KiB blocks just allocated.
        unsafe {
            std::ptr::write_bytes(ha as *mut u8, 9, 64 << 10);
            std::ptr::write_bytes(hb as *mut u8, 5, 64 << 10);
        }
        m.free(a).unwrap();
        let a2 = m.malloc(64 << 10).unwrap();
        assert_eq!(a2, a);
        // SAFETY: a2 and b are live; a punched hole reads back as zero.
        unsafe {
            assert_eq!(*(m.host_address(a2) as *const u8), 0, "the freed block's pages were released");
            assert_eq!(*(hb as *const u8), 5, "the neighbour's data is intact");
        }
    }
}
