//! The C ABI that the C++ glue (`csrc/`) calls. `build.rs` runs cbindgen over
//! this file to produce `oxide_abi.h`, so the header is never written by hand.
//!
//! Conventions: every fallible function returns an `OXIDE_STATUS_*` code and
//! leaves a message for [`oxide_last_error`] (thread-local, like
//! `cudaGetLastError`); outputs go through pointer arguments; no panic
//! crosses this boundary (each body runs under `catch_unwind`). Device
//! indices are `i32`, sizes `usize` bytes, strides `i64` elements, stream ids
//! `i64` (0 = default stream).

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use oxide_kernels::Layout;
use oxide_runtime::{runtime, Event, MemcpyKind, PointerKind};

use crate::fallback;

/// Success.
pub const OXIDE_STATUS_SUCCESS: i32 = 0;
/// Invalid device index (becomes a RuntimeError).
pub const OXIDE_STATUS_INVALID_DEVICE: i32 = 1;
/// Device out of memory (becomes torch.OutOfMemoryError).
pub const OXIDE_STATUS_OUT_OF_MEMORY: i32 = 2;
/// An argument the runtime rejects: pointer, stream, event, layout (becomes a ValueError).
pub const OXIDE_STATUS_INVALID_VALUE: i32 = 3;
/// Runtime used in a forked child (becomes a RuntimeError).
pub const OXIDE_STATUS_FORKED: i32 = 4;
/// The runtime could not start or an internal error (including a caught panic).
pub const OXIDE_STATUS_INTERNAL: i32 = 5;
/// A runtime call the device refuses in its current state, e.g. the elapsed
/// time between events of two devices (becomes a RuntimeError, as a CUDA error does).
pub const OXIDE_STATUS_RUNTIME_ERROR: i32 = 9;

/// A kernel rejected its input values (becomes a RuntimeError, as on CPU).
pub const OXIDE_STATUS_KERNEL_ERROR: i32 = 6;
/// The kernel has no loop for the dtype (becomes a NotImplementedError, as AT_DISPATCH does).
pub const OXIDE_STATUS_UNSUPPORTED_DTYPE: i32 = 7;

/// An index out of range (becomes an IndexError, as on CPU).
pub const OXIDE_STATUS_INDEX_ERROR: i32 = 8;

/// Dtype codes of the ABI. They equal `c10::ScalarType` values: `tests` below
/// check them against `oxide_kernels::DType`, and the glue `static_assert`s them
/// against `c10::ScalarType`, so neither side is synchronised by hand.
pub const OXIDE_DTYPE_UINT8: i32 = 0;
pub const OXIDE_DTYPE_INT8: i32 = 1;
pub const OXIDE_DTYPE_INT16: i32 = 2;
pub const OXIDE_DTYPE_INT32: i32 = 3;
pub const OXIDE_DTYPE_INT64: i32 = 4;
pub const OXIDE_DTYPE_FLOAT16: i32 = 5;
pub const OXIDE_DTYPE_FLOAT32: i32 = 6;
pub const OXIDE_DTYPE_FLOAT64: i32 = 7;
pub const OXIDE_DTYPE_COMPLEX64: i32 = 9;
pub const OXIDE_DTYPE_COMPLEX128: i32 = 10;
pub const OXIDE_DTYPE_BOOL: i32 = 11;
pub const OXIDE_DTYPE_BFLOAT16: i32 = 15;
pub const OXIDE_DTYPE_UINT16: i32 = 27;
pub const OXIDE_DTYPE_UINT32: i32 = 28;
pub const OXIDE_DTYPE_UINT64: i32 = 29;

const _: () = {
    use oxide_kernels::DType as D;
    assert!(D::U8 as i32 == OXIDE_DTYPE_UINT8 && D::I8 as i32 == OXIDE_DTYPE_INT8);
    assert!(D::I16 as i32 == OXIDE_DTYPE_INT16 && D::I32 as i32 == OXIDE_DTYPE_INT32);
    assert!(D::I64 as i32 == OXIDE_DTYPE_INT64 && D::F16 as i32 == OXIDE_DTYPE_FLOAT16);
    assert!(D::F32 as i32 == OXIDE_DTYPE_FLOAT32 && D::F64 as i32 == OXIDE_DTYPE_FLOAT64);
    assert!(D::C64 as i32 == OXIDE_DTYPE_COMPLEX64 && D::C128 as i32 == OXIDE_DTYPE_COMPLEX128);
    assert!(D::Bool as i32 == OXIDE_DTYPE_BOOL && D::BF16 as i32 == OXIDE_DTYPE_BFLOAT16);
    assert!(D::U16 as i32 == OXIDE_DTYPE_UINT16 && D::U32 as i32 == OXIDE_DTYPE_UINT32 && D::U64 as i32 == OXIDE_DTYPE_UINT64);
};

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

/// Errors crossing the ABI.
#[derive(Debug, thiserror::Error)]
pub enum AbiError {
    #[error(transparent)]
    Runtime(#[from] oxide_runtime::Error),
    #[error(transparent)]
    Kernel(#[from] oxide_kernels::Error),
    #[error("{0}")]
    Invalid(String),
}

impl AbiError {
    fn status(&self) -> i32 {
        use oxide_runtime::Error as E;
        match self {
            AbiError::Runtime(E::InvalidDevice { .. }) => OXIDE_STATUS_INVALID_DEVICE,
            AbiError::Runtime(E::OutOfMemory { .. } | E::HostOutOfMemory { .. }) => OXIDE_STATUS_OUT_OF_MEMORY,
            AbiError::Runtime(E::Forked) => OXIDE_STATUS_FORKED,
            AbiError::Runtime(E::Config { .. } | E::Reserve { .. }) => OXIDE_STATUS_INTERNAL,
            AbiError::Runtime(E::InvalidEvent { .. }) => OXIDE_STATUS_RUNTIME_ERROR,
            AbiError::Kernel(oxide_kernels::Error::InvalidValue { .. }) => OXIDE_STATUS_KERNEL_ERROR,
            AbiError::Kernel(oxide_kernels::Error::UnsupportedDtype { .. }) => OXIDE_STATUS_UNSUPPORTED_DTYPE,
            AbiError::Kernel(oxide_kernels::Error::IndexOutOfBounds { .. } | oxide_kernels::Error::OutOfRange { .. }) => OXIDE_STATUS_INDEX_ERROR,
            AbiError::Runtime(_) | AbiError::Kernel(_) | AbiError::Invalid(_) => OXIDE_STATUS_INVALID_VALUE,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn ffi(f: impl FnOnce() -> Result<(), AbiError>) -> i32 {
    let (status, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return OXIDE_STATUS_SUCCESS,
        Ok(Err(e)) => (e.status(), e.to_string()),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            (OXIDE_STATUS_INTERNAL, format!("internal error in the oxide runtime (a Rust panic was caught): {what}"))
        }
    };
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
    status
}

/// Writes `out` only if it is non-null.
fn put<T>(out: *mut T, v: T) -> Result<(), AbiError> {
    if out.is_null() {
        return Err(AbiError::Invalid("null output pointer".into()));
    }
    // SAFETY: non-null, and the glue passes pointers to its own locals.
    unsafe { out.write(v) };
    Ok(())
}

/// Copies the calling thread's last error message into `buf` (NUL-terminated,
/// truncated to `len - 1` bytes). Returns the full message length in bytes.
///
/// # Safety
/// `buf` is null or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn oxide_last_error(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|e| {
        let msg = e.borrow();
        if !buf.is_null() && len > 0 {
            let n = msg.len().min(len - 1);
            // SAFETY: buf has room for len bytes per the contract above.
            unsafe {
                std::ptr::copy_nonoverlapping(msg.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
        }
        msg.len()
    })
}

/// Test hook: a body that panics, to prove the boundary turns a panic into
/// `OXIDE_STATUS_INTERNAL` plus a message instead of unwinding into C++.
#[no_mangle]
pub extern "C" fn oxide_test_panic() -> i32 {
    ffi(|| panic!("deliberate panic from oxide_test_panic"))
}

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
    ffi(|| put(out, runtime()?.current_device() as i32))
}

/// Sets the calling thread's current device.
#[no_mangle]
pub extern "C" fn oxide_set_device(device: i32) -> i32 {
    ffi(|| Ok(runtime()?.set_device(device as i64)?))
}

/// Checks that `device` is a valid index without changing anything.
#[no_mangle]
pub extern "C" fn oxide_check_device(device: i32) -> i32 {
    ffi(|| runtime()?.device(device as i64).map(|_| ()).map_err(Into::into))
}

/// Allocates `bytes` on `device` for use on `stream` through the caching allocator (null for 0 bytes).
#[no_mangle]
pub extern "C" fn oxide_malloc(device: i32, bytes: usize, stream: i64, out: *mut *mut c_void) -> i32 {
    ffi(|| {
        let p = runtime()?.device(device as i64)?.allocator().allocate(bytes, stream)?;
        put(out, p as *mut c_void)
    })
}

/// Returns a block from [`oxide_malloc`] to its device's cache. Null is a no-op.
#[no_mangle]
pub extern "C" fn oxide_free(ptr: *mut c_void) -> i32 {
    ffi(|| {
        if ptr.is_null() {
            return Ok(());
        }
        let rt = runtime()?;
        match rt.pointer_kind(ptr as usize) {
            PointerKind::Device(d) => Ok(rt.device(d as i64)?.allocator().free(ptr as usize)?),
            _ => Err(oxide_runtime::Error::InvalidPointer { ptr: ptr as usize }.into()),
        }
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
            PointerKind::Device(d) => Ok(rt.device(d as i64)?.allocator().record_stream(ptr as usize, user.index(), stream)?),
            _ => Err(oxide_runtime::Error::InvalidPointer { ptr: ptr as usize }.into()),
        }
    })
}

/// Releases every cached block of every device.
#[no_mangle]
pub extern "C" fn oxide_empty_cache() -> i32 {
    ffi(|| {
        runtime()?.empty_cache();
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

fn stat(s: oxide_runtime::Stat) -> OxideStat {
    OxideStat { current: s.current, peak: s.peak, allocated: s.allocated, freed: s.freed }
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

/// `cudaMemcpyAsync` of `bytes` on `stream` of `device` (the device side of the copy).
#[no_mangle]
pub extern "C" fn oxide_memcpy_async(dst: *mut c_void, src: *const c_void, bytes: usize, kind: i32, device: i32, stream: i64) -> i32 {
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
        Ok(rt.memcpy_async(dst as usize, src as usize, bytes, kind, stream)?)
    })
}

/// Strided device-to-device copy of `ndim`-dimensional operands whose
/// elements are `elem_size` bytes, enqueued on `stream` of `device`.
/// `shape`, `dst_strides`, `src_strides` hold `ndim` values (strides in elements).
///
/// # Safety
/// The glue guarantees that every addressed element lies in live device
/// memory and that destination and source do not overlap.
#[no_mangle]
pub unsafe extern "C" fn oxide_copy_strided(
    device: i32,
    stream: i64,
    elem_size: usize,
    ndim: usize,
    shape: *const i64,
    dst: *mut c_void,
    dst_strides: *const i64,
    src: *const c_void,
    src_strides: *const i64,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (shape, ds, ss) = unsafe { (dims(shape, ndim), dims(dst_strides, ndim), dims(src_strides, ndim)) };
        let layout = Layout::new("copy_", shape, [ds, ss])?;
        launch(device, stream, layout.numel(), &[dst, src], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::elementwise::copy::copy_strided(elem_size, &layout, dst as *mut u8, src as *const u8) }
        })
    })
}

/// Concatenation of `count` contiguous device operands into the contiguous
/// device operand `dst` (`torch.cat`): `dst` is `outer` rows, each made of
/// part 0's next `part_bytes[0]` bytes, then part 1's, and so on. Enqueued on
/// `stream` of `device`, on up to `threads` tasks.
///
/// # Safety
/// `srcs` and `part_bytes` hold `count` values; part `i` holds
/// `outer * part_bytes[i]` bytes of live device memory and `dst` their sum,
/// overlapping no part.
#[no_mangle]
pub unsafe extern "C" fn oxide_cat_contiguous(device: i32, stream: i64, count: usize, srcs: *const *const c_void, part_bytes: *const usize, outer: usize, dst: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes count-long arrays.
        let (srcs, sizes) = unsafe {
            if count == 0 { (&[][..], &[][..]) } else { (std::slice::from_raw_parts(srcs, count), std::slice::from_raw_parts(part_bytes, count)) }
        };
        let parts: Vec<(*const u8, usize)> = srcs.iter().zip(sizes).filter(|(_, &n)| n > 0).map(|(&p, &n)| (p as *const u8, n)).collect();
        let mut operands: Vec<*const c_void> = vec![dst as *const c_void];
        operands.extend(parts.iter().map(|p| p.0 as *const c_void));
        let bytes = outer * parts.iter().map(|p| p.1).sum::<usize>();
        launch(device, stream, bytes, &operands, || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::elementwise::copy::cat_contiguous(outer, &parts, dst as *mut u8, threads.max(1) as usize) };
            Ok::<(), oxide_kernels::Error>(())
        })
    })
}

