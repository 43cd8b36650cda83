//! Inductor's generated C++ kernels as launch records.
//!
//! A compiled graph on oxide calls oxide's native kernels (launch records queued on
//! the current stream) and C++ kernels Inductor generated for the host. Called from
//! Python on the host thread, a C++ kernel must first wait for the stream (it reads
//! what queued launches write), so the host and the stream took turns and neither
//! ran ahead. Launched through [`oxide_launch_host_kernel`] it is one more record on
//! the stream: the stream worker calls it, in stream order, and the host goes on to
//! the graph's next launch. As with every record, an error it raises (a C++
//! exception such as Inductor's index bound checks) is kept by the stream and raised
//! at its next synchronisation; the kernel can be captured into a graph.
//!
//! The call goes through the glue's `oxide_glue_call_host_kernel` (C++: it catches
//! the kernel's exceptions), which passes 64 integer arguments; the Python wrapper
//! only launches kernels whose parameters are all pointers or 64-bit integers.

use super::*;

/// Most arguments a launched C++ kernel may take.
pub const MAX_HOST_KERNEL_ARGS: usize = 64;

extern "C" {
    /// `csrc/runtime/host_kernel.cpp`.
    fn oxide_glue_call_host_kernel(kernel: *mut c_void, args: *const u64, error: *mut c_char, len: usize) -> i32;
}

/// The kernel's address and its arguments: a raw function pointer is not `Send`,
/// but the compiled module that holds the code outlives every launch of it
/// (Inductor keeps the modules it loads, and the graph holds the kernel object).
struct HostKernel {
    kernel: usize,
    args: [u64; MAX_HOST_KERNEL_ARGS],
}

impl HostKernel {
    fn call(&self) -> Result<(), AbiError> {
        let mut error = [0 as c_char; 512];
        // SAFETY: the kernel reads its leading arguments from `args` (see the module
        // documentation and host_kernel.cpp), device pointers were translated to
        // their host addresses, and stream order puts the call after the launches
        // that write its inputs and before those that read its outputs.
        let status = unsafe {
            oxide_glue_call_host_kernel(self.kernel as *mut c_void, self.args.as_ptr(), error.as_mut_ptr(), error.len())
        };
        if status == 0 {
            return Ok(());
        }
        // SAFETY: the glue wrote a NUL-terminated message into `error`.
        let message = unsafe { std::ffi::CStr::from_ptr(error.as_ptr()) }.to_string_lossy().into_owned();
        Err(AbiError::Invalid(format!("a compiled graph's C++ kernel raised: {message}")))
    }
}

/// Queues the generated C++ kernel at `kernel` on the launch's stream with `nargs`
/// arguments; bit `k` of `pointers` marks argument `k` as an address, which is
/// translated to its host address when it is device memory (guarded memory).
///
/// # Safety
/// `kernel` is an `extern "C"` function whose parameters are `nargs` pointers or
/// 64-bit integers, `args` holds `nargs` values, and the buffers the pointers name
/// stay allocated in stream order.
#[no_mangle]
pub unsafe extern "C" fn oxide_launch_host_kernel(
    l: OxideLaunch,
    kernel: *mut c_void,
    args: *const u64,
    nargs: usize,
    pointers: u64,
) -> i32 {
    ffi(|| {
        if kernel.is_null() || nargs > MAX_HOST_KERNEL_ARGS || (nargs > 0 && args.is_null()) {
            return Err(AbiError::Invalid(format!(
                "oxide_launch_host_kernel: a kernel address and at most {MAX_HOST_KERNEL_ARGS} arguments are needed"
            )));
        }
        let rt = runtime()?;
        // SAFETY: the caller's contract: `args` holds `nargs` values.
        let given = unsafe { std::slice::from_raw_parts(args, nargs) };
        let mut values = [0u64; MAX_HOST_KERNEL_ARGS];
        for (k, (slot, &v)) in values.iter_mut().zip(given).enumerate() {
            *slot = if pointers >> k & 1 == 1 { rt.host_address(v as usize) as u64 } else { v };
        }
        let host = HostKernel { kernel: kernel as usize, args: values };
        // The kernel's address tells launches apart: each kernel's first launch runs
        // at the call (see launch_op), so a kernel that throws at once raises there.
        launch_op(&l, host.kernel, move || host.call())
    })
}
