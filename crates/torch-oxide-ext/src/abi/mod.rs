//! The C ABI that the C++ glue (`csrc/`) calls. `build.rs` runs cbindgen over
//! this file to produce `oxide_abi.h`, so the header is never written by hand.
//!
//! Conventions: every fallible function returns an `OXIDE_STATUS_*` code and
//! leaves a message for [`oxide_last_error`] (thread-local, like
//! `cudaGetLastError`); outputs go through pointer arguments; no panic
//! crosses this boundary (each body runs under `catch_unwind`). Device
//! indices are `i32`, sizes `usize` bytes, strides `i64` elements, stream ids
//! `i64` (0 = default stream), flags `bool`.
//!
//! A kernel entry point takes plain data only: one [`OxideLaunch`] (device,
//! stream, threads), one [`OxideTensor`] per operand (data pointer, dtype,
//! sizes, element strides, read or write), and the op's scalars, in a per-op
//! `#[repr(C)]` struct when there are more than a few. [`operands`] decodes
//! and checks every operand in one place and [`launch`] runs the kernel on the
//! stream: the same values can later be queued, captured, timed or checked.
//!
//! One file per op family, named as in `csrc/aten/<family>/` and `oxide_kernels::ops::<family>`;
//! this file holds the conventions, status and dtype codes, the error boundary and the launch helper.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use oxide_kernels::engine::team::with_launch_threads;
use oxide_kernels::Layout;
use oxide_runtime::profiler::{traced, ActivityKind, Launch};
use oxide_runtime::{runtime, Event, MemcpyKind, PointerKind};

use crate::fallback;

pub mod custom;
pub mod elementwise;
pub mod fft;
pub mod graph;
pub mod host_kernel;
pub mod index;
pub mod linalg;
pub mod nn;
pub mod optim;
pub mod profiler;
pub mod random;
pub mod reduce;
pub mod runtime;
pub mod torchvision;

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

pub const OXIDE_DTYPE_COMPLEX32: i32 = 8;

pub const OXIDE_DTYPE_COMPLEX64: i32 = 9;

pub const OXIDE_DTYPE_COMPLEX128: i32 = 10;

pub const OXIDE_DTYPE_BOOL: i32 = 11;

pub const OXIDE_DTYPE_BFLOAT16: i32 = 15;

pub const OXIDE_DTYPE_UINT16: i32 = 27;

pub const OXIDE_DTYPE_UINT32: i32 = 28;

pub const OXIDE_DTYPE_UINT64: i32 = 29;

pub const OXIDE_DTYPE_FLOAT8_E5M2: i32 = 23;

pub const OXIDE_DTYPE_FLOAT8_E4M3FN: i32 = 24;

pub const OXIDE_DTYPE_FLOAT8_E5M2FNUZ: i32 = 25;

pub const OXIDE_DTYPE_FLOAT8_E4M3FNUZ: i32 = 26;

pub const OXIDE_DTYPE_FLOAT8_E8M0FNU: i32 = 44;

const _: () = {
    use oxide_kernels::DType as D;
    assert!(D::U8 as i32 == OXIDE_DTYPE_UINT8 && D::I8 as i32 == OXIDE_DTYPE_INT8);
    assert!(D::I16 as i32 == OXIDE_DTYPE_INT16 && D::I32 as i32 == OXIDE_DTYPE_INT32);
    assert!(D::I64 as i32 == OXIDE_DTYPE_INT64 && D::F16 as i32 == OXIDE_DTYPE_FLOAT16);
    assert!(D::F32 as i32 == OXIDE_DTYPE_FLOAT32 && D::F64 as i32 == OXIDE_DTYPE_FLOAT64);
    assert!(D::C64 as i32 == OXIDE_DTYPE_COMPLEX64 && D::C128 as i32 == OXIDE_DTYPE_COMPLEX128);
    assert!(D::Bool as i32 == OXIDE_DTYPE_BOOL && D::BF16 as i32 == OXIDE_DTYPE_BFLOAT16);
    assert!(
        D::U16 as i32 == OXIDE_DTYPE_UINT16
            && D::U32 as i32 == OXIDE_DTYPE_UINT32
            && D::U64 as i32 == OXIDE_DTYPE_UINT64
    );
    assert!(D::C32 as i32 == OXIDE_DTYPE_COMPLEX32 && D::F8E5M2 as i32 == OXIDE_DTYPE_FLOAT8_E5M2);
    assert!(D::F8E4M3FN as i32 == OXIDE_DTYPE_FLOAT8_E4M3FN && D::F8E5M2FNUZ as i32 == OXIDE_DTYPE_FLOAT8_E5M2FNUZ);
    assert!(D::F8E4M3FNUZ as i32 == OXIDE_DTYPE_FLOAT8_E4M3FNUZ && D::F8E8M0FNU as i32 == OXIDE_DTYPE_FLOAT8_E8M0FNU);
};