/// Writes the `elem_size` bytes at `pattern` to every element of the strided
/// device operand `dst` (`ndim` dimensions, strides in elements), enqueued on
/// `stream` of `device`.
///
/// # Safety
/// The glue guarantees that every addressed element lies in live device
/// memory and that `pattern` holds `elem_size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn oxide_fill_strided(
    device: i32,
    stream: i64,
    elem_size: usize,
    ndim: usize,
    shape: *const i64,
    dst: *mut c_void,
    dst_strides: *const i64,
    pattern: *const c_void,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (shape, strides) = unsafe { (dims(shape, ndim), dims(dst_strides, ndim)) };
        let layout = Layout::new("fill_", shape, [strides])?;
        launch(device, stream, layout.numel(), &[dst], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::elementwise::fill::fill_strided(elem_size, &layout, dst as *mut u8, pattern as *const u8) }
        })
    })
}

/// `ndim` values at `p` (an empty slice for `ndim == 0`, whatever `p` is).
///
/// # Safety
/// For `ndim > 0`, `p` points to `ndim` readable values.
unsafe fn dims<'a>(p: *const i64, ndim: usize) -> &'a [i64] {
    if ndim == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(p, ndim) }
    }
}

/// The calling thread's current stream on `device`.
#[no_mangle]
pub extern "C" fn oxide_stream_current(device: i32, out: *mut i64) -> i32 {
    ffi(|| put(out, runtime()?.current_stream(device as i64)?))
}

/// Makes `stream` current on `device` for the calling thread; `out` receives the previous one.
#[no_mangle]
pub extern "C" fn oxide_stream_exchange(device: i32, stream: i64, out: *mut i64) -> i32 {
    ffi(|| put(out, runtime()?.exchange_stream(device as i64, stream)?))
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

fn event<'a>(e: *const OxideEvent) -> Result<&'a OxideEvent, AbiError> {
    // SAFETY: non-null handles come from oxide_event_create and live until oxide_event_destroy.
    unsafe { e.as_ref() }.ok_or_else(|| AbiError::Invalid("null event".into()))
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
        let state = runtime()?.device(device as i64)?.streams().state(stream)?;
        event(e)?.get().record(device as usize, stream, state);
        Ok(())
    })
}

/// Device the event was last recorded on, or -1.
#[no_mangle]
pub extern "C" fn oxide_event_device(e: *const OxideEvent, out: *mut i32) -> i32 {
    ffi(|| put(out, event(e)?.get().recorded_on().map_or(-1, |(d, _)| d as i32)))
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

/// `cudaStreamWaitEvent`: later work on `stream` of `device` waits for the event.
/// With inline streams the event's work has finished, so this only validates.
#[no_mangle]
pub extern "C" fn oxide_stream_wait_event(device: i32, stream: i64, e: *const OxideEvent) -> i32 {
    ffi(|| {
        runtime()?.device(device as i64)?.streams().state(stream)?;
        event(e)?.get().synchronize();
        Ok(())
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

/// Distribution kinds of [`OxideDistribution`].
pub const OXIDE_DIST_UNIFORM: i32 = 0;
pub const OXIDE_DIST_NORMAL: i32 = 1;
pub const OXIDE_DIST_BERNOULLI: i32 = 2;
pub const OXIDE_DIST_EXPONENTIAL: i32 = 3;
pub const OXIDE_DIST_CAUCHY: i32 = 4;
pub const OXIDE_DIST_LOG_NORMAL: i32 = 5;
pub const OXIDE_DIST_GEOMETRIC: i32 = 6;
pub const OXIDE_DIST_INTEGERS: i32 = 7;

/// A distribution and its parameters: `a`, `b` are (from, to), (mean, std),
/// (p, -), (lambda, -), (median, sigma) or (p, -) by kind; integers use
/// `base + bits % range` (`range` 0 = 2^64).
#[repr(C)]
pub struct OxideDistribution {
    pub kind: i32,
    pub a: f64,
    pub b: f64,
    pub base: i64,
    pub range: u64,
}

/// Philox4x32-10 state for one kernel: the key (seed) and the first counter (offset).
#[repr(C)]
pub struct OxidePhilox {
    pub seed: u64,
    pub offset: u64,
}

fn philox(p: &OxidePhilox) -> impl Fn(u64) -> [u32; 4] + Sync {
    let engine = oxide_runtime::Philox4x32::new(p.seed);
    let offset = p.offset;
    move |i| engine.block(offset.wrapping_add(i))
}

fn dtype(code: i32) -> Result<oxide_kernels::DType, AbiError> {
    Ok(oxide_kernels::DType::from_code(code)?)
}

fn check_device_ptr(rt: &oxide_runtime::Runtime, p: *const c_void, numel: usize) -> Result<(), AbiError> {
    if numel > 0 && !matches!(rt.pointer_kind(p as usize), PointerKind::Device(_)) {
        return Err(oxide_runtime::Error::InvalidPointer { ptr: p as usize }.into());
    }
    Ok(())
}

/// The common tail of every kernel entry point: when there is work (`numel > 0`)
/// each operand must be device memory; then `kernel` runs on `stream` of `device`
/// and its error, if any, is returned.
fn launch<T, E: Into<AbiError>>(
    device: i32,
    stream: i64,
    numel: usize,
    operands: &[*const c_void],
    kernel: impl FnOnce() -> Result<T, E>,
) -> Result<T, AbiError> {
    let rt = runtime()?;
    for &p in operands {
        check_device_ptr(rt, p, numel)?;
    }
    let (_, r) = rt.device(device as i64)?.streams().launch(stream, kernel)?;
    r.map_err(Into::into)
}

/// Fills the strided device operand `dst` (`ndim` dims, element strides) of
/// dtype `dtype_code` with samples of `dist`; element k in iteration order uses
/// Philox block `philox.offset + k`. Enqueued on `stream` of `device`.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_random_sample(
    device: i32,
    stream: i64,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    dst: *mut c_void,
    strides: *const i64,
    dist: OxideDistribution,
    philox_state: OxidePhilox,
) -> i32 {
    use oxide_kernels::ops::random::random::Distribution as D;
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let layout = Layout::new("random", unsafe { dims(shape, ndim) }, [unsafe { dims(strides, ndim) }])?;
        let d = match dist.kind {
            OXIDE_DIST_UNIFORM => D::Uniform { from: dist.a, to: dist.b },
            OXIDE_DIST_NORMAL => D::Normal { mean: dist.a, std: dist.b },
            OXIDE_DIST_BERNOULLI => D::Bernoulli { p: dist.a },
            OXIDE_DIST_EXPONENTIAL => D::Exponential { lambda: dist.a },
            OXIDE_DIST_CAUCHY => D::Cauchy { median: dist.a, sigma: dist.b },
            OXIDE_DIST_LOG_NORMAL => D::LogNormal { mean: dist.a, std: dist.b },
            OXIDE_DIST_GEOMETRIC => D::Geometric { p: dist.a },
            OXIDE_DIST_INTEGERS => D::Integers { base: dist.base, range: dist.range },
            k => return Err(AbiError::Invalid(format!("unknown distribution kind {k}"))),
        };
        let dt = dtype(dtype_code)?;
        let bits = philox(&philox_state);
        launch(device, stream, layout.numel(), &[dst], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::random::random::sample(dt, &layout, dst as *mut u8, d, &bits) }
        })
    })
}

/// `bernoulli_(p)` with a float64 probability operand `p` already broadcast to `dst`'s shape.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_bernoulli_tensor(
    device: i32,
    stream: i64,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    dst: *mut c_void,
    dst_strides: *const i64,
    p: *const c_void,
    p_strides: *const i64,
    philox_state: OxidePhilox,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (sh, ds, ps) = unsafe { (dims(shape, ndim), dims(dst_strides, ndim), dims(p_strides, ndim)) };
        let layout = Layout::new("bernoulli_", sh, [ds, ps])?;
        let dt = dtype(dtype_code)?;
        let bits = philox(&philox_state);
        launch(device, stream, layout.numel(), &[dst, p], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::random::random::bernoulli_tensor(dt, &layout, dst as *mut u8, p as *const f64, &bits) }
        })
    })
}

/// Dropout scaling `out = mask ? input * scale : 0` over three strided device
/// operands (`out`, `input` of `dtype_code`, `mask` of bool).
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_masked_scale(
    device: i32,
    stream: i64,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    out: *mut c_void,
    out_strides: *const i64,
    input: *const c_void,
    input_strides: *const i64,
    mask: *const c_void,
    mask_strides: *const i64,
    scale: f64,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (sh, os, is, ms) = unsafe { (dims(shape, ndim), dims(out_strides, ndim), dims(input_strides, ndim), dims(mask_strides, ndim)) };
        let layout = Layout::new("masked_scale", sh, [os, is, ms])?;
        let dt = dtype(dtype_code)?;
        launch(device, stream, layout.numel(), &[out, input, mask], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::random::random::masked_scale(dt, &layout, out as *mut u8, input as *const u8, mask as *const bool, scale) }
        })
    })
}

/// `randperm(n)` into the 1-D strided device operand `out` (`n` elements at
/// `stride`) of dtype `dtype_code`; swap i uses Philox block `offset + i`.
///
/// # Safety
/// `out` addresses `n` live device elements at `stride`.
#[no_mangle]
pub unsafe extern "C" fn oxide_randperm(device: i32, stream: i64, dtype_code: i32, n: i64, out: *mut c_void, stride: i64, philox_state: OxidePhilox) -> i32 {
    ffi(|| {
        let layout = Layout::new("randperm", &[n], [&[stride]])?;
        let dt = dtype(dtype_code)?;
        let bits = philox(&philox_state);
        launch(device, stream, layout.numel(), &[out], || -> Result<(), AbiError> {
            let perm = oxide_kernels::ops::random::random::randperm(n as usize, &bits);
            let src = Layout::new("randperm", &[n], [&[stride], &[1]])?;
            // SAFETY: out addresses n elements (contract); perm is a host buffer of n i64s
            // converted element by element into the destination dtype.
            unsafe { oxide_kernels::ops::elementwise::cast::cast_from_i64(dt, &src, out as *mut u8, &perm)? };
            Ok(())
        })
    })
}

/// `multinomial`: `samples` draws per row of the contiguous `rows x categories`
/// weights (float32 or float64) into the contiguous int64 `out`.
///
/// # Safety
/// `weights` holds rows*categories live device elements, `out` rows*samples.
#[no_mangle]
pub unsafe extern "C" fn oxide_multinomial(
    device: i32,
    stream: i64,
    dtype_code: i32,
    rows: usize,
    categories: usize,
    weights: *const c_void,
    samples: usize,
    replacement: bool,
    out: *mut c_void,
    philox_state: OxidePhilox,
) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        check_device_ptr(runtime()?, weights, rows * categories)?;
        let bits = philox(&philox_state);
        launch(device, stream, rows * samples, &[out], || -> Result<(), AbiError> {
            // SAFETY: sizes per the contract.
            let out = unsafe { std::slice::from_raw_parts_mut(out as *mut i64, rows * samples) };
            match dt {
                oxide_kernels::DType::F32 => {
                    // SAFETY: sizes per the contract.
                    let w = unsafe { std::slice::from_raw_parts(weights as *const f32, rows * categories) };
                    oxide_kernels::ops::random::random::multinomial(w, rows, categories, samples, replacement, &bits, out)?
                }
                oxide_kernels::DType::F64 => {
                    // SAFETY: sizes per the contract.
                    let w = unsafe { std::slice::from_raw_parts(weights as *const f64, rows * categories) };
                    oxide_kernels::ops::random::random::multinomial(w, rows, categories, samples, replacement, &bits, out)?
                }
                d => return Err(oxide_kernels::Error::UnsupportedDtype { op: "multinomial", dtype: d }.into()),
            }
            Ok(())
        })
    })
}

/// Activation kinds of [`oxide_activation_forward`] / [`oxide_activation_backward`].
pub const OXIDE_ACT_SELU: i32 = 0;
pub const OXIDE_ACT_SWISH: i32 = 1;

fn activation_kind(kind: i32) -> Result<(oxide_kernels::ops::custom::activation::Forward, oxide_kernels::ops::custom::activation::Backward), AbiError> {
    use oxide_kernels::ops::custom::activation::{Backward, Forward};
    match kind {
        OXIDE_ACT_SELU => Ok((Forward::Selu, Backward::Selu)),
        OXIDE_ACT_SWISH => Ok((Forward::Swish, Backward::Swish)),
        k => Err(AbiError::Invalid(format!("unknown activation kind {k}"))),
    }
}

