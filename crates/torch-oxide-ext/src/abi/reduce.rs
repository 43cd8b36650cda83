//! Reductions, scans, sorting, unique, search and counting (`csrc/aten/reduce/`,
//! `oxide_kernels::ops::reduce`).

use super::*;

// Reduction ids of [`oxide_reduce`], one per PyTorch reduction (`ReduceOp`'s variants).
pub const OXIDE_REDUCE_SUM: i32 = 0;
pub const OXIDE_REDUCE_NANSUM: i32 = 1;
pub const OXIDE_REDUCE_PROD: i32 = 2;
pub const OXIDE_REDUCE_MEAN: i32 = 3;
pub const OXIDE_REDUCE_AMAX: i32 = 4;
pub const OXIDE_REDUCE_AMIN: i32 = 5;
pub const OXIDE_REDUCE_ALL: i32 = 6;
pub const OXIDE_REDUCE_ANY: i32 = 7;
pub const OXIDE_REDUCE_ARGMAX: i32 = 8;
pub const OXIDE_REDUCE_ARGMIN: i32 = 9;
pub const OXIDE_REDUCE_MAX: i32 = 10;
pub const OXIDE_REDUCE_MIN: i32 = 11;
pub const OXIDE_REDUCE_STD_VAR: i32 = 12;
pub const OXIDE_REDUCE_NORM: i32 = 13;
pub const OXIDE_REDUCE_COUNT_NONZERO: i32 = 14;

/// One reduction: its id (an `OXIDE_REDUCE_*`) and the scalars the
/// parameterised ones take (`std_var`: `correction`, `take_sqrt`; `norm`: `p`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideReduction {
    pub op: i32,
    pub correction: f64,
    pub take_sqrt: bool,
    pub p: f64,
}

impl OxideReduction {
    fn op(&self) -> Result<oxide_kernels::ops::reduce::reduce::ReduceOp, AbiError> {
        use oxide_kernels::ops::reduce::reduce::ReduceOp as R;
        Ok(match self.op {
            OXIDE_REDUCE_SUM => R::Sum,
            OXIDE_REDUCE_NANSUM => R::NanSum,
            OXIDE_REDUCE_PROD => R::Prod,
            OXIDE_REDUCE_MEAN => R::Mean,
            OXIDE_REDUCE_AMAX => R::Amax,
            OXIDE_REDUCE_AMIN => R::Amin,
            OXIDE_REDUCE_ALL => R::All,
            OXIDE_REDUCE_ANY => R::Any,
            OXIDE_REDUCE_ARGMAX => R::ArgMax,
            OXIDE_REDUCE_ARGMIN => R::ArgMin,
            OXIDE_REDUCE_MAX => R::Max,
            OXIDE_REDUCE_MIN => R::Min,
            OXIDE_REDUCE_STD_VAR => R::StdVar { correction: self.correction, take_sqrt: self.take_sqrt },
            OXIDE_REDUCE_NORM => R::Norm { p: self.p },
            OXIDE_REDUCE_COUNT_NONZERO => R::CountNonzero,
            k => return Err(AbiError::Invalid(format!("unknown reduction id {k}"))),
        })
    }
}

/// Runs `reduction` over the reduction iterator `iter` (outputs first, then
/// the input), on `on`.
///
/// # Safety
/// `iter` is a valid [`OxideIter`] (see [`tensor_iter`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_reduce(on: OxideLaunch, reduction: OxideReduction, iter: *const OxideIter) -> i32 {
    ffi(|| {
        let op = reduction.op()?;
        // SAFETY: the function's contract.
        let it = unsafe { tensor_iter(op.name(), &*iter, &on) }?;
        launch_op(&on, reduction.op, move || {
            // SAFETY: `tensor_iter` checked that every operand the iterator addresses is device memory.
            unsafe { oxide_kernels::ops::reduce::reduce::reduce(op, &it) }
        })
    })
}

// Scan ids of [`oxide_scan`].
pub const OXIDE_SCAN_CUMSUM: i32 = 0;
pub const OXIDE_SCAN_CUMPROD: i32 = 1;
pub const OXIDE_SCAN_CUMMAX: i32 = 2;
pub const OXIDE_SCAN_CUMMIN: i32 = 3;