/// Errors crossing the ABI.
#[derive(Debug, thiserror::Error)]
pub enum AbiError {
    #[error(transparent)]
    Runtime(#[from] oxide_runtime::Error),
    #[error(transparent)]
    Kernel(#[from] oxide_kernels::Error),
    #[error("{0}")]
    Invalid(String),
    /// A launch the sanitizer refused (`OXIDE_SANITIZE=1`): a RuntimeError.
    #[error("{0}")]
    Sanitizer(String),
}

impl AbiError {
    fn status(&self) -> i32 {
        use oxide_runtime::Error as E;
        match self {
            AbiError::Runtime(E::InvalidDevice { .. }) => OXIDE_STATUS_INVALID_DEVICE,
            AbiError::Runtime(E::OutOfMemory { .. } | E::HostOutOfMemory { .. }) => OXIDE_STATUS_OUT_OF_MEMORY,
            AbiError::Runtime(E::Forked) => OXIDE_STATUS_FORKED,
            AbiError::Runtime(E::Config { .. } | E::Reserve { .. }) => OXIDE_STATUS_INTERNAL,
            AbiError::Runtime(
                E::InvalidEvent { .. } | E::Deferred { .. } | E::WorkerStart { .. } | E::Capture { .. },
            ) => OXIDE_STATUS_RUNTIME_ERROR,
            AbiError::Kernel(oxide_kernels::Error::InvalidValue { .. }) => OXIDE_STATUS_KERNEL_ERROR,
            AbiError::Sanitizer(_) => OXIDE_STATUS_RUNTIME_ERROR,
            // A dtype without an ABI code (float8, complex32, ...) has no kernel either:
            // both go to the CPU fallback (the glue's registration wrapper).
            AbiError::Kernel(
                oxide_kernels::Error::UnsupportedDtype { .. } | oxide_kernels::Error::UnknownDtype { .. },
            ) => OXIDE_STATUS_UNSUPPORTED_DTYPE,
            AbiError::Kernel(
                oxide_kernels::Error::IndexOutOfBounds { .. } | oxide_kernels::Error::OutOfRange { .. },
            ) => OXIDE_STATUS_INDEX_ERROR,
            AbiError::Runtime(_) | AbiError::Kernel(_) | AbiError::Invalid(_) => OXIDE_STATUS_INVALID_VALUE,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// Dtype codes of the operands the current ABI call decoded, in order: with
    /// the kernel's entry point, its launch signature (see [`launch`]).
    static CALL_DTYPES: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    /// Set by an ABI call whose kernel checks the values of its operands (see [`checks_values`]).
    static CALL_CHECKS_VALUES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current ABI call as launching a kernel that checks the values of
/// its operands (an index in range, a probability in [0, 1], an integer divisor
/// not 0), the checks CUDA makes with device-side asserts. Such a kernel can
/// fail after the call returned, so a queued launch of it records the Python
/// line that launched it ([`crate::site`]) for its error.
pub(crate) fn checks_values() {
    CALL_CHECKS_VALUES.with(|c| c.set(true));
}

fn ffi(f: impl FnOnce() -> Result<(), AbiError>) -> i32 {
    CALL_DTYPES.with(|d| d.borrow_mut().clear());
    crate::sanitize::begin_call();
    CALL_CHECKS_VALUES.with(|c| c.set(false));
    ffi_without_launch(f)
}

/// [`ffi`] for the hot calls that launch no kernel (the current device and stream,
/// allocation; the rarer ones keep [`ffi`]): they leave the per-launch state alone (dtypes, value checks, the
/// sanitizer's accesses), which a kernel call resets for itself. Every operator
/// call makes several of them (its device guard, its output's allocation), and
/// the resets cost about 30 instructions of each one's 80-150 (three thread-local
/// accesses, through `__tls_get_addr` in a shared library).
fn ffi_without_launch(f: impl FnOnce() -> Result<(), AbiError>) -> i32 {
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

/// `ndim` values at `p` (an empty slice for `ndim == 0`, whatever `p` is).
/// The lifetime is the caller's to choose: never keep the slice in a launch
/// record (the caller's array is gone when the record runs); copy it.
///
/// # Safety
/// For `ndim > 0`, `p` points to `ndim` readable values for `'a`.
unsafe fn dims<'a>(p: *const i64, ndim: usize) -> &'a [i64] {
    if ndim == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(p, ndim) }
    }
}

/// The dtype of an operand of kernel `op`. The float8 types only convert, as on CPU
/// where no kernel computes in them: only the converting copy (`copy_`) takes them,
/// every other kernel refuses them, so those calls go to the CPU fallback (which
/// raises CPU's error where CPU has no kernel either). The kernels' own dtype
/// dispatch would otherwise read a float8 type as an integer in its default arm.
fn dtype(op: &'static str, code: i32) -> Result<oxide_kernels::DType, AbiError> {
    use oxide_kernels::DType as D;
    let dt = D::from_code(code)?;
    if op != "copy_" && matches!(dt, D::F8E5M2 | D::F8E4M3FN | D::F8E5M2FNUZ | D::F8E4M3FNUZ | D::F8E8M0FNU) {
        return Err(oxide_kernels::Error::UnsupportedDtype { op, dtype: dt }.into());
    }
    Ok(dt)
}

fn check_device_ptr(rt: &oxide_runtime::Runtime, p: *const c_void, numel: usize) -> Result<(), AbiError> {
    if numel > 0 && !matches!(rt.pointer_kind(p as usize), PointerKind::Device(_)) {
        return Err(oxide_runtime::Error::InvalidPointer { ptr: p as usize }.into());
    }
    Ok(())
}

/// Where a kernel runs: a device, a stream of that device, and how many threads
/// the caller allows (PyTorch's `at::get_num_threads()`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideLaunch {
    pub device: i32,
    pub stream: i64,
    pub threads: i32,
}

impl OxideLaunch {
    /// The thread count as kernels take it (at least 1).
    fn threads(&self) -> usize {
        self.threads.max(1) as usize
    }
}

/// [`OxideTensor::access`]: the kernel only reads the operand.
pub const OXIDE_ACCESS_READ: i32 = 0;
/// The kernel only writes the operand (its prior contents are not read).
pub const OXIDE_ACCESS_WRITE: i32 = 1;
/// The kernel reads and writes the operand (in-place updates, accumulation).
pub const OXIDE_ACCESS_READ_WRITE: i32 = 2;

/// One operand of a kernel: a strided view of device memory. `data` is the
/// address of the first element, `sizes` and `strides` hold `ndim` values,
/// strides in elements. An absent optional operand has null `data` and null
/// `sizes`; a present empty tensor may have null `data` but never null `sizes`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideTensor {
    pub data: *mut c_void,
    pub dtype: i32,
    pub ndim: usize,
    pub sizes: *const i64,
    pub strides: *const i64,
    pub access: i32,
}

impl OxideTensor {
    /// An absent optional operand (an undefined tensor in the glue).
    fn is_absent(&self) -> bool {
        self.data.is_null() && self.sizes.is_null()
    }
}

/// Dimensions a [`Dims`] holds without a heap allocation: every tensor of the
/// test suites and models has at most this many (PyTorch allows more).
const INLINE_DIMS: usize = 8;

/// Sizes or strides of one operand, copied out of the caller's arrays: a
/// launch record runs after the C++ call that described it has returned, so
/// it may not point into that call's stack. Up to [`INLINE_DIMS`] values are
/// stored in place (no allocation per launch); more go to the heap.
#[derive(Clone)]
pub(crate) enum Dims {
    Inline(u8, [i64; INLINE_DIMS]),
    Heap(Box<[i64]>),
}

impl Dims {
    fn copy_of(v: &[i64]) -> Dims {
        if v.len() <= INLINE_DIMS {
            let mut values = [0; INLINE_DIMS];
            values[..v.len()].copy_from_slice(v);
            Dims::Inline(v.len() as u8, values)
        } else {
            Dims::Heap(v.into())
        }
    }
}

impl std::ops::Deref for Dims {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        match self {
            Dims::Inline(len, values) => &values[..*len as usize],
            Dims::Heap(values) => values,
        }
    }
}

impl PartialEq for Dims {
    fn eq(&self, other: &Dims) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// An [`OxideTensor`] decoded by [`operands`]: dtype known, sizes and strides
/// copied, element count computed, and the pointer checked to be device memory.
#[derive(Clone, Debug)]
pub(crate) struct Operand {
    pub data: *mut c_void,
    pub dtype: oxide_kernels::DType,
    pub sizes: Dims,
    pub strides: Dims,
    pub numel: usize,
    pub access: i32,
}

// SAFETY: an Operand is an address in device memory plus owned values. Device
// memory belongs to the process, and the stream-ordered caching allocator keeps
// a block from being reused by other work before the launches queued on it have
// run, so a launch record holding the address may run on a stream worker.
unsafe impl Send for Operand {}

impl Operand {
    /// The first element, for a kernel that reads the operand.
    pub fn src(&self) -> *const u8 {
        self.data as *const u8
    }

