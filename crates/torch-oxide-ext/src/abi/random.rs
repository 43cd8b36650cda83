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
        launch_raw(device, stream, layout.numel(), &[dst], || {
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
        launch_raw(device, stream, layout.numel(), &[dst, p], || {
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
        launch_raw(device, stream, layout.numel(), &[out, input, mask], || {
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
        launch_raw(device, stream, layout.numel(), &[out], || -> Result<(), AbiError> {
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
        launch_raw(device, stream, rows * samples, &[out], || -> Result<(), AbiError> {
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

/// Distribution kinds of [`OxideDistribution`].
pub const OXIDE_DIST_UNIFORM: i32 = 0;

pub const OXIDE_DIST_NORMAL: i32 = 1;

pub const OXIDE_DIST_BERNOULLI: i32 = 2;

pub const OXIDE_DIST_EXPONENTIAL: i32 = 3;

pub const OXIDE_DIST_CAUCHY: i32 = 4;

pub const OXIDE_DIST_LOG_NORMAL: i32 = 5;

pub const OXIDE_DIST_GEOMETRIC: i32 = 6;

pub const OXIDE_DIST_INTEGERS: i32 = 7;
