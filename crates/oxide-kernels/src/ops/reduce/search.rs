//! Binary search in sorted rows: `searchsorted` (and `bucketize`, which the
//! glue forwards to it).
//!
//! The comparisons are written as negations (`!(b >= v)` for the left bound,
//! `!(b > v)` for the right) as CPU PyTorch writes them, so a NaN value lands
//! after every boundary and NaN boundaries compare as CPU's do.

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_range, tasks_for};
use crate::error::{Error, Result};

/// The shape of one [`searchsorted`] call: the dtype of values and
/// boundaries, `nvalues` values, `per_row` of them per boundary row of `len`
/// elements, upper bound when `right`, and the output dtype (int32/int64).
#[derive(Debug, Clone, Copy)]
pub struct Search {
    pub dtype: DType,
    pub nvalues: usize,
    pub per_row: usize,
    pub len: usize,
    pub right: bool,
    pub out_dtype: DType,
}

/// Where each value would be inserted into its row of `boundaries` to keep it sorted.
///
/// Shapes: `values` holds `nvalues` contiguous elements; `boundaries` holds
/// `len`-element contiguous rows; value `i` searches row `i / per_row`
/// (pass `per_row >= nvalues` for one 1-d boundary row). `sorter`, when not
/// null, holds per row the positions that sort it (`boundaries[row][sorter[row][j]]`
/// is ascending in `j`). `right`: the last position whose left neighbour is
/// `<= v` (upper bound); otherwise the first whose element is `>= v`. The
/// result (a position in `0..=len`) is written as int64 or int32 (`out_dtype`).
///
/// Dtypes (values and boundaries share one): every real dtype CPU dispatches
/// (uint8, int8..int64, float16, bfloat16, float32, float64).
///
/// Errors: [`Error::UnsupportedDtype`] for bool, uint16/32/64, complex, or an
/// output that is not int32/int64.
///
/// # Safety
/// Pointers address the stated contiguous elements; `sorter` entries are in `0..len`.
pub unsafe fn searchsorted(
    s: Search,
    values: *const u8,
    boundaries: *const u8,
    sorter: *const i64,
    out: *mut u8,
    threads: usize,
) -> Result<()> {
    let Search { dtype, per_row, out_dtype, .. } = s;
    if !matches!(out_dtype, DType::I64 | DType::I32) {
        return Err(Error::UnsupportedDtype { op: "searchsorted (out)", dtype: out_dtype });
    }
    macro_rules! go {
        ($T:ty) => {
            // SAFETY: forwarded contract.
            unsafe {
                search_typed::<$T>(
                    Search { per_row: per_row.max(1), ..s },
                    values as usize,
                    boundaries as usize,
                    sorter as usize,
                    out as usize,
                    threads,
                )
            }
        };
    }
    match dtype {
        DType::U8 => go!(u8),
        DType::I8 => go!(i8),
        DType::I16 => go!(i16),
        DType::I32 => go!(i32),
        DType::I64 => go!(i64),
        DType::F16 => go!(half::f16),
        DType::BF16 => go!(half::bf16),
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        d => return Err(Error::UnsupportedDtype { op: "searchsorted", dtype: d }),
    }
    Ok(())
}