/// `out = f(x)` for activation `kind` over two strided device operands of `dtype_code`.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_activation_forward(
    device: i32,
    stream: i64,
    kind: i32,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    out: *mut c_void,
    out_strides: *const i64,
    x: *const c_void,
    x_strides: *const i64,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (sh, os, xs) = unsafe { (dims(shape, ndim), dims(out_strides, ndim), dims(x_strides, ndim)) };
        let layout = Layout::new("activation", sh, [os, xs])?;
        let (fw, _) = activation_kind(kind)?;
        let dt = dtype(dtype_code)?;
        launch(device, stream, layout.numel(), &[out, x], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::custom::activation::forward(fw, dt, &layout, out as *mut u8, x as *const u8) }
        })
    })
}

/// `dx = dy * f'(x)` for activation `kind` over three strided device operands of `dtype_code`.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_activation_backward(
    device: i32,
    stream: i64,
    kind: i32,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    dx: *mut c_void,
    dx_strides: *const i64,
    dy: *const c_void,
    dy_strides: *const i64,
    x: *const c_void,
    x_strides: *const i64,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (sh, a, b, c) = unsafe { (dims(shape, ndim), dims(dx_strides, ndim), dims(dy_strides, ndim), dims(x_strides, ndim)) };
        let layout = Layout::new("activation_backward", sh, [a, b, c])?;
        let (_, bw) = activation_kind(kind)?;
        let dt = dtype(dtype_code)?;
        launch(device, stream, layout.numel(), &[dx, dy, x], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::custom::activation::backward(bw, dt, &layout, dx as *mut u8, dy as *const u8, x as *const u8) }
        })
    })
}

/// `_amp_foreach_non_finite_check_and_unscale_` for one strided device operand:
/// scales it in place by `inv_scale` and ORs "found a NaN/inf" into `*found`.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_amp_unscale(
    device: i32,
    stream: i64,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    data: *mut c_void,
    strides: *const i64,
    inv_scale: f64,
    found: *mut bool,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let layout = Layout::new("_amp_foreach_non_finite_check_and_unscale_", unsafe { dims(shape, ndim) }, [unsafe { dims(strides, ndim) }])?;
        let dt = dtype(dtype_code)?;
        let any = launch(device, stream, layout.numel(), &[data], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::optim::amp::unscale_and_check(dt, &layout, data as *mut u8, inv_scale) }
        })?;
        // SAFETY: found is the glue's local.
        if any && !found.is_null() {
            unsafe { *found = true };
        }
        Ok(())
    })
}

/// `_amp_update_scale_` on one-element device tensors: `scale` (float32),
/// `growth_tracker` (int32) and `found_inf` (float32).
///
/// # Safety
/// The three pointers address one live device element each.
#[no_mangle]
pub unsafe extern "C" fn oxide_amp_update_scale(
    device: i32,
    stream: i64,
    scale: *mut f32,
    growth_tracker: *mut i32,
    found_inf: *const f32,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
) -> i32 {
    ffi(|| {
        let operands = [scale as *const c_void, growth_tracker as *const c_void, found_inf as *const c_void];
        launch(device, stream, 1, &operands, || -> Result<(), AbiError> {
            // SAFETY: one element each, per the contract.
            unsafe {
                let (mut s, mut t) = (scale.read_unaligned(), growth_tracker.read_unaligned());
                oxide_kernels::ops::optim::amp::update_scale(&mut s, &mut t, found_inf.read_unaligned(), growth_factor, backoff_factor, growth_interval);
                scale.write_unaligned(s);
                growth_tracker.write_unaligned(t);
            }
            Ok(())
        })
    })
}

/// A `TensorIterator` as the glue hands it over: `ndim` extents (dimension 0
/// fastest), and per operand (outputs first) a data pointer, a dtype code and
/// `ndim` byte strides (operand-major in `strides`). `threads` is PyTorch's
/// `at::get_num_threads()`.
#[repr(C)]
pub struct OxideIter {
    pub ndim: usize,
    pub shape: *const i64,
    pub ntensors: usize,
    pub noutputs: usize,
    pub data: *const *mut c_void,
    pub dtypes: *const i32,
    pub strides: *const i64,
    pub threads: i32,
}

/// Converts an [`OxideIter`] and checks that every operand that is not a
/// broadcast scalar (all strides 0: a CPU scalar may live in host memory) is device memory.
///
/// # Safety
/// The arrays hold the counts the struct states.
unsafe fn tensor_iter(op: &'static str, it: &OxideIter) -> Result<oxide_kernels::engine::iter::TensorIter, AbiError> {
    use oxide_kernels::engine::iter::{Operand, TensorIter};
    // SAFETY: caller contract.
    let (shape, data, dtypes, strides) = unsafe {
        (
            dims(it.shape, it.ndim),
            std::slice::from_raw_parts(it.data, it.ntensors),
            std::slice::from_raw_parts(it.dtypes, it.ntensors),
            if it.ndim * it.ntensors == 0 { &[][..] } else { std::slice::from_raw_parts(it.strides, it.ndim * it.ntensors) },
        )
    };
    let numel: usize = shape.iter().map(|&d| d.max(0) as usize).product();
    let rt = runtime()?;
    let mut operands = Vec::with_capacity(it.ntensors);
    for k in 0..it.ntensors {
        let s = &strides[k * it.ndim..(k + 1) * it.ndim];
        if s.iter().any(|&x| x != 0) {
            check_device_ptr(rt, data[k], numel)?;
        }
        operands.push((Operand { ptr: data[k] as *mut u8, dtype: dtype(dtypes[k])? }, s));
    }
    Ok(TensorIter::new(op, shape, operands, it.noutputs, it.threads.max(1) as usize)?)
}

/// The id of the pointwise op named `name` (see `oxide_kernels::ops::elementwise::pointwise`), or -1.
/// The glue resolves each name once and caches the id.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn oxide_pointwise_lookup(name: *const c_char) -> i32 {
    // SAFETY: caller contract.
    let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap_or("");
    oxide_kernels::ops::elementwise::pointwise::PointwiseOp::lookup(name).map_or(-1, |o| o.id())
}

/// Runs pointwise op `op` (an id from [`oxide_pointwise_lookup`]) over `iter`
/// on `stream` of `device`, computing in the opmath type of dtype `common`
/// (-1: the op family's default), with scalar arguments `f[0..4]` / `i[0..4]`
/// (the same values as double and int64).
///
/// # Safety
/// `iter` describes live memory as [`OxideIter`] states; `f` and `i` hold 4 values each.
#[no_mangle]
pub unsafe extern "C" fn oxide_pointwise(device: i32, stream: i64, op: i32, iter: *const OxideIter, common: i32, f: *const f64, i: *const i64) -> i32 {
    ffi(|| {
        let o = oxide_kernels::ops::elementwise::pointwise::PointwiseOp::from_id(op).ok_or_else(|| AbiError::Invalid(format!("unknown pointwise op id {op}")))?;
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter(o.name(), &*iter) }?;
        let common = if common < 0 { None } else { Some(dtype(common)?) };
        // SAFETY: caller contract.
        let ctx = unsafe {
            oxide_kernels::ops::elementwise::pointwise::Ctx { f: std::ptr::read(f as *const [f64; 4]), i: std::ptr::read(i as *const [i64; 4]), ..Default::default() }
        };
        let rt = runtime()?;
        let (_, r) = rt.device(device as i64)?.streams().launch(stream, || unsafe { o.run(&it, common, &ctx) })?;
        Ok(r?)
    })
}

/// Runs reduction stub `name` (`sum`, `mean`, `prod`, `max_values`, `argmax`,
/// `std_var`, `norm`, ... see `oxide_kernels::ops::reduce::reduce::ReduceOp::lookup`, with
/// scalar arguments `a`, `b`) over the reduction iterator `iter`.
///
/// # Safety
/// As [`oxide_pointwise`]; `name` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn oxide_reduce(device: i32, stream: i64, name: *const c_char, a: f64, b: f64, iter: *const OxideIter) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap_or("");
        let op = oxide_kernels::ops::reduce::reduce::ReduceOp::lookup(name, a, b).ok_or_else(|| AbiError::Invalid(format!("unknown reduction {name}")))?;
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter("reduce", &*iter) }?;
        let rt = runtime()?;
        let (_, r) = rt.device(device as i64)?.streams().launch(stream, || unsafe { oxide_kernels::ops::reduce::reduce::reduce(op, &it) })?;
        Ok(r?)
    })
}

/// One operand of [`oxide_gemm`]: pointer to element (0, 0) of batch 0 and element strides.
#[repr(C)]
pub struct OxideMatrix {
    pub data: *mut c_void,
    pub batch_stride: i64,
    pub row_stride: i64,
    pub col_stride: i64,
}

/// `C[b] = alpha * A[b] @ B[b] + beta * C[b]` for `batch` products of
/// (m x k) @ (k x n), all of dtype `dtype_code`, on `stream` of `device`
/// (`beta == 0`: C is not read).
///
/// # Safety
/// Every addressed element is live device memory; C does not overlap A or B.
#[no_mangle]
pub unsafe extern "C" fn oxide_gemm(
    device: i32,
    stream: i64,
    dtype_code: i32,
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: OxideMatrix,
    b: OxideMatrix,
    beta: f64,
    c: OxideMatrix,
) -> i32 {
    use oxide_kernels::ops::linalg::gemm::{gemm, GemmShape, Matrix};
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let mat = |x: &OxideMatrix| Matrix { ptr: x.data as *mut u8, batch_stride: x.batch_stride as isize, row_stride: x.row_stride as isize, col_stride: x.col_stride as isize };
        let work = batch * m * n;
        let operands = if k == 0 { vec![c.data as *const c_void] } else { vec![a.data as *const c_void, b.data as *const c_void, c.data as *const c_void] };
        launch(device, stream, work, &operands, || unsafe { gemm(dt, GemmShape { batch, m, n, k }, alpha, mat(&a), mat(&b), beta, mat(&c)) })
    })
}

/// Advanced indexing over `iter` (destination, source, `nindexed` index
/// operands): `put == 0` gathers (`x[idx]`), otherwise scatters (`x[idx] = v`,
/// adding when `accumulate != 0`). `sizes`/`strides` (bytes) describe the
/// indexed dimensions of the restrided tensor; elements are `elem_size` bytes.
/// Negative indices count from the end when `wrap_negative != 0`, else they are
/// out of range (index_select, embedding).
///
/// # Safety
/// As [`oxide_pointwise`]; `sizes` and `strides` hold `nindexed` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_index(
    device: i32,
    stream: i64,
    iter: *const OxideIter,
    nindexed: usize,
    sizes: *const i64,
    strides: *const i64,
    elem_size: usize,
    put: i32,
    accumulate: i32,
    wrap_negative: i32,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter("index", &*iter) }?;
        let ix = oxide_kernels::ops::index::index::Indexed {
            sizes: unsafe { dims(sizes, nindexed) },
            strides: unsafe { dims(strides, nindexed) },
            wrap_negative: wrap_negative != 0,
        };
        let rt = runtime()?;
        let (_, r) = rt.device(device as i64)?.streams().launch(stream, || unsafe {
            if put != 0 {
                oxide_kernels::ops::index::index::index_put(&it, &ix, elem_size, accumulate != 0)
            } else {
                oxide_kernels::ops::index::index::index(&it, &ix, elem_size)
            }
        })?;
        Ok(r?)
    })
}

/// Fills operand 0 of `iter` with `arange` (`kind` 0: start `a`/`ia`, step
/// `b`/`ib`) or `linspace` (`kind` 1: from `a` to `b` in `steps` values).
///
/// # Safety
/// As [`oxide_pointwise`].
#[no_mangle]
pub unsafe extern "C" fn oxide_fill_sequence(device: i32, stream: i64, iter: *const OxideIter, kind: i32, a: f64, b: f64, ia: i64, ib: i64, steps: i64) -> i32 {
    use oxide_kernels::ops::elementwise::factory::{fill_sequence, Sequence};
    ffi(|| {
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter("arange", &*iter) }?;
        let seq = match kind {
            0 => Sequence::Arange { start: a, step: b, istart: ia, istep: ib },
            1 => Sequence::Linspace { start: a, end: b, steps },
            k => return Err(AbiError::Invalid(format!("unknown sequence kind {k}"))),
        };
        let rt = runtime()?;
        let (_, r) = rt.device(device as i64)?.streams().launch(stream, || unsafe { fill_sequence(&it, seq) })?;
        Ok(r?)
    })
}

/// `usize` extents from `i64` ones (negative extents are rejected).
fn extents(op: &'static str, shape: &[i64]) -> Result<Vec<usize>, AbiError> {
    shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| AbiError::Kernel(oxide_kernels::Error::InvalidLayout { op, reason: format!("negative extent {d}") })))
        .collect()
}

