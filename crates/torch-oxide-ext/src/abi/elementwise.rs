//! Elementwise kernels (`csrc/aten/elementwise/`, `oxide_kernels::ops::elementwise`):
//! strided copy, cat, fill, the pointwise op table (real and complex), casts and range factories.

use super::*;

/// Strided device-to-device copy between two operands of one shape whose
/// elements are `elem_size` bytes (any dtype, float8 and complex32 included:
/// the copy moves bytes, so the dtype codes are not interpreted).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`byte_operands`]); the
/// operands do not overlap.
#[no_mangle]
pub unsafe extern "C" fn oxide_copy_strided(
    on: OxideLaunch,
    elem_size: usize,
    dst: OxideTensor,
    src: OxideTensor,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [dst, src] = unsafe { byte_operands("copy_", [&dst, &src]) }?;
        if dst.sizes != src.sizes {
            return Err(AbiError::Invalid(format!("copy_: operands of sizes {:?} and {:?}", dst.sizes, src.sizes)));
        }
        let layout = Layout::new("copy_", &dst.sizes, [&dst.strides, &src.strides])?;
        launch(&on, move || {
            // SAFETY: `layout` addresses only elements of the two decoded, checked operands.
            unsafe { oxide_kernels::ops::elementwise::copy::copy_strided(elem_size, &layout, dst.dst(), src.src()) }
        })
    })
}

/// Concatenation (`torch.cat`) of `count` contiguous operands `parts` into the
/// contiguous operand `dst`, all of `elem_size`-byte elements: `dst` is
/// `outer` rows, each made of part 0's next row, then part 1's, and so on
/// (a part's row is its element count / `outer`).
///
/// # Safety
/// `parts` holds `count` [`OxideTensor`]s; each describes live memory (see
/// [`byte_operands`]) and none overlaps `dst`.
#[no_mangle]
pub unsafe extern "C" fn oxide_cat_contiguous(
    on: OxideLaunch,
    elem_size: usize,
    outer: usize,
    dst: OxideTensor,
    parts: *const OxideTensor,
    count: usize,
) -> i32 {
    ffi(|| {
        // SAFETY: `parts` holds `count` descriptors.
        let parts = unsafe {
            if count == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(parts, count)
            }
        };
        // SAFETY: the function's contract.
        let [dst] = unsafe { byte_operands("cat", [&dst]) }?;
        dst.contiguous("cat")?;
        let mut rows: Vec<(ByteOperand, usize)> = Vec::with_capacity(count);
        for part in parts {
            // SAFETY: the function's contract.
            let [p] = unsafe { byte_operands("cat", [part]) }?;
            p.contiguous("cat")?;
            if p.numel > 0 {
                if outer == 0 || p.numel % outer != 0 {
                    return Err(AbiError::Invalid(format!("cat: a part of {} elements is not {outer} rows", p.numel)));
                }
                let bytes = p.numel / outer * elem_size;
                rows.push((p, bytes));
            }
        }
        let total: usize = rows.iter().map(|r| r.1).sum::<usize>() * outer;
        if total != dst.numel * elem_size {
            return Err(AbiError::Invalid(format!(
                "cat: parts of {total} bytes for an output of {} bytes",
                dst.numel * elem_size
            )));
        }
        let threads = on.threads();
        launch(&on, move || {
            let rows: Vec<(*const u8, usize)> = rows.iter().map(|(p, bytes)| (p.src(), *bytes)).collect();
            // SAFETY: every part and `dst` were decoded and checked, are contiguous, and their sizes add up.
            unsafe { oxide_kernels::ops::elementwise::copy::cat_contiguous(outer, &rows, dst.dst(), threads) };
            Ok::<(), oxide_kernels::Error>(())
        })
    })
}

/// Writes the `elem_size` bytes at `pattern` to every element of `dst` (any dtype).
///
/// # Safety
/// `dst` describes live memory (see [`byte_operands`]); `pattern` holds `elem_size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn oxide_fill_strided(
    on: OxideLaunch,
    elem_size: usize,
    dst: OxideTensor,
    pattern: *const c_void,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [dst] = unsafe { byte_operands("fill_", [&dst]) }?;
        let layout = Layout::new("fill_", &dst.sizes, [&dst.strides])?;
        // The pattern is the caller's local: the launch record keeps its own copy.
        let mut value = [0u8; 16];
        if elem_size > value.len() {
            return Err(AbiError::Invalid(format!("fill_: elements of {elem_size} bytes (at most 16)")));
        }
        // SAFETY: `pattern` holds `elem_size` readable bytes (the contract), and `value` has room for them.
        unsafe { std::ptr::copy_nonoverlapping(pattern as *const u8, value.as_mut_ptr(), elem_size) };
        launch(&on, move || {
            // SAFETY: `layout` addresses only elements of the decoded, checked operand; `value` holds `elem_size` bytes.
            unsafe {
                oxide_kernels::ops::elementwise::fill::fill_strided(elem_size, &layout, dst.dst(), value.as_ptr())
            }
        })
    })
}

