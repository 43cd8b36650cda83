//! Reductions, scans, sorting, unique, search and counting (`csrc/aten/reduce/`,
//! `oxide_kernels::ops::reduce`).

use super::*;

/// Runs reduction stub `name` (`sum`, `mean`, `prod`, `max_values`, `argmax`,
/// `std_var`, `norm`, ... see `oxide_kernels::ops::reduce::reduce::ReduceOp::lookup`, with
/// scalar arguments `a`, `b`) over the reduction iterator `iter`.
///
/// # Safety
/// As [`oxide_pointwise`]; `name` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn oxide_reduce(on: OxideLaunch, name: *const c_char, a: f64, b: f64, iter: *const OxideIter) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap_or("");
        let op = oxide_kernels::ops::reduce::reduce::ReduceOp::lookup(name, a, b).ok_or_else(|| AbiError::Invalid(format!("unknown reduction {name}")))?;
        // SAFETY: caller contract.
        let it = unsafe { tensor_iter("reduce", &*iter, &on) }?;
        launch(&on, || {
            // SAFETY: `it` was built from checked operands by tensor_iter.
            unsafe { oxide_kernels::ops::reduce::reduce::reduce(op, &it) }
        })
    })
}

/// Cumulative op `op` (0 cumsum, 1 cumprod, 2 cummax, 3 cummin) along `dim`
/// of the strided tensor `input` (`ndim` extents, element strides) into `out`
/// (and `indices`, int64, for cummax/cummin; may be null otherwise).
///
/// # Safety
/// All arrays hold `ndim` values; every addressed element is live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_scan(
    device: i32,
    stream: i64,
    op: i32,
    ndim: usize,
    shape: *const i64,
    dim: usize,
    in_dtype: i32,
    input: *const c_void,
    in_strides: *const i64,
    out_dtype: i32,
    out: *mut c_void,
    out_strides: *const i64,
    indices: *mut i64,
    idx_strides: *const i64,
    threads: i32,
) -> i32 {
    use oxide_kernels::ops::reduce::scan::{scan, ScanOp};
    ffi(|| {
        let op = match op {
            0 => ScanOp::CumSum,
            1 => ScanOp::CumProd,
            2 => ScanOp::CumMax,
            3 => ScanOp::CumMin,
            k => return Err(AbiError::Invalid(format!("unknown scan op {k}"))),
        };
        // SAFETY: caller contract.
        let shape = extents("scan", unsafe { dims(shape, ndim) })?;
        let conv = |p: *const i64| -> Vec<isize> { unsafe { dims(p, ndim) }.iter().map(|&s| s as isize).collect() };
        let (ins, outs) = (conv(in_strides), conv(out_strides));
        let idxs = if indices.is_null() { vec![] } else { conv(idx_strides) };
        let (idt, odt) = (dtype(in_dtype)?, dtype(out_dtype)?);
        let numel: usize = shape.iter().product();
        let mut operands = vec![input, out as *const c_void];
        if !indices.is_null() {
            operands.push(indices as *const c_void);
        }
        launch_raw(device, stream, numel, &operands, || unsafe {
            let idx = if indices.is_null() { None } else { Some((indices, &idxs[..])) };
            scan(op, &shape, dim, idt, input as *const u8, &ins, odt, out as *mut u8, &outs, idx, threads.max(1) as usize)
        })
    })
}

/// Stable sort of `rows` contiguous rows of `len` elements of `dtype_code` at
/// `data`, in place; original positions go to `indices` (rows x len int64).
///
/// # Safety
/// `data` holds rows*len elements, `indices` rows*len int64, both live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_sort_rows(device: i32, stream: i64, dtype_code: i32, rows: usize, len: usize, data: *mut c_void, indices: *mut i64, descending: i32, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        launch_raw(device, stream, rows * len, &[data as *const c_void, indices as *const c_void], || unsafe {
            oxide_kernels::ops::reduce::sort::sort_rows(dt, rows, len, data as *mut u8, indices, descending != 0, threads.max(1) as usize)
        })
    })
}