    /// The first element, for a kernel that writes the operand (refused for a read-only operand).
    pub fn dst(&self) -> *mut u8 {
        debug_assert!(self.access != OXIDE_ACCESS_READ, "a read-only operand written");
        self.data as *mut u8
    }

    /// Sizes as `usize` (decoding already refused negative sizes).
    pub fn extents(&self) -> Vec<usize> {
        self.sizes.iter().map(|&d| d as usize).collect()
    }

    /// Refuses an operand that is not row-major contiguous (strides of a
    /// contiguous tensor; extents of 1 may have any stride, as in PyTorch).
    pub fn contiguous(&self, op: &'static str) -> Result<&Self, AbiError> {
        if !is_contiguous(&self.sizes, &self.strides) {
            return Err(AbiError::Invalid(format!(
                "{op}: operand of sizes {:?} is not contiguous (strides {:?})",
                self.sizes, self.strides
            )));
        }
        Ok(self)
    }

    /// Refuses an operand whose element count is not `numel`.
    pub fn numel_is(&self, op: &'static str, numel: usize) -> Result<&Self, AbiError> {
        if self.numel != numel {
            return Err(AbiError::Invalid(format!("{op}: operand has {} elements, expected {numel}", self.numel)));
        }
        Ok(self)
    }

    /// Refuses an operand whose dtype is not `dtype`.
    pub fn dtype_is(&self, op: &'static str, dtype: oxide_kernels::DType) -> Result<&Self, AbiError> {
        if self.dtype != dtype {
            return Err(AbiError::Invalid(format!(
                "{op}: operand of dtype {}, expected {}",
                self.dtype.name(),
                dtype.name()
            )));
        }
        Ok(self)
    }

