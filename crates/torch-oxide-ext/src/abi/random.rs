//! Philox random kernels (`csrc/aten/random/`, `oxide_kernels::ops::random`).

use super::*;

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

/// Fills the strided operand `dst` with samples of `dist`; element k in
/// iteration order uses Philox block `philox.offset + k`.
///
/// # Safety
/// `dst` describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_random_sample(
    on: OxideLaunch,
    dst: OxideTensor,
    dist: OxideDistribution,
    philox_state: OxidePhilox,
) -> i32 {
    use oxide_kernels::ops::random::random::Distribution as D;
    ffi(|| {
        // SAFETY: the function's contract.
        let [dst] = unsafe { required("random", [&dst]) }?;
        let layout = Layout::new("random", &dst.sizes, [&dst.strides])?;
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
        launch_op(&on, dist.kind, move || {
            let bits = philox(&philox_state);
            // SAFETY: `layout` addresses only elements of the decoded operand.
            unsafe { oxide_kernels::ops::random::random::sample(dst.dtype, &layout, dst.dst(), d, &bits) }
        })
    })
}

/// `bernoulli_(p)` with a float64 probability operand `p` of `dst`'s sizes
/// (broadcast by the glue).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_bernoulli_tensor(
    on: OxideLaunch,
    dst: OxideTensor,
    p: OxideTensor,
    philox_state: OxidePhilox,
) -> i32 {
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let [dst, p] = unsafe { required("bernoulli_", [&dst, &p]) }?;
        same_sizes("bernoulli_", &[&dst, &p])?;
        p.dtype_is("bernoulli_ (p)", oxide_kernels::DType::F64)?;
        let layout = Layout::new("bernoulli_", &dst.sizes, [&dst.strides, &p.strides])?;
        launch(&on, move || {
            let bits = philox(&philox_state);
            // SAFETY: `layout` addresses only elements of the two decoded operands of one shape.
            unsafe {
                oxide_kernels::ops::random::random::bernoulli_tensor(
                    dst.dtype,
                    &layout,
                    dst.dst(),
                    p.src() as *const f64,
                    &bits,
                )
            }
        })
    })
}

/// Dropout scaling `out = mask ? input * scale : 0` over three strided
/// operands of one shape (`out`, `input` of one dtype, `mask` of bool).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_masked_scale(
    on: OxideLaunch,
    out: OxideTensor,
    input: OxideTensor,
    mask: OxideTensor,
    scale: f64,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, input, mask] = unsafe { required("masked_scale", [&out, &input, &mask]) }?;
        same_sizes("masked_scale", &[&out, &input, &mask])?;
        let dt = common_dtype("masked_scale", &[&out, &input])?;
        mask.dtype_is("masked_scale (mask)", oxide_kernels::DType::Bool)?;
        let layout = Layout::new("masked_scale", &out.sizes, [&out.strides, &input.strides, &mask.strides])?;
        launch(&on, move || {
            // SAFETY: `layout` addresses only elements of the three decoded operands of one shape.
            unsafe {
                oxide_kernels::ops::random::random::masked_scale(
                    dt,
                    &layout,
                    out.dst(),
                    input.src(),
                    mask.src() as *const bool,
                    scale,
                )
            }
        })
    })
}

/// `randperm(n)` into the 1-d strided operand `out` (`n` its length); swap i
/// uses Philox block `offset + i`.
///
/// # Safety
/// `out` describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_randperm(on: OxideLaunch, out: OxideTensor, philox_state: OxidePhilox) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [out] = unsafe { required("randperm", [&out]) }?;
        let (n, stride) = match (&*out.sizes, &*out.strides) {
            (&[n], &[s]) => (n, s),
            (s, _) => {
                return Err(AbiError::Invalid(format!("randperm: operand of sizes {s:?}, expected one dimension")))
            }
        };
        launch(&on, move || -> Result<(), AbiError> {
            let bits = philox(&philox_state);
            let perm = oxide_kernels::ops::random::random::randperm(n as usize, &bits);
            let src = Layout::new("randperm", &[n], [&[stride], &[1]])?;
            // SAFETY: `out` holds n elements at `stride` (decoded above); perm is a host
            // buffer of n i64s converted element by element.
            unsafe { oxide_kernels::ops::elementwise::cast::cast_from_i64(out.dtype, &src, out.dst(), &perm)? };
            Ok(())
        })
    })
}

/// `multinomial`: draws per row of the contiguous `(rows, categories)`
/// `weights` (float32 or float64) into the contiguous int64 `out`
/// (`(rows, samples)`; 1-d operands are one row).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_multinomial(
    on: OxideLaunch,
    out: OxideTensor,
    weights: OxideTensor,
    replacement: bool,
    philox_state: OxidePhilox,
) -> i32 {
    ffi(|| {
        checks_values();
        const OP: &str = "multinomial";
        // SAFETY: the function's contract.
        let [out, weights] = unsafe { required(OP, [&out, &weights]) }?;
        out.contiguous(OP)?.dtype_is("multinomial (out)", oxide_kernels::DType::I64)?;
        weights.contiguous(OP)?;
        let rows_of = |o: &Operand| match &*o.sizes {
            &[c] => Ok((1usize, c as usize)),
            &[r, c] => Ok((r as usize, c as usize)),
            s => Err(AbiError::Invalid(format!("{OP}: operand of sizes {s:?}, expected one or two dimensions"))),
        };
        let ((rows, categories), (out_rows, samples)) = (rows_of(&weights)?, rows_of(&out)?);
        if out_rows != rows || out.sizes.len() != weights.sizes.len() {
            return Err(AbiError::Invalid(format!(
                "{OP}: samples of sizes {:?} for weights of sizes {:?}",
                out.sizes, weights.sizes
            )));
        }
        launch(&on, move || -> Result<(), AbiError> {
            let bits = philox(&philox_state);
            let (wp, op) = (weights.src(), out.dst());
            if rows * samples == 0 {
                return Ok(());
            }
            // SAFETY: `out` holds rows * samples contiguous int64 (checked above), at least one.
            let out = unsafe { std::slice::from_raw_parts_mut(op as *mut i64, rows * samples) };
            match weights.dtype {
                oxide_kernels::DType::F32 => {
                    let w = if categories == 0 {
                        &[][..]
                    } else {
                        // SAFETY: `weights` holds rows * categories contiguous float32 (checked above).
                        unsafe { std::slice::from_raw_parts(wp as *const f32, rows * categories) }
                    };
                    oxide_kernels::ops::random::random::multinomial(
                        w,
                        rows,
                        categories,
                        samples,
                        replacement,
                        &bits,
                        out,
                    )?
                }
                oxide_kernels::DType::F64 => {
                    let w = if categories == 0 {
                        &[][..]
                    } else {
                        // SAFETY: `weights` holds rows * categories contiguous float64 (checked above).
                        unsafe { std::slice::from_raw_parts(wp as *const f64, rows * categories) }
                    };
                    oxide_kernels::ops::random::random::multinomial(
                        w,
                        rows,
                        categories,
                        samples,
                        replacement,
                        &bits,
                        out,
                    )?
                }
                d => return Err(oxide_kernels::Error::UnsupportedDtype { op: "multinomial", dtype: d }.into()),
            }
            Ok(())
        })
    })
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