/// Cumulative op `op` (0 cumsum, 1 cumprod, 2 cummax, 3 cummin) along `dim`
/// of the strided tensor `input` (`ndim` extents, element strides) into `out`
/// (and `indices`, int64, for cummax/cummin; may be null otherwise).
///
/// # Safety
/// All arrays hold `ndim` values; every addressed element is live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_scan(
    device: i32,
    stream: i64,
    op: i32,
    ndim: usize,
    shape: *const i64,
    dim: usize,
    in_dtype: i32,
    input: *const c_void,
    in_strides: *const i64,
    out_dtype: i32,
    out: *mut c_void,
    out_strides: *const i64,
    indices: *mut i64,
    idx_strides: *const i64,
    threads: i32,
) -> i32 {
    use oxide_kernels::ops::reduce::scan::{scan, ScanOp};
    ffi(|| {
        let op = match op {
            0 => ScanOp::CumSum,
            1 => ScanOp::CumProd,
            2 => ScanOp::CumMax,
            3 => ScanOp::CumMin,
            k => return Err(AbiError::Invalid(format!("unknown scan op {k}"))),
        };
        // SAFETY: caller contract.
        let shape = extents("scan", unsafe { dims(shape, ndim) })?;
        let conv = |p: *const i64| -> Vec<isize> { unsafe { dims(p, ndim) }.iter().map(|&s| s as isize).collect() };
        let (ins, outs) = (conv(in_strides), conv(out_strides));
        let idxs = if indices.is_null() { vec![] } else { conv(idx_strides) };
        let (idt, odt) = (dtype(in_dtype)?, dtype(out_dtype)?);
        let numel: usize = shape.iter().product();
        let mut operands = vec![input, out as *const c_void];
        if !indices.is_null() {
            operands.push(indices as *const c_void);
        }
        launch(device, stream, numel, &operands, || unsafe {
            let idx = if indices.is_null() { None } else { Some((indices, &idxs[..])) };
            scan(op, &shape, dim, idt, input as *const u8, &ins, odt, out as *mut u8, &outs, idx, threads.max(1) as usize)
        })
    })
}

/// Stable sort of `rows` contiguous rows of `len` elements of `dtype_code` at
/// `data`, in place; original positions go to `indices` (rows x len int64).
///
/// # Safety
/// `data` holds rows*len elements, `indices` rows*len int64, both live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_sort_rows(device: i32, stream: i64, dtype_code: i32, rows: usize, len: usize, data: *mut c_void, indices: *mut i64, descending: i32, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        launch(device, stream, rows * len, &[data as *const c_void, indices as *const c_void], || unsafe {
            oxide_kernels::ops::reduce::sort::sort_rows(dt, rows, len, data as *mut u8, indices, descending != 0, threads.max(1) as usize)
        })
    })
}

/// `torch.nonzero`: with `out` null, stores the number of nonzero elements of
/// the strided tensor in `*count`; otherwise writes their coordinates
/// (`*count` x `ndim` int64, row-major order) to `out`.
///
/// # Safety
/// Arrays hold `ndim` values; `data` addresses live memory of `dtype_code`;
/// `out` (when non-null) holds `*count * ndim` int64.
#[no_mangle]
pub unsafe extern "C" fn oxide_nonzero(device: i32, stream: i64, dtype_code: i32, ndim: usize, shape: *const i64, strides: *const i64, data: *const c_void, out: *mut i64, count: *mut usize) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        // SAFETY: caller contract.
        let shape = extents("nonzero", unsafe { dims(shape, ndim) })?;
        let strides: Vec<isize> = unsafe { dims(strides, ndim) }.iter().map(|&s| s as isize).collect();
        let numel: usize = shape.iter().product();
        launch(device, stream, numel, &[data], || unsafe {
            if out.is_null() {
                *count = oxide_kernels::ops::reduce::nonzero::count_nonzero(dt, &shape, &strides, data as *const u8)?;
                Ok::<(), oxide_kernels::Error>(())
            } else {
                oxide_kernels::ops::reduce::nonzero::nonzero(dt, &shape, &strides, data as *const u8, out, *count)
            }
        })
    })
}

/// Softmax (`log` = 0) or log-softmax (`log` != 0) of the contiguous
/// `[outer, dim, inner]` tensor `input` (dtype `in_dtype`) along its middle
/// dimension into `out` (dtype `out_dtype`: the same, or float32 for a half input).
///
/// # Safety
/// Both hold `outer * dim * inner` elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_softmax(device: i32, stream: i64, in_dtype: i32, input: *const c_void, out_dtype: i32, out: *mut c_void, outer: usize, dim: usize, inner: usize, log: i32, threads: i32) -> i32 {
    ffi(|| {
        let (idt, odt) = (dtype(in_dtype)?, dtype(out_dtype)?);
        launch(device, stream, outer * dim * inner, &[input, out as *const c_void], || unsafe {
            oxide_kernels::ops::nn::softmax::softmax(idt, input as *const u8, odt, out as *mut u8, outer, dim, inner, log != 0, threads.max(1) as usize)
        })
    })
}

/// Backward of [`oxide_softmax`]: `grad` and `output` (dtype `dtype`) to
/// `grad_input` (dtype `gin_dtype`), all contiguous `[outer, dim, inner]`.
///
/// # Safety
/// All three hold `outer * dim * inner` elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_softmax_backward(device: i32, stream: i64, dtype_code: i32, grad: *const c_void, output: *const c_void, gin_dtype: i32, grad_input: *mut c_void, outer: usize, dim: usize, inner: usize, log: i32, threads: i32) -> i32 {
    ffi(|| {
        let (dt, gdt) = (dtype(dtype_code)?, dtype(gin_dtype)?);
        launch(device, stream, outer * dim * inner, &[grad, output, grad_input as *const c_void], || unsafe {
            oxide_kernels::ops::nn::softmax::softmax_backward(dt, grad as *const u8, output as *const u8, gdt, grad_input as *mut u8, outer, dim, inner, log != 0, threads.max(1) as usize)
        })
    })
}

/// `nll_loss` / `nll_loss2d` forward over log-probabilities `[n, c, s]` and
/// int64 targets `[n, s]` (contiguous); `weight` (c elements) may be null.
/// `reduction` is PyTorch's code (0 none, 1 mean, 2 sum).
///
/// # Safety
/// Pointers address the contiguous tensors described; `out` holds n*s
/// elements for reduction 0, else one; `total_weight` one.
#[no_mangle]
pub unsafe extern "C" fn oxide_nll_loss(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, reduction: i64, ignore_index: i64, input: *const c_void, target: *const i64, weight: *const c_void, out: *mut c_void, total_weight: *mut c_void) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let sh = oxide_kernels::ops::nn::nll::NllShape { n, c, s, ignore_index, reduction: oxide_kernels::ops::nn::nll::Reduction::from_code(reduction)? };
        launch(device, stream, n * c * s, &[input], || unsafe {
            oxide_kernels::ops::nn::nll::nll_loss(dt, sh, input as *const u8, target, weight as *const u8, out as *mut u8, total_weight as *mut u8)
        })
    })
}

/// Backward of [`oxide_nll_loss`] into the zero-filled `grad_input` (`[n, c, s]`).
///
/// # Safety
/// As [`oxide_nll_loss`]; `grad_output` holds n*s elements for reduction 0, else one.
#[no_mangle]
pub unsafe extern "C" fn oxide_nll_loss_backward(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, reduction: i64, ignore_index: i64, grad_output: *const c_void, target: *const i64, weight: *const c_void, total_weight: *const c_void, grad_input: *mut c_void) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let sh = oxide_kernels::ops::nn::nll::NllShape { n, c, s, ignore_index, reduction: oxide_kernels::ops::nn::nll::Reduction::from_code(reduction)? };
        launch(device, stream, n * c * s, &[grad_input as *const c_void], || unsafe {
            oxide_kernels::ops::nn::nll::nll_loss_backward(dt, sh, grad_output as *const u8, target, weight as *const u8, total_weight as *const u8, grad_input as *mut u8)
        })
    })
}

/// Group norm forward (layer norm is `g = 1, s = 1`): `x`, `y` contiguous
/// `[n, c, s]` of `dtype_code`; `weight`/`bias` `[c]` of `param_dtype` (may
/// be null); `mean`/`rstd` `[n, g]` of `stat_dtype`.
///
/// # Safety
/// Pointers address live device tensors of those shapes.
#[no_mangle]
pub unsafe extern "C" fn oxide_group_norm(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, g: usize, x: *const c_void, param_dtype: i32, weight: *const c_void, bias: *const c_void, eps: f64, y: *mut c_void, stat_dtype: i32, mean: *mut c_void, rstd: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt, sdt) = (dtype(dtype_code)?, dtype(param_dtype)?, dtype(stat_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::GroupShape { n, c, s, g };
        launch(device, stream, n * c * s, &[x, y as *const c_void], || unsafe {
            oxide_kernels::ops::nn::norm::group_norm(dt, sh, x as _, pdt, weight as _, bias as _, eps, y as _, sdt, mean as _, rstd as _, threads.max(1) as usize)
        })
    })
}

/// Group norm backward; `dx`, `dweight`, `dbias` may each be null (not computed).
///
/// # Safety
/// As [`oxide_group_norm`]; `dy`, `dx` are `[n, c, s]`, `dweight`/`dbias` `[c]`.
#[no_mangle]
pub unsafe extern "C" fn oxide_group_norm_backward(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, g: usize, dy: *const c_void, x: *const c_void, stat_dtype: i32, mean: *const c_void, rstd: *const c_void, param_dtype: i32, weight: *const c_void, dx: *mut c_void, dweight: *mut c_void, dbias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt, sdt) = (dtype(dtype_code)?, dtype(param_dtype)?, dtype(stat_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::GroupShape { n, c, s, g };
        launch(device, stream, n * c * s, &[dy, x], || unsafe {
            oxide_kernels::ops::nn::norm::group_norm_backward(dt, sh, dy as _, x as _, sdt, mean as _, rstd as _, pdt, weight as _, dx as _, dweight as _, dbias as _, threads.max(1) as usize)
        })
    })
}

/// Batch norm forward over `x` `[n, c, s]` (contiguous, `dtype_code`);
/// per-channel tensors `[c]` of `param_dtype`, each possibly null. Training
/// writes `save_mean`/`save_invstd` and updates the running statistics.
///
/// # Safety
/// Pointers address live device tensors of those shapes.
#[no_mangle]
pub unsafe extern "C" fn oxide_batch_norm(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, x: *const c_void, param_dtype: i32, weight: *const c_void, bias: *const c_void, running_mean: *mut c_void, running_var: *mut c_void, training: i32, momentum: f64, eps: f64, y: *mut c_void, save_mean: *mut c_void, save_invstd: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt) = (dtype(dtype_code)?, dtype(param_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::BatchShape { n, c, s };
        let p = oxide_kernels::ops::nn::norm::BatchParams { weight: weight as _, bias: bias as _, running_mean: running_mean as _, running_var: running_var as _ };
        launch(device, stream, n * c * s, &[x, y as *const c_void], || unsafe {
            oxide_kernels::ops::nn::norm::batch_norm(dt, sh, x as _, pdt, p, training != 0, momentum, eps, y as _, save_mean as _, save_invstd as _, threads.max(1) as usize)
        })
    })
}

/// Batch norm backward; `dx`, `dweight`, `dbias` may each be null (not computed).
///
/// # Safety
/// As [`oxide_batch_norm`]; `dy`, `dx` are `[n, c, s]`.
#[no_mangle]
pub unsafe extern "C" fn oxide_batch_norm_backward(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, dy: *const c_void, x: *const c_void, param_dtype: i32, weight: *const c_void, running_mean: *const c_void, running_var: *const c_void, save_mean: *const c_void, save_invstd: *const c_void, training: i32, eps: f64, dx: *mut c_void, dweight: *mut c_void, dbias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt) = (dtype(dtype_code)?, dtype(param_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::BatchShape { n, c, s };
        let p = oxide_kernels::ops::nn::norm::BatchParams { weight: weight as _, bias: std::ptr::null(), running_mean: running_mean as _, running_var: running_var as _ };
        launch(device, stream, n * c * s, &[dy, x], || unsafe {
            oxide_kernels::ops::nn::norm::batch_norm_backward(dt, sh, dy as _, x as _, pdt, p, save_mean as _, save_invstd as _, training != 0, eps, dx as _, dweight as _, dbias as _, threads.max(1) as usize)
        })
    })
}

/// Hyper-parameters of [`oxide_fused_adam`], as `torch.optim.Adam(W)` passes them.
#[repr(C)]
pub struct OxideAdam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub eps: f64,
    pub amsgrad: i32,
    pub maximize: i32,
    /// Nonzero for AdamW's decoupled weight decay.
    pub decoupled: i32,
    /// Step count after this step.
    pub step: f64,
    /// Gradients are divided by this when `has_grad_scale` is nonzero.
    pub grad_scale: f64,
    pub has_grad_scale: i32,
}