    /// Refuses an operand whose sizes are not `sizes`.
    pub fn sizes_are(&self, op: &'static str, sizes: &[i64]) -> Result<&Self, AbiError> {
        if *self.sizes != *sizes {
            return Err(AbiError::Invalid(format!("{op}: operand of sizes {:?}, expected {sizes:?}", self.sizes)));
        }
        Ok(self)
    }

    /// Strides as `isize`, as the strided kernels take them.
    pub fn istrides(&self) -> Vec<isize> {
        self.strides.iter().map(|&s| s as isize).collect()
    }
}

/// Decodes every operand of a kernel: dtype codes, access modes and sizes must
/// be valid, and every operand with elements must be device memory. Absent
/// optional operands (null `data` and `sizes`) are `None`.
///
/// # Safety
/// Each operand's `sizes` and `strides` point to `ndim` readable values (they
/// are copied: the operands do not borrow them).
pub(crate) unsafe fn operands<const N: usize>(
    op: &'static str,
    ts: [&OxideTensor; N],
) -> Result<[Option<Operand>; N], AbiError> {
    let rt = runtime()?;
    let mut out: [Option<Operand>; N] = std::array::from_fn(|_| None);
    for (slot, t) in out.iter_mut().zip(ts) {
        if t.is_absent() {
            continue;
        }
        // SAFETY: the caller's contract.
        let (sizes, strides, numel) = unsafe { decode(op, rt, t) }?;
        let data = rt.host_address(t.data as usize) as *mut c_void;
        *slot = Some(Operand { data, dtype: dtype(op, t.dtype)?, sizes, strides, numel, access: t.access });
        CALL_DTYPES.with(|d| d.borrow_mut().push(t.dtype));
    }
    Ok(out)
}

/// An operand of a kernel that moves bytes (copy, fill, cat): like [`Operand`]
/// without a dtype, since such kernels also serve dtypes the kernels do not
/// compute in (float8, complex32).
#[derive(Clone, Debug)]
pub(crate) struct ByteOperand {
    pub data: *mut c_void,
    pub sizes: Dims,
    pub strides: Dims,
    pub numel: usize,
}

// SAFETY: as for [`Operand`].
unsafe impl Send for ByteOperand {}

impl ByteOperand {
    /// The first byte, for a kernel that reads the operand.
    pub fn src(&self) -> *const u8 {
        self.data as *const u8
    }

    /// The first byte, for a kernel that writes the operand.
    pub fn dst(&self) -> *mut u8 {
        self.data as *mut u8
    }