/// Cumulative op `op` (an `OXIDE_SCAN_*`) along `dim`
/// of `input` into `out` (same sizes; its own dtype) and, for cummax/cummin,
/// `indices` (int64, same sizes; absent otherwise).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_scan(
    on: OxideLaunch,
    op: i32,
    dim: usize,
    out: OxideTensor,
    input: OxideTensor,
    indices: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::reduce::scan::{scan, ScanOp, View};
    ffi(|| {
        let op = match op {
            OXIDE_SCAN_CUMSUM => ScanOp::CumSum,
            OXIDE_SCAN_CUMPROD => ScanOp::CumProd,
            OXIDE_SCAN_CUMMAX => ScanOp::CumMax,
            OXIDE_SCAN_CUMMIN => ScanOp::CumMin,
            k => return Err(AbiError::Invalid(format!("unknown scan op {k}"))),
        };
        // SAFETY: the function's contract.
        let [out, input, indices] = unsafe { operands("scan", [&out, &input, &indices]) }?;
        let (out, input) = (present("scan", out)?, present("scan", input)?);
        same_sizes("scan", &[&out, &input])?;
        if let Some(i) = &indices {
            i.dtype_is("scan (indices)", oxide_kernels::DType::I64)?.sizes_are("scan (indices)", &input.sizes)?;
        }
        let shape = input.extents();
        let (ins, outs) = (input.istrides(), out.istrides());
        let idxs = indices.as_ref().map(|i| i.istrides()).unwrap_or_default();
        launch_op(&on, op as u8, move || {
            // SAFETY: the three decoded operands share `shape` (checked above); the kernel
            // addresses only their elements through their own strides.
            unsafe {
                scan(
                    op,
                    &shape,
                    dim,
                    View { dtype: input.dtype, ptr: input.src() as *mut u8, strides: &ins },
                    View { dtype: out.dtype, ptr: out.dst(), strides: &outs },
                    indices.as_ref().map(|i| (i.dst() as *mut i64, &idxs[..])),
                    on.threads(),
                )
            }
        })
    })
}

/// Stable sort of the rows (last dimension) of the contiguous `values`, in
/// place; original positions go to `indices` (int64, contiguous, same sizes).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_sort_rows(
    on: OxideLaunch,
    values: OxideTensor,
    indices: OxideTensor,
    descending: bool,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [values, indices] = unsafe { required("sort", [&values, &indices]) }?;
        values.contiguous("sort")?;
        indices
            .contiguous("sort")?
            .dtype_is("sort (indices)", oxide_kernels::DType::I64)?
            .sizes_are("sort (indices)", &values.sizes)?;
        let len = values.sizes.last().map_or(1, |&l| l as usize);
        let rows = values.numel.checked_div(len).unwrap_or(0);
        launch(&on, move || {
            // SAFETY: both operands are contiguous with `rows * len` elements (checked above).
            unsafe {
                oxide_kernels::ops::reduce::sort::sort_rows(
                    values.dtype,
                    rows,
                    len,
                    values.dst(),
                    indices.dst() as *mut i64,
                    descending,
                    on.threads(),
                )
            }
        })
    })
}

/// `torch.nonzero` of the strided `input`: with `out` absent, stores the
/// number of nonzero elements in `*count`; otherwise writes their coordinates
/// to `out` (contiguous int64 of sizes `[k, ndim]`, `k` the count), row-major.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `count` is
/// null or writable.
#[no_mangle]
pub unsafe extern "C" fn oxide_nonzero(
    on: OxideLaunch,
    input: OxideTensor,
    out: OxideTensor,
    count: *mut usize,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [input, out] = unsafe { operands("nonzero", [&input, &out]) }?;
        let input = present("nonzero", input)?;
        let (shape, strides) = (input.extents(), input.istrides());
        match out {
            None => {
                let k = launch_now(&on, || {
                    // SAFETY: the kernel addresses only elements of the decoded input.
                    unsafe {
                        oxide_kernels::ops::reduce::nonzero::count_nonzero(input.dtype, &shape, &strides, input.src())
                    }
                })?;
                put(count, k)
            }
            Some(out) => {
                let k = out.sizes.first().copied().unwrap_or(0);
                out.contiguous("nonzero")?
                    .dtype_is("nonzero (out)", oxide_kernels::DType::I64)?
                    .sizes_are("nonzero (out)", &[k, shape.len() as i64])?;
                launch(&on, move || {
                    // SAFETY: `out` holds `k` contiguous rows of `ndim` int64 (checked above); the
                    // kernel writes no more than `k` rows and refuses another count.
                    unsafe {
                        oxide_kernels::ops::reduce::nonzero::nonzero(
                            input.dtype,
                            &shape,
                            &strides,
                            input.src(),
                            out.dst() as *mut i64,
                            k as usize,
                        )
                    }
                })
            }
        }
    })
}