/// One fused Adam/AdamW step on `n` contiguous elements of each tensor
/// (`max_exp_avg_sq` may be null without amsgrad).
///
/// # Safety
/// Non-null pointers address `n` elements of `dtype_code` in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_fused_adam(device: i32, stream: i64, dtype_code: i32, n: usize, param: *mut c_void, grad: *mut c_void, exp_avg: *mut c_void, exp_avg_sq: *mut c_void, max_exp_avg_sq: *mut c_void, h: *const OxideAdam, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        // SAFETY: caller passes a valid struct.
        let h = unsafe { &*h };
        let hp = oxide_kernels::ops::optim::fused::Adam {
            lr: h.lr, beta1: h.beta1, beta2: h.beta2, weight_decay: h.weight_decay, eps: h.eps,
            amsgrad: h.amsgrad != 0, maximize: h.maximize != 0, decoupled: h.decoupled != 0, step: h.step,
            grad_scale: (h.has_grad_scale != 0).then_some(h.grad_scale),
        };
        launch(device, stream, n, &[param as *const c_void, grad as *const c_void, exp_avg as *const c_void, exp_avg_sq as *const c_void], || unsafe {
            oxide_kernels::ops::optim::fused::adam(dt, n, param as _, grad as _, exp_avg as _, exp_avg_sq as _, max_exp_avg_sq as _, hp, threads.max(1) as usize)
        })
    })
}

/// Hyper-parameters of [`oxide_fused_sgd`], as `torch.optim.SGD` passes them.
#[repr(C)]
pub struct OxideSgd {
    pub lr: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: i32,
    pub maximize: i32,
    pub is_first_step: i32,
    pub grad_scale: f64,
    pub has_grad_scale: i32,
}

/// One fused SGD step on `n` contiguous elements (`momentum_buffer` may be null without momentum).
///
/// # Safety
/// Non-null pointers address `n` elements of `dtype_code` in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_fused_sgd(device: i32, stream: i64, dtype_code: i32, n: usize, param: *mut c_void, grad: *mut c_void, momentum_buffer: *mut c_void, h: *const OxideSgd, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        // SAFETY: caller passes a valid struct.
        let h = unsafe { &*h };
        let hp = oxide_kernels::ops::optim::fused::Sgd {
            lr: h.lr, weight_decay: h.weight_decay, momentum: h.momentum, dampening: h.dampening,
            nesterov: h.nesterov != 0, maximize: h.maximize != 0, is_first_step: h.is_first_step != 0,
            grad_scale: (h.has_grad_scale != 0).then_some(h.grad_scale),
        };
        launch(device, stream, n, &[param as *const c_void, grad as *const c_void], || unsafe {
            oxide_kernels::ops::optim::fused::sgd(dt, n, param as _, grad as _, momentum_buffer as _, hp, threads.max(1) as usize)
        })
    })
}

/// Reductions of [`oxide_scatter_reduce`] (values of PyTorch's `ReductionType`).
pub const OXIDE_REDUCE_MAX: i32 = 0;
pub const OXIDE_REDUCE_MEAN: i32 = 1;
pub const OXIDE_REDUCE_MIN: i32 = 2;
pub const OXIDE_REDUCE_SUM: i32 = 3;
pub const OXIDE_REDUCE_PROD: i32 = 4;

/// Scatter with reduction `reduce` (an `OXIDE_REDUCE_*`) along `dim`: for
/// every position of the index shape (`ndim` extents), the element of `out`
/// at that position with coordinate `dim` replaced by the index is combined
/// with the source element (see `oxide_kernels::ops::index::scatter::scatter_reduce`).
/// `dim_size` is `out`'s extent along `dim`; strides are in elements, `ndim`
/// per operand (all zero for a scalar source); the index is int64 or int32.
///
/// # Safety
/// Arrays hold `ndim` values; every addressed element is live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_scatter_reduce(
    device: i32,
    stream: i64,
    reduce: i32,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    dim: usize,
    dim_size: i64,
    out: *mut c_void,
    out_strides: *const i64,
    src: *const c_void,
    src_strides: *const i64,
    index_dtype: i32,
    index: *const c_void,
    index_strides: *const i64,
    threads: i32,
) -> i32 {
    use oxide_kernels::ops::index::scatter::{scatter_reduce, ScatterReduce, Strided};
    ffi(|| {
        let reduce = match reduce {
            OXIDE_REDUCE_MAX => ScatterReduce::Amax,
            OXIDE_REDUCE_MEAN => ScatterReduce::Mean,
            OXIDE_REDUCE_MIN => ScatterReduce::Amin,
            OXIDE_REDUCE_SUM => ScatterReduce::Sum,
            OXIDE_REDUCE_PROD => ScatterReduce::Prod,
            r => return Err(AbiError::Invalid(format!("unknown scatter reduction {r}"))),
        };
        let (dt, idt) = (dtype(dtype_code)?, dtype(index_dtype)?);
        // SAFETY: caller contract.
        let shape = extents("scatter_reduce", unsafe { dims(shape, ndim) })?;
        let conv = |p: *const i64| -> Vec<isize> { unsafe { dims(p, ndim) }.iter().map(|&s| s as isize).collect() };
        let (os, ss, is) = (conv(out_strides), conv(src_strides), conv(index_strides));
        let numel: usize = shape.iter().product();
        // A broadcast scalar source may live in host memory (a CPU scalar): only strided operands are checked.
        let mut operands = vec![out as *const c_void, index];
        if ss.iter().any(|&s| s != 0) {
            operands.push(src);
        }
        launch(device, stream, numel, &operands, || unsafe {
            scatter_reduce(
                reduce,
                dt,
                &shape,
                dim,
                dim_size.max(0) as usize,
                Strided { ptr: out as *mut u8, strides: &os },
                Strided { ptr: src as *mut u8, strides: &ss },
                idt,
                Strided { ptr: index as *mut u8, strides: &is },
                threads.max(1) as usize,
            )
        })
    })
}

/// `masked_scatter_` over `iter` (output, bool mask; linear order): the
/// k-th set mask element receives element k of the contiguous `source`
/// (`source_len` elements of the output's dtype).
///
/// # Safety
/// As [`oxide_pointwise`]; `source` holds `source_len` elements.
#[no_mangle]
pub unsafe extern "C" fn oxide_masked_scatter(device: i32, stream: i64, iter: *const OxideIter, source: *const c_void, source_len: usize) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter("masked_scatter", &*iter) }?;
        launch(device, stream, source_len, &[source], || unsafe { oxide_kernels::ops::index::scatter::masked_scatter(&it, source as *const u8, source_len) })
    })
}

/// Stable lexicographic order of `n` contiguous rows of `m` elements at
/// `data`, written to `perm` (`n` int64): the sort behind `unique`.
///
/// # Safety
/// `data` holds n*m elements of `dtype_code`, `perm` n int64, both live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_argsort_rows(device: i32, stream: i64, dtype_code: i32, n: usize, m: usize, data: *const c_void, perm: *mut i64, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let operands: &[*const c_void] = if m == 0 { &[perm as *const c_void] } else { &[data, perm as *const c_void] };
        launch(device, stream, n, operands, || unsafe { oxide_kernels::ops::reduce::unique::argsort_rows(dt, n, m, data as *const u8, perm, threads.max(1) as usize) })
    })
}

/// Groups of equal consecutive rows among `n` contiguous rows of `m`
/// elements, visited in `perm` order (null: in order): first row of each
/// group to `reps`, group sizes to `counts` (may be null), each row's group
/// to `inverse` (may be null); the number of groups to `*groups`.
///
/// # Safety
/// `data` holds n*m elements; `perm` (if non-null) a permutation of 0..n;
/// `reps`, `counts`, `inverse` n int64 each; all live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_unique_consecutive(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    m: usize,
    data: *const c_void,
    perm: *const i64,
    reps: *mut i64,
    inverse: *mut i64,
    counts: *mut i64,
    groups: *mut usize,
) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let mut operands = vec![reps as *const c_void];
        for p in [data, perm as *const c_void, inverse as *const c_void, counts as *const c_void] {
            if !p.is_null() && (m > 0 || p != data) {
                operands.push(p);
            }
        }
        let k = launch(device, stream, n, &operands, || unsafe { oxide_kernels::ops::reduce::unique::unique_consecutive(dt, n, m, data as *const u8, perm, reps, inverse, counts) })?;
        put(groups, k)
    })
}

/// Sorted flat `unique` of `n` contiguous one-byte elements (bool, uint8,
/// int8) by counting: distinct values to `values` (room for 256), their counts
/// to `counts` (room for 256, may be null), each element's position among them
/// to `inverse` (`n`, may be null); the number of distinct values to `*groups`.
///
/// # Safety
/// `data` holds n bytes; the outputs are live device memory of the sizes above.
#[no_mangle]
pub unsafe extern "C" fn oxide_unique_bytes(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    data: *const c_void,
    values: *mut c_void,
    inverse: *mut i64,
    counts: *mut i64,
    groups: *mut usize,
) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let mut operands = vec![values as *const c_void];
        if n > 0 {
            operands.push(data);
        }
        operands.extend([inverse as *const c_void, counts as *const c_void].into_iter().filter(|p| !p.is_null()));
        let k = launch(device, stream, n, &operands, || unsafe {
            oxide_kernels::ops::reduce::unique::unique_bytes(dt, n, data as *const u8, values as *mut u8, inverse, counts)
        })?;
        put(groups, k)
    })
}

/// `searchsorted`: for each of the `nvalues` contiguous values, its
/// insertion position in row `i / per_row` of `boundaries` (contiguous rows
/// of `len`, ordered through `sorter` when non-null), upper bound when
/// `right != 0`; written as `out_dtype` (int32/int64) to `out`.
///
/// # Safety
/// Pointers address the stated contiguous elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_searchsorted(
    device: i32,
    stream: i64,
    dtype_code: i32,
    values: *const c_void,
    nvalues: usize,
    per_row: usize,
    boundaries: *const c_void,
    len: usize,
    sorter: *const i64,
    right: i32,
    out_dtype: i32,
    out: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        let (dt, odt) = (dtype(dtype_code)?, dtype(out_dtype)?);
        let mut operands = vec![values, out as *const c_void];
        if len > 0 {
            operands.push(boundaries);
            if !sorter.is_null() {
                operands.push(sorter as *const c_void);
            }
        }
        launch(device, stream, nvalues, &operands, || unsafe {
            oxide_kernels::ops::reduce::search::searchsorted(dt, values as *const u8, nvalues, per_row, boundaries as *const u8, len, sorter, right != 0, odt, out as *mut u8, threads.max(1) as usize)
        })
    })
}

/// Smallest and largest of `n` integers at `data` (element stride
/// `stride`); `*any = false` when `n == 0`. The glue validates `bincount`'s
/// input and sizes its result with them.
///
/// # Safety
/// `data + i*stride` are live device elements of `dtype_code` for `i < n`.
#[no_mangle]
pub unsafe extern "C" fn oxide_bincount_range(device: i32, stream: i64, dtype_code: i32, n: usize, data: *const c_void, stride: i64, min: *mut i64, max: *mut i64, any: *mut bool) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let r = launch(device, stream, n, &[data], || unsafe { oxide_kernels::ops::reduce::histogram::bincount_range(dt, n, data as *const u8, stride as isize) })?;
        let (lo, hi) = r.unwrap_or((0, -1));
        put(min, lo)?;
        put(max, hi)?;
        put(any, r.is_some())
    })
}

/// `bincount` of `n` integers at `data` into `out` (`nbins` contiguous
/// elements, zeroed first): int64 counts when `weights_dtype < 0`, else sums
/// of the float32/float64 `weights` (element stride `weights_stride`).
///
/// # Safety
/// As [`oxide_bincount_range`]; `weights` likewise; `out` holds `nbins` elements.
#[no_mangle]
pub unsafe extern "C" fn oxide_bincount(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    data: *const c_void,
    stride: i64,
    weights_dtype: i32,
    weights: *const c_void,
    weights_stride: i64,
    out: *mut c_void,
    nbins: usize,
) -> i32 {
    use oxide_kernels::ops::reduce::histogram::{bincount, Weights};
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let w = if weights_dtype < 0 { None } else { Some(Weights { dtype: dtype(weights_dtype)?, ptr: weights as *const u8, stride: weights_stride as isize }) };
        // An empty input's pointer may be null: only what is read is checked.
        let mut operands = vec![out as *const c_void];
        if n > 0 {
            operands.push(data);
            if w.is_some() {
                operands.push(weights);
            }
        }
        launch(device, stream, n.max(nbins), &operands, || unsafe {
            bincount(dt, n, data as *const u8, stride as isize, w, out as *mut u8, nbins)
        })
    })
}

/// `histc` counts of `n` values at `input` (element stride `stride`) in the
/// bins between the `nedges` contiguous ascending `edges`, into `hist`
/// (`nedges - 1` contiguous elements); `local_search` refines the
/// interpolated bin against the edges.
///
/// # Safety
/// Pointers address the stated elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_histc(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    input: *const c_void,
    stride: i64,
    edges: *const c_void,
    nedges: usize,
    local_search: i32,
    hist: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let operands: &[*const c_void] = if n == 0 { &[edges, hist as *const c_void] } else { &[input, edges, hist as *const c_void] };
        launch(device, stream, nedges, operands, || unsafe {
            oxide_kernels::ops::reduce::histogram::histc(dt, n, input as *const u8, stride as isize, edges as *const u8, nedges, local_search != 0, hist as *mut u8, threads.max(1) as usize)
        })
    })
}

