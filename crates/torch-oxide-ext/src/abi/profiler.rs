//! The profiler's side of the runtime: recording of device activities
//! (`oxide_runtime::profiler`) for the Kineto child profiler of
//! `csrc/runtime/profiler.cpp`, and the correlation ids it pushes per operator.

use std::ffi::{c_char, c_void};

use oxide_runtime::profiler::{self, ActivityKind};

use super::ffi;

/// `OxideActivity.kind` of a kernel.
pub const OXIDE_ACTIVITY_KERNEL: i32 = 0;
/// `OxideActivity.kind` of a copy.
pub const OXIDE_ACTIVITY_MEMCPY: i32 = 1;

/// One recorded kernel or copy (see `oxide_runtime::profiler::Activity`);
/// `name` is not NUL-terminated and lives for the whole process.
#[repr(C)]
pub struct OxideActivity {
    pub kind: i32,
    pub name: *const c_char,
    pub name_len: usize,
    pub device: i32,
    pub stream: i64,
    pub correlation: u64,
    pub thread: i64,
    pub launch_start_ns: i64,
    pub launch_end_ns: i64,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// Starts recording device activities, dropping any left from before.
#[no_mangle]
pub extern "C" fn oxide_profiler_start() {
    profiler::start();
}

/// Stops recording, after every stream of every started device has run the
/// work queued so far, so each kernel launched while recording is in the trace.
/// Kernel errors stay with their streams for the program's next synchronisation.
#[no_mangle]
pub extern "C" fn oxide_profiler_stop() -> i32 {
    ffi(|| {
        if oxide_runtime::is_initialized() {
            let rt = oxide_runtime::runtime()?;
            for d in 0..rt.device_count() {
                for fence in rt.device(d as i64)?.streams().fences() {
                    fence.wait();
                }
            }
        }
        profiler::stop();
        Ok(())
    })
}

/// An operator with `id` starts on the calling thread: launches from this
/// thread belong to it until [`oxide_profiler_pop_correlation`].
#[no_mangle]
pub extern "C" fn oxide_profiler_push_correlation(id: u64) {
    profiler::push_correlation(id);
}

/// The calling thread's innermost operator has ended.
#[no_mangle]
pub extern "C" fn oxide_profiler_pop_correlation() {
    profiler::pop_correlation();
}

/// Hands every recorded activity to `each(ctx, activity)`, in the order they
/// finished, and forgets them. `each` must not unwind.
#[no_mangle]
pub extern "C" fn oxide_profiler_drain(
    ctx: *mut c_void,
    each: Option<extern "C" fn(*mut c_void, *const OxideActivity)>,
) {
    let activities = profiler::take();
    let Some(each) = each else { return };
    for a in activities {
        let c = OxideActivity {
            kind: match a.kind {
                ActivityKind::Kernel => OXIDE_ACTIVITY_KERNEL,
                ActivityKind::Memcpy => OXIDE_ACTIVITY_MEMCPY,
            },
            name: a.name.as_ptr().cast(),
            name_len: a.name.len(),
            device: a.device as i32,
            stream: a.stream,
            correlation: a.correlation,
            thread: a.thread,
            launch_start_ns: a.launch_start_ns,
            launch_end_ns: a.launch_end_ns,
            start_ns: a.start_ns,
            end_ns: a.end_ns,
        };
        each(ctx, &c);
    }
}