    /// Refuses an operand that is not row-major contiguous.
    pub fn contiguous(&self, op: &'static str) -> Result<&Self, AbiError> {
        if !is_contiguous(&self.sizes, &self.strides) {
            return Err(AbiError::Invalid(format!(
                "{op}: operand of sizes {:?} is not contiguous (strides {:?})",
                self.sizes, self.strides
            )));
        }
        Ok(self)
    }
}

/// Whether `sizes`/`strides` (elements) describe a row-major contiguous
/// tensor; as in PyTorch, extents of 1 may have any stride and an empty
/// tensor is contiguous whatever its strides.
fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    if sizes.contains(&0) {
        return true;
    }
    let mut expected = 1i64;
    for (&size, &stride) in sizes.iter().zip(strides).rev() {
        if size != 1 && stride != expected {
            return false;
        }
        expected *= size;
    }
    true
}

/// The shared part of decoding: sizes and strides as slices, the element
/// count (negative sizes refused), the device check of an operand with elements.
///
/// # Safety
/// As for [`operands`].
unsafe fn decode(
    op: &'static str,
    rt: &oxide_runtime::Runtime,
    t: &OxideTensor,
) -> Result<(Dims, Dims, usize), AbiError> {
    if !(OXIDE_ACCESS_READ..=OXIDE_ACCESS_READ_WRITE).contains(&t.access) {
        return Err(AbiError::Invalid(format!("{op}: unknown access mode {}", t.access)));
    }
    // SAFETY: the caller's contract: both arrays hold `ndim` values.
    let (sizes, strides) = unsafe { (dims(t.sizes, t.ndim), dims(t.strides, t.ndim)) };
    let numel = extents(op, sizes)?.iter().product();
    check_device_ptr(rt, t.data, numel)?;
    if numel > 0 {
        crate::sanitize::note_access(t.data as usize, t.access != OXIDE_ACCESS_READ);
    }
    Ok((Dims::copy_of(sizes), Dims::copy_of(strides), numel))
}

/// Decodes the operands of a byte-moving kernel (all required), as [`operands`] does but without dtypes.
///
/// # Safety
/// As for [`operands`].
pub(crate) unsafe fn byte_operands<const N: usize>(
    op: &'static str,
    ts: [&OxideTensor; N],
) -> Result<[ByteOperand; N], AbiError> {
    let rt = runtime()?;
    let mut out = Vec::with_capacity(N);
    for t in ts {
        if t.is_absent() {
            return Err(AbiError::Invalid(format!("{op}: a required operand is missing")));
        }
        // SAFETY: the caller's contract.
        let (sizes, strides, numel) = unsafe { decode(op, rt, t) }?;
        out.push(ByteOperand { data: rt.host_address(t.data as usize) as *mut c_void, sizes, strides, numel });
    }
    Ok(out.try_into().unwrap_or_else(|_| unreachable!("N operands in, N out")))
}

/// [`operands`] for operands that must all be present.
///
/// # Safety
/// As for [`operands`].
pub(crate) unsafe fn required<const N: usize>(
    op: &'static str,
    ts: [&OxideTensor; N],
) -> Result<[Operand; N], AbiError> {
    // SAFETY: the caller's contract.
    let decoded = unsafe { operands(op, ts) }?;
    let mut out = Vec::with_capacity(N);
    for d in decoded {
        out.push(d.ok_or_else(|| AbiError::Invalid(format!("{op}: a required operand is missing")))?);
    }
    Ok(out.try_into().unwrap_or_else(|_| unreachable!("N operands in, N out")))
}

/// `o`, refused when absent (a required operand among optional ones).
pub(crate) fn present(op: &'static str, o: Option<Operand>) -> Result<Operand, AbiError> {
    o.ok_or_else(|| AbiError::Invalid(format!("{op}: a required operand is missing")))
}

/// The dtype all of `ops` share; refused when they differ (a kernel reads
/// every operand as one element type).
pub(crate) fn common_dtype(op: &'static str, ops: &[&Operand]) -> Result<oxide_kernels::DType, AbiError> {
    let first = ops.first().map(|o| o.dtype).ok_or_else(|| AbiError::Invalid(format!("{op}: no operands")))?;
    if let Some(o) = ops.iter().find(|o| o.dtype != first) {
        return Err(AbiError::Invalid(format!("{op}: operands of dtypes {} and {}", first.name(), o.dtype.name())));
    }
    Ok(first)
}

/// Refuses operands whose sizes differ.
pub(crate) fn same_sizes(op: &'static str, ops: &[&Operand]) -> Result<(), AbiError> {
    if let Some((a, b)) = ops.first().and_then(|a| ops.iter().find(|b| *b.sizes != *a.sizes).map(|b| (a, b))) {
        return Err(AbiError::Invalid(format!("{op}: operands of sizes {:?} and {:?}", a.sizes, b.sizes)));
    }
    Ok(())
}

/// Launches `kernel` on the launch's stream: a launch record, queued for the
/// stream's worker, so the call returns before the kernel has run. The record
/// owns everything it reads (`'static`: no borrow of the caller's arguments)
/// and may run on another thread (`Send`). Argument errors were raised before,
/// by the caller; the kernel's own error (a data-dependent check, such as an
/// index out of range) is kept by the stream and raised at its next
/// synchronisation. With launch blocking (`OXIDE_LAUNCH_BLOCKING=1`) the
/// kernel runs at the call and its error is raised there, with its own status.
///
/// On a stream that captures a graph the record becomes a graph node instead
/// (see `oxide_runtime::graph`): so a kernel closure is `FnMut`, it may run once
/// per replay, and reads what it owns without consuming it.
fn launch<E: Into<AbiError>>(
    l: &OxideLaunch,
    kernel: impl FnMut() -> Result<(), E> + Send + 'static,
) -> Result<(), AbiError> {
    launch_op(l, (), kernel)
}

/// Launch signatures whose kernel has run once and so is known to have a loop
/// for their dtypes (see [`launch_op`]).
static KNOWN_SIGNATURES: std::sync::RwLock<Vec<u64>> = std::sync::RwLock::new(Vec::new());

/// [`launch`] for an entry point that serves several ops: `op` (an op id, a
/// flag) tells them apart in the launch signature.
///
/// Whether a kernel has a loop for a call's dtypes is decided inside the kernel
/// (its dtype dispatch), and PyTorch raises an unsupported dtype at the call
/// (NotImplementedError), as CUDA's host-side dispatch does. So the first launch
/// of each signature (the entry point, which is the kernel closure's type, `op`,
/// and the dtypes of every operand the call decoded) runs at the call, after the
/// stream's queued work: an unsupported dtype raises there, every time, and a
/// signature that ran is recorded, so later launches with it are queued. The
/// dtypes decide the dispatch alone, so a recorded signature never fails it.
fn launch_op<K: Hash, E: Into<AbiError>, F: FnMut() -> Result<(), E> + Send + 'static>(
    l: &OxideLaunch,
    op: K,
    mut kernel: F,
) -> Result<(), AbiError> {
    let rt = runtime()?;
    let streams = rt.device(l.device as i64)?.streams();
    if streams.is_capturing(l.stream) {
        // A graph node. Its dtypes are not tried at the call: a refused dtype is
        // reported by the replay, as any kernel error of a queued launch.
        let closure = std::any::type_name::<F>();
        let site = if CALL_CHECKS_VALUES.with(|c| c.get()) { crate::site::capture() } else { None };
        let threads = l.threads();
        let node = move || {
            with_launch_threads(threads, &mut kernel).map_err(|e| deferred_message(closure, site.as_ref(), e.into()))
        };
        streams.capture(l.stream, entry_point(closure), Box::new(node))?;
        crate::sanitize::note_captured(l.device as usize, l.stream);
        return Ok(());
    }
    if crate::sanitize::enabled() {
        crate::sanitize::check_launch(rt, l.device as usize, l.stream, entry_point(std::any::type_name::<F>()))?;
    }
    let signature = {
        // FxHash, not SipHash: no untrusted input here, and this runs at every launch.
        let mut h = rustc_hash::FxHasher::default();
        std::any::TypeId::of::<F>().hash(&mut h);
        op.hash(&mut h);
        CALL_DTYPES.with(|d| d.borrow().hash(&mut h));
        h.finish()
    };
    let known = KNOWN_SIGNATURES.read().unwrap_or_else(|e| e.into_inner()).binary_search(&signature).is_ok();
    if rt.launch_blocking() || !known {
        let r = launch_now(l, kernel);
        // The write lock only for a signature not yet recorded (launch blocking runs
        // every launch here).
        if !known && !matches!(r, Err(AbiError::Kernel(oxide_kernels::Error::UnsupportedDtype { .. }))) {
            let mut set = KNOWN_SIGNATURES.write().unwrap_or_else(|e| e.into_inner());
            if let Err(at) = set.binary_search(&signature) {
                set.insert(at, signature);
            }
        }
        return r;
    }
    streams.throttle(l.stream)?;
    // The closure's type name, parsed into the entry point only if the kernel fails
    // or a profiler records it.
    let closure = std::any::type_name::<F>();
    let site = if CALL_CHECKS_VALUES.with(|c| c.get()) { crate::site::capture() } else { None };
    let mut trace = Launch::begin(ActivityKind::Kernel, || entry_point(closure), l.device as usize, l.stream);
    if let Some(t) = trace.as_mut() {
        t.submitted();
    }
    let threads = l.threads();
    let record = move || {
        traced(trace, || with_launch_threads(threads, kernel))
            .map_err(|e| deferred_message(closure, site.as_ref(), e.into()))
    };
    streams.enqueue(l.stream, oxide_runtime::Record::Work(oxide_runtime::Work::new(record)))?;
    Ok(())
}