/// # Safety
/// As [`searchsorted`] (addresses passed as `usize` to cross rayon tasks), with
/// `T` the element type of `s.dtype` and `s.per_row >= 1`.
// The negated comparisons are CPU PyTorch's, on purpose: see the module documentation (NaN order).
#[allow(clippy::neg_cmp_op_on_partial_ord)]
unsafe fn search_typed<T: Element + PartialOrd>(
    s: Search,
    values: usize,
    boundaries: usize,
    sorter: usize,
    out: usize,
    threads: usize,
) {
    let Search { nvalues, per_row, len, right, out_dtype, .. } = s;
    let run = |a: usize, b: usize| {
        for i in a..b {
            let row = i / per_row;
            // SAFETY: caller contract.
            unsafe {
                let v = (values as *const T).add(i).read_unaligned();
                let bd = (boundaries as *const T).add(row * len);
                let srt = if sorter == 0 { None } else { Some((sorter as *const i64).add(row * len)) };
                let at = |j: usize| match srt {
                    Some(s) => bd.add(s.add(j).read_unaligned() as usize).read_unaligned(),
                    None => bd.add(j).read_unaligned(),
                };
                let (mut lo, mut hi) = (0usize, len);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    let m = at(mid);
                    let go_right = if right { !(m > v) } else { !(m >= v) };
                    if go_right {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                if out_dtype == DType::I64 {
                    (out as *mut i64).add(i).write_unaligned(lo as i64);
                } else {
                    (out as *mut i32).add(i).write_unaligned(lo as i32);
                }
            }
        }
    };
    // Each search costs about log2(len) reads: weigh the grain by it.
    let work = nvalues.saturating_mul((usize::BITS - len.leading_zeros()).max(1) as usize);
    for_each_range(nvalues, tasks_for(work, 1, threads), run);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }

    fn search<T: Element>(
        values: &[T],
        per_row: usize,
        bd: &[T],
        len: usize,
        sorter: Option<&[i64]>,
        right: bool,
        threads: usize,
    ) -> Vec<i64> {
        let mut out = vec![-1i64; values.len()];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            searchsorted(
                Search { dtype: T::DTYPE, nvalues: values.len(), per_row, len, right, out_dtype: DType::I64 },
                values.as_ptr() as *const u8,
                bd.as_ptr() as *const u8,
                sorter.map_or(std::ptr::null(), |s| s.as_ptr()),
                out.as_mut_ptr() as *mut u8,
                threads,
            )
        }
        .unwrap();
        out
    }

    #[test]
    fn matches_linear_scan() {
        // Batched rows with ties, unsorted rows through a sorter, many values (parallel path).
        let (rows, len, per_row) = (4, 9, 3 * crate::engine::iter::GRAIN / 4);
        let mut s = 3;
        let mut bd: Vec<i32> = (0..rows * len).map(|_| (lcg(&mut s) % 7) as i32 - 3).collect();
        let unsorted = bd.clone();
        let mut sorter = vec![0i64; rows * len];
        for r in 0..rows {
            let row = &mut bd[r * len..(r + 1) * len];
            row.sort();
            let mut p: Vec<usize> = (0..len).collect();
            p.sort_by_key(|&j| unsorted[r * len + j]);
            for (j, &q) in p.iter().enumerate() {
                sorter[r * len + j] = q as i64;
            }
        }
        let values: Vec<i32> = (0..rows * per_row).map(|_| (lcg(&mut s) % 11) as i32 - 5).collect();
        for right in [false, true] {
            let want: Vec<i64> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let row = &bd[(i / per_row) * len..(i / per_row + 1) * len];
                    row.iter().filter(|&&b| if right { b <= v } else { b < v }).count() as i64
                })
                .collect();
            for threads in [1, 4] {
                assert_eq!(search(&values, per_row, &bd, len, None, right, threads), want);
                assert_eq!(search(&values, per_row, &unsorted, len, Some(&sorter), right, threads), want);
            }
        }
    }

    #[test]
    fn nan_empty_and_int32() {
        let bd = [1.0f64, 2.0, f64::NAN];
        assert_eq!(search(&[f64::NAN, 2.0, 5.0], 3, &bd, 3, None, false, 1), [3, 1, 3]);
        assert_eq!(search(&[f64::NAN, 2.0, 5.0], 3, &bd, 3, None, true, 1), [3, 3, 3]);
        assert_eq!(search::<f32>(&[1.0], 1, &[], 0, None, false, 1), [0]);
        let mut out = [0i32; 2];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            searchsorted(
                Search { dtype: DType::U8, nvalues: 2, per_row: 2, len: 2, right: false, out_dtype: DType::I32 },
                [0u8, 9].as_ptr(),
                [1u8, 5].as_ptr(),
                std::ptr::null(),
                out.as_mut_ptr() as *mut u8,
                1,
            )
        }
        .unwrap();
        assert_eq!(out, [0, 2]);
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            searchsorted(
                Search { dtype: DType::Bool, nvalues: 1, per_row: 1, len: 1, right: false, out_dtype: DType::I64 },
                [0u8].as_ptr(),
                [1u8].as_ptr(),
                std::ptr::null(),
                out.as_mut_ptr() as *mut u8,
                1,
            )
        };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "searchsorted", dtype: DType::Bool }));
    }
}