/// `torch.nonzero`: with `out` null, stores the number of nonzero elements of
/// the strided tensor in `*count`; otherwise writes their coordinates
/// (`*count` x `ndim` int64, row-major order) to `out`.
///
/// # Safety
/// Arrays hold `ndim` values; `data` addresses live memory of `dtype_code`;
/// `out` (when non-null) holds `*count * ndim` int64.
#[no_mangle]
pub unsafe extern "C" fn oxide_nonzero(device: i32, stream: i64, dtype_code: i32, ndim: usize, shape: *const i64, strides: *const i64, data: *const c_void, out: *mut i64, count: *mut usize) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        // SAFETY: caller contract.
        let shape = extents("nonzero", unsafe { dims(shape, ndim) })?;
        let strides: Vec<isize> = unsafe { dims(strides, ndim) }.iter().map(|&s| s as isize).collect();
        let numel: usize = shape.iter().product();
        launch_raw(device, stream, numel, &[data], || unsafe {
            if out.is_null() {
                *count = oxide_kernels::ops::reduce::nonzero::count_nonzero(dt, &shape, &strides, data as *const u8)?;
                Ok::<(), oxide_kernels::Error>(())
            } else {
                oxide_kernels::ops::reduce::nonzero::nonzero(dt, &shape, &strides, data as *const u8, out, *count)
            }
        })
    })
}

/// Stable lexicographic order of `n` contiguous rows of `m` elements at
/// `data`, written to `perm` (`n` int64): the sort behind `unique`.
///
/// # Safety
/// `data` holds n*m elements of `dtype_code`, `perm` n int64, both live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_argsort_rows(device: i32, stream: i64, dtype_code: i32, n: usize, m: usize, data: *const c_void, perm: *mut i64, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let operands: &[*const c_void] = if m == 0 { &[perm as *const c_void] } else { &[data, perm as *const c_void] };
        launch_raw(device, stream, n, operands, || unsafe { oxide_kernels::ops::reduce::unique::argsort_rows(dt, n, m, data as *const u8, perm, threads.max(1) as usize) })
    })
}

/// Groups of equal consecutive rows among `n` contiguous rows of `m`
/// elements, visited in `perm` order (null: in order): first row of each
/// group to `reps`, group sizes to `counts` (may be null), each row's group
/// to `inverse` (may be null); the number of groups to `*groups`.
///
/// # Safety
/// `data` holds n*m elements; `perm` (if non-null) a permutation of 0..n;
/// `reps`, `counts`, `inverse` n int64 each; all live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_unique_consecutive(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    m: usize,
    data: *const c_void,
    perm: *const i64,
    reps: *mut i64,
    inverse: *mut i64,
    counts: *mut i64,
    groups: *mut usize,
) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let mut operands = vec![reps as *const c_void];
        for p in [data, perm as *const c_void, inverse as *const c_void, counts as *const c_void] {
            if !p.is_null() && (m > 0 || p != data) {
                operands.push(p);
            }
        }
        let k = launch_raw(device, stream, n, &operands, || unsafe { oxide_kernels::ops::reduce::unique::unique_consecutive(dt, n, m, data as *const u8, perm, reps, inverse, counts) })?;
        put(groups, k)
    })
}

/// Sorted flat `unique` of `n` contiguous one-byte elements (bool, uint8,
/// int8) by counting: distinct values to `values` (room for 256), their counts
/// to `counts` (room for 256, may be null), each element's position among them
/// to `inverse` (`n`, may be null); the number of distinct values to `*groups`.
///
/// # Safety
/// `data` holds n bytes; the outputs are live device memory of the sizes above.
#[no_mangle]
pub unsafe extern "C" fn oxide_unique_bytes(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    data: *const c_void,
    values: *mut c_void,
    inverse: *mut i64,
    counts: *mut i64,
    groups: *mut usize,
) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let mut operands = vec![values as *const c_void];
        if n > 0 {
            operands.push(data);
        }
        operands.extend([inverse as *const c_void, counts as *const c_void].into_iter().filter(|p| !p.is_null()));
        let k = launch_raw(device, stream, n, &operands, || unsafe {
            oxide_kernels::ops::reduce::unique::unique_bytes(dt, n, data as *const u8, values as *mut u8, inverse, counts)
        })?;
        put(groups, k)
    })
}