/// The windows of one pooling call: `planes` contiguous (depth, height,
/// width) volumes; per axis (index 0 depth, 1 height, 2 width) the input and
/// output extents and, unless `adaptive` is nonzero, PyTorch's kernel size,
/// stride, padding and dilation. 2-d pooling passes depth 1 with a kernel,
/// stride and dilation of 1 and no padding.
#[repr(C)]
pub struct OxidePoolGeometry {
    pub planes: i64,
    pub input: [i64; 3],
    pub output: [i64; 3],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
    pub dilation: [i64; 3],
    pub adaptive: i32,
}

/// The kernel crate's view of a geometry: plane count and the three axes.
fn pool_axes(g: &OxidePoolGeometry) -> Result<(usize, [oxide_kernels::ops::nn::pool::Axis; 3]), AbiError> {
    use oxide_kernels::ops::nn::pool::{Axis, Window};
    let size = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("pooling: negative {what} {v}")));
    let mut axes = [Axis::unit(); 3];
    for (k, a) in axes.iter_mut().enumerate() {
        let window = if g.adaptive != 0 {
            Window::Adaptive
        } else {
            Window::Fixed { kernel: size("kernel size", g.kernel[k])?, stride: size("stride", g.stride[k])?, padding: size("padding", g.padding[k])?, dilation: size("dilation", g.dilation[k])? }
        };
        *a = Axis { input: size("input size", g.input[k])?, output: size("output size", g.output[k])?, window };
    }
    Ok((size("plane count", g.planes)?, axes))
}

fn plane(extents: &[i64; 3]) -> usize {
    extents.iter().map(|&e| e.max(0) as usize).product()
}

/// Max pooling forward (`oxide_kernels::ops::nn::pool::max_pool`): the maxima of the
/// windows of `input` (`planes` contiguous volumes of `dtype_code`) into
/// `output` and their flat in-plane offsets into `indices` (both contiguous).
///
/// # Safety
/// `geometry` is valid; `input` holds planes x input volume elements,
/// `output` and `indices` planes x output volume, all live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_max_pool(device: i32, stream: i64, dtype_code: i32, geometry: *const OxidePoolGeometry, input: *const c_void, output: *mut c_void, indices: *mut i64, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let g = unsafe { &*geometry };
        let (dt, (planes, axes)) = (dtype(dtype_code)?, pool_axes(g)?);
        launch(device, stream, planes * plane(&g.output), &[input, output as *const c_void, indices as *const c_void], || unsafe {
            oxide_kernels::ops::nn::pool::max_pool(dt, planes, &axes, input as *const u8, output as *mut u8, indices, threads.max(1) as usize)
        })
    })
}

/// Max pooling backward (`oxide_kernels::ops::nn::pool::max_pool_backward`): zeroes
/// `grad_input` (`planes` x `in_plane`, contiguous) and adds each
/// `grad_output` element (`planes` x `out_plane`) at its `indices` offset.
///
/// # Safety
/// Buffers hold the stated element counts of `dtype_code` (indices: int64) in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_max_pool_backward(device: i32, stream: i64, dtype_code: i32, planes: usize, in_plane: usize, out_plane: usize, grad_output: *const c_void, indices: *const i64, grad_input: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = [grad_output, indices as *const c_void];
        let operands: &[*const c_void] = if planes * out_plane > 0 { &ops } else { &[] };
        launch(device, stream, planes * in_plane, &[&[grad_input as *const c_void], operands].concat(), || unsafe {
            oxide_kernels::ops::nn::pool::max_pool_backward(dt, planes, in_plane, out_plane, grad_output as *const u8, indices, grad_input as *mut u8, threads.max(1) as usize)
        })
    })
}

fn pool_divisor(adaptive: bool, count_include_pad: i32, has_divisor: i32, divisor: i64) -> oxide_kernels::ops::nn::pool::Divisor {
    use oxide_kernels::ops::nn::pool::Divisor;
    if adaptive {
        Divisor::Adaptive
    } else if has_divisor != 0 {
        Divisor::Override(divisor)
    } else {
        Divisor::Window { count_include_pad: count_include_pad != 0 }
    }
}

/// Average pooling (`oxide_kernels::ops::nn::pool::avg_pool`, or `avg_pool_backward`
/// when `backward` is nonzero): forward reads `src` (input volumes) and
/// writes `dst` (output volumes); backward reads `src` (grad_output, output
/// volumes) and writes `dst` (grad_input, input volumes). The divisor is
/// PyTorch's: adaptive windows divide by their extents, fixed ones by
/// `divisor` when `has_divisor` is nonzero, else by the window volume with
/// (`count_include_pad`) or without padding.
///
/// # Safety
/// `geometry` is valid; `src` and `dst` hold planes x the stated volumes of `dtype_code` in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_avg_pool(device: i32, stream: i64, dtype_code: i32, geometry: *const OxidePoolGeometry, count_include_pad: i32, has_divisor: i32, divisor: i64, backward: i32, src: *const c_void, dst: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let g = unsafe { &*geometry };
        let (dt, (planes, axes)) = (dtype(dtype_code)?, pool_axes(g)?);
        let div = pool_divisor(g.adaptive != 0, count_include_pad, has_divisor, divisor);
        let threads = threads.max(1) as usize;
        if backward != 0 {
            let operands: &[*const c_void] = if planes * plane(&g.output) > 0 { &[src, dst as *const c_void] } else { &[dst as *const c_void] };
            launch(device, stream, planes * plane(&g.input), operands, || unsafe {
                oxide_kernels::ops::nn::pool::avg_pool_backward(dt, planes, &axes, div, src as *const u8, dst as *mut u8, threads)
            })
        } else {
            launch(device, stream, planes * plane(&g.output), &[src, dst as *const c_void], || unsafe {
                oxide_kernels::ops::nn::pool::avg_pool(dt, planes, &axes, div, src as *const u8, dst as *mut u8, threads)
            })
        }
    })
}

/// One convolution (PyTorch's `ConvParams` with the operands' extents): the
/// first `ndim` (1 to 3) entries of each spatial array are used. Operands are
/// contiguous; shapes and weight layouts as `oxide_kernels::ops::nn::conv` describes.
/// `threads` is PyTorch's `at::get_num_threads()`.
#[repr(C)]
pub struct OxideConv {
    pub ndim: usize,
    pub batch: i64,
    pub in_channels: i64,
    pub out_channels: i64,
    pub groups: i64,
    pub transposed: bool,
    pub input: [i64; 3],
    pub output: [i64; 3],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
    pub dilation: [i64; 3],
    pub threads: i32,
}

fn conv_desc(c: &OxideConv) -> Result<oxide_kernels::ops::nn::conv::Conv, AbiError> {
    use oxide_kernels::ops::nn::conv::{Conv, Spatial, MAX_SPATIAL};
    if c.ndim == 0 || c.ndim > MAX_SPATIAL {
        return Err(AbiError::Invalid(format!("convolution over {} spatial dimensions (1 to {MAX_SPATIAL} supported)", c.ndim)));
    }
    let s = |a: &[i64; 3]| -> Vec<i64> { a[..c.ndim].to_vec() };
    let (input, output, kernel, stride, padding, dilation) = (s(&c.input), s(&c.output), s(&c.kernel), s(&c.stride), s(&c.padding), s(&c.dilation));
    let spatial = Spatial { input: &input, output: &output, kernel: &kernel, stride: &stride, padding: &padding, dilation: &dilation };
    Ok(Conv::new(c.batch, c.in_channels, c.out_channels, c.groups, c.transposed, spatial)?)
}

/// `output = convolution(input, weight) + bias` (`bias` may be null) for
/// convolution `conv`, all operands of dtype `dtype_code`, on `stream` of `device`.
///
/// # Safety
/// `conv` points to a valid description; each operand pointer addresses the
/// contiguous live device memory of its shape; the output overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_convolution(
    device: i32,
    stream: i64,
    dtype_code: i32,
    conv: *const OxideConv,
    input: *const c_void,
    weight: *const c_void,
    bias: *const c_void,
    output: *mut c_void,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let c = unsafe { &*conv };
        let (dt, cv) = (dtype(dtype_code)?, conv_desc(c)?);
        let mut operands = vec![input, weight, output as *const c_void];
        if !bias.is_null() {
            operands.push(bias);
        }
        let work = cv.batch * cv.out_channels;
        let bias = (!bias.is_null()).then_some(bias as *const u8);
        launch(device, stream, work, &operands, || unsafe {
            oxide_kernels::ops::nn::conv::convolution(dt, &cv, input as *const u8, weight as *const u8, bias, output as *mut u8, c.threads.max(1) as usize)
        })
    })
}

/// Gradients of convolution `conv` from `grad_output`: `grad_input`,
/// `grad_weight`, `grad_bias` (each null when not requested; PyTorch's
/// `output_mask`). `input` is read only for the weight gradient and `weight`
/// only for the input gradient (either may be null otherwise).
///
/// # Safety
/// As [`oxide_convolution`] for every non-null pointer; the gradients overlap
/// no operand and each other.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn oxide_convolution_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    conv: *const OxideConv,
    grad_output: *const c_void,
    input: *const c_void,
    weight: *const c_void,
    grad_input: *mut c_void,
    grad_weight: *mut c_void,
    grad_bias: *mut c_void,
) -> i32 {
    use oxide_kernels::ops::nn::conv::Grads;
    ffi(|| {
        // SAFETY: caller contract.
        let c = unsafe { &*conv };
        let (dt, cv) = (dtype(dtype_code)?, conv_desc(c)?);
        if (!grad_input.is_null() && weight.is_null()) || (!grad_weight.is_null() && input.is_null()) {
            return Err(AbiError::Invalid("convolution_backward: a requested gradient needs a missing operand".into()));
        }
        let given = |p: *mut c_void| (!p.is_null()).then_some(p as *mut u8);
        let grads = Grads { input: given(grad_input), weight: given(grad_weight), bias: given(grad_bias) };
        let mut operands = vec![grad_output];
        operands.extend([input, weight, grad_input, grad_weight, grad_bias].into_iter().filter(|p| !p.is_null()).map(|p| p as *const c_void));
        let work = cv.batch * cv.out_channels.max(cv.in_channels);
        launch(device, stream, work, &operands, || unsafe {
            oxide_kernels::ops::nn::conv::convolution_backward(dt, &cv, grad_output as *const u8, input as *const u8, weight as *const u8, grads, c.threads.max(1) as usize)
        })
    })
}

// ---------------------------------------------------------------------------
// Fused recurrent cells (oxide_kernels::ops::nn::rnn), called by csrc/rnn.cpp.
// ---------------------------------------------------------------------------

/// A read-only 2-D operand of the recurrent-cell kernels: first element and
/// element strides of rows and columns. `data` null: an absent optional operand.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OxideMat {
    pub data: *const c_void,
    pub row_stride: i64,
    pub col_stride: i64,
}

impl OxideMat {
    fn mat(self) -> oxide_kernels::ops::nn::rnn::Mat {
        oxide_kernels::ops::nn::rnn::Mat { ptr: self.data as *const u8, row_stride: self.row_stride as isize, col_stride: self.col_stride as isize }
    }
}

/// The non-null pointers among `ptrs`, for the device check of [`launch`].
fn present(ptrs: &[*const c_void]) -> Vec<*const c_void> {
    ptrs.iter().copied().filter(|p| !p.is_null()).collect()
}

/// `_thnn_fused_lstm_cell`: gate pre-activations `igates`, `hgates`
/// (`[batch, 4 hidden]`), cell state `cx` (`[batch, hidden]`), biases `b_ih`,
/// `b_hh` (`[4 hidden]` contiguous, each may be null) to contiguous `hy`, `cy`
/// (`[batch, hidden]`) and `workspace` (`[batch, 4 hidden]`); one dtype throughout.
///
/// # Safety
/// Every non-null pointer addresses live device memory of the shape described.
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, igates: OxideMat, hgates: OxideMat, cx: OxideMat, b_ih: *const c_void, b_hh: *const c_void, hy: *mut c_void, cy: *mut c_void, workspace: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[igates.data, hgates.data, cx.data, b_ih, b_hh, hy as *const c_void, cy as *const c_void, workspace as *const c_void]);
        launch(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::lstm_cell(dt, batch, hidden, igates.mat(), hgates.mat(), cx.mat(), b_ih as _, b_hh as _, hy as _, cy as _, workspace as _, threads.max(1) as usize)
        })
    })
}