/// The `(n, m)` contiguous `rows` (one dtype) as a row count and width.
fn matrix_rows(op: &'static str, rows: &Operand) -> Result<(usize, usize), AbiError> {
    rows.contiguous(op)?;
    match &*rows.sizes {
        &[n, m] => Ok((n as usize, m as usize)),
        s => Err(AbiError::Invalid(format!("{op}: rows of sizes {s:?}, expected two dimensions"))),
    }
}

/// A contiguous int64 operand of `n` elements.
fn int64_of(op: &'static str, o: &Operand, n: usize) -> Result<(), AbiError> {
    o.contiguous(op)?.dtype_is(op, oxide_kernels::DType::I64)?.numel_is(op, n)?;
    Ok(())
}

/// Stable lexicographic order of the rows of the contiguous `(n, m)` `rows`,
/// written to `perm` (`n` contiguous int64): the sort behind `unique`.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_argsort_rows(on: OxideLaunch, rows: OxideTensor, perm: OxideTensor) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [rows, perm] = unsafe { required("unique", [&rows, &perm]) }?;
        let (n, m) = matrix_rows("unique", &rows)?;
        int64_of("unique (perm)", &perm, n)?;
        launch(&on, move || {
            // SAFETY: `rows` holds n*m contiguous elements and `perm` n int64 (checked above).
            unsafe {
                oxide_kernels::ops::reduce::unique::argsort_rows(
                    rows.dtype,
                    n,
                    m,
                    rows.src(),
                    perm.dst() as *mut i64,
                    on.threads(),
                )
            }
        })
    })
}

/// Groups of equal consecutive rows among the rows of the contiguous `(n, m)`
/// `rows`, visited in `perm` order (absent: in order): first row of each group
/// to `reps`, group sizes to `counts` (optional), each row's group to `inverse`
/// (optional), all `n` contiguous int64; the number of groups to `*groups`.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `perm`, when
/// present, is a permutation of `0..n`; `groups` is writable.
#[no_mangle]
pub unsafe extern "C" fn oxide_unique_consecutive(
    on: OxideLaunch,
    rows: OxideTensor,
    perm: OxideTensor,
    reps: OxideTensor,
    inverse: OxideTensor,
    counts: OxideTensor,
    groups: *mut usize,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [rows, perm, reps, inverse, counts] =
            unsafe { operands("unique", [&rows, &perm, &reps, &inverse, &counts]) }?;
        let (rows, reps) = (present("unique", rows)?, present("unique", reps)?);
        let (n, m) = matrix_rows("unique", &rows)?;
        for o in [Some(&reps), perm.as_ref(), inverse.as_ref(), counts.as_ref()].into_iter().flatten() {
            int64_of("unique", o, n)?;
        }
        let ptr = |o: Option<Operand>| o.map_or(std::ptr::null_mut(), |o| o.data as *mut i64);
        let k = launch_now(&on, || {
            // SAFETY: `rows` holds n*m contiguous elements, every index operand n int64 (checked above).
            unsafe {
                let out = oxide_kernels::ops::reduce::unique::Groups {
                    reps: reps.dst() as *mut i64,
                    inverse: ptr(inverse),
                    counts: ptr(counts),
                };
                oxide_kernels::ops::reduce::unique::unique_consecutive(rows.dtype, n, m, rows.src(), ptr(perm), out)
            }
        })?;
        put(groups, k)
    })
}