/// The message of a queued kernel's error: the operator, the ABI entry point (from
/// the kernel closure's type name), where Python launched it (for kernels that
/// check values) and the error.
fn deferred_message(closure: &'static str, site: Option<&crate::site::LaunchSite>, e: AbiError) -> String {
    let entry = entry_point(closure);
    let op = match &e {
        AbiError::Kernel(k) => k.op(),
        _ => None,
    };
    let name = match op {
        Some(op) => format!("{op} ({entry})"),
        None => entry.to_string(),
    };
    match site {
        Some(site) => format!("{name}, launched at {site}: {e}"),
        None => format!("{name}: {e}"),
    }
}

/// The ABI function a kernel closure was launched from (`oxide_index`), from
/// the closure's type name (`torch_oxide_ext::abi::index::oxide_index::{{closure}}`):
/// a queued kernel's error names its kernel, since the launching call has returned.
fn entry_point(closure: &'static str) -> &'static str {
    closure.split("::").find(|part| part.starts_with("oxide_")).unwrap_or("a kernel")
}

/// Runs `kernel` on the calling thread once the work queued on the launch's
/// stream has run, and returns its result: for kernels whose result the host
/// needs at once (the size of a data-dependent output, a flag read on the host).
fn launch_now<T, E: Into<AbiError>, F: FnOnce() -> Result<T, E>>(l: &OxideLaunch, kernel: F) -> Result<T, AbiError> {
    let streams = runtime()?.device(l.device as i64)?.streams();
    if streams.is_capturing(l.stream) {
        let what = format!("{} (its result is read on the host at the call)", entry_point(std::any::type_name::<F>()));
        streams.refuse_in_capture(l.stream, &what)?;
    }
    if crate::sanitize::enabled() {
        crate::sanitize::check_launch(
            runtime()?,
            l.device as usize,
            l.stream,
            entry_point(std::any::type_name::<F>()),
        )?;
    }
    let mut trace =
        Launch::begin(ActivityKind::Kernel, || entry_point(std::any::type_name::<F>()), l.device as usize, l.stream);
    if let Some(t) = trace.as_mut() {
        t.submitted();
    }
    let threads = l.threads();
    let (_, r) = streams.launch(l.stream, || traced(trace, || with_launch_threads(threads, kernel)))?;
    r.map_err(Into::into)
}

/// A `TensorIterator` as the glue hands it over: `ndim` extents (dimension 0
/// fastest), and per operand (outputs first) a data pointer, a dtype code and
/// `ndim` byte strides (operand-major in `strides`). The iterator's own
/// layout (permuted, coalesced dimensions and byte strides) is why its
/// operands are not [`OxideTensor`]s.
#[repr(C)]
pub struct OxideIter {
    pub ndim: usize,
    pub shape: *const i64,
    pub ntensors: usize,
    pub noutputs: usize,
    pub data: *const *mut c_void,
    pub dtypes: *const i32,
    pub strides: *const i64,
}

/// A [`oxide_kernels::engine::iter::TensorIter`] built from an [`OxideIter`],
/// with the copies of its host-memory scalar operands: a launch record owns both.
pub(crate) struct Iter {
    it: oxide_kernels::engine::iter::TensorIter,
    /// Values of CPU scalars (0-dim CPU tensors broadcast over the iteration),
    /// read when the kernel is launched, as CUDA passes them as kernel arguments:
    /// the caller's tensor may be gone by the time the kernel runs. `it` holds
    /// their addresses: the vector never grows past the capacity it was made
    /// with, and moving it does not move its elements.
    _host: Vec<[u8; 16]>,
}

impl std::ops::Deref for Iter {
    type Target = oxide_kernels::engine::iter::TensorIter;
    fn deref(&self) -> &Self::Target {
        &self.it
    }
}

impl std::ops::DerefMut for Iter {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.it
    }
}