/// `_thnn_fused_lstm_cell_backward_impl`: from `grad_hy`, `grad_cy` (either
/// may have null data: zero), the forward's `cx`, `cy` and `workspace`, to
/// contiguous `grad_gates` (`[batch, 4 hidden]`), `grad_cx` (`[batch, hidden]`)
/// and `grad_bias` (`[4 hidden]`, null: not computed).
///
/// # Safety
/// As [`oxide_lstm_cell`].
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell_backward(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, grad_hy: OxideMat, grad_cy: OxideMat, cx: OxideMat, cy: OxideMat, workspace: OxideMat, grad_gates: *mut c_void, grad_cx: *mut c_void, grad_bias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[grad_hy.data, grad_cy.data, cx.data, cy.data, workspace.data, grad_gates as *const c_void, grad_cx as *const c_void, grad_bias as *const c_void]);
        launch(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::lstm_cell_backward(dt, batch, hidden, grad_hy.mat(), grad_cy.mat(), cx.mat(), cy.mat(), workspace.mat(), grad_gates as _, grad_cx as _, grad_bias as _, threads.max(1) as usize)
        })
    })
}

/// `_thnn_fused_gru_cell`: gate pre-activations `igates`, `hgates`
/// (`[batch, 3 hidden]`), hidden state `hx` (`[batch, hidden]`), biases (`[3
/// hidden]` contiguous, each may be null) to contiguous `hy` (`[batch,
/// hidden]`) and `workspace` (`[batch, 5 hidden]`).
///
/// # Safety
/// As [`oxide_lstm_cell`].
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, igates: OxideMat, hgates: OxideMat, hx: OxideMat, b_ih: *const c_void, b_hh: *const c_void, hy: *mut c_void, workspace: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[igates.data, hgates.data, hx.data, b_ih, b_hh, hy as *const c_void, workspace as *const c_void]);
        launch(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::gru_cell(dt, batch, hidden, igates.mat(), hgates.mat(), hx.mat(), b_ih as _, b_hh as _, hy as _, workspace as _, threads.max(1) as usize)
        })
    })
}

/// `_thnn_fused_gru_cell_backward`: from `grad_hy` (`[batch, hidden]`) and
/// the forward's `workspace` to contiguous `grad_input_gates`,
/// `grad_hidden_gates` (`[batch, 3 hidden]`), `grad_hx` (`[batch, hidden]`)
/// and the bias gradients (`[3 hidden]`, null: not computed).
///
/// # Safety
/// As [`oxide_lstm_cell`].
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell_backward(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, grad_hy: OxideMat, workspace: OxideMat, grad_input_gates: *mut c_void, grad_hidden_gates: *mut c_void, grad_hx: *mut c_void, grad_input_bias: *mut c_void, grad_hidden_bias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[grad_hy.data, workspace.data, grad_input_gates as *const c_void, grad_hidden_gates as *const c_void, grad_hx as *const c_void, grad_input_bias as *const c_void, grad_hidden_bias as *const c_void]);
        launch(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::gru_cell_backward(dt, batch, hidden, grad_hy.mat(), workspace.mat(), grad_input_gates as _, grad_hidden_gates as _, grad_hx as _, grad_input_bias as _, grad_hidden_bias as _, threads.max(1) as usize)
        })
    })
}

// ---- fold/unfold, embedding bags, grid sampling ----

/// One `im2col` / `col2im` call over 2-d images (`oxide_kernels::ops::nn::conv::Unfold`):
/// `batch` images of `channels` planes of `image` (height, width); kernel,
/// stride, padding and dilation per (height, width).
#[repr(C)]
pub struct OxideUnfold {
    pub batch: i64,
    pub channels: i64,
    pub image: [i64; 2],
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
}

fn unfold_desc(u: &OxideUnfold) -> Result<oxide_kernels::ops::nn::conv::Unfold, AbiError> {
    let n = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("im2col/col2im: negative {what} {v}")));
    let pair = |what: &str, a: [i64; 2]| -> Result<[usize; 2], AbiError> { Ok([n(what, a[0])?, n(what, a[1])?]) };
    Ok(oxide_kernels::ops::nn::conv::Unfold {
        batch: n("batch", u.batch)?,
        channels: n("channels", u.channels)?,
        image: pair("image extent", u.image)?,
        kernel: pair("kernel size", u.kernel)?,
        stride: pair("stride", u.stride)?,
        padding: pair("padding", u.padding)?,
        dilation: pair("dilation", u.dilation)?,
    })
}

/// `im2col` (`fold` zero: `src` images -> `dst` columns) or `col2im` (`fold`
/// nonzero: `src` columns -> `dst` images), `oxide_kernels::ops::nn::conv::unfold` /
/// `fold`; both operands contiguous, of `dtype_code`, `elements` the larger
/// operand's element count (0: nothing to do).
///
/// # Safety
/// `geometry` is valid; `src` and `dst` address the contiguous elements of their shapes in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_unfold(device: i32, stream: i64, dtype_code: i32, geometry: *const OxideUnfold, fold: i32, elements: usize, src: *const c_void, dst: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let (dt, u) = (dtype(dtype_code)?, unfold_desc(unsafe { &*geometry })?);
        launch(device, stream, elements, &[src, dst as *const c_void], || unsafe {
            let threads = threads.max(1) as usize;
            if fold != 0 {
                oxide_kernels::ops::nn::conv::fold(dt, &u, src as *const u8, dst as *mut u8, threads)
            } else {
                oxide_kernels::ops::nn::conv::unfold(dt, &u, src as *const u8, dst as *mut u8, threads)
            }
        })
    })
}

/// A possibly empty int64 device array as a slice.
///
/// # Safety
/// `p` addresses `n` live int64 values when `n > 0`.
unsafe fn index_slice<'a>(p: *const i64, n: usize) -> &'a [i64] {
    if n == 0 {
        &[]
    } else {
        // SAFETY: caller contract.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

/// The bags of an embedding bag call as the ABI passes them: `n` int64
/// `indices`, `num_offsets` int64 `offsets`, into a `(num_weights, dim)` weight.
#[repr(C)]
pub struct OxideBags {
    pub indices: *const i64,
    pub n: usize,
    pub offsets: *const i64,
    pub num_offsets: usize,
    pub include_last_offset: bool,
    pub num_weights: usize,
    pub dim: usize,
    /// Weight row whose indices are skipped; negative: none.
    pub padding_idx: i64,
    /// PyTorch's mode code: 0 sum, 1 mean, 2 max.
    pub mode: i64,
}

/// `_embedding_bag` forward (`oxide_kernels::ops::nn::embedding::embedding_bag`): the
/// bags of `weight` (contiguous, `dtype_code`) into `output` `(num_bags, dim)`,
/// `offset2bag` `(n)`, `bag_size` `(num_bags)` and, in max mode, `max_indices`
/// `(num_bags, dim)` (all contiguous, int64 but the output). `per_sample_weights`
/// (`n`, the weight's dtype) may be null. Invalid offsets or indices are
/// reported with CPU PyTorch's messages.
///
/// # Safety
/// `bags` is valid and its arrays live device memory of the stated lengths; every other non-null pointer
/// addresses the contiguous device elements of its shape; outputs overlap nothing.
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag(
    device: i32,
    stream: i64,
    dtype_code: i32,
    bags: *const OxideBags,
    weight: *const c_void,
    per_sample_weights: *const c_void,
    output: *mut c_void,
    offset2bag: *mut i64,
    bag_size: *mut i64,
    max_indices: *mut i64,
    threads: i32,
) -> i32 {
    use oxide_kernels::ops::nn::embedding::{embedding_bag, BagOutputs, Bags, Mode};
    ffi(|| {
        // SAFETY: caller contract.
        let b = unsafe { &*bags };
        let (dt, mode) = (dtype(dtype_code)?, Mode::from_code(b.mode)?);
        let mut operands = vec![];
        if b.n > 0 {
            operands.extend([b.indices as *const c_void, offset2bag as *const c_void]);
            if b.num_weights * b.dim > 0 {
                operands.push(weight);
            }
            if !per_sample_weights.is_null() {
                operands.push(per_sample_weights);
            }
        }
        if b.num_offsets > 0 {
            operands.push(b.offsets as *const c_void);
        }
        let nb = b.num_offsets.saturating_sub(usize::from(b.include_last_offset));
        if nb > 0 {
            operands.push(bag_size as *const c_void);
            if b.dim > 0 {
                operands.push(output as *const c_void);
                if mode == Mode::Max {
                    operands.push(max_indices as *const c_void);
                }
            }
        }
        launch(device, stream, 1, &operands, || unsafe {
            let bags = Bags { indices: index_slice(b.indices, b.n), offsets: index_slice(b.offsets, b.num_offsets), include_last_offset: b.include_last_offset, num_weights: b.num_weights, dim: b.dim, padding_idx: b.padding_idx };
            let out = BagOutputs { output: output as *mut u8, offset2bag, bag_size, max_indices };
            let psw = (!per_sample_weights.is_null()).then_some(per_sample_weights as *const u8);
            embedding_bag(dt, &bags, mode, weight as *const u8, psw, out, threads.max(1) as usize)
        })
    })
}

/// `_embedding_bag_dense_backward` (`oxide_kernels::ops::nn::embedding::embedding_bag_backward`):
/// `grad` `(num_bags, dim)` into `grad_weight` `(num_weights, dim)` (overwritten),
/// from the forward's `offset2bag` (`n`), `bag_size` (`num_bags`) and, in max
/// mode, `max_indices` (`num_bags * dim`; may be null otherwise). `bags.offsets` is not read.
///
/// # Safety
/// As [`oxide_embedding_bag`].
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    bags: *const OxideBags,
    num_bags: usize,
    grad: *const c_void,
    offset2bag: *const i64,
    bag_size: *const i64,
    max_indices: *const i64,
    scale_grad_by_freq: bool,
    per_sample_weights: *const c_void,
    grad_weight: *mut c_void,
    threads: i32,
) -> i32 {
    use oxide_kernels::ops::nn::embedding::{embedding_bag_backward, BagGrad, Mode};
    ffi(|| {
        // SAFETY: caller contract.
        let b = unsafe { &*bags };
        let (dt, mode) = (dtype(dtype_code)?, Mode::from_code(b.mode)?);
        let mut operands = vec![grad_weight as *const c_void];
        if b.n > 0 {
            operands.extend([b.indices as *const c_void, offset2bag as *const c_void]);
            if !per_sample_weights.is_null() {
                operands.push(per_sample_weights);
            }
        }
        if num_bags > 0 {
            operands.push(bag_size as *const c_void);
            if b.dim > 0 {
                operands.push(grad);
                if mode == Mode::Max {
                    operands.push(max_indices as *const c_void);
                }
            }
        }
        launch(device, stream, b.num_weights * b.dim, &operands, || unsafe {
            let max = (mode == Mode::Max && !max_indices.is_null()).then(|| index_slice(max_indices, num_bags * b.dim));
            let g = BagGrad {
                indices: index_slice(b.indices, b.n),
                offset2bag: index_slice(offset2bag, b.n),
                bag_size: index_slice(bag_size, num_bags),
                max_indices: max,
                num_weights: b.num_weights,
                dim: b.dim,
                scale_grad_by_freq,
                padding_idx: b.padding_idx,
            };
            let psw = (!per_sample_weights.is_null()).then_some(per_sample_weights as *const u8);
            embedding_bag_backward(dt, &g, mode, grad as *const u8, psw, grad_weight as *mut u8, threads.max(1) as usize)
        })
    })
}

/// `_embedding_bag_per_sample_weights_backward`
/// (`oxide_kernels::ops::nn::embedding::per_sample_weights_backward`): `out[i]` (`n`, the
/// weight's dtype) is the dot product of `grad[offset2bag[i]]` and `weight[indices[i]]`.
/// `bags.offsets` is not read.
///
/// # Safety
/// As [`oxide_embedding_bag`].
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag_per_sample_weights_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    bags: *const OxideBags,
    num_bags: usize,
    grad: *const c_void,
    weight: *const c_void,
    offset2bag: *const i64,
    out: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let b = unsafe { &*bags };
        let dt = dtype(dtype_code)?;
        let mut operands = vec![];
        if b.n > 0 {
            operands.extend([b.indices as *const c_void, offset2bag as *const c_void, out as *const c_void]);
            if b.dim > 0 {
                operands.push(weight);
                if num_bags > 0 {
                    operands.push(grad);
                }
            }
        }
        launch(device, stream, 1, &operands, || unsafe {
            oxide_kernels::ops::nn::embedding::per_sample_weights_backward(
                dt,
                index_slice(b.indices, b.n),
                index_slice(offset2bag, b.n),
                num_bags,
                b.num_weights,
                b.dim,
                b.padding_idx,
                grad as *const u8,
                weight as *const u8,
                out as *mut u8,
                threads.max(1) as usize,
            )
        })
    })
}

/// One 2-d grid sampling (`oxide_kernels::ops::nn::grid_sample::GridSample`): extents,
/// PyTorch's interpolation (0 bilinear, 1 nearest, 2 bicubic) and padding
/// (0 zeros, 1 border, 2 reflection) codes, `align_corners`.
#[repr(C)]
pub struct OxideGridSample {
    pub batch: i64,
    pub channels: i64,
    pub input: [i64; 2],
    pub output: [i64; 2],
    pub interpolation: i64,
    pub padding: i64,
    pub align_corners: bool,
}