/// Sorted flat `unique` of the contiguous one-byte (bool, uint8, int8)
/// `input` by counting: distinct values to `values` (256 elements of the
/// input's dtype), their counts to `counts` (256 int64, optional), each
/// element's position among them to `inverse` (int64, the input's element
/// count, optional); the number of distinct values to `*groups`.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `groups` is writable.
#[no_mangle]
pub unsafe extern "C" fn oxide_unique_bytes(
    on: OxideLaunch,
    input: OxideTensor,
    values: OxideTensor,
    inverse: OxideTensor,
    counts: OxideTensor,
    groups: *mut usize,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [input, values, inverse, counts] = unsafe { operands("unique", [&input, &values, &inverse, &counts]) }?;
        let (input, values) = (present("unique", input)?, present("unique", values)?);
        input.contiguous("unique")?;
        values.contiguous("unique (values)")?.numel_is("unique (values)", 256)?;
        common_dtype("unique", &[&input, &values])?;
        if let Some(i) = &inverse {
            int64_of("unique (inverse)", i, input.numel)?;
        }
        if let Some(c) = &counts {
            int64_of("unique (counts)", c, 256)?;
        }
        let ptr = |o: Option<Operand>| o.map_or(std::ptr::null_mut(), |o| o.data as *mut i64);
        let k = launch_now(&on, || {
            // SAFETY: sizes checked above: `input` n contiguous elements, `values` and `counts` 256, `inverse` n.
            unsafe {
                oxide_kernels::ops::reduce::unique::unique_bytes(
                    input.dtype,
                    input.numel,
                    input.src(),
                    values.dst(),
                    ptr(inverse),
                    ptr(counts),
                )
            }
        })?;
        put(groups, k)
    })
}

/// `searchsorted`: for each value of the contiguous `values`, its insertion
/// position in its row of the contiguous `boundaries` (1-d: one row for all
/// values; else rows along the last dimension, one per row of `values`),
/// ordered through `sorter` (int64, `boundaries`' sizes, optional); upper
/// bound when `right`. Written as int32/int64 to the contiguous `out`.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `sorter`
/// entries lie in `0..len`.
#[no_mangle]
pub unsafe extern "C" fn oxide_searchsorted(
    on: OxideLaunch,
    out: OxideTensor,
    values: OxideTensor,
    boundaries: OxideTensor,
    sorter: OxideTensor,
    right: bool,
) -> i32 {
    use oxide_kernels::ops::reduce::search::{searchsorted, Search};
    ffi(|| {
        const OP: &str = "searchsorted";
        // SAFETY: the function's contract.
        let [out, values, boundaries, sorter] = unsafe { operands(OP, [&out, &values, &boundaries, &sorter]) }?;
        let (out, values, boundaries) = (present(OP, out)?, present(OP, values)?, present(OP, boundaries)?);
        common_dtype(OP, &[&values, &boundaries])?;
        values.contiguous(OP)?;
        boundaries.contiguous(OP)?;
        out.contiguous(OP)?.numel_is(OP, values.numel)?;
        if let Some(s) = &sorter {
            s.contiguous(OP)?
                .dtype_is("searchsorted (sorter)", oxide_kernels::DType::I64)?
                .sizes_are("searchsorted (sorter)", &boundaries.sizes)?;
        }
        let len = *boundaries.sizes.last().ok_or_else(|| AbiError::Invalid("searchsorted: 0-dim boundaries".into()))?
            as usize;
        let nvalues = values.numel;
        let per_row =
            if boundaries.sizes.len() == 1 { nvalues } else { values.sizes.last().map_or(1, |&l| l as usize) };
        let rows = if boundaries.sizes.len() == 1 { 1 } else { nvalues.checked_div(per_row).unwrap_or(0) };
        if boundaries.sizes.len() > 1
            && (values.sizes.len() != boundaries.sizes.len() || boundaries.numel != rows * len)
        {
            return Err(AbiError::Invalid(format!(
                "searchsorted: boundaries of sizes {:?} for values of sizes {:?}",
                boundaries.sizes, values.sizes
            )));
        }
        let s = Search { dtype: values.dtype, nvalues, per_row, len, right, out_dtype: out.dtype };
        launch(&on, move || {
            let sorter = sorter.as_ref().map_or(std::ptr::null(), |o| o.src() as *const i64);
            // SAFETY: every value's row of `boundaries` (and `sorter`) exists (checked above); all operands are contiguous.
            unsafe { searchsorted(s, values.src(), boundaries.src(), sorter, out.dst(), on.threads()) }
        })
    })
}