/// Converts an [`OxideIter`] and checks that every operand that is not a
/// broadcast scalar (all strides 0) is device memory. A broadcast scalar in
/// host memory (a CPU scalar) is copied into the result.
///
/// # Safety
/// The arrays hold the counts the struct states.
unsafe fn tensor_iter(op: &'static str, it: &OxideIter, on: &OxideLaunch) -> Result<Iter, AbiError> {
    use oxide_kernels::engine::iter::{Operand, TensorIter};
    // SAFETY: caller contract.
    let (shape, data, dtypes, strides) = unsafe {
        (
            dims(it.shape, it.ndim),
            std::slice::from_raw_parts(it.data, it.ntensors),
            std::slice::from_raw_parts(it.dtypes, it.ntensors),
            if it.ndim * it.ntensors == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(it.strides, it.ndim * it.ntensors)
            },
        )
    };
    let numel: usize = shape.iter().map(|&d| d.max(0) as usize).product();
    let rt = runtime()?;
    // Inline, and the host-scalar vector made only when a host scalar comes: a launch
    // allocates nothing here (see TensorIter for why that matters).
    let mut operands: smallvec::SmallVec<[_; oxide_kernels::engine::iter::INLINE_OPERANDS]> = smallvec::SmallVec::new();
    let mut host: Vec<[u8; 16]> = Vec::new();
    // The launch signature's dtypes, in one thread-local access (one per operand cost
    // about 50 instructions each).
    CALL_DTYPES.with(|d| d.borrow_mut().extend_from_slice(dtypes));
    for k in 0..it.ntensors {
        let s = &strides[k * it.ndim..(k + 1) * it.ndim];
        let dt = dtype(op, dtypes[k])?;
        let mut ptr = data[k] as *mut u8;
        if s.iter().any(|&x| x != 0) {
            check_device_ptr(rt, data[k], numel)?;
            if numel > 0 {
                crate::sanitize::note_access(ptr as usize, k < it.noutputs);
            }
            ptr = rt.host_address(ptr as usize) as *mut u8;
        } else if matches!(rt.pointer_kind(ptr as usize), PointerKind::Device(_)) {
            // A broadcast device scalar (a 0-dim tensor, or all strides 0).
            if numel > 0 {
                crate::sanitize::note_access(ptr as usize, k < it.noutputs);
            }
            ptr = rt.host_address(ptr as usize) as *mut u8;
        } else if numel > 0 {
            if k < it.noutputs {
                return Err(AbiError::Invalid(format!("{op}: an output is in host memory")));
            }
            if host.capacity() == 0 {
                host.reserve_exact(it.ntensors); // once: `it` keeps addresses into it
            }
            let mut value = [0u8; 16];
            // SAFETY: a scalar operand points to one element of its dtype (at most 16 bytes), per the contract.
            unsafe { std::ptr::copy_nonoverlapping(ptr, value.as_mut_ptr(), dt.size()) };
            host.push(value); // within the capacity: earlier addresses stay valid
            ptr = host.last_mut().map_or(ptr, |v| v.as_mut_ptr());
        }
        operands.push((Operand { ptr, dtype: dt }, s));
    }
    let it = TensorIter::new(op, shape, operands, it.noutputs, on.threads())?;
    Ok(Iter { it, _host: host })
}

