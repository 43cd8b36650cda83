//! Devices, memory, copies, streams, events, pinned host memory and the fallback counter:
//! the CUDA-runtime-shaped calls of `csrc/runtime/` (oxide_runtime).

use super::*;

/// Copy directions for [`oxide_memcpy_async`] (values of `cudaMemcpyKind`).
pub const OXIDE_MEMCPY_HOST_TO_HOST: i32 = 0;

pub const OXIDE_MEMCPY_HOST_TO_DEVICE: i32 = 1;

pub const OXIDE_MEMCPY_DEVICE_TO_HOST: i32 = 2;

pub const OXIDE_MEMCPY_DEVICE_TO_DEVICE: i32 = 3;

/// What the glue must do after [`oxide_fallback_record`].
pub const OXIDE_FALLBACK_RUN: i32 = 0;

/// Run the fallback and warn (first fallback of this operator in `warn` mode).
pub const OXIDE_FALLBACK_WARN: i32 = 1;

/// Refuse: raise an error naming the operator (`error` mode).
pub const OXIDE_FALLBACK_ERROR: i32 = 2;

/// Starts the runtime (idempotent). Fails in a forked child or on a bad configuration.
#[no_mangle]
pub extern "C" fn oxide_init() -> i32 {
    ffi(|| runtime().map(|_| ()).map_err(Into::into))
}

/// True once the runtime has started in this process.
#[no_mangle]
pub extern "C" fn oxide_is_initialized() -> bool {
    oxide_runtime::is_initialized()
}

/// Number of devices; 0 when the runtime cannot start. Never fails.
#[no_mangle]
pub extern "C" fn oxide_device_count() -> i32 {
    catch_unwind(oxide_runtime::device_count).map_or(0, |n| n as i32)
}

/// Current device of the calling thread.
#[no_mangle]
pub extern "C" fn oxide_get_device(out: *mut i32) -> i32 {
    ffi_without_launch(|| put(out, runtime()?.current_device() as i32))
}

/// Sets the calling thread's current device.
#[no_mangle]
pub extern "C" fn oxide_set_device(device: i32) -> i32 {
    ffi_without_launch(|| Ok(runtime()?.set_device(device as i64)?))
}

/// Checks that `device` is a valid index without changing anything.
#[no_mangle]
pub extern "C" fn oxide_check_device(device: i32) -> i32 {
    ffi(|| runtime()?.device(device as i64).map(|_| ()).map_err(Into::into))
}

