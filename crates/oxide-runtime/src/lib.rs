//! oxide-runtime: the device runtime behind torch-oxide's `oxide` device.
//!
//! Shaped like the CUDA runtime API (see this crate's README for the call
//! mapping): devices with a thread-local current device, per-device memory
//! behind a caching allocator, pinned host memory, streams and events, and
//! copies between host and devices. It knows nothing of PyTorch.
//!
//! The runtime is created lazily on first use from the environment
//! (`OXIDE_DEVICE_COUNT`, `OXIDE_DEVICE_MEMORY`). A process forked after
//! initialisation gets [`Error::Forked`] from every call, as `torch.cuda` does.

pub mod allocator;
pub mod config;
pub mod error;
pub mod event;
pub mod graph;
pub mod guard;
pub mod host;
pub mod ipc;
pub mod memory;
pub mod philox;
pub mod profiler;
pub mod publish;
pub mod stream;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

pub use allocator::{BlockInfo, BlockState, CachingAllocator, DeviceStats, SegmentEvent, Stat};
pub use config::Config;
pub use error::{Error, Result};
pub use event::Event;
pub use graph::{Graph, Node};
pub use host::HostMemory;
pub use philox::Philox4x32;
pub use stream::{
    host_waiting, on_stream_worker, set_wait_hooks, Fence, Priority, Record, StreamId, Streams, Work, DEFAULT_STREAM,
};

/// One device: its caching allocator (owning its memory) and its streams.
pub struct Device {
    index: usize,
    allocator: Mutex<CachingAllocator>,
    /// The device's address range: start and length (larger than the capacity).
    range: (usize, usize),
    /// Where host code reaches `range.0`: `range.0` itself, or the host alias
    /// of a guarded range (see [`memory`]).
    alias: usize,
    capacity: usize,
    streams: Streams,
}

impl Device {
    /// Index of the device.
    pub fn index(&self) -> usize {
        self.index
    }
    /// The device's caching allocator, locked.
    pub fn allocator(&self) -> MutexGuard<'_, CachingAllocator> {
        self.allocator.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The device's streams.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }
    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// `cudaMemGetInfo`: `(free, total)` bytes, where free excludes what the caching allocator holds.
    pub fn mem_get_info(&self) -> (usize, usize) {
        let reserved = self.allocator().memory().used();
        (self.capacity() - reserved, self.capacity())
    }
    /// Waits until every stream of the device has run what was queued (errors stay for the streams).
    pub fn wait_idle(&self) {
        for f in self.streams.fences() {
            f.wait();
        }
    }
    fn contains(&self, ptr: usize) -> bool {
        ptr >= self.range.0 && ptr < self.range.0 + self.range.1
    }
}

/// The process-wide runtime.
pub struct Runtime {
    config: Config,
    devices: Vec<Device>,
    host: HostMemory,
    /// Kernels run at the call instead of on the stream workers (`OXIDE_LAUNCH_BLOCKING`).
    launch_blocking: AtomicBool,
    /// This process's memory counters for other processes (`python -m torch_oxide`).
    published: Option<publish::Published>,
    /// Device memory shared with other processes (see [`ipc`]).
    ipc: Mutex<ipc::Ipc>,
    /// Set on the first send: until then a free need not look at what was sent.
    ipc_sent: AtomicBool,
}

/// `cudaIpcGetMemHandle`'s result: device address `ptr` is byte `offset` of
/// device `device`'s memory file `fd` (owned by the runtime; duplicate it to send it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcHandle {
    pub device: usize,
    pub fd: libc::c_int,
    pub offset: usize,
}

static RUNTIME: OnceLock<std::result::Result<Runtime, Error>> = OnceLock::new();
static INITIALIZED: AtomicBool = AtomicBool::new(false);
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn mark_forked_child() {
    if INITIALIZED.load(Ordering::Relaxed) {
        FORKED.store(true, Ordering::Relaxed);
    }
}

