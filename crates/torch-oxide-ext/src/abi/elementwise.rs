//! Elementwise kernels (`csrc/aten/elementwise/`, `oxide_kernels::ops::elementwise`):
//! strided copy, cat, fill, the pointwise op table (real and complex), casts and range factories.

use super::*;

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
        launch_raw(device, stream, layout.numel(), &[dst, src], || {
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
        launch_raw(device, stream, bytes, &operands, || {
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
        launch_raw(device, stream, layout.numel(), &[dst], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::elementwise::fill::fill_strided(elem_size, &layout, dst as *mut u8, pattern as *const u8) }
        })
    })
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