/// `searchsorted`: for each of the `nvalues` contiguous values, its
/// insertion position in row `i / per_row` of `boundaries` (contiguous rows
/// of `len`, ordered through `sorter` when non-null), upper bound when
/// `right != 0`; written as `out_dtype` (int32/int64) to `out`.
///
/// # Safety
/// Pointers address the stated contiguous elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_searchsorted(
    device: i32,
    stream: i64,
    dtype_code: i32,
    values: *const c_void,
    nvalues: usize,
    per_row: usize,
    boundaries: *const c_void,
    len: usize,
    sorter: *const i64,
    right: i32,
    out_dtype: i32,
    out: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        let (dt, odt) = (dtype(dtype_code)?, dtype(out_dtype)?);
        let mut operands = vec![values, out as *const c_void];
        if len > 0 {
            operands.push(boundaries);
            if !sorter.is_null() {
                operands.push(sorter as *const c_void);
            }
        }
        launch_raw(device, stream, nvalues, &operands, || unsafe {
            oxide_kernels::ops::reduce::search::searchsorted(dt, values as *const u8, nvalues, per_row, boundaries as *const u8, len, sorter, right != 0, odt, out as *mut u8, threads.max(1) as usize)
        })
    })
}

/// Smallest and largest of `n` integers at `data` (element stride
/// `stride`); `*any = false` when `n == 0`. The glue validates `bincount`'s
/// input and sizes its result with them.
///
/// # Safety
/// `data + i*stride` are live device elements of `dtype_code` for `i < n`.
#[no_mangle]
pub unsafe extern "C" fn oxide_bincount_range(device: i32, stream: i64, dtype_code: i32, n: usize, data: *const c_void, stride: i64, min: *mut i64, max: *mut i64, any: *mut bool) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let r = launch_raw(device, stream, n, &[data], || unsafe { oxide_kernels::ops::reduce::histogram::bincount_range(dt, n, data as *const u8, stride as isize) })?;
        let (lo, hi) = r.unwrap_or((0, -1));
        put(min, lo)?;
        put(max, hi)?;
        put(any, r.is_some())
    })
}

/// `bincount` of `n` integers at `data` into `out` (`nbins` contiguous
/// elements, zeroed first): int64 counts when `weights_dtype < 0`, else sums
/// of the float32/float64 `weights` (element stride `weights_stride`).
///
/// # Safety
/// As [`oxide_bincount_range`]; `weights` likewise; `out` holds `nbins` elements.
#[no_mangle]
pub unsafe extern "C" fn oxide_bincount(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    data: *const c_void,
    stride: i64,
    weights_dtype: i32,
    weights: *const c_void,
    weights_stride: i64,
    out: *mut c_void,
    nbins: usize,
) -> i32 {
    use oxide_kernels::ops::reduce::histogram::{bincount, Weights};
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let w = if weights_dtype < 0 { None } else { Some(Weights { dtype: dtype(weights_dtype)?, ptr: weights as *const u8, stride: weights_stride as isize }) };
        // An empty input's pointer may be null: only what is read is checked.
        let mut operands = vec![out as *const c_void];
        if n > 0 {
            operands.push(data);
            if w.is_some() {
                operands.push(weights);
            }
        }
        launch_raw(device, stream, n.max(nbins), &operands, || unsafe {
            bincount(dt, n, data as *const u8, stride as isize, w, out as *mut u8, nbins)
        })
    })
}

/// `histc` counts of `n` values at `input` (element stride `stride`) in the
/// bins between the `nedges` contiguous ascending `edges`, into `hist`
/// (`nedges - 1` contiguous elements); `local_search` refines the
/// interpolated bin against the edges.
///
/// # Safety
/// Pointers address the stated elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_histc(
    device: i32,
    stream: i64,
    dtype_code: i32,
    n: usize,
    input: *const c_void,
    stride: i64,
    edges: *const c_void,
    nedges: usize,
    local_search: i32,
    hist: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let operands: &[*const c_void] = if n == 0 { &[edges, hist as *const c_void] } else { &[input, edges, hist as *const c_void] };
        launch_raw(device, stream, nedges, operands, || unsafe {
            oxide_kernels::ops::reduce::histogram::histc(dt, n, input as *const u8, stride as isize, edges as *const u8, nedges, local_search != 0, hist as *mut u8, threads.max(1) as usize)
        })
    })
}