fn grid_sample_desc(g: &OxideGridSample) -> Result<(oxide_kernels::ops::nn::grid_sample::GridSample, usize), AbiError> {
    use oxide_kernels::ops::nn::grid_sample::GridSample;
    let n = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("grid_sampler_2d: negative {what} {v}")));
    let (interpolation, padding) = GridSample::modes(g.interpolation, g.padding)?;
    let gs = GridSample {
        batch: n("batch", g.batch)?,
        channels: n("channels", g.channels)?,
        input: [n("height", g.input[0])?, n("width", g.input[1])?],
        output: [n("height", g.output[0])?, n("width", g.output[1])?],
        interpolation,
        padding,
        align_corners: g.align_corners,
    };
    // Work happens when there are output positions; the input is read only when it is not empty.
    let work = gs.batch * gs.output[0] * gs.output[1];
    Ok((gs, work))
}

/// `grid_sampler_2d` (`oxide_kernels::ops::nn::grid_sample::grid_sample_2d`): contiguous
/// input `(N, C, H, W)`, grid `(N, H_out, W_out, 2)`, output `(N, C, H_out, W_out)`, all of `dtype_code`.
///
/// # Safety
/// `geometry` is valid; each pointer addresses the contiguous device elements of its shape.
#[no_mangle]
pub unsafe extern "C" fn oxide_grid_sample_2d(device: i32, stream: i64, dtype_code: i32, geometry: *const OxideGridSample, input: *const c_void, grid: *const c_void, output: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let (gs, work) = grid_sample_desc(unsafe { &*geometry })?;
        let dt = dtype(dtype_code)?;
        let operands: &[*const c_void] = if gs.channels * gs.input[0] * gs.input[1] == 0 { &[grid] } else { &[input, grid, output as *const c_void] };
        launch(device, stream, work, operands, || unsafe {
            oxide_kernels::ops::nn::grid_sample::grid_sample_2d(dt, &gs, input as *const u8, grid as *const u8, output as *mut u8, threads.max(1) as usize)
        })
    })
}

/// `grid_sampler_2d_backward` (`oxide_kernels::ops::nn::grid_sample::grid_sample_2d_backward`):
/// `grad_input` (may be null: not requested) and `grad_grid`, overwritten, from
/// `grad_output`; layouts as [`oxide_grid_sample_2d`].
///
/// # Safety
/// As [`oxide_grid_sample_2d`]; the gradients overlap no operand and each other.
#[no_mangle]
pub unsafe extern "C" fn oxide_grid_sample_2d_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    geometry: *const OxideGridSample,
    grad_output: *const c_void,
    input: *const c_void,
    grid: *const c_void,
    grad_input: *mut c_void,
    grad_grid: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let (gs, work) = grid_sample_desc(unsafe { &*geometry })?;
        let dt = dtype(dtype_code)?;
        let mut operands = vec![grid, grad_grid as *const c_void];
        if gs.channels * gs.input[0] * gs.input[1] > 0 {
            operands.extend([grad_output, input]);
            if !grad_input.is_null() {
                operands.push(grad_input as *const c_void);
            }
        }
        let gi = (!grad_input.is_null()).then_some(grad_input as *mut u8);
        launch(device, stream, work, &operands, || unsafe {
            oxide_kernels::ops::nn::grid_sample::grid_sample_2d_backward(dt, &gs, grad_output as *const u8, input as *const u8, grid as *const u8, gi, grad_grid as *mut u8, threads.max(1) as usize)
        })
    })
}

// ---- scaled dot-product attention (oxide_kernels::ops::nn::attention) ----

/// A 4-d strided tensor operand: data pointer (null = absent) and element
/// strides (batch, head, row, column); stride 0 on broadcast dims.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OxideStrided4 {
    pub data: *mut c_void,
    pub strides: [i64; 4],
}

/// One attention call: extents (`batch`, query heads `heads_q`, key/value
/// heads `heads_kv` dividing `heads_q`, query rows `len_q`, keys `len_kv`,
/// query/key features `dim_qk`, value features `dim_v`), the query `[B,
/// Hq, L, E]`, key `[B, Hkv, S, E]` and value `[B, Hkv, S, Ev]` operands, an
/// optional additive `bias` broadcast to `[B, Hq, L, S]` (null data: none),
/// the causal flag (top-left aligned), the resolved `scale`, the dropout
/// probability (0: none) with its Philox state, and PyTorch's thread count.
#[repr(C)]
pub struct OxideAttention {
    pub batch: i64,
    pub heads_q: i64,
    pub heads_kv: i64,
    pub len_q: i64,
    pub len_kv: i64,
    pub dim_qk: i64,
    pub dim_v: i64,
    pub query: OxideStrided4,
    pub key: OxideStrided4,
    pub value: OxideStrided4,
    pub bias: OxideStrided4,
    pub causal: bool,
    pub scale: f64,
    pub dropout_p: f64,
    pub philox: OxidePhilox,
    pub threads: i32,
}

fn attention_dims(a: &OxideAttention) -> Result<oxide_kernels::ops::nn::attention::Dims, AbiError> {
    let n = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("scaled_dot_product_attention: negative {what} {v}")));
    Ok(oxide_kernels::ops::nn::attention::Dims {
        batch: n("batch", a.batch)?,
        heads_q: n("query heads", a.heads_q)?,
        heads_kv: n("key/value heads", a.heads_kv)?,
        len_q: n("query length", a.len_q)?,
        len_kv: n("key length", a.len_kv)?,
        dim_qk: n("query/key size", a.dim_qk)?,
        dim_v: n("value size", a.dim_v)?,
    })
}

fn attention_operand(s: &OxideStrided4) -> oxide_kernels::ops::nn::attention::Operand {
    oxide_kernels::ops::nn::attention::Operand { ptr: s.data as *mut u8, strides: s.strides }
}

fn given4(s: &OxideStrided4) -> Option<oxide_kernels::ops::nn::attention::Operand> {
    (!s.data.is_null()).then(|| attention_operand(s))
}

/// Runs `f` with the kernel's description of `a` (dropout bits borrowed from its Philox state).
fn with_attention<T>(a: &OxideAttention, dtype_code: i32, f: impl FnOnce(&oxide_kernels::ops::nn::attention::Attention) -> Result<T, AbiError>) -> Result<T, AbiError> {
    use oxide_kernels::ops::nn::attention::{Attention, Dropout};
    let bits = philox(&a.philox);
    let att = Attention {
        dims: attention_dims(a)?,
        dtype: dtype(dtype_code)?,
        query: attention_operand(&a.query),
        key: attention_operand(&a.key),
        value: attention_operand(&a.value),
        bias: given4(&a.bias),
        causal: a.causal,
        scale: a.scale,
        dropout: (a.dropout_p > 0.0).then_some(Dropout { p: a.dropout_p, bits: &bits }),
        threads: a.threads.max(1) as usize,
    };
    f(&att)
}

/// Philox blocks the dropout mask of `attention` consumes (the generator
/// offset must advance by this much; see `oxide_kernels::ops::nn::attention`).
///
/// # Safety
/// `attention` and `out` are valid pointers.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_dropout_blocks(attention: *const OxideAttention, out: *mut u64) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let a = unsafe { &*attention };
        put(out, oxide_kernels::ops::nn::attention::dropout_blocks(&attention_dims(a)?))
    })
}

/// Fused attention forward (`oxide_kernels::ops::nn::attention::forward`): writes
/// `out` (`[B, Hq, L, Ev]`, strided, dtype `dtype_code`) and `logsumexp`
/// (`[B, Hq, L]` contiguous; float64 for float64 inputs, else float32).
///
/// # Safety
/// Every element the shapes and strides address lies in live device memory;
/// outputs overlap no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_forward(device: i32, stream: i64, dtype_code: i32, attention: *const OxideAttention, out: OxideStrided4, logsumexp: *mut c_void) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let a = unsafe { &*attention };
        let mut operands: Vec<*const c_void> = vec![a.query.data, a.key.data, a.value.data, out.data, logsumexp as *const c_void];
        operands.push(a.bias.data);
        // Empty operands may have no storage; only the non-null ones are checked.
        operands.retain(|p| !p.is_null());
        let work = (a.batch * a.heads_q * a.len_q).max(0) as usize;
        with_attention(a, dtype_code, |att| {
            // SAFETY: caller contract.
            launch(device, stream, work, &operands, || unsafe { oxide_kernels::ops::nn::attention::forward(att, attention_operand(&out), logsumexp as *mut u8) })
        })
    })
}

/// Fused attention backward (`oxide_kernels::ops::nn::attention::backward`) from the
/// forward's `out` and `logsumexp`: writes each gradient whose data is
/// non-null (`grad_bias` is the full `[B, Hq, L, S]` gradient; the caller
/// reduces it to the bias's shape). Dropout must use the forward's Philox state.
///
/// # Safety
/// As [`oxide_attention_forward`]; the gradients overlap each other and no input.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn oxide_attention_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    attention: *const OxideAttention,
    out: OxideStrided4,
    grad_out: OxideStrided4,
    logsumexp: *const c_void,
    grad_query: OxideStrided4,
    grad_key: OxideStrided4,
    grad_value: OxideStrided4,
    grad_bias: OxideStrided4,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let a = unsafe { &*attention };
        let mut operands: Vec<*const c_void> = vec![a.query.data, a.key.data, a.value.data, out.data, grad_out.data, logsumexp];
        operands.extend([a.bias.data, grad_query.data, grad_key.data, grad_value.data, grad_bias.data].map(|p| p as *const c_void));
        // Absent gradients and empty operands are null; only the others are checked.
        operands.retain(|p| !p.is_null());
        let grads = oxide_kernels::ops::nn::attention::Grads { query: given4(&grad_query), key: given4(&grad_key), value: given4(&grad_value), bias: given4(&grad_bias) };
        let work = (a.batch * a.heads_q * a.len_q).max(0) as usize;
        with_attention(a, dtype_code, |att| {
            // SAFETY: caller contract.
            launch(device, stream, work, &operands, || unsafe {
                oxide_kernels::ops::nn::attention::backward(att, attention_operand(&out), attention_operand(&grad_out), logsumexp as *const u8, grads)
            })
        })
    })
}

// ---- complex64 / complex128 (oxide_kernels::ops::elementwise::complex) ----

/// [`oxide_pointwise`] with complex scalar arguments: `re[0..4]` / `i[0..4]`
/// are the scalars as double and int64 (real scalars as for
/// [`oxide_pointwise`]), `im[0..4]` their imaginary parts (0 for real
/// scalars). A complex compute dtype runs the op's complex kernel.
///
/// # Safety
/// As [`oxide_pointwise`]; `im` holds 4 values.
#[no_mangle]
pub unsafe extern "C" fn oxide_pointwise_complex(device: i32, stream: i64, op: i32, iter: *const OxideIter, common: i32, re: *const f64, i: *const i64, im: *const f64) -> i32 {
    ffi(|| {
        let o = oxide_kernels::ops::elementwise::pointwise::PointwiseOp::from_id(op).ok_or_else(|| AbiError::Invalid(format!("unknown pointwise op id {op}")))?;
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter(o.name(), &*iter) }?;
        let common = if common < 0 { None } else { Some(dtype(common)?) };
        // SAFETY: caller contract.
        let ctx = unsafe {
            oxide_kernels::ops::elementwise::pointwise::Ctx {
                f: std::ptr::read(re as *const [f64; 4]),
                i: std::ptr::read(i as *const [i64; 4]),
                im: std::ptr::read(im as *const [f64; 4]),
                ..Default::default()
            }
        };
        let rt = runtime()?;
        let (_, r) = rt.device(device as i64)?.streams().launch(stream, || unsafe { o.run(&it, common, &ctx) })?;
        Ok(r?)
    })
}

/// Whether pointwise op `op` (an id from [`oxide_pointwise_lookup`]) has a
/// complex64/complex128 kernel; the glue runs the others on its counted CPU path.
#[no_mangle]
pub extern "C" fn oxide_pointwise_complex_supported(op: i32) -> bool {
    oxide_kernels::ops::elementwise::pointwise::PointwiseOp::from_id(op).is_some_and(|o| oxide_kernels::ops::elementwise::complex::supports(o.name()))
}

/// Converting copy on `stream` of `device`: operand 0 of `iter` (any dtype)
/// receives operand 1 (any dtype, broadcast by stride 0) converted element
/// for element as C++ `static_cast` (complex to real keeps the real part,
/// complex to bool is "either part nonzero").
///
/// # Safety
/// As [`oxide_pointwise`]; the operands do not overlap.
#[no_mangle]
pub unsafe extern "C" fn oxide_cast(device: i32, stream: i64, iter: *const OxideIter) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter("copy_", &*iter) }?;
        let rt = runtime()?;
        let (_, r) = rt.device(device as i64)?.streams().launch(stream, || unsafe { oxide_kernels::ops::elementwise::complex::cast(&it) })?;
        Ok(r?)
    })
}