/// Allocates `bytes` through the caching allocator (null for 0 bytes) on the calling
/// thread's current device, for its current stream there (as `cudaMalloc` takes the
/// current device, and as `c10::Allocator::allocate` is called); `device_out` receives
/// the device. One call, not three: every operator's output is allocated here.
#[no_mangle]
pub extern "C" fn oxide_malloc(bytes: usize, device_out: *mut i32, out: *mut *mut c_void) -> i32 {
    ffi_without_launch(|| {
        let rt = runtime()?;
        let device = rt.current_device();
        let stream = rt.current_stream(device as i64)?;
        put(device_out, device as i32)?;
        let p = match rt.malloc(device as i64, bytes, stream) {
            Ok(p) => p,
            Err(e @ oxide_runtime::Error::OutOfMemory { .. }) => {
                let free = rt.device(device as i64).map_or(0, |d| d.mem_get_info().0);
                crate::memory_history::on_oom(device as usize, bytes, free, stream);
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        crate::memory_history::on_alloc(device as usize, p, bytes, stream);
        if crate::sanitize::enabled() && p != 0 {
            let size = rt.device(device as i64)?.allocator().block_size(p).unwrap_or(0);
            if let Err(e) = crate::sanitize::poison(rt, device as usize, stream, p, size, true) {
                crate::memory_history::on_free(p);
                rt.free(p)?;
                return Err(e);
            }
        }
        put(out, p as *mut c_void)
    })
}

/// Returns a block from [`oxide_malloc`] to its device's cache. Null is a no-op.
#[no_mangle]
pub extern "C" fn oxide_free(ptr: *mut c_void) -> i32 {
    ffi_without_launch(|| {
        if ptr.is_null() {
            return Ok(());
        }
        crate::memory_history::on_free(ptr as usize);
        let rt = runtime()?;
        if rt.ipc_defer_free(ptr as usize) {
            // Sent to another process that may still read it: kept until ipc_collect.
            return Ok(());
        }
        if crate::sanitize::enabled() {
            if let PointerKind::Device(d) = rt.pointer_kind(ptr as usize) {
                let block = rt.device(d as i64)?.allocator().block_use(ptr as usize);
                // The fill is queued (and the history forgotten) before the block goes
                // back to the cache: from then on another host thread (Gloo's workers
                // drop tensors) may allocate it, and a fill queued after that thread's
                // launches would overwrite the data they wrote.
                // A block other streams used may still be read there: not filled.
                let filled = match block {
                    Some((stream, size, false)) => crate::sanitize::poison(rt, d, stream, ptr as usize, size, false),
                    _ => {
                        crate::sanitize::forget(ptr as usize);
                        Ok(())
                    }
                };
                rt.free(ptr as usize)?;
                return filled;
            }
        }
        Ok(rt.free(ptr as usize)?)
    })
}

/// Device and size of the live block at `ptr` (what the allocator reports
/// to `profile_memory`).
#[no_mangle]
pub extern "C" fn oxide_block_size(ptr: *const c_void, device: *mut i32, out: *mut usize) -> i32 {
    ffi(|| {
        let rt = runtime()?;
        let invalid = || oxide_runtime::Error::InvalidPointer { ptr: ptr as usize };
        let PointerKind::Device(d) = rt.pointer_kind(ptr as usize) else { return Err(invalid().into()) };
        let size = rt.device(d as i64)?.allocator().block_size(ptr as usize).ok_or_else(invalid)?;
        put(device, d as i32)?;
        put(out, size)
    })
}

/// Marks the block at `ptr` as used by `stream` of `stream_device` (`recordStream`);
/// the stream may belong to any device, as with CUDA.
#[no_mangle]
pub extern "C" fn oxide_record_stream(ptr: *mut c_void, stream_device: i32, stream: i64) -> i32 {
    ffi(|| {
        let rt = runtime()?;
        let user = rt.device(stream_device as i64)?;
        user.streams().state(stream)?;
        match rt.pointer_kind(ptr as usize) {
            PointerKind::Device(d) => {
                Ok(rt.device(d as i64)?.allocator().record_stream(ptr as usize, user.index(), stream)?)
            }
            _ => Err(oxide_runtime::Error::InvalidPointer { ptr: ptr as usize }.into()),
        }
    })
}

/// Releases every cached block of every device.
#[no_mangle]
pub extern "C" fn oxide_empty_cache() -> i32 {
    ffi(|| {
        runtime()?.empty_cache();
        crate::memory_history::on_empty_cache();
        Ok(())
    })
}

/// One statistic (`c10::CachingAllocator::Stat`).
#[repr(C)]
#[derive(Default)]
pub struct OxideStat {
    pub current: i64,
    pub peak: i64,
    pub allocated: i64,
    pub freed: i64,
}

/// Allocator statistics of one device; byte counts in bytes.
#[repr(C)]
#[derive(Default)]
pub struct OxideDeviceStats {
    pub allocation: OxideStat,
    pub segment: OxideStat,
    pub allocated_bytes: OxideStat,
    pub reserved_bytes: OxideStat,
    pub requested_bytes: OxideStat,
    pub num_alloc_retries: i64,
    pub num_ooms: i64,
    pub num_device_alloc: i64,
    pub num_device_free: i64,
}

/// Statistics of `device`'s caching allocator.
#[no_mangle]
pub extern "C" fn oxide_device_stats(device: i32, out: *mut OxideDeviceStats) -> i32 {
    ffi(|| {
        let s = runtime()?.device(device as i64)?.allocator().stats();
        put(
            out,
            OxideDeviceStats {
                allocation: stat(s.allocation),
                segment: stat(s.segment),
                allocated_bytes: stat(s.allocated_bytes),
                reserved_bytes: stat(s.reserved_bytes),
                requested_bytes: stat(s.requested_bytes),
                num_alloc_retries: s.num_alloc_retries,
                num_ooms: s.num_ooms,
                num_device_alloc: s.num_device_alloc,
                num_device_free: s.num_device_free,
            },
        )
    })
}

/// `resetPeakStats` for `device`.
#[no_mangle]
pub extern "C" fn oxide_reset_peak_stats(device: i32) -> i32 {
    ffi(|| {
        runtime()?.device(device as i64)?.allocator().reset_peak_stats();
        Ok(())
    })
}

/// `resetAccumulatedStats` for `device`.
#[no_mangle]
pub extern "C" fn oxide_reset_accumulated_stats(device: i32) -> i32 {
    ffi(|| {
        runtime()?.device(device as i64)?.allocator().reset_accumulated_stats();
        Ok(())
    })
}

/// `cudaMemGetInfo`: bytes not reserved by the allocator, and capacity, of `device`.
#[no_mangle]
pub extern "C" fn oxide_mem_get_info(device: i32, free: *mut usize, total: *mut usize) -> i32 {
    ffi(|| {
        let (f, t) = runtime()?.device(device as i64)?.mem_get_info();
        put(free, f)?;
        put(total, t)
    })
}

/// Device owning `ptr`: its index, -1 for ordinary host memory, -2 for pinned host memory.
#[no_mangle]
pub extern "C" fn oxide_pointer_device(ptr: *const c_void, out: *mut i32) -> i32 {
    ffi(|| {
        let v = match runtime()?.pointer_kind(ptr as usize) {
            PointerKind::Device(d) => d as i32,
            PointerKind::Host => -1,
            PointerKind::PinnedHost => -2,
        };
        put(out, v)
    })
}

/// Where host code reads and writes the device address `ptr` (its host alias
/// when device memory is guarded, `OXIDE_SANITIZE=1`; else `ptr` itself). For
/// the host views that hand device memory to host libraries (the collectives,
/// Inductor's C++ kernels); anything else reads device memory through kernels
/// and copies.
#[no_mangle]
pub extern "C" fn oxide_host_address(ptr: *mut c_void, out: *mut *mut c_void) -> i32 {
    ffi(|| put(out, runtime()?.host_address(ptr as usize) as *mut c_void))
}

/// `cudaMemcpyAsync` of `bytes` on `stream` of `device` (the device side of the copy).
#[no_mangle]
pub extern "C" fn oxide_memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: i32,
    device: i32,
    stream: i64,
) -> i32 {
    ffi(|| {
        let kind = match kind {
            OXIDE_MEMCPY_HOST_TO_HOST => MemcpyKind::HostToHost,
            OXIDE_MEMCPY_HOST_TO_DEVICE => MemcpyKind::HostToDevice,
            OXIDE_MEMCPY_DEVICE_TO_HOST => MemcpyKind::DeviceToHost,
            OXIDE_MEMCPY_DEVICE_TO_DEVICE => MemcpyKind::DeviceToDevice,
            k => return Err(AbiError::Invalid(format!("unknown memcpy kind {k}"))),
        };
        let rt = runtime()?;
        rt.device(device as i64)?;
        if crate::sanitize::enabled() && bytes > 0 {
            for (p, write) in [(src as usize, false), (dst as usize, true)] {
                if matches!(rt.pointer_kind(p), PointerKind::Device(_)) {
                    crate::sanitize::note_access(p, write);
                }
            }
            if rt.device(device as i64)?.streams().is_capturing(stream) {
                rt.memcpy_async(dst as usize, src as usize, bytes, kind, stream)?;
                crate::sanitize::note_captured(device as usize, stream);
                return Ok(());
            }
            crate::sanitize::check_launch(rt, device as usize, stream, "memcpy")?;
        }
        Ok(rt.memcpy_async(dst as usize, src as usize, bytes, kind, stream)?)
    })
}

/// The calling thread's current stream on `device`.
#[no_mangle]
pub extern "C" fn oxide_stream_current(device: i32, out: *mut i64) -> i32 {
    ffi_without_launch(|| put(out, runtime()?.current_stream(device as i64)?))
}

/// Makes `stream` current on `device` for the calling thread; `out` receives the previous one.
#[no_mangle]
pub extern "C" fn oxide_stream_exchange(device: i32, stream: i64, out: *mut i64) -> i32 {
    ffi_without_launch(|| put(out, runtime()?.exchange_stream(device as i64, stream)?))
}

/// `cudaStreamCreateWithPriority` as PyTorch uses it: the next stream of
/// `device`'s pool for `priority` (negative = high priority), round-robin.
#[no_mangle]
pub extern "C" fn oxide_stream_create(device: i32, priority: i32, out: *mut i64) -> i32 {
    ffi(|| put(out, runtime()?.device(device as i64)?.streams().create(priority)))
}

/// A pool stream of `device`, from the high-priority pool when `high_priority`.
#[no_mangle]
pub extern "C" fn oxide_stream_from_pool(device: i32, high_priority: bool, out: *mut i64) -> i32 {
    let class = if high_priority { oxide_runtime::Priority::High } else { oxide_runtime::Priority::Normal };
    ffi(|| put(out, runtime()?.device(device as i64)?.streams().from_pool(class)))
}

/// `cudaStreamQuery`.
#[no_mangle]
pub extern "C" fn oxide_stream_query(device: i32, stream: i64, out: *mut bool) -> i32 {
    ffi(|| put(out, runtime()?.device(device as i64)?.streams().query(stream)?))
}

/// `cudaStreamSynchronize`.
#[no_mangle]
pub extern "C" fn oxide_stream_synchronize(device: i32, stream: i64) -> i32 {
    ffi(|| Ok(runtime()?.device(device as i64)?.streams().synchronize(stream)?))
}

/// `cudaDeviceSynchronize`.
#[no_mangle]
pub extern "C" fn oxide_device_synchronize(device: i32) -> i32 {
    ffi(|| Ok(runtime()?.synchronize_device(device as i64)?))
}

/// An event handle (opaque to C).
pub struct OxideEvent(Mutex<Event>);

impl OxideEvent {
    fn get(&self) -> std::sync::MutexGuard<'_, Event> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `cudaEventCreateWithFlags`; `enable_timing` false is `cudaEventDisableTiming`.
#[no_mangle]
pub extern "C" fn oxide_event_create(enable_timing: bool, out: *mut *mut OxideEvent) -> i32 {
    ffi(|| put(out, Box::into_raw(Box::new(OxideEvent(Mutex::new(Event::new(enable_timing)))))))
}

/// `cudaEventDestroy`. Null is a no-op.
///
/// # Safety
/// `e` comes from [`oxide_event_create`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn oxide_event_destroy(e: *mut OxideEvent) {
    if !e.is_null() {
        // SAFETY: per the contract, e is a live Box from oxide_event_create.
        drop(unsafe { Box::from_raw(e) });
    }
}

/// `cudaEventRecord` on `stream` of `device`.
#[no_mangle]
pub extern "C" fn oxide_event_record(e: *const OxideEvent, device: i32, stream: i64) -> i32 {
    ffi(|| {
        let streams = runtime()?.device(device as i64)?.streams();
        Ok(event(e)?.get().record(device as usize, streams, stream)?)
    })
}

/// `cudaEventQuery`.
#[no_mangle]
pub extern "C" fn oxide_event_query(e: *const OxideEvent, out: *mut bool) -> i32 {
    ffi(|| put(out, event(e)?.get().query()))
}

/// `cudaEventSynchronize`.
#[no_mangle]
pub extern "C" fn oxide_event_synchronize(e: *const OxideEvent) -> i32 {
    ffi(|| {
        event(e)?.get().synchronize();
        Ok(())
    })
}

/// `cudaStreamWaitEvent`: work enqueued on `stream` of `device` from now on
/// runs after the event's work (a wait record; the host does not wait).
#[no_mangle]
pub extern "C" fn oxide_stream_wait_event(device: i32, stream: i64, e: *const OxideEvent) -> i32 {
    ffi(|| {
        let streams = runtime()?.device(device as i64)?.streams();
        let ev = event(e)?.get();
        if let (Some(on), Some((_, seq))) = (ev.recorded_on(), ev.fence()) {
            crate::sanitize::on_wait((device as usize, stream), on, seq);
        }
        match ev.fence() {
            Some((state, seq)) => Ok(streams.wait(stream, state, seq)?),
            None => Ok(streams.state(stream).map(|_| ())?),
        }
    })
}

/// Work enqueued on `stream` of `device` from now on runs after the work
/// enqueued so far on `other` of `other_device` (an event recorded there and
/// waited for here, without the event object). The host does not wait.
#[no_mangle]
pub extern "C" fn oxide_stream_wait_stream(device: i32, stream: i64, other_device: i32, other: i64) -> i32 {
    ffi(|| {
        let rt = runtime()?;
        let waiter = rt.device(device as i64)?.streams();
        // The capturing stream's work so far is the graph's, which runs only at
        // replay: no eager stream can wait for it (CUDA would join the other
        // stream into the capture; oxide graphs keep one stream).
        let others = rt.device(other_device as i64)?.streams();
        if !(device == other_device && stream == other) {
            others.refuse_in_capture(other, "making another stream wait for the capturing stream")?;
        }
        let other_id = other;
        let other = others.state(other)?;
        let seq = other.submitted();
        crate::sanitize::on_wait((device as usize, stream), (other_device as usize, other_id), seq);
        Ok(waiter.wait(stream, other, seq)?)
    })
}

/// `cudaEventElapsedTime` in milliseconds.
#[no_mangle]
pub extern "C" fn oxide_event_elapsed_ms(start: *const OxideEvent, end: *const OxideEvent, out: *mut f64) -> i32 {
    ffi(|| {
        let a = event(start)?.get().clone();
        let b = event(end)?.get().clone();
        put(out, a.elapsed_ms(&b)?)
    })
}

/// `cudaMallocHost` (null for 0 bytes).
#[no_mangle]
pub extern "C" fn oxide_host_malloc(bytes: usize, out: *mut *mut c_void) -> i32 {
    ffi(|| put(out, runtime()?.host().malloc(bytes)? as *mut c_void))
}

/// `cudaFreeHost`. Null is a no-op.
#[no_mangle]
pub extern "C" fn oxide_host_free(ptr: *mut c_void) -> i32 {
    ffi(|| Ok(runtime()?.host().free(ptr as usize)?))
}

/// Pinned host memory in use: bytes and number of blocks.
#[no_mangle]
pub extern "C" fn oxide_host_stats(bytes: *mut usize, blocks: *mut usize) -> i32 {
    ffi(|| {
        let host = runtime()?.host();
        put(bytes, host.pinned_bytes())?;
        put(blocks, host.live_blocks())
    })
}

/// True when `ptr` lies inside pinned host memory.
#[no_mangle]
pub extern "C" fn oxide_is_pinned(ptr: *const c_void) -> bool {
    catch_unwind(|| runtime().is_ok_and(|rt| rt.host().contains(ptr as usize))).unwrap_or(false)
}

/// Counts one CPU-fallback call of operator `op` (a NUL-terminated name) and
/// says what to do: one of `OXIDE_FALLBACK_*`.
///
/// # Safety
/// `op` is a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn oxide_fallback_record(op: *const c_char) -> i32 {
    catch_unwind(|| {
        // SAFETY: per the contract.
        let name = unsafe { CStr::from_ptr(op) }.to_string_lossy();
        fallback::record(&name)
    })
    .unwrap_or(OXIDE_FALLBACK_RUN)
}

fn stat(s: oxide_runtime::Stat) -> OxideStat {
    OxideStat { current: s.current, peak: s.peak, allocated: s.allocated, freed: s.freed }
}

fn event<'a>(e: *const OxideEvent) -> Result<&'a OxideEvent, AbiError> {
    // SAFETY: non-null handles come from oxide_event_create and live until oxide_event_destroy.
    unsafe { e.as_ref() }.ok_or_else(|| AbiError::Invalid("null event".into()))
}
