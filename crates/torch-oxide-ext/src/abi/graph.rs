//! Graph capture and replay (`torch.accelerator.Graph`): the calls of
//! `csrc/runtime/graph.cpp` (oxide_runtime::graph, the allocator's private pools).
//!
//! Capturing on a stream makes every launch aimed at it a graph node instead
//! of a queued record ([`launch_op`] checks the stream), and routes the
//! stream's allocations to the graph's private pool; a replay queues one
//! record that runs the nodes in capture order with the generator states the
//! glue reserved for this replay.

use super::*;

/// A captured graph (opaque to C).
pub struct OxideGraph {
    graph: oxide_runtime::Graph,
    /// The device memory its launches read and write (with `OXIDE_SANITIZE=1`).
    accesses: Vec<(usize, bool)>,
}

/// The generator state one replay gives a Philox slot of the graph (see [`OxidePhilox`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideReplayPhilox {
    pub seed: u64,
    pub offset: u64,
}

/// `cudaStreamBeginCapture` on `stream` of `device`, its allocations going to
/// private pool `pool` (not 0) until the capture ends.
#[no_mangle]
pub extern "C" fn oxide_graph_capture_begin(device: i32, stream: i64, pool: u64) -> i32 {
    ffi(|| {
        if pool == oxide_runtime::allocator::GENERAL_POOL {
            return Err(AbiError::Invalid("a graph needs a private memory pool (id 0 is the general pool)".into()));
        }
        let d = runtime()?.device(device as i64)?;
        d.streams().begin_capture(stream)?;
        d.allocator().begin_pool(stream, pool);
        crate::sanitize::take_captured(device as usize, stream);
        Ok(())
    })
}

/// `cudaStreamEndCapture`: the captured graph, or the error that invalidated
/// the capture. Either way the stream stops capturing and its allocations go
/// back to the general pool.
#[no_mangle]
pub extern "C" fn oxide_graph_capture_end(device: i32, stream: i64, out: *mut *mut OxideGraph) -> i32 {
    ffi(|| {
        let d = runtime()?.device(device as i64)?;
        d.streams().state(stream)?;
        let ended = d.streams().end_capture(stream);
        d.allocator().end_pool(stream);
        let accesses = crate::sanitize::take_captured(device as usize, stream);
        put(out, Box::into_raw(Box::new(OxideGraph { graph: ended?, accesses })))
    })
}

/// True while `stream` of `device` captures (`cudaStreamIsCapturing`).
#[no_mangle]
pub extern "C" fn oxide_stream_is_capturing(device: i32, stream: i64, out: *mut bool) -> i32 {
    ffi(|| put(out, runtime()?.device(device as i64)?.streams().is_capturing(stream)))
}

/// Number of launches the graph holds.
#[no_mangle]
pub extern "C" fn oxide_graph_len(g: *const OxideGraph, out: *mut usize) -> i32 {
    ffi(|| put(out, graph(g)?.graph.len()))
}

/// `cudaGraphLaunch`: one record on `stream` of `device` that runs the graph's
/// launches in order; `philox` holds `n` generator states, one per Philox slot
/// of the graph. Errors of the launches are reported as any queued kernel's.
/// With launch blocking the graph runs at the call.
///
/// # Safety
/// `philox` points to `n` states (null for 0).
#[no_mangle]
pub unsafe extern "C" fn oxide_graph_replay(
    g: *const OxideGraph,
    device: i32,
    stream: i64,
    philox: *const OxideReplayPhilox,
    n: usize,
) -> i32 {
    ffi(|| {
        let handle = graph(g)?;
        let (graph, accesses) = (handle.graph.clone(), &handle.accesses);
        let states: Vec<(u64, u64)> = if n == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(philox, n) }.iter().map(|p| (p.seed, p.offset)).collect()
        };
        let rt = runtime()?;
        let streams = rt.device(device as i64)?.streams();
        let run = move || with_replay_philox(&states, || graph.run());
        if streams.is_capturing(stream) {
            // A replay inside another capture is one node of that graph.
            return Ok(streams.capture(stream, "oxide_graph_replay", Box::new(run))?);
        }
        crate::sanitize::check_replay(rt, device as usize, stream, accesses)?;
        let mut trace = Launch::begin(ActivityKind::Kernel, || "oxide_graph_replay", device as usize, stream);
        if let Some(t) = trace.as_mut() {
            t.submitted();
        }
        if rt.launch_blocking() {
            let (_, r) = streams.launch(stream, || traced(trace, run))?;
            return r
                .map_err(|message| oxide_runtime::Error::Deferred { device: device as usize, stream, message }.into());
        }
        streams.throttle(stream)?;
        streams.enqueue(stream, oxide_runtime::Record::Work(oxide_runtime::Work::new(move || traced(trace, run))))?;
        Ok(())
    })
}