/// `usize` extents from `i64` ones (negative extents are rejected).
fn extents(op: &'static str, shape: &[i64]) -> Result<Vec<usize>, AbiError> {
    shape
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                AbiError::Kernel(oxide_kernels::Error::InvalidLayout { op, reason: format!("negative extent {d}") })
            })
        })
        .collect()
}

/// Philox4x32-10 state for one kernel: the key (seed) and the first counter
/// (offset). In a graph capture `slot` is `k > 0`: the seed and the offset's base
/// are the state of the graph's `k`-th generator, given to each replay
/// ([`with_replay_philox`]), so every replay draws new numbers (CUDA's
/// graph-safe Philox); `offset` is then relative to that base.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxidePhilox {
    pub seed: u64,
    pub offset: u64,
    pub slot: u64,
}

thread_local! {
    /// The generator states, `(seed, offset)` per slot, of the graph replay running on this thread.
    static REPLAY_PHILOX: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` (a graph's nodes) with `states` as the generator states of its Philox slots.
pub(crate) fn with_replay_philox<T>(states: &[(u64, u64)], f: impl FnOnce() -> T) -> T {
    let previous = REPLAY_PHILOX.with(|r| std::mem::replace(&mut *r.borrow_mut(), states.to_vec()));
    let out = f();
    REPLAY_PHILOX.with(|r| *r.borrow_mut() = previous);
    out
}

/// The Philox block function of `p`: counter `i` past its offset gives four
/// 32-bit words. Called inside the launch record, when the kernel runs: a
/// captured kernel's state depends on the replay.
fn philox(p: &OxidePhilox) -> impl Fn(u64) -> [u32; 4] + Sync {
    let (seed, base) = match p.slot {
        0 => (p.seed, 0),
        k => REPLAY_PHILOX.with(|r| r.borrow().get(k as usize - 1).copied()).unwrap_or((p.seed, 0)),
    };
    let engine = oxide_runtime::Philox4x32::new(seed);
    let offset = base.wrapping_add(p.offset);
    move |i| engine.block(offset.wrapping_add(i))
}
