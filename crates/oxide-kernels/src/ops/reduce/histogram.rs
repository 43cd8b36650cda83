//! Counting kernels: `bincount` (optionally weighted) and `histc`
//! (PyTorch's `histogramdd_linear_stub` for one dimension).
//!
//! bincount adds in input order, serially, as CPU PyTorch does, so weighted
//! float sums round identically. histc counts exactly (int64 per task, summed
//! in task order) and converts once; CPU counts in the input's dtype, which
//! only differs where a float16/bfloat16 bin exceeds 2048/256 elements.

use crate::dtype::{DType, Element};
use crate::engine::iter::tasks_for;
use crate::error::{Error, Result};

/// The integral dtypes CPU's `bincount` dispatches (`AT_DISPATCH_INTEGRAL_TYPES`).
macro_rules! with_bincount_dtype {
    ($dtype:expr, |$T:ident| $body:expr) => {
        match $dtype {
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::I8 => {
                type $T = i8;
                $body
            }
            DType::I16 => {
                type $T = i16;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            d => return Err(Error::UnsupportedDtype { op: "bincount", dtype: d }),
        }
    };
}

/// `(min, max)` of `n` integers of `dtype` at `data` (element stride
/// `stride`), `None` when `n == 0`: the glue needs both to validate the input
/// and size the result, as CPU does before counting.
///
/// Errors: [`Error::UnsupportedDtype`] for anything but uint8, int8, int16, int32, int64.
///
/// # Safety
/// `data + i*stride` are readable elements of `dtype` for `i < n`.
pub unsafe fn bincount_range(dtype: DType, n: usize, data: *const u8, stride: isize) -> Result<Option<(i64, i64)>> {
    with_bincount_dtype!(dtype, |T| {
        let mut r: Option<(i64, i64)> = None;
        for i in 0..n {
            // SAFETY: caller contract.
            let v = unsafe { (data as *const T).offset(i as isize * stride).read_unaligned() }.to_i64();
            r = Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
        }
        Ok(r)
    })
}

/// Weights of [`bincount`]: float32 (summed in float) or float64; element stride.
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub dtype: DType,
    pub ptr: *const u8,
    pub stride: isize,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for Weights {}

/// `out[data[i]] += weights[i]` (or `+= 1` as int64 without weights) over
/// `n` non-negative integers at `data`; `out` holds `nbins` contiguous
/// elements (int64, or the weights' dtype) and is zeroed first.
///
/// Errors: [`Error::UnsupportedDtype`] for a non-integral input (as
/// [`bincount_range`]) or weights that are not float32/float64;
/// [`Error::InvalidValue`] for a value outside `[0, nbins)`.
///
/// # Safety
/// `data` as in [`bincount_range`], the weights likewise; `out` holds `nbins` writable elements.
pub unsafe fn bincount(
    dtype: DType,
    n: usize,
    data: *const u8,
    stride: isize,
    weights: Option<Weights>,
    out: *mut u8,
    nbins: usize,
) -> Result<()> {
    unsafe fn count<T: Element, W: Element + std::ops::AddAssign + Default>(
        n: usize,
        data: *const u8,
        stride: isize,
        weight: impl Fn(usize) -> W,
        out: *mut W,
        nbins: usize,
    ) -> Result<()> {
        // SAFETY: caller contract.
        let out = unsafe { std::slice::from_raw_parts_mut(out, nbins) };
        out.fill(W::default());
        for i in 0..n {
            // SAFETY: caller contract.
            let v = unsafe { (data as *const T).offset(i as isize * stride).read_unaligned() }.to_i64();
            let slot = usize::try_from(v).ok().filter(|&b| b < nbins).ok_or_else(|| Error::InvalidValue {
                op: "bincount",
                reason: format!("bincount: value {v} is outside [0, {nbins})"),
            })?;
            out[slot] += weight(i);
        }
        Ok(())
    }
    with_bincount_dtype!(dtype, |T| {
        // SAFETY: caller contract.
        match weights {
            // SAFETY: caller contract.
            None => unsafe { count::<T, i64>(n, data, stride, |_| 1, out as *mut i64, nbins) },
            // SAFETY: caller contract.
            Some(w) if w.dtype == DType::F32 => unsafe {
                count::<T, f32>(
                    n,
                    data,
                    stride,
                    |i| (w.ptr as *const f32).offset(i as isize * w.stride).read_unaligned(),
                    out as *mut f32,
                    nbins,
                )
            },
            // SAFETY: caller contract.
            Some(w) if w.dtype == DType::F64 => unsafe {
                count::<T, f64>(
                    n,
                    data,
                    stride,
                    |i| (w.ptr as *const f64).offset(i as isize * w.stride).read_unaligned(),
                    out as *mut f64,
                    nbins,
                )
            },
            Some(w) => Err(Error::UnsupportedDtype { op: "bincount (weights)", dtype: w.dtype }),
        }
    })
}

/// A floating dtype's bin arithmetic, in that dtype as CPU computes it.
trait BinFloat: Element + PartialOrd {
    /// `(v - lo) * bins / (hi - lo)` truncated to an integer.
    fn linear_bin(v: Self, lo: Self, hi: Self, bins: i64) -> i64;
}
impl BinFloat for f32 {
    fn linear_bin(v: f32, lo: f32, hi: f32, bins: i64) -> i64 {
        ((v - lo) * bins as f32 / (hi - lo)) as i64
    }
}
impl BinFloat for f64 {
    fn linear_bin(v: f64, lo: f64, hi: f64, bins: i64) -> i64 {
        ((v - lo) * bins as f64 / (hi - lo)) as i64
    }
}
macro_rules! half_bin {
    ($($t:ty),*) => {$( impl BinFloat for $t {
        // c10::Half/BFloat16 round every intermediate result (and the integer factor) to their own type.
        fn linear_bin(v: $t, lo: $t, hi: $t, bins: i64) -> i64 {
            let r = |x: f32| <$t>::from_f32(x).to_f32();
            let d = r(v.to_f32() - lo.to_f32());
            let m = r(d * r(bins as f32));
            r(m / r(hi.to_f32() - lo.to_f32())) as i64
        }
    } )*};
}
half_bin!(half::f16, half::bf16);

/// The bins of [`histc`]: `nedges` contiguous ascending edges (the input's
/// dtype), and whether the interpolated bin is refined against them.
#[derive(Debug, Clone, Copy)]
pub struct Bins {
    pub edges: *const u8,
    pub nedges: usize,
    pub local_search: bool,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for Bins {}

/// `histc`: counts of the `n` values at `input` (element stride `stride`)
/// in the `nedges - 1` bins delimited by the ascending `edges` (contiguous,
/// same dtype), written to `hist` (`nedges - 1` contiguous elements of the
/// dtype). Values outside `[edges[0], edges[last]]` and NaN are skipped; the
/// last bin includes its right edge. The bin is found by linear
/// interpolation between the outer edges, and with `local_search` corrected
/// against the neighbouring edges (PyTorch's `LINEAR_INTERPOLATION[_WITH_LOCAL_SEARCH]`).
///
/// Dtypes: float32, float64, float16, bfloat16.
///
/// Errors: [`Error::UnsupportedDtype`] for other dtypes; [`Error::InvalidLayout`] for fewer than 2 edges.
///
/// # Safety
/// Pointers address the stated elements; `hist` does not overlap the inputs.
pub unsafe fn histc(
    dtype: DType,
    n: usize,
    input: *const u8,
    stride: isize,
    bins: Bins,
    hist: *mut u8,
    threads: usize,
) -> Result<()> {
    let nedges = bins.nedges;
    if nedges < 2 {
        return Err(Error::InvalidLayout { op: "histc", reason: format!("{nedges} bin edges") });
    }
    macro_rules! go {
        ($T:ty) => {
            // SAFETY: forwarded contract.
            unsafe { histc_typed::<$T>(n, input as usize, stride, bins, hist as *mut $T, threads) }
        };
    }
    match dtype {
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        DType::F16 => go!(half::f16),
        DType::BF16 => go!(half::bf16),
        d => return Err(Error::UnsupportedDtype { op: "histc", dtype: d }),
    }
    Ok(())
}

/// # Safety
/// As [`histc`], with `T` the element type of the edges.
unsafe fn histc_typed<T: BinFloat>(n: usize, input: usize, stride: isize, bins: Bins, hist: *mut T, threads: usize) {
    let Bins { edges, nedges, local_search } = bins;
    // SAFETY: caller contract.
    let edges = unsafe { std::slice::from_raw_parts(edges as *const T, nedges) };
    let bins = nedges - 1;
    let (lo, hi) = (edges[0], edges[bins]);
    let count = |a: usize, b: usize| {
        let mut local = vec![0i64; bins];
        for i in a..b {
            // SAFETY: caller contract.
            let v = unsafe { (input as *const T).offset(i as isize * stride).read_unaligned() };
            if !(v >= lo && v <= hi) {
                continue;
            }
            let mut pos = T::linear_bin(v, lo, hi, bins as i64).clamp(0, bins as i64) as usize;
            if local_search {
                let (from, to) = (pos.saturating_sub(1), (pos + 2).min(nedges));
                pos = from + edges[from..to].partition_point(|e| *e <= v) - 1;
            }
            local[pos.min(bins - 1)] += 1;
        }
        local
    };
    let tasks = tasks_for(n, 1, threads);
    let chunk = n.div_ceil(tasks).max(1);
    let partial: Vec<Vec<i64>> = if tasks <= 1 {
        vec![count(0, n)]
    } else {
        crate::engine::iter::map_tasks(tasks, |t| count((t * chunk).min(n), ((t + 1) * chunk).min(n)))
    };
    for b in 0..bins {
        let total: i64 = partial.iter().map(|p| p[b]).sum();
        // SAFETY: caller contract; b < bins.
        unsafe { hist.add(b).write_unaligned(T::from_i64(total)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bincount_counts_and_weights() {
        let data = [3i16, 0, 3, 1, 9, 3];
        // SAFETY: the pointers address live local buffers sized for the call.
        assert_eq!(unsafe { bincount_range(DType::I16, 6, data.as_ptr() as *const u8, 1) }.unwrap(), Some((0, 9)));
        // every other element: 3, 3, 9
        // SAFETY: the pointers address live local buffers sized for the call.
        assert_eq!(unsafe { bincount_range(DType::I16, 3, data.as_ptr() as *const u8, 2) }.unwrap(), Some((3, 9)));
        // SAFETY: the pointers address live local buffers sized for the call.
        assert_eq!(unsafe { bincount_range(DType::U8, 0, std::ptr::null(), 1) }.unwrap(), None);
        let mut out = [7i64; 11];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { bincount(DType::I16, 6, data.as_ptr() as *const u8, 1, None, out.as_mut_ptr() as *mut u8, 11) }
            .unwrap();
        assert_eq!(out, [1, 1, 0, 3, 0, 0, 0, 0, 0, 1, 0]);
        let w = [0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6];
        let mut out = [0f32; 10];
        let weights = Weights { dtype: DType::F32, ptr: w.as_ptr() as *const u8, stride: 1 };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            bincount(DType::I16, 6, data.as_ptr() as *const u8, 1, Some(weights), out.as_mut_ptr() as *mut u8, 10)
        }
        .unwrap();
        // input order: ((0.1 + 0.3) + 0.6) in float
        assert_eq!(out[3], (0.1f32 + 0.3) + 0.6);
        assert_eq!((out[0], out[1], out[9]), (0.2, 0.4, 0.5));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { bincount(DType::I16, 6, data.as_ptr() as *const u8, 1, None, out.as_mut_ptr() as *mut u8, 5) };
        assert!(matches!(e, Err(Error::InvalidValue { .. })));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { bincount_range(DType::F32, 1, w.as_ptr() as *const u8, 1) };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "bincount", dtype: DType::F32 }));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { bincount_range(DType::U16, 1, w.as_ptr() as *const u8, 1) };
        assert!(e.is_err());
    }

    /// Naive histc: the bin by an exact search over the edges (`upper_bound - 1`).
    fn naive(values: &[f64], edges: &[f64]) -> Vec<f64> {
        let bins = edges.len() - 1;
        let mut h = vec![0.0; bins];
        for &v in values {
            if v >= edges[0] && v <= edges[bins] {
                let p = edges.partition_point(|e| *e <= v) - 1;
                h[p.min(bins - 1)] += 1.0;
            }
        }
        h
    }

    #[test]
    fn histc_matches_search_on_representable_edges() {
        // Edges exactly representable (multiples of 0.25), values on and between edges, outside, NaN.
        let edges: Vec<f64> = (0..=8).map(|i| -1.0 + 0.25 * i as f64).collect();
        let mut values: Vec<f64> = (0..200).map(|i| -1.5 + 0.0125 * i as f64).collect();
        values.extend([f64::NAN, f64::INFINITY, -1.0, 1.0]);
        let values: Vec<f64> = values.iter().cycle().take(3 * crate::engine::iter::GRAIN).copied().collect();
        let want = naive(&values, &edges);
        for local in [false, true] {
            for threads in [1, 4] {
                let mut h = vec![0f64; 8];
                // SAFETY: the pointers address live local buffers sized for the call.
                unsafe {
                    histc(
                        DType::F64,
                        values.len(),
                        values.as_ptr() as *const u8,
                        1,
                        Bins { edges: edges.as_ptr() as *const u8, nedges: 9, local_search: local },
                        h.as_mut_ptr() as *mut u8,
                        threads,
                    )
                }
                .unwrap();
                assert_eq!(h, want);
                let v32: Vec<f32> = values.iter().map(|&v| v as f32).collect();
                let e32: Vec<f32> = edges.iter().map(|&v| v as f32).collect();
                let mut h = vec![0f32; 8];
                // SAFETY: the pointers address live local buffers sized for the call.
                unsafe {
                    histc(
                        DType::F32,
                        v32.len(),
                        v32.as_ptr() as *const u8,
                        1,
                        Bins { edges: e32.as_ptr() as *const u8, nedges: 9, local_search: local },
                        h.as_mut_ptr() as *mut u8,
                        threads,
                    )
                }
                .unwrap();
                assert_eq!(h.iter().map(|&x| x as f64).collect::<Vec<_>>(), want);
            }
        }
        let vh: Vec<half::f16> = values[..200].iter().map(|&v| half::f16::from_f64(v)).collect();
        let eh: Vec<half::f16> = edges.iter().map(|&v| half::f16::from_f64(v)).collect();
        let mut h = vec![half::f16::ZERO; 8];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            histc(
                DType::F16,
                200,
                vh.as_ptr() as *const u8,
                1,
                Bins { edges: eh.as_ptr() as *const u8, nedges: 9, local_search: true },
                h.as_mut_ptr() as *mut u8,
                1,
            )
        }
        .unwrap();
        let wanth = naive(&vh.iter().map(|v| v.to_f64()).collect::<Vec<_>>(), &edges);
        assert_eq!(h.iter().map(|v| v.to_f64()).collect::<Vec<_>>(), wanth);
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            histc(
                DType::I64,
                0,
                std::ptr::null(),
                1,
                Bins { edges: edges.as_ptr() as *const u8, nedges: 9, local_search: false },
                h.as_mut_ptr() as *mut u8,
                1,
            )
        };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "histc", dtype: DType::I64 }));
    }
}