/// The 1-d operand `o` as an element count and stride.
fn vector(op: &'static str, o: &Operand) -> Result<(usize, isize), AbiError> {
    match (&*o.sizes, &*o.strides) {
        (&[n], &[s]) => Ok((n as usize, s as isize)),
        (s, _) => Err(AbiError::Invalid(format!("{op}: operand of sizes {s:?}, expected one dimension"))),
    }
}

/// Smallest and largest of the integers of the 1-d `input`; `*any = false`
/// when it is empty. The glue validates `bincount`'s input and sizes its
/// result with them.
///
/// # Safety
/// `input` describes live memory (see [`operands`]); the outputs are writable.
#[no_mangle]
pub unsafe extern "C" fn oxide_bincount_range(
    on: OxideLaunch,
    input: OxideTensor,
    min: *mut i64,
    max: *mut i64,
    any: *mut bool,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [input] = unsafe { required("bincount", [&input]) }?;
        let (n, stride) = vector("bincount", &input)?;
        // The host sizes `bincount`'s result from the range: it is needed now.
        let r = launch_now(&on, || {
            // SAFETY: the kernel reads the n elements of the decoded 1-d input.
            unsafe { oxide_kernels::ops::reduce::histogram::bincount_range(input.dtype, n, input.src(), stride) }
        })?;
        let (lo, hi) = r.unwrap_or((0, -1));
        put(min, lo)?;
        put(max, hi)?;
        put(any, r.is_some())
    })
}

/// `bincount` of the 1-d integer `input` into the contiguous 1-d `out`
/// (its length is the bin count; zeroed first): int64 counts without
/// `weights`, else sums of the float32/float64 1-d `weights` (the input's
/// length) in `out` of the weights' dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_bincount(
    on: OxideLaunch,
    out: OxideTensor,
    input: OxideTensor,
    weights: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::reduce::histogram::{bincount, Weights};
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let [out, input, weights] = unsafe { operands("bincount", [&out, &input, &weights]) }?;
        let (out, input) = (present("bincount", out)?, present("bincount", input)?);
        let (n, stride) = vector("bincount", &input)?;
        let (nbins, _) = vector("bincount", out.contiguous("bincount")?)?;
        let w = match weights {
            None => {
                out.dtype_is("bincount (out)", oxide_kernels::DType::I64)?;
                None
            }
            Some(w) => {
                let (wn, ws) = vector("bincount (weights)", &w)?;
                if wn != n {
                    return Err(AbiError::Invalid(format!("bincount: {wn} weights for {n} values")));
                }
                out.dtype_is("bincount (out)", w.dtype)?;
                Some(Weights { dtype: w.dtype, ptr: w.src(), stride: ws })
            }
        };
        launch(&on, move || {
            // SAFETY: `input` and `weights` hold n elements at their strides, `out` nbins contiguous
            // elements of the dtype the kernel writes (checked above).
            unsafe { bincount(input.dtype, n, input.src(), stride, w, out.dst(), nbins) }
        })
    })
}

/// `histc` counts of the values of the 1-d `input` in the bins between the
/// contiguous ascending 1-d `edges`, into the contiguous `hist` (one element
/// fewer than `edges`; all three of one dtype); `local_search` refines the
/// interpolated bin against the edges.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_histc(
    on: OxideLaunch,
    hist: OxideTensor,
    input: OxideTensor,
    edges: OxideTensor,
    local_search: bool,
) -> i32 {
    use oxide_kernels::ops::reduce::histogram::{histc, Bins};
    ffi(|| {
        // SAFETY: the function's contract.
        let [hist, input, edges] = unsafe { required("histc", [&hist, &input, &edges]) }?;
        common_dtype("histc", &[&hist, &input, &edges])?;
        let (n, stride) = vector("histc", &input)?;
        let (nedges, _) = vector("histc", edges.contiguous("histc")?)?;
        hist.contiguous("histc")?.numel_is("histc", nedges.saturating_sub(1))?;
        let bins = Bins { edges: edges.src(), nedges, local_search };
        launch(&on, move || {
            // SAFETY: `input` holds n elements at its stride, `edges` nedges and `hist`
            // nedges - 1 contiguous elements of one dtype (checked above).
            unsafe { histc(input.dtype, n, input.src(), stride, bins, hist.dst(), on.threads()) }
        })
    })
}
