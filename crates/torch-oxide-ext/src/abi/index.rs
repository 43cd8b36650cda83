//! Advanced indexing, scatter with reductions and masked_scatter (`csrc/aten/index/`,
//! `oxide_kernels::ops::index`).

use super::*;

/// Advanced indexing over `iter` (destination, source, `nindexed` index
/// operands), on `on`: `put == false` gathers (`x[idx]`), otherwise scatters
/// (`x[idx] = v`, adding when `accumulate`). `sizes`/`strides` (bytes)
/// describe the indexed dimensions of the restrided tensor; elements are of
/// the destination's dtype. Negative indices count from the end when
/// `wrap_negative`, else they are out of range (index_select, embedding).
///
/// # Safety
/// `iter` is a valid [`OxideIter`] (see [`tensor_iter`]); `sizes` and
/// `strides` hold `nindexed` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_index(
    on: OxideLaunch,
    iter: *const OxideIter,
    nindexed: usize,
    sizes: *const i64,
    strides: *const i64,
    put: bool,
    accumulate: bool,
    wrap_negative: bool,
) -> i32 {
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let it = unsafe { tensor_iter("index", &*iter, &on) }?;
        // SAFETY: the function's contract: both arrays hold `nindexed` values.
        // Copied: the launch record outlives the caller's arrays.
        let (sizes, strides) = unsafe { (dims(sizes, nindexed).to_vec(), dims(strides, nindexed).to_vec()) };
        // PyTorch's `iter.element_size(0)`: the destination's element size.
        let elem_size = it.dtype(0).size();
        launch_op(&on, (put, accumulate), move || {
            let ix = oxide_kernels::ops::index::index::Indexed { sizes: &sizes, strides: &strides, wrap_negative };
            // SAFETY: `tensor_iter` checked the iterator's operands; the kernel checks every
            // index against `sizes` before it addresses the indexed tensor.
            unsafe {
                if put {
                    oxide_kernels::ops::index::index::index_put(&it, &ix, elem_size, accumulate)
                } else {
                    oxide_kernels::ops::index::index::index(&it, &ix, elem_size)
                }
            }
        })
    })
}

/// Scatter with reduction `reduce` (an `OXIDE_SCATTER_REDUCE_*`) along `dim`: for
/// every position of `index` (int64 or int32), the element of `out` at that
/// position with coordinate `dim` replaced by the index is combined with the
/// element of `src` at that position (see
/// `oxide_kernels::ops::index::scatter::scatter_reduce`). `out`, `src` and
/// `index` have one number of dimensions, and `index` fits in both (`out`
/// outside `dim`); a 0-dim `src` is a scalar read for every position.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_scatter_reduce(
    on: OxideLaunch,
    reduce: i32,
    dim: usize,
    out: OxideTensor,
    src: OxideTensor,
    index: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::index::scatter::{scatter_reduce, Scatter, ScatterReduce, Strided};
    ffi(|| {
        checks_values();
        const OP: &str = "scatter_reduce";
        let reduce = match reduce {
            OXIDE_SCATTER_REDUCE_MAX => ScatterReduce::Amax,
            OXIDE_SCATTER_REDUCE_MEAN => ScatterReduce::Mean,
            OXIDE_SCATTER_REDUCE_MIN => ScatterReduce::Amin,
            OXIDE_SCATTER_REDUCE_SUM => ScatterReduce::Sum,
            OXIDE_SCATTER_REDUCE_PROD => ScatterReduce::Prod,
            r => return Err(AbiError::Invalid(format!("unknown scatter reduction {r}"))),
        };
        // SAFETY: the function's contract.
        let [out, src, index] = unsafe { required(OP, [&out, &src, &index]) }?;
        let dt = common_dtype(OP, &[&out, &src])?;
        let nd = index.sizes.len();
        let scalar = src.sizes.is_empty();
        let fits = |o: &Operand, skip: Option<usize>| {
            o.sizes.len() == nd && (0..nd).all(|d| Some(d) == skip || index.sizes[d] <= o.sizes[d])
        };
        if dim >= nd || !fits(&out, Some(dim)) || !(scalar || fits(&src, None)) {
            return Err(AbiError::Invalid(format!(
                "{OP}: index of sizes {:?} along dim {dim} does not fit out {:?} and src {:?}",
                index.sizes, out.sizes, src.sizes
            )));
        }
        let shape = index.extents();
        let (os, is) = (out.istrides(), index.istrides());
        // A scalar source is read for every position: all-zero strides.
        let ss = if scalar { vec![0; nd] } else { src.istrides() };
        let dim_size = out.sizes[dim] as usize;
        launch_op(&on, reduce as i32, move || {
            let s = Scatter { reduce, shape: &shape, dim, dim_size };
            // SAFETY: every position of `index` lies within `src` and, outside `dim`, `out`
            // (checked above); the kernel checks each index against `dim_size` before writing.
            unsafe {
                scatter_reduce(
                    s,
                    dt,
                    Strided { ptr: out.dst(), strides: &os },
                    Strided { ptr: src.src() as *mut u8, strides: &ss },
                    index.dtype,
                    Strided { ptr: index.src() as *mut u8, strides: &is },
                    on.threads(),
                )
            }
        })
    })
}

/// `masked_scatter_` over `iter` (output, bool mask; linear order), on `on`:
/// the k-th set mask element receives element k of the contiguous `source`
/// (of the output's dtype).
///
/// # Safety
/// `iter` is a valid [`OxideIter`] (see [`tensor_iter`]); `source` describes
/// live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_masked_scatter(on: OxideLaunch, iter: *const OxideIter, source: OxideTensor) -> i32 {
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let it = unsafe { tensor_iter("masked_scatter", &*iter, &on) }?;
        // SAFETY: the function's contract.
        let [source] = unsafe { required("masked_scatter", [&source]) }?;
        source.contiguous("masked_scatter")?.dtype_is("masked_scatter (source)", it.dtype(0))?;
        launch(&on, move || {
            // SAFETY: `source` holds `numel` contiguous elements of the output's dtype (checked
            // above); the kernel refuses a mask with more set elements than that.
            unsafe { oxide_kernels::ops::index::scatter::masked_scatter(&it, source.src(), source.numel) }
        })
    })
}

// Reductions of [`oxide_scatter_reduce`] (values of PyTorch's `ReductionType`).
pub const OXIDE_SCATTER_REDUCE_MAX: i32 = 0;
pub const OXIDE_SCATTER_REDUCE_MEAN: i32 = 1;
pub const OXIDE_SCATTER_REDUCE_MIN: i32 = 2;
pub const OXIDE_SCATTER_REDUCE_SUM: i32 = 3;
pub const OXIDE_SCATTER_REDUCE_PROD: i32 = 4;