thread_local! {
    static CURRENT_DEVICE: RefCell<usize> = const { RefCell::new(0) };
    /// Current stream per device index on this thread.
    static CURRENT_STREAMS: RefCell<Vec<StreamId>> = const { RefCell::new(Vec::new()) };
}

/// Copy directions, as `cudaMemcpyKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemcpyKind {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

impl MemcpyKind {
    fn name(self) -> &'static str {
        match self {
            MemcpyKind::HostToHost => "host-to-host",
            MemcpyKind::HostToDevice => "host-to-device",
            MemcpyKind::DeviceToHost => "device-to-host",
            MemcpyKind::DeviceToDevice => "device-to-device",
        }
    }

    /// The copy's name in a profile, as CUDA's activity records name copies.
    fn activity_name(self, pinned: bool) -> &'static str {
        match (self, pinned) {
            (MemcpyKind::HostToDevice, true) => "Memcpy HtoD (Pinned -> Device)",
            (MemcpyKind::HostToDevice, false) => "Memcpy HtoD (Pageable -> Device)",
            (MemcpyKind::DeviceToHost, true) => "Memcpy DtoH (Device -> Pinned)",
            (MemcpyKind::DeviceToHost, false) => "Memcpy DtoH (Device -> Pageable)",
            (MemcpyKind::DeviceToDevice, _) => "Memcpy DtoD (Device -> Device)",
            (MemcpyKind::HostToHost, _) => "Memcpy HtoH (Host -> Host)",
        }
    }
}

/// What a pointer is, as `cudaPointerGetAttributes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointerKind {
    /// Inside the address range of this device (allocated or not).
    Device(usize),
    /// Inside a live pinned host block.
    PinnedHost,
    /// Anything else: ordinary host memory.
    Host,
}

/// True once the runtime has been created in this process.
pub fn is_initialized() -> bool {
    INITIALIZED.load(Ordering::Relaxed)
}

