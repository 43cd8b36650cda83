//! `torch_oxide._C`: the extension module. It holds three things:
//! - [`abi`]: the `extern "C"` functions the C++ glue in `csrc/` calls;
//! - [`fallback`]: CPU-fallback counting and its mode;
//! - the PyO3 module below: the Python view of the runtime (device
//!   management, memory statistics, fallback report) used by `torch.oxide`.
//!
//! The C++ glue is compiled by `build.rs` and linked whole-archive into this
//! library, so its static registrations (allocator, guard, hooks, kernels,
//! fallback) run when Python loads the module (after `import torch`).

pub mod abi;
pub mod fallback;
mod ipc;
mod memory_history;
mod sanitize;
mod site;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use oxide_runtime::runtime;

fn to_py(e: oxide_runtime::Error) -> PyErr {
    match e {
        oxide_runtime::Error::Config { .. } => PyValueError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

fn device(index: i64) -> PyResult<&'static oxide_runtime::Device> {
    runtime().and_then(|rt| rt.device(index)).map_err(to_py)
}

/// Number of oxide devices (0 if the runtime cannot start).
#[pyfunction]
fn device_count() -> usize {
    oxide_runtime::device_count()
}

/// Starts the runtime. Raises RuntimeError in a forked child, ValueError on a bad configuration.
#[pyfunction]
fn init() -> PyResult<()> {
    runtime().map(|_| ()).map_err(to_py)
}

/// True once the runtime has started.
#[pyfunction]
fn is_initialized() -> bool {
    oxide_runtime::is_initialized()
}

/// True in a child forked after the runtime started.
#[pyfunction]
fn is_in_bad_fork() -> bool {
    oxide_runtime::is_in_bad_fork()
}

/// Current device of the calling thread.
#[pyfunction]
fn current_device() -> PyResult<usize> {
    runtime().map(|rt| rt.current_device()).map_err(to_py)
}

/// Sets the calling thread's current device. Raises RuntimeError for an invalid index.
#[pyfunction]
fn set_device(index: i64) -> PyResult<()> {
    runtime().and_then(|rt| rt.set_device(index)).map_err(to_py)
}

/// Waits for all work on every stream of `index` (without the GIL: other
/// Python threads run meanwhile), then raises the first kernel error a queued
/// launch met, if any.
#[pyfunction]
fn synchronize(py: Python<'_>, index: i64) -> PyResult<()> {
    py.detach(|| runtime().and_then(|rt| rt.synchronize_device(index))).map_err(to_py)
}

/// Waits for the work queued on the calling thread's current stream of device
/// `index` (raising a queued kernel's error): what a compiled graph does before
/// each of its host (C++) kernels.
#[pyfunction]
fn _sync_current_stream(py: Python<'_>, index: i64) -> PyResult<()> {
    py.detach(|| {
        let rt = runtime()?;
        let stream = rt.current_stream(index)?;
        rt.device(index)?.streams().synchronize(stream)
    })
    .map_err(to_py)
}

/// Queues a compiled graph's C++ kernel (its address) on the current stream of
/// `oxide:index` with `args`; bit `k` of `pointers` marks argument `k` as an address
/// (see `abi::host_kernel`). The wrapper that calls this checked the kernel's
/// signature: pointers and 64-bit integers only.
#[pyfunction]
fn _launch_host_kernel(index: i64, kernel: usize, pointers: u64, args: Vec<u64>) -> PyResult<()> {
    let rt = runtime().map_err(to_py)?;
    let stream = rt.current_stream(index).map_err(to_py)?;
    let launch = abi::OxideLaunch { device: index as i32, stream, threads: 1 };
    // SAFETY: the caller's contract (the generated wrapper): `kernel` is the address of
    // a loaded kernel taking `args.len()` pointers and 64-bit integers, and the pointers
    // name live buffers allocated in stream order.
    let status = unsafe {
        abi::host_kernel::oxide_launch_host_kernel(
            launch,
            kernel as *mut std::ffi::c_void,
            args.as_ptr(),
            args.len(),
            pointers,
        )
    };
    if status == abi::OXIDE_STATUS_SUCCESS {
        return Ok(());
    }
    let mut buf = vec![0u8; 4096];
    // SAFETY: buf holds buf.len() bytes.
    let n = unsafe { abi::oxide_last_error(buf.as_mut_ptr() as *mut std::ffi::c_char, buf.len()) };
    buf.truncate(n.min(buf.len() - 1));
    Err(PyRuntimeError::new_err(String::from_utf8_lossy(&buf).into_owned()))
}

/// True when kernels run at the call (`OXIDE_LAUNCH_BLOCKING=1`).
#[pyfunction]
fn _launch_blocking() -> PyResult<bool> {
    runtime().map(|rt| rt.launch_blocking()).map_err(to_py)
}

/// Switches launch blocking on or off for the launches that follow.
#[pyfunction]
fn _set_launch_blocking(on: bool) -> PyResult<()> {
    runtime().map(|rt| rt.set_launch_blocking(on)).map_err(to_py)
}

/// Raises RuntimeError when `index` is not a valid device index.
#[pyfunction]
fn check_device(index: i64) -> PyResult<()> {
    device(index).map(|_| ())
}

/// Number of streams whose state device `index` tracks: fixed (the default
/// stream and the two pools), however many streams the program has made.
#[pyfunction]
fn _stream_count(index: i64) -> PyResult<usize> {
    Ok(device(index)?.streams().len())
}

/// Capacity of device `index` in bytes.
#[pyfunction]
fn device_capacity(index: i64) -> PyResult<usize> {
    Ok(device(index)?.capacity())
}

/// Threads a kernel splits its work over (the kernel thread team, the launcher
/// included): what `get_device_properties().multi_processor_count` reports.
#[pyfunction]
fn kernel_threads() -> usize {
    oxide_kernels::engine::team::size()
}

/// STREAM-style bandwidth of host memory on `threads` threads of the kernel team
/// (float32 arrays of `numel` elements, best of `reps` passes), bytes per second per kernel:
/// `{"copy", "scale", "add", "triad"}`. For `benchmarks/ops.py`, which compares
/// kernels with it in the same run; runs without the GIL.
#[pyfunction]
fn _probe_memory_bandwidth(py: Python<'_>, numel: usize, reps: usize, threads: usize) -> PyResult<Bound<'_, PyDict>> {
    let bw = py.detach(|| oxide_kernels::engine::limits::stream_bandwidth(numel, reps, threads));
    let out = PyDict::new(py);
    for (name, v) in [("copy", bw.copy), ("scale", bw.scale), ("add", bw.add), ("triad", bw.triad)] {
        out.set_item(name, v)?;
    }
    Ok(out)
}

/// Peak float32 operations per second of `threads` threads of the kernel team
/// (`iters` rounds of independent FMAs per thread, best of `reps`) and the instruction set used:
/// `(flops, isa)`. For `benchmarks/ops.py`; runs without the GIL.
#[pyfunction]
fn _probe_fma_peak(py: Python<'_>, iters: usize, reps: usize, threads: usize) -> (f64, &'static str) {
    let peak = py.detach(|| oxide_kernels::engine::limits::fma_peak(iters, reps, threads));
    (peak.flops, peak.isa)
}

/// `torch.cuda.set_per_process_memory_fraction`: the caching allocator of device
/// `index` may reserve at most `fraction` of the device's capacity; past it an
/// allocation raises out-of-memory (after releasing the cache, as at the capacity).
#[pyfunction]
fn set_memory_fraction(index: i64, fraction: f64) -> PyResult<()> {
    if !(0.0..=1.0).contains(&fraction) {
        return Err(PyValueError::new_err(format!("invalid memory fraction {fraction}: expected a number in [0, 1]")));
    }
    let d = device(index)?;
    let limit = (fraction < 1.0).then(|| (d.capacity() as f64 * fraction) as usize);
    d.allocator().set_limit(limit);
    Ok(())
}

/// The fraction [`set_memory_fraction`] set for device `index` (1.0 when none).
#[pyfunction]
fn memory_fraction(index: i64) -> PyResult<f64> {
    let d = device(index)?;
    let limit = d.allocator().limit();
    Ok(limit.map_or(1.0, |l| l as f64 / d.capacity() as f64))
}

/// Starts or stops the memory history (`torch.oxide._record_memory_history`).
#[pyfunction]
fn record_memory_history(enabled: bool, stacks: bool, max_entries: usize) {
    memory_history::record(enabled, stacks, max_entries);
}

/// A Python frame as the memory snapshot gives it: (filename, line, function).
type PyFrame = (String, i64, String);
/// A block of [`memory_snapshot_raw`]: device, address, size, requested, stream, state, stack.
type BlockRow = (usize, usize, usize, usize, i64, &'static str, Vec<PyFrame>);
/// An event of [`memory_snapshot_raw`]: device, action, address, size, stream, time (us), stack.
type EventRow = (usize, &'static str, usize, usize, i64, i64, Vec<PyFrame>);

/// The raw material of `torch.oxide._snapshot()`: every caching-allocator block of
/// every device as (device, address, size, requested, stream, state, allocation
/// stack), and the recorded events as (device, action, address, size, stream,
/// time in microseconds, stack). Python assembles CUDA's dictionaries.
#[pyfunction]
fn memory_snapshot_raw() -> PyResult<(Vec<BlockRow>, Vec<EventRow>)> {
    use oxide_runtime::BlockState;
    let rt = runtime().map_err(to_py)?;
    let (events, live) = memory_history::snapshot();
    let frames = |f: &[site::LaunchSite]| -> Vec<PyFrame> {
        f.iter().map(|s| (s.file.clone(), s.line, s.function.clone())).collect()
    };
    let mut blocks = Vec::new();
    for d in 0..rt.device_count() {
        let device = rt.device(d as i64).map_err(to_py)?;
        for b in device.allocator().blocks() {
            let state = match b.state {
                BlockState::Active => "active_allocated",
                BlockState::PendingFree => "active_pending_free",
                BlockState::Cached => "inactive",
            };
            let stack = match b.state {
                BlockState::Active => live.get(&b.ptr).map(|f| frames(f)).unwrap_or_default(),
                _ => Vec::new(),
            };
            blocks.push((d, b.ptr, b.size, b.requested, b.stream, state, stack));
        }
    }
    let events =
        events.iter().map(|e| (e.device, e.action, e.addr, e.size, e.stream, e.time_us, frames(&e.frames))).collect();
    Ok((blocks, events))
}

/// `(free, total)` bytes of device `index`, as `torch.cuda.mem_get_info`.
#[pyfunction]
fn mem_get_info(index: i64) -> PyResult<(usize, usize)> {
    Ok(device(index)?.mem_get_info())
}

/// Allocator statistics of device `index` as a flat dict keyed like
/// `torch.cuda.memory_stats()` (`"allocated_bytes.all.current"`, ...).
#[pyfunction]
fn memory_stats<'py>(py: Python<'py>, index: i64) -> PyResult<Bound<'py, PyDict>> {
    let s = device(index)?.allocator().stats();
    let out = PyDict::new(py);
    for (name, st) in [
        ("allocation", s.allocation),
        ("segment", s.segment),
        ("active", s.allocation),
        ("allocated_bytes", s.allocated_bytes),
        ("reserved_bytes", s.reserved_bytes),
        ("active_bytes", s.allocated_bytes),
        ("requested_bytes", s.requested_bytes),
    ] {
        for (field, v) in [("current", st.current), ("peak", st.peak), ("allocated", st.allocated), ("freed", st.freed)]
        {
            out.set_item(format!("{name}.all.{field}"), v)?;
        }
    }
    out.set_item("num_alloc_retries", s.num_alloc_retries)?;
    out.set_item("num_ooms", s.num_ooms)?;
    out.set_item("num_device_alloc", s.num_device_alloc)?;
    out.set_item("num_device_free", s.num_device_free)?;
    Ok(out)
}

/// Resets the peak statistics of device `index`.
#[pyfunction]
fn reset_peak_memory_stats(index: i64) -> PyResult<()> {
    device(index)?.allocator().reset_peak_stats();
    Ok(())
}

/// Resets the accumulated statistics of device `index`.
#[pyfunction]
fn reset_accumulated_memory_stats(index: i64) -> PyResult<()> {
    device(index)?.allocator().reset_accumulated_stats();
    Ok(())
}

/// Releases all cached, unused blocks of every device.
#[pyfunction]
fn empty_cache() -> PyResult<()> {
    runtime().map_err(to_py)?.empty_cache();
    Ok(())
}

/// `{operator name: calls}` of operators that ran through the CPU fallback.
#[pyfunction]
fn fallback_stats() -> std::collections::BTreeMap<String, u64> {
    fallback::counts()
}

/// Forgets the fallback counts.
#[pyfunction]
fn reset_fallback_stats() {
    fallback::reset()
}

/// The fallback mode: "silent", "warn" or "error".
#[pyfunction]
fn get_fallback_mode() -> &'static str {
    fallback::mode().name()
}

/// Sets the fallback mode. Raises ValueError for anything but "silent", "warn", "error".
#[pyfunction]
fn set_fallback_mode(mode: &str) -> PyResult<()> {
    let m = fallback::Mode::parse(mode).ok_or_else(|| {
        PyValueError::new_err(format!("invalid fallback mode {mode:?}: expected 'silent', 'warn' or 'error'"))
    })?;
    fallback::set_mode(m);
    Ok(())
}

/// Calls the ABI's panicking test hook and returns `(status, last error message)`.
#[pyfunction]
fn _ffi_panic_probe() -> (i32, String) {
    let status = abi::oxide_test_panic();
    let mut buf = vec![0u8; 512];
    // SAFETY: buf has 512 writable bytes.
    let n = unsafe { abi::oxide_last_error(buf.as_mut_ptr() as *mut std::ffi::c_char, buf.len()) };
    buf.truncate(n.min(511));
    (status, String::from_utf8_lossy(&buf).into_owned())
}

/// The extension module `torch_oxide._C`.
#[pymodule]
#[pyo3(name = "_C")]
fn oxide_c(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Kernels running on stream workers leave the host's core to the host while it
    // runs Python, and a host that waits for the device helps with the kernel
    // running then (oxide_kernels::engine::team, "Narrow launches").
    oxide_kernels::engine::team::set_narrow_policy(|| {
        oxide_runtime::on_stream_worker() && !oxide_runtime::host_waiting()
    });
    oxide_runtime::set_wait_hooks(oxide_kernels::engine::team::help, oxide_kernels::engine::team::crowding_a_worker);
    ipc::register(m)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(is_initialized, m)?)?;
    m.add_function(wrap_pyfunction!(is_in_bad_fork, m)?)?;
    m.add_function(wrap_pyfunction!(current_device, m)?)?;
    m.add_function(wrap_pyfunction!(set_device, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(_launch_blocking, m)?)?;
    m.add_function(wrap_pyfunction!(_sync_current_stream, m)?)?;
    m.add_function(wrap_pyfunction!(_launch_host_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(_set_launch_blocking, m)?)?;
    m.add_function(wrap_pyfunction!(check_device, m)?)?;
    m.add_function(wrap_pyfunction!(_stream_count, m)?)?;
    m.add_function(wrap_pyfunction!(device_capacity, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_threads, m)?)?;
    m.add_function(wrap_pyfunction!(_probe_memory_bandwidth, m)?)?;
    m.add_function(wrap_pyfunction!(_probe_fma_peak, m)?)?;
    m.add_function(wrap_pyfunction!(set_memory_fraction, m)?)?;
    m.add_function(wrap_pyfunction!(record_memory_history, m)?)?;
    m.add_function(wrap_pyfunction!(memory_snapshot_raw, m)?)?;
    m.add_function(wrap_pyfunction!(memory_fraction, m)?)?;
    m.add_function(wrap_pyfunction!(mem_get_info, m)?)?;
    m.add_function(wrap_pyfunction!(memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_accumulated_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(fallback_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_fallback_stats, m)?)?;
    m.add_function(wrap_pyfunction!(get_fallback_mode, m)?)?;
    m.add_function(wrap_pyfunction!(set_fallback_mode, m)?)?;
    m.add_function(wrap_pyfunction!(_ffi_panic_probe, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("_cpu_capability", oxide_kernels::CPU_CAPABILITY)?;
    Ok(())
}
