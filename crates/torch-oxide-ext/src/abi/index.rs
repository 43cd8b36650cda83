//! Advanced indexing, scatter with reductions and masked_scatter (`csrc/aten/index/`,
//! `oxide_kernels::ops::index`).

use super::*;

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
    on: OxideLaunch,
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
        let it = unsafe { tensor_iter("index", &*iter, &on) }?;
        let ix = oxide_kernels::ops::index::index::Indexed {
            sizes: unsafe { dims(sizes, nindexed) },
            strides: unsafe { dims(strides, nindexed) },
            wrap_negative: wrap_negative != 0,
        };
        launch(&on, || {
            // SAFETY: `it` was built from checked operands by tensor_iter; `ix` per the contract.
            unsafe {
                if put != 0 {
                    oxide_kernels::ops::index::index::index_put(&it, &ix, elem_size, accumulate != 0)
                } else {
                    oxide_kernels::ops::index::index::index(&it, &ix, elem_size)
                }
            }
        })
    })
}

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
        launch_raw(device, stream, numel, &operands, || unsafe {
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
pub unsafe extern "C" fn oxide_masked_scatter(on: OxideLaunch, iter: *const OxideIter, source: *const c_void, source_len: usize) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter("masked_scatter", &*iter, &on) }?;
        check_device_ptr(runtime()?, source, source_len)?;
        launch(&on, || {
            // SAFETY: `it` was built from checked operands by tensor_iter; `source` was checked and holds `source_len` elements.
            unsafe { oxide_kernels::ops::index::scatter::masked_scatter(&it, source as *const u8, source_len) }
        })
    })
}

/// Reductions of [`oxide_scatter_reduce`] (values of PyTorch's `ReductionType`).
pub const OXIDE_REDUCE_MAX: i32 = 0;

pub const OXIDE_REDUCE_MEAN: i32 = 1;

pub const OXIDE_REDUCE_MIN: i32 = 2;

pub const OXIDE_REDUCE_SUM: i32 = 3;

pub const OXIDE_REDUCE_PROD: i32 = 4;