/// Frees a graph from [`oxide_graph_capture_end`]; a replay still queued keeps
/// its launches until it has run. Null is a no-op.
///
/// # Safety
/// `g` comes from [`oxide_graph_capture_end`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn oxide_graph_destroy(g: *mut OxideGraph) {
    if !g.is_null() {
        // SAFETY: per the contract, g is a live Box from oxide_graph_capture_end.
        drop(unsafe { Box::from_raw(g) });
    }
}

/// A graph takes hold of private pool `pool` of `device` (its blocks stay its
/// own, and `empty_cache` keeps them).
#[no_mangle]
pub extern "C" fn oxide_graph_pool_retain(device: i32, pool: u64) -> i32 {
    ffi(|| {
        runtime()?.device(device as i64)?.allocator().retain_pool(pool);
        Ok(())
    })
}

/// A graph lets go of private pool `pool` of `device`; the last one to do so
/// gives its blocks back to the general pool.
#[no_mangle]
pub extern "C" fn oxide_graph_pool_release(device: i32, pool: u64) -> i32 {
    ffi(|| {
        let d = runtime()?.device(device as i64)?;
        // Replays still queued may write the pool's blocks: they wait for them.
        let fences = d.streams().fences();
        d.allocator().release_pool_after(pool, fences);
        Ok(())
    })
}

fn graph<'a>(g: *const OxideGraph) -> Result<&'a OxideGraph, AbiError> {
    // SAFETY: the glue passes handles from oxide_graph_capture_end that it has not destroyed.
    unsafe { g.as_ref() }.ok_or_else(|| AbiError::Invalid("null graph handle".into()))
}

/// Refuses `what` (a NUL-terminated description) when `stream` of `device`
/// captures: the capture is invalidated and the error says so. Succeeds when
/// the stream is not capturing. For work the glue itself knows cannot be a
/// graph node (the CPU fallback).
///
/// # Safety
/// `what` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn oxide_capture_refuse(device: i32, stream: i64, what: *const c_char) -> i32 {
    ffi(|| {
        let streams = runtime()?.device(device as i64)?.streams();
        if !streams.is_capturing(stream) {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let what = unsafe { CStr::from_ptr(what) }.to_string_lossy();
        Ok(streams.refuse_in_capture(stream, &what)?)
    })
}

/// Writes a description of the graph to `path` (`debug_dump`): its device,
/// stream and pool, then one line per launch with its ABI entry point, in
/// replay order.
///
/// # Safety
/// `path` and `header` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn oxide_graph_dump(g: *const OxideGraph, header: *const c_char, path: *const c_char) -> i32 {
    ffi(|| {
        // SAFETY: the caller's contract.
        let (header, path) =
            unsafe { (CStr::from_ptr(header).to_string_lossy(), CStr::from_ptr(path).to_string_lossy()) };
        let names = graph(g)?.graph.names();
        let mut text = format!("{header}\n{} launches, in replay order:\n", names.len());
        for (i, n) in names.iter().enumerate() {
            text.push_str(&format!("{:>6}  {n}\n", i + 1));
        }
        std::fs::write(&*path, text).map_err(|e| AbiError::Invalid(format!("debug_dump: cannot write {path}: {e}")))
    })
}