/// True in a child forked after the parent initialised the runtime.
pub fn is_in_bad_fork() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// The runtime, created on first call.
///
/// Errors: [`Error::Forked`] in a forked child; [`Error::Config`] or
/// [`Error::Reserve`] when the environment asks for something impossible.
pub fn runtime() -> Result<&'static Runtime> {
    if FORKED.load(Ordering::Relaxed) {
        return Err(Error::Forked);
    }
    RUNTIME
        .get_or_init(|| {
            let config = Config::from_env()?;
            let devices = (0..config.device_count)
                .map(|i| {
                    let memory = if config.guard_device_memory {
                        memory::DeviceMemory::reserve_guarded(i, config.device_memory)?
                    } else {
                        memory::DeviceMemory::reserve(i, config.device_memory)?
                    };
                    let (range, capacity) = ((memory.base(), memory.span()), memory.capacity());
                    let alias = memory.alias_base();
                    let allocator = Mutex::new(CachingAllocator::new(memory));
                    Ok(Device { index: i, allocator, range, alias, capacity, streams: Streams::new(i) })
                })
                .collect::<Result<Vec<_>>>()?;
            if config.guard_device_memory {
                guard::install(&devices.iter().map(|d| d.range).collect::<Vec<_>>());
            }
            // SAFETY: registering a plain extern "C" function with no captured state.
            unsafe { libc::pthread_atfork(None, None, Some(mark_forked_child)) };
            INITIALIZED.store(true, Ordering::Relaxed);
            let published = publish::Published::create(&devices.iter().map(|d| d.capacity).collect::<Vec<_>>());
            Ok(Runtime {
                config,
                devices,
                host: HostMemory::default(),
                launch_blocking: AtomicBool::new(config.launch_blocking),
                published,
                ipc: Mutex::default(),
                ipc_sent: AtomicBool::new(false),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// `cudaGetDeviceCount` that never fails: 0 when the runtime cannot start.
pub fn device_count() -> usize {
    runtime().map_or(0, |r| r.devices.len())
}

impl Runtime {
    /// The configuration the runtime was created with.
    pub fn config(&self) -> Config {
        self.config
    }

    /// True when kernels run at the call (`CUDA_LAUNCH_BLOCKING`'s meaning):
    /// their errors are raised by the launching call.
    pub fn launch_blocking(&self) -> bool {
        self.launch_blocking.load(Ordering::Relaxed)
    }

    /// Switches launch blocking on or off for launches made from now on
    /// (already queued work still runs on the stream workers). For tests that
    /// expect a kernel's error at the launching call.
    pub fn set_launch_blocking(&self, on: bool) {
        self.launch_blocking.store(on, Ordering::Relaxed);
    }

    /// Number of devices.
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Device `index`.
    ///
    /// Errors: [`Error::InvalidDevice`] for an index outside `0..device_count`.
    pub fn device(&self, index: i64) -> Result<&Device> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or(Error::InvalidDevice { index, count: self.devices.len() })
    }

    /// `emptyCache` on every device: cached, unused blocks go back to device
    /// memory, once the work queued on the device (which may still use a
    /// freed block) has run.
    pub fn empty_cache(&self) {
        for d in &self.devices {
            d.wait_idle();
            let mut alloc = d.allocator();
            alloc.empty_cache();
            self.publish(d.index, &alloc);
        }
    }

    /// Publishes device `d`'s counters (see [`publish`]); called with its allocator locked,
    /// so the published values follow the allocator's order of changes.
    fn publish(&self, d: usize, alloc: &CachingAllocator) {
        if let Some(p) = &self.published {
            p.update(d, &alloc.stats());
        }
    }

    /// `cudaMalloc` through device `device`'s caching allocator, for use on
    /// `stream`. When the device is full, its queued work is waited for before
    /// the cache is released for the one retry (see [`CachingAllocator::allocate_with`]).
    ///
    /// Errors: [`Error::InvalidDevice`], [`Error::OutOfMemory`].
    pub fn malloc(&self, device: i64, bytes: usize, stream: StreamId) -> Result<usize> {
        let d = self.device(device)?;
        // The stream workers never take the allocator's lock, so waiting under it cannot deadlock.
        let mut alloc = d.allocator();
        let r = alloc.allocate_with(bytes, stream, || d.wait_idle());
        self.publish(d.index, &alloc);
        r
    }

    /// Returns the device block at `ptr` to its allocator. A block other
    /// streams used (`record_stream`) is reused only after the work those
    /// streams had queued by now has run.
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not a live device block.
    pub fn free(&self, ptr: usize) -> Result<()> {
        let PointerKind::Device(d) = self.pointer_kind(ptr) else {
            return Err(Error::InvalidPointer { ptr });
        };
        let mut alloc = self.devices[d].allocator();
        let users = alloc.recorded_streams(ptr).map(<[_]>::to_vec).unwrap_or_default();
        let fences = users.iter().filter_map(|&(dev, s)| self.devices.get(dev)?.streams.fence(s).ok()).collect();
        let r = alloc.free_after(ptr, fences);
        self.publish(d, &alloc);
        r
    }

    /// Pinned host memory.
    pub fn host(&self) -> &HostMemory {
        &self.host
    }

    /// `cudaGetDevice` for the calling thread.
    pub fn current_device(&self) -> usize {
        CURRENT_DEVICE.with(|d| *d.borrow())
    }

    /// `cudaSetDevice` for the calling thread.
    ///
    /// Errors: [`Error::InvalidDevice`].
    pub fn set_device(&self, index: i64) -> Result<()> {
        let d = self.device(index)?.index;
        CURRENT_DEVICE.with(|c| *c.borrow_mut() = d);
        Ok(())
    }

    /// The calling thread's current stream on `device` (the default stream unless set).
    ///
    /// Errors: [`Error::InvalidDevice`].
    pub fn current_stream(&self, device: i64) -> Result<StreamId> {
        let d = self.device(device)?.index;
        Ok(CURRENT_STREAMS.with(|s| s.borrow().get(d).copied().unwrap_or(DEFAULT_STREAM)))
    }

    /// Makes `stream` the calling thread's current stream on `device`; returns the previous one.
    ///
    /// Errors: [`Error::InvalidDevice`], [`Error::InvalidStream`].
    pub fn exchange_stream(&self, device: i64, stream: StreamId) -> Result<StreamId> {
        let dev = self.device(device)?;
        if !dev.streams.is_valid(stream) {
            return Err(Error::InvalidStream { device: dev.index, stream });
        }
        Ok(CURRENT_STREAMS.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() <= dev.index {
                s.resize(dev.index + 1, DEFAULT_STREAM);
            }
            std::mem::replace(&mut s[dev.index], stream)
        }))
    }

    /// Where host code (a kernel, a copy, a collective's host view) reads and
    /// writes `ptr`: the host alias of a device address in a guarded range,
    /// else `ptr` itself. Kernels must never dereference a device address
    /// without it; with guarded memory (`OXIDE_SANITIZE=1`) that faults.
    pub fn host_address(&self, ptr: usize) -> usize {
        if !self.config.guard_device_memory {
            return ptr;
        }
        match self.devices.iter().find(|d| d.contains(ptr)) {
            Some(d) => ptr - d.range.0 + d.alias,
            None => ptr,
        }
    }

    /// `cudaIpcGetMemHandle`: names the device memory at `ptr` for another
    /// process (see [`ipc`]). The caller keeps the block alive while it is shared.
    ///
    /// Errors: [`Error::Ipc`] for a pointer outside device memory or inside
    /// memory this process received from another one.
    pub fn ipc_export(&self, ptr: usize) -> Result<IpcHandle> {
        let PointerKind::Device(d) = self.pointer_kind(ptr) else {
            return Err(Error::Ipc { reason: format!("{ptr:#x} is not oxide device memory") });
        };
        let alloc = self.devices[d].allocator();
        let memory = alloc.memory();
        if memory.is_imported(ptr) {
            return Err(Error::Ipc {
                reason: "this memory was received from another process and cannot be sent on (as with CUDA tensors); clone the tensor and send the clone".into(),
            });
        }
        Ok(IpcHandle { device: d, fd: memory.file_descriptor(), offset: memory.file_offset(ptr) })
    }

    /// Sends the device memory at `ptr` to another process: waits for the work
    /// queued on the streams that use its block (the one it was allocated on
    /// and those `record_stream` named; never the whole device, so a capture on
    /// another stream goes on), counts the send (see [`ipc`]), and returns the
    /// handle and the counter slot. The block stays allocated until every
    /// receiver has released it, even if its tensors free it first.
    ///
    /// Errors: as [`Runtime::ipc_export`]; [`Error::Ipc`] when the counter file is full.
    pub fn ipc_send(&self, ptr: usize) -> Result<(IpcHandle, usize)> {
        let handle = self.ipc_export(ptr)?;
        let (block, fences) = {
            let alloc = self.devices[handle.device].allocator();
            let block = alloc.memory().allocation_of(ptr).map_or(ptr, |(start, _)| start);
            let mut users: Vec<(usize, StreamId)> =
                alloc.block_use(block).map(|(stream, _, _)| vec![(handle.device, stream)]).unwrap_or_default();
            users.extend(alloc.recorded_streams(block).unwrap_or_default());
            let fences: Vec<Fence> =
                users.iter().filter_map(|&(d, s)| self.devices.get(d)?.streams.fence(s).ok()).collect();
            (block, fences)
        };
        for f in fences {
            f.wait();
        }
        let slot = self.ipc().note_send(block)?;
        self.ipc_sent.store(true, Ordering::Release);
        Ok((handle, slot))
    }

    /// Frees the sent blocks that every receiver has released and whose tensors
    /// freed them meanwhile; returns their addresses.
    pub fn ipc_collect(&self) -> Vec<usize> {
        let freed = self.ipc().collect();
        for &block in &freed {
            // The block was live when it was kept aside; nothing else can free it.
            let _ = self.free(block);
        }
        freed
    }

    /// True when the block at `ptr`, being freed by its tensors, was sent to
    /// another process that may still use it: it is kept until [`Runtime::ipc_collect`].
    pub fn ipc_defer_free(&self, ptr: usize) -> bool {
        self.ipc_sent.load(Ordering::Acquire) && self.ipc().defer_free(ptr)
    }

    /// `cudaIpcOpenMemHandle`: maps `bytes` at `offset` of another process's
    /// device memory file `fd` into device `device`'s range; returns the
    /// device address of the byte at `offset`. `fd` may be closed afterwards.
    ///
    /// Errors: [`Error::InvalidDevice`], [`Error::Ipc`].
    pub fn ipc_open(&self, device: i64, fd: libc::c_int, offset: usize, bytes: usize) -> Result<usize> {
        let d = self.device(device)?;
        let mut alloc = d.allocator();
        alloc.memory_mut().map_file(fd, offset, bytes)
    }

    /// `cudaIpcCloseMemHandle`: unmaps what [`Runtime::ipc_open`] mapped
    /// around `ptr`, once the work queued on the device (which may use it) has run.
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not such memory.
    pub fn ipc_close(&self, ptr: usize) -> Result<()> {
        let PointerKind::Device(d) = self.pointer_kind(ptr) else {
            return Err(Error::InvalidPointer { ptr });
        };
        let d = &self.devices[d];
        d.wait_idle();
        let mut alloc = d.allocator();
        alloc.memory_mut().unmap_file(ptr)
    }

    /// True when `ptr` is device memory received from another process.
    pub fn ipc_is_imported(&self, ptr: usize) -> bool {
        match self.pointer_kind(ptr) {
            PointerKind::Device(d) => self.devices[d].allocator().memory().is_imported(ptr),
            _ => false,
        }
    }

    /// The process's sharing state (its counter file, the senders' files), locked.
    pub fn ipc(&self) -> MutexGuard<'_, ipc::Ipc> {
        self.ipc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `cudaPointerGetAttributes`.
    pub fn pointer_kind(&self, ptr: usize) -> PointerKind {
        if let Some(d) = self.devices.iter().find(|d| d.contains(ptr)) {
            PointerKind::Device(d.index)
        } else if self.host.contains(ptr) {
            PointerKind::PinnedHost
        } else {
            PointerKind::Host
        }
    }

    /// `cudaDeviceSynchronize`.
    ///
    /// Errors: [`Error::InvalidDevice`].
    pub fn synchronize_device(&self, device: i64) -> Result<()> {
        self.device(device)?.streams.synchronize_all()
    }

    fn check_device_range(&self, ptr: usize, bytes: usize, kind: MemcpyKind, src: usize, dst: usize) -> Result<usize> {
        let bad = |reason| Error::InvalidCopy { kind: kind.name(), bytes, src, dst, reason };
        let PointerKind::Device(d) = self.pointer_kind(ptr) else {
            return Err(bad("a device-side pointer is not oxide device memory"));
        };
        let alloc = self.devices[d].allocator();
        let Some((start, len)) = alloc.memory().allocation_of(ptr) else {
            return Err(bad("a device-side pointer is not inside a live allocation"));
        };
        if ptr + bytes > start + len {
            return Err(bad("the copy runs past the end of the device allocation"));
        }
        Ok(d)
    }

    fn check_host(&self, ptr: usize, bytes: usize, kind: MemcpyKind, src: usize, dst: usize) -> Result<()> {
        if let PointerKind::Device(_) = self.pointer_kind(ptr) {
            return Err(Error::InvalidCopy {
                kind: kind.name(),
                bytes,
                src,
                dst,
                reason: "a host-side pointer is oxide device memory",
            });
        }
        Ok(())
    }

    /// `cudaMemcpyAsync`: copies `bytes` from `src` to `dst` in stream order on
    /// `stream` of the device side (the destination for device-to-device).
    /// A copy between a device and pinned host memory is queued (the host does
    /// not wait; synchronise the stream before reading the host side); any other
    /// copy runs on the calling thread after the stream's queued work.
    /// The ranges must not overlap. Null pointers are allowed only for 0 bytes.
    ///
    /// Errors: [`Error::InvalidCopy`] when a pointer is on the wrong side or
    /// the range leaves its allocation; [`Error::InvalidStream`].
    pub fn memcpy_async(&self, dst: usize, src: usize, bytes: usize, kind: MemcpyKind, stream: StreamId) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let device = match kind {
            MemcpyKind::HostToHost => {
                self.check_host(src, bytes, kind, src, dst)?;
                self.check_host(dst, bytes, kind, src, dst)?;
                None
            }
            MemcpyKind::HostToDevice => {
                self.check_host(src, bytes, kind, src, dst)?;
                Some(self.check_device_range(dst, bytes, kind, src, dst)?)
            }
            MemcpyKind::DeviceToHost => {
                self.check_host(dst, bytes, kind, src, dst)?;
                Some(self.check_device_range(src, bytes, kind, src, dst)?)
            }
            MemcpyKind::DeviceToDevice => {
                self.check_device_range(src, bytes, kind, src, dst)?;
                Some(self.check_device_range(dst, bytes, kind, src, dst)?)
            }
        };
        if src.max(dst) - src.min(dst) < bytes {
            return Err(Error::InvalidCopy {
                kind: kind.name(),
                bytes,
                src,
                dst,
                reason: "source and destination overlap",
            });
        }
        let (from, to) = (self.host_address(src), self.host_address(dst));
        // SAFETY: both ranges were checked above to be live, disjoint and `bytes` long
        // (host ranges are the caller's contract, as with cudaMemcpy); device ones are
        // reached through their host addresses.
        let copy = move || unsafe { std::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, bytes) };
        let pinned = match kind {
            MemcpyKind::HostToDevice => Some(src),
            MemcpyKind::DeviceToHost => Some(dst),
            _ => None,
        }
        .filter(|&p| self.pointer_kind(p) == PointerKind::PinnedHost);
        let trace = |d: usize| {
            profiler::Launch::begin(profiler::ActivityKind::Memcpy, || kind.activity_name(pinned.is_some()), d, stream)
        };
        if let Some(d) = device.filter(|&d| self.devices[d].streams.is_capturing(stream)) {
            // A graph node: copies between device memory and pinned host memory
            // replay like kernels (the graph reads the same addresses each time).
            if matches!(kind, MemcpyKind::DeviceToDevice) || pinned.is_some() {
                // The graph keeps the pinned block allocated, even after its tensor is
                // freed: every replay copies to or from it.
                let hold = pinned.map(|host| {
                    let (fence, hold) = Fence::hold();
                    self.host.record(host, fence);
                    hold
                });
                return self.devices[d].streams.capture(
                    stream,
                    kind.activity_name(pinned.is_some()),
                    Box::new(move || {
                        let _held = &hold;
                        copy();
                        Ok(())
                    }),
                );
            }
            return self.devices[d].streams.refuse_in_capture(
                stream,
                "a copy between device memory and pageable host memory (.item(), .cpu(), printing)",
            );
        }
        match (device, pinned) {
            // Pinned memory: queued, as CUDA copies pinned memory asynchronously; the
            // block is kept until the copy has run, even if freed before.
            (Some(d), Some(host)) if !self.launch_blocking() => {
                let streams = &self.devices[d].streams;
                let mut trace = trace(d);
                if let Some(t) = trace.as_mut() {
                    t.submitted();
                }
                streams.enqueue(
                    stream,
                    Record::Work(crate::stream::Work::new(move || {
                        profiler::traced(trace, copy);
                        Ok(())
                    })),
                )?;
                self.host.record(host, streams.fence(stream)?);
                Ok(())
            }
            (Some(d), _) => {
                let mut trace = trace(d);
                if let Some(t) = trace.as_mut() {
                    t.submitted();
                }
                self.devices[d].streams.launch(stream, || profiler::traced(trace, copy)).map(|_| ())
            }
            (None, _) => {
                copy();
                Ok(())
            }
        }
    }

    /// `cudaMemcpy`: [`Runtime::memcpy_async`] on the current stream, then synchronise it.
    pub fn memcpy(&self, dst: usize, src: usize, bytes: usize, kind: MemcpyKind) -> Result<()> {
        let d = self.current_device() as i64;
        let stream = self.current_stream(d)?;
        self.memcpy_async(dst, src, bytes, kind, stream)?;
        self.device(d)?.streams.synchronize(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_streams_and_copies() {
        let rt = runtime().unwrap();
        assert_eq!(rt.device_count(), config::DEFAULT_DEVICE_COUNT.min(rt.device_count()));
        assert!(matches!(rt.device(99), Err(Error::InvalidDevice { index: 99, .. })));
        assert!(matches!(rt.set_device(-1), Err(Error::InvalidDevice { .. })));

        std::thread::spawn(move || {
            rt.set_device(1).unwrap();
            assert_eq!(rt.current_device(), 1);
            let s = rt.device(1).unwrap().streams().create(0);
            assert_eq!(rt.exchange_stream(1, s).unwrap(), DEFAULT_STREAM);
            assert_eq!(rt.current_stream(1).unwrap(), s);
            assert_eq!(rt.current_stream(0).unwrap(), DEFAULT_STREAM);
        })
        .join()
        .unwrap();
        assert_eq!(rt.current_device(), 0, "current device is thread-local");

        let d0 = rt.device(0).unwrap().allocator().allocate(64, 0).unwrap();
        let d1 = rt.device(1).unwrap().allocator().allocate(64, 0).unwrap();
        assert_eq!(rt.pointer_kind(d0), PointerKind::Device(0));
        assert_eq!(rt.pointer_kind(d1 + 63), PointerKind::Device(1));
        let host: Vec<u8> = (0..64).collect();
        let mut back = vec![0u8; 64];
        assert_eq!(rt.pointer_kind(host.as_ptr() as usize), PointerKind::Host);
        rt.memcpy(d0, host.as_ptr() as usize, 64, MemcpyKind::HostToDevice).unwrap();
        rt.memcpy(d1, d0, 64, MemcpyKind::DeviceToDevice).unwrap();
        rt.memcpy(back.as_mut_ptr() as usize, d1, 64, MemcpyKind::DeviceToHost).unwrap();
        assert_eq!(host, back);

        let err = rt.memcpy(d0, host.as_ptr() as usize, 4096, MemcpyKind::HostToDevice).unwrap_err();
        assert!(matches!(err, Error::InvalidCopy { .. }), "{err}");
        let err =
            rt.memcpy(back.as_mut_ptr() as usize, host.as_ptr() as usize, 64, MemcpyKind::DeviceToHost).unwrap_err();
        assert!(matches!(err, Error::InvalidCopy { .. }), "{err}");

        rt.device(0).unwrap().allocator().free(d0).unwrap();
        rt.device(1).unwrap().allocator().free(d1).unwrap();
        rt.synchronize_device(0).unwrap();
        rt.empty_cache();
        let (free, total) = rt.device(1).unwrap().mem_get_info();
        assert_eq!(
            (free, total),
            (total - rt.device(1).unwrap().allocator().memory().used(), rt.device(1).unwrap().capacity())
        );

        let pinned = rt.host().malloc(128).unwrap();
        assert_eq!(rt.pointer_kind(pinned + 5), PointerKind::PinnedHost);
        rt.host().free(pinned).unwrap();
        assert!(is_initialized() && !is_in_bad_fork());
    }
}