/// The scalar arguments of a pointwise op: up to 4 values, each as double
/// (`f`) and as int64 (`i`) so that integer kernels see exact values, and the
/// imaginary part of a complex scalar (`im`, 0 for real scalars).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OxideScalars {
    pub f: [f64; 4],
    pub i: [i64; 4],
    pub im: [f64; 4],
}

fn pointwise_op(op: i32) -> Result<oxide_kernels::ops::elementwise::pointwise::PointwiseOp, AbiError> {
    oxide_kernels::ops::elementwise::pointwise::PointwiseOp::from_id(op)
        .ok_or_else(|| AbiError::Invalid(format!("unknown pointwise op id {op}")))
}

/// Runs pointwise op `op` (an `OXIDE_POINTWISE_*` id of the generated
/// `oxide_pointwise_ops.h`) over `iter`, computing in the opmath type of
/// dtype `common` (-1: the op family's default; a complex dtype runs the op's
/// complex kernel), with scalar arguments `scalars`.
///
/// # Safety
/// `iter` describes live memory as [`OxideIter`] states.
#[no_mangle]
pub unsafe extern "C" fn oxide_pointwise(
    on: OxideLaunch,
    op: i32,
    iter: *const OxideIter,
    common: i32,
    scalars: OxideScalars,
) -> i32 {
    ffi(|| {
        let o = pointwise_op(op)?;
        if o.checks_values() {
            checks_values();
        }
        // SAFETY: the function's contract.
        let it = unsafe { tensor_iter(o.name(), &*iter, &on) }?;
        let common = if common < 0 { None } else { Some(dtype(o.name(), common)?) };
        let ctx = oxide_kernels::ops::elementwise::pointwise::Ctx {
            f: scalars.f,
            i: scalars.i,
            im: scalars.im,
            ..Default::default()
        };
        launch_op(&on, (op, common), move || {
            // SAFETY: `it` was built from checked operands by tensor_iter.
            unsafe { o.run(&it, common, &ctx) }
        })
    })
}

/// Whether pointwise op `op` has a complex64/complex128 kernel; the glue runs
/// the others on its counted CPU path.
#[no_mangle]
pub extern "C" fn oxide_pointwise_complex_supported(op: i32) -> bool {
    pointwise_op(op).is_ok_and(oxide_kernels::ops::elementwise::complex::supports)
}

/// `arange` or `linspace` into operand 0 of an iterator ([`oxide_fill_sequence`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideSequence {
    /// True: `linspace` from `start` to `end` in `steps` values; false: `arange`
    /// from `start` (`istart`) by `end` (`istep`) as the step.
    pub linspace: bool,
    pub start: f64,
    pub end: f64,
    pub istart: i64,
    pub istep: i64,
    pub steps: i64,
}

/// Fills operand 0 of `iter` with the sequence `seq`.
///
/// # Safety
/// As [`oxide_pointwise`].
#[no_mangle]
pub unsafe extern "C" fn oxide_fill_sequence(on: OxideLaunch, iter: *const OxideIter, seq: OxideSequence) -> i32 {
    use oxide_kernels::ops::elementwise::factory::{fill_sequence, Sequence};
    ffi(|| {
        // SAFETY: the function's contract.
        let it = unsafe { tensor_iter("arange", &*iter, &on) }?;
        let seq = if seq.linspace {
            Sequence::Linspace { start: seq.start, end: seq.end, steps: seq.steps }
        } else {
            Sequence::Arange { start: seq.start, step: seq.end, istart: seq.istart, istep: seq.istep }
        };
        launch(&on, move || {
            // SAFETY: `it` was built from checked operands by tensor_iter.
            unsafe { fill_sequence(&it, seq) }
        })
    })
}

/// Converting copy: operand 0 of `iter` (any dtype) receives operand 1 (any
/// dtype, broadcast by stride 0) converted element for element as C++
/// `static_cast` (complex to real keeps the real part, complex to bool is
/// "either part nonzero").
///
/// # Safety
/// As [`oxide_pointwise`]; the operands do not overlap.
#[no_mangle]
pub unsafe extern "C" fn oxide_cast(on: OxideLaunch, iter: *const OxideIter) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let it = unsafe { tensor_iter("copy_", &*iter, &on) }?;
        launch(&on, move || {
            // SAFETY: `it` was built from checked operands by tensor_iter.
            unsafe { oxide_kernels::ops::elementwise::complex::cast(&it) }
        })
    })
}
