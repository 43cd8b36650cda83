//! Scatter with a reduction (PyTorch's `scatter_reduce_two_stub`,
//! `scatter_reduce_stub` and `scatter_scalar_reduce_stub`) and
//! `masked_scatter_` (`masked_scatter_stub`).
//!
//! scatter_reduce: for every position `p` of `index`, the element of `self`
//! at `p` with coordinate `dim` replaced by `index[p]` is combined with
//! `src[p]`. All positions that reach one element of `self` share every
//! coordinate but `dim`, so the kernel walks *lines* (one per position of
//! `index` without `dim`): lines touch disjoint elements and run in
//! parallel, and within a line the sources are combined in index order, the
//! order CPU PyTorch uses. float16/bfloat16 accumulate in float and round once
//! at the end (CPU's opmath buffer), so results do not depend on the thread
//! count and match CPU bit for bit.
//!
//! masked_scatter: the `k`-th set element of the mask (in row-major order)
//! receives `source[k]`. Two passes over the same ranges: count the set
//! elements of each range, then each range writes from its prefix offset
//! (the stream-compaction scheme CUDA's kernel uses).

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_range, tasks_for, TensorIter};
use crate::engine::math::Num;
use crate::error::{Error, Result};
use crate::with_real_dtype;

/// The reductions of `scatter_reduce` and `scatter(reduce=)` (PyTorch's `ReductionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterReduce {
    /// `sum` (and `add`): `a + b` (bool: or).
    Sum,
    /// `prod` (and `multiply`): `a * b` (bool: and).
    Prod,
    /// `mean`: sums here; the glue divides by the counts (as CPU's structured impl does).
    Mean,
    /// `amax`: NaN propagates; ties keep the destination (`std::max`).
    Amax,
    /// `amin`: NaN propagates; ties keep the destination (`std::min`).
    Amin,
}

impl ScatterReduce {
    /// The operator name CPU's dispatch error mentions.
    pub fn name(self) -> &'static str {
        match self {
            ScatterReduce::Sum => "scatter_reduce_sum",
            ScatterReduce::Prod => "scatter_reduce_prod",
            ScatterReduce::Mean => "scatter_reduce_mean",
            ScatterReduce::Amax => "scatter_reduce_amax",
            ScatterReduce::Amin => "scatter_reduce_amin",
        }
    }

    /// Whether CPU PyTorch has a loop for `dtype`: sum and prod take every
    /// real dtype, mean no bool, and none of mean/amax/amin the wide unsigned types.
    fn supports(self, dtype: DType) -> bool {
        match dtype {
            DType::C32 | DType::C64 | DType::C128 => false,
            DType::U16 | DType::U32 | DType::U64 => matches!(self, ScatterReduce::Sum | ScatterReduce::Prod),
            DType::Bool => self != ScatterReduce::Mean,
            _ => true,
        }
    }

    #[inline(always)]
    fn combine<C: Num>(self, acc: C, v: C) -> C {
        match self {
            ScatterReduce::Sum | ScatterReduce::Mean => acc.add(v),
            ScatterReduce::Prod => acc.mul(v),
            ScatterReduce::Amax => {
                if v.is_nan() || acc < v {
                    v
                } else {
                    acc
                }
            }
            ScatterReduce::Amin => {
                if v.is_nan() || v < acc {
                    v
                } else {
                    acc
                }
            }
        }
    }
}

/// The CPU accumulation type of a scatter reduction (`at::opmath_type`).
trait Opmath: Element {
    type Acc: Num;
}
macro_rules! opmath {
    ($($t:ty => $a:ty),*) => {$( impl Opmath for $t { type Acc = $a; } )*};
}
opmath!(u8 => u8, i8 => i8, i16 => i16, i32 => i32, i64 => i64, u16 => u16, u32 => u32, u64 => u64,
    bool => bool, half::f16 => f32, half::bf16 => f32, f32 => f32, f64 => f64);

/// A strided operand of [`scatter_reduce`]: the first element and element strides.
#[derive(Debug, Clone, Copy)]
pub struct Strided<'a> {
    pub ptr: *mut u8,
    pub strides: &'a [isize],
}

// SAFETY: a plain address; the caller of `scatter_reduce` guarantees validity.
unsafe impl Send for Strided<'_> {}
// SAFETY: as for `Send` above: shared references only read the descriptor, and tasks that write through it write disjoint elements.
unsafe impl Sync for Strided<'_> {}

/// The lines of `index`: every dimension but `dim`.
struct Lines<'a> {
    shape: &'a [usize],
    dim: usize,
    count: usize,
}

impl Lines<'_> {
    /// Element offsets of line `l` in each operand (`strides[k]` per dimension).
    fn offsets<const N: usize>(&self, mut l: usize, strides: [&[isize]; N]) -> [isize; N] {
        let mut off = [0isize; N];
        for d in (0..self.shape.len()).rev() {
            if d == self.dim {
                continue;
            }
            let c = l % self.shape[d];
            l /= self.shape[d];
            for k in 0..N {
                off[k] += c as isize * strides[k][d];
            }
        }
        off
    }
}

/// What one [`scatter_reduce`] does: the reduction, the index shape, the
/// dimension scattered along and `out`'s extent along it.
#[derive(Debug, Clone, Copy)]
pub struct Scatter<'a> {
    pub reduce: ScatterReduce,
    pub shape: &'a [usize],
    pub dim: usize,
    pub dim_size: usize,
}

/// `out[.., index[p], ..] = reduce(out[.., index[p], ..], src[p])` for every
/// position `p` of the index shape `shape`, along `dim` (`out` has `dim_size`
/// elements along it). Strides are in elements, one per dimension of `shape`
/// (a broadcast scalar source has all-zero strides). `index` is int64 or
/// int32 (CPU accepts both). `Mean` only sums: the caller divides.
///
/// Algorithm: lines in parallel (disjoint destinations), sources of one line
/// in index order; half types accumulate per destination in float (a buffer
/// of `dim_size` per task) and are rounded once.
///
/// Errors: [`Error::UnsupportedDtype`] where CPU has no loop (complex; bool
/// for mean; uint16/32/64 except for sum and prod; an index that is not
/// int32/int64); [`Error::InvalidValue`] (a RuntimeError, as on CPU) for an
/// index outside `[0, dim_size)`, reported before anything is written.
///
/// # Safety
/// Every addressed element is live memory of its dtype; `out` does not overlap
/// `src` or `index`; stride arrays have `shape.len()` entries.
pub unsafe fn scatter_reduce(
    s: Scatter,
    dtype: DType,
    out: Strided,
    src: Strided,
    index_dtype: DType,
    index: Strided,
    threads: usize,
) -> Result<()> {
    let Scatter { reduce, shape, dim, dim_size } = s;
    if !reduce.supports(dtype) {
        return Err(Error::UnsupportedDtype { op: reduce.name(), dtype });
    }
    if dim >= shape.len() || [out.strides, src.strides, index.strides].iter().any(|s| s.len() != shape.len()) {
        return Err(Error::InvalidLayout {
            op: "scatter_reduce",
            reason: format!("dim {dim} of {} dimensions, stride arrays of another length", shape.len()),
        });
    }
    let numel: usize = shape.iter().product();
    if numel == 0 {
        return Ok(());
    }
    let lines = Lines { shape, dim, count: numel / shape[dim] };
    let tasks = tasks_for(lines.count, shape[dim], threads);
    // SAFETY: forwarded contract.
    match index_dtype {
        // SAFETY: forwarded contract.
        DType::I64 => unsafe { check_indices::<i64>(&lines, index, dim_size, tasks)? },
        // SAFETY: forwarded contract.
        DType::I32 => unsafe { check_indices::<i32>(&lines, index, dim_size, tasks)? },
        d => return Err(Error::UnsupportedDtype { op: "scatter_reduce (index)", dtype: d }),
    }
    with_real_dtype!(dtype, reduce.name(), |T| {
        // SAFETY: forwarded contract; indices checked above.
        match index_dtype {
            // SAFETY: forwarded contract; indices checked above.
            DType::I64 => unsafe { reduce_lines::<T, i64>(reduce, &lines, dim_size, out, src, index, tasks) },
            // SAFETY: forwarded contract; indices checked above.
            _ => unsafe { reduce_lines::<T, i32>(reduce, &lines, dim_size, out, src, index, tasks) },
        }
        Ok(())
    })
}

/// The first (in line order) index outside `[0, size)`, as an error.
///
/// # Safety
/// As [`scatter_reduce`], with `I` the index type.
unsafe fn check_indices<I: Element>(lines: &Lines, index: Strided, size: usize, tasks: usize) -> Result<()> {
    let k = lines.shape[lines.dim];
    let step = index.strides[lines.dim];
    let first_bad: Vec<std::sync::Mutex<Option<i64>>> =
        (0..tasks.max(1)).map(|_| std::sync::Mutex::new(None)).collect();
    let chunk = lines.count.div_ceil(tasks.max(1));
    // Capture the operand whole (it is Sync), not its raw pointer field.
    let index = &index;
    for_each_range(lines.count, tasks, |a, b| {
        for l in a..b {
            let [o] = lines.offsets(l, [index.strides]);
            for i in 0..k {
                // SAFETY: caller contract.
                let v = unsafe { (index.ptr as *const I).offset(o + i as isize * step).read_unaligned() }.to_i64();
                if v < 0 || v >= size as i64 {
                    *first_bad[a / chunk.max(1)].lock().unwrap() = Some(v);
                    return;
                }
            }
        }
    });
    match first_bad.into_iter().find_map(|m| m.into_inner().unwrap()) {
        Some(v) => Err(Error::InvalidValue {
            op: "scatter_reduce",
            reason: format!("index {v} is out of bounds for dimension {} with size {size}", lines.dim),
        }),
        None => Ok(()),
    }
}

/// # Safety
/// As [`scatter_reduce`], with indices already checked.
unsafe fn reduce_lines<T: Opmath, I: Element>(
    reduce: ScatterReduce,
    lines: &Lines,
    size: usize,
    out: Strided,
    src: Strided,
    index: Strided,
    tasks: usize,
) {
    let k = lines.shape[lines.dim];
    let (o_step, s_step, i_step) = (out.strides[lines.dim], src.strides[lines.dim], index.strides[lines.dim]);
    // Accumulating in the storage type is exactly CPU's read-modify-write; a
    // wider accumulator needs a per-destination buffer so that rounding happens once.
    let direct = T::DTYPE == <T::Acc as Element>::DTYPE;
    // Capture the operands whole (they are Sync), not their raw pointer fields.
    let (out, src, index) = (&out, &src, &index);
    for_each_range(lines.count, tasks, |a, b| {
        let (mut acc, mut seen, mut touched) =
            if direct { (vec![], vec![], vec![]) } else { (vec![T::Acc::ZERO; size], vec![false; size], Vec::new()) };
        for l in a..b {
            let [oo, so, io] = lines.offsets(l, [out.strides, src.strides, index.strides]);
            for i in 0..k {
                let i = i as isize;
                // SAFETY: caller contract; the index is in range.
                unsafe {
                    let t = (index.ptr as *const I).offset(io + i * i_step).read_unaligned().to_i64() as usize;
                    let v = (src.ptr as *const T).offset(so + i * s_step).read_unaligned().cast::<T::Acc>();
                    let dst = (out.ptr as *mut T).offset(oo + t as isize * o_step);
                    if direct {
                        let cur = dst.read_unaligned().cast::<T::Acc>();
                        dst.write_unaligned(reduce.combine(cur, v).cast::<T>());
                    } else {
                        if !seen[t] {
                            seen[t] = true;
                            acc[t] = dst.read_unaligned().cast::<T::Acc>();
                            touched.push(t);
                        }
                        acc[t] = reduce.combine(acc[t], v);
                    }
                }
            }
            for &t in &touched {
                // SAFETY: as above.
                unsafe { (out.ptr as *mut T).offset(oo + t as isize * o_step).write_unaligned(acc[t].cast::<T>()) };
                seen[t] = false;
            }
            touched.clear();
        }
    });
}

/// `masked_scatter_` over the iterator (output, bool mask), taken in its
/// linear order (the glue builds it with `enforce_linear_iteration`): the
/// `k`-th set mask element's output receives element `k` of the contiguous
/// `source` (`source_len` elements of the output's dtype).
///
/// Errors: [`Error::InvalidValue`] (RuntimeError, as on CPU) when the mask
/// has more set elements than `source_len`, before anything is written;
/// [`Error::UnsupportedDtype`] for uint16/32/64 and complex32, which CPU
/// does not dispatch, or a mask that is not bool.
///
/// # Safety
/// The iterator addresses live memory; `source` holds `source_len` elements.
pub unsafe fn masked_scatter(it: &TensorIter, source: *const u8, source_len: usize) -> Result<()> {
    let dtype = it.dtype(0);
    if matches!(dtype, DType::U16 | DType::U32 | DType::U64 | DType::C32) {
        return Err(Error::UnsupportedDtype { op: "masked_scatter", dtype });
    }
    if it.dtype(1) != DType::Bool {
        return Err(Error::UnsupportedDtype { op: "masked_scatter (mask)", dtype: it.dtype(1) });
    }
    let numel = it.numel();
    if numel == 0 {
        return Ok(());
    }
    let size = dtype.size();
    let tasks = it.tasks_for(numel);
    let chunk = numel.div_ceil(tasks);
    let range = |t: usize| ((t * chunk).min(numel), ((t + 1) * chunk).min(numel));
    let ms = it.inner_stride(1);
    let count = |t: usize| {
        let (a, b) = range(t);
        let mut n = 0usize;
        it.for_each_row_in(a, b, |offs, len| {
            for j in 0..len {
                // SAFETY: caller contract (bool is one byte).
                n += unsafe { *it.operands[1].ptr.offset(offs[1] + j as isize * ms) != 0 } as usize;
            }
        });
        n
    };
    let counts: Vec<usize> = if tasks <= 1 { vec![count(0)] } else { crate::engine::iter::map_tasks(tasks, count) };
    let total: usize = counts.iter().sum();
    if total > source_len {
        return Err(Error::InvalidValue {
            op: "masked_scatter",
            reason: "Number of elements of source < number of ones in mask".into(),
        });
    }
    let starts: Vec<usize> = counts.iter().scan(0, |s, &c| Some(std::mem::replace(s, *s + c))).collect();
    let os = it.inner_stride(0);
    let (out, src) = (it.operands[0].ptr as usize, source as usize);
    let write = |t: usize| {
        let (a, b) = range(t);
        let mut k = starts[t];
        it.for_each_row_in(a, b, |offs, len| {
            for j in 0..len {
                // SAFETY: caller contract; k < total <= source_len.
                unsafe {
                    if *it.operands[1].ptr.offset(offs[1] + j as isize * ms) != 0 {
                        let d = (out as *mut u8).offset(offs[0] + j as isize * os);
                        std::ptr::copy_nonoverlapping((src as *const u8).add(k * size), d, size);
                        k += 1;
                    }
                }
            }
        });
    };
    if tasks <= 1 {
        write(0);
    } else {
        crate::engine::iter::for_each_task(tasks, write);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::iter::Operand;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// Naive scatter_reduce on a contiguous 2-d `out` (rows x cols) along dim 1
    /// with a contiguous (rows x k) index and source, accumulating in f64.
    fn naive(reduce: ScatterReduce, out: &[f64], cols: usize, index: &[i64], src: &[f64], k: usize) -> Vec<f64> {
        let mut acc = out.to_vec();
        for r in 0..index.len() / k {
            for i in 0..k {
                let t = r * cols + index[r * k + i] as usize;
                let (a, v) = (acc[t], src[r * k + i]);
                acc[t] = match reduce {
                    ScatterReduce::Sum | ScatterReduce::Mean => a + v,
                    ScatterReduce::Prod => a * v,
                    ScatterReduce::Amax => {
                        if v.is_nan() || a < v {
                            v
                        } else {
                            a
                        }
                    }
                    ScatterReduce::Amin => {
                        if v.is_nan() || v < a {
                            v
                        } else {
                            a
                        }
                    }
                };
            }
        }
        acc
    }

    fn run<T: Element>(
        reduce: ScatterReduce,
        out: &mut [T],
        cols: usize,
        index: &[i64],
        src: &[T],
        k: usize,
        threads: usize,
    ) -> Result<()> {
        let rows = index.len() / k;
        let (os, ss, is) = ([cols as isize, 1], [k as isize, 1], [k as isize, 1]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            scatter_reduce(
                Scatter { reduce, shape: &[rows, k], dim: 1, dim_size: cols },
                T::DTYPE,
                Strided { ptr: out.as_mut_ptr() as *mut u8, strides: &os },
                Strided { ptr: src.as_ptr() as *mut u8, strides: &ss },
                DType::I64,
                Strided { ptr: index.as_ptr() as *mut u8, strides: &is },
                threads,
            )
        }
    }

    const ALL: [ScatterReduce; 5] =
        [ScatterReduce::Sum, ScatterReduce::Prod, ScatterReduce::Mean, ScatterReduce::Amax, ScatterReduce::Amin];

    #[test]
    fn matches_naive_for_floats_and_ints() {
        let (rows, cols, k) = (300, 7, 40);
        let mut s = 1;
        let index: Vec<i64> = (0..rows * k).map(|_| (lcg(&mut s) % cols as u64) as i64).collect();
        let src: Vec<f64> = (0..rows * k)
            .map(|_| match lcg(&mut s) % 30 {
                0 => f64::NAN,
                r => (r as f64 - 15.0) * 0.25 + 1.0,
            })
            .collect();
        let out: Vec<f64> = (0..rows * cols).map(|i| (i % 5) as f64 - 2.0).collect();
        for reduce in ALL {
            let want = naive(reduce, &out, cols, &index, &src, k);
            for threads in [1, 8] {
                let mut got = out.clone();
                run(reduce, &mut got, cols, &index, &src, k, threads).unwrap();
                for (g, w) in got.iter().zip(&want) {
                    assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{reduce:?} {g} {w}");
                }
                // int32 wraps like C++; compare against the same naive loop in i64 with wrapping.
                let oi: Vec<i32> = out.iter().map(|&v| v as i32).collect();
                let si: Vec<i32> = src.iter().map(|&v| if v.is_nan() { 3 } else { (v * 4.0) as i32 }).collect();
                let mut gi = oi.clone();
                run(reduce, &mut gi, cols, &index, &si, k, threads).unwrap();
                let mut wi = oi.clone();
                for r in 0..rows {
                    for i in 0..k {
                        let t = r * cols + index[r * k + i] as usize;
                        let (a, v) = (wi[t], si[r * k + i]);
                        wi[t] = match reduce {
                            ScatterReduce::Sum | ScatterReduce::Mean => a.wrapping_add(v),
                            ScatterReduce::Prod => a.wrapping_mul(v),
                            ScatterReduce::Amax => a.max(v),
                            ScatterReduce::Amin => a.min(v),
                        };
                    }
                }
                assert_eq!(gi, wi, "{reduce:?} int32");
            }
        }
    }

    #[test]
    fn half_accumulates_in_float_and_rounds_once() {
        use half::bf16;
        // 1000 x 1.01 into one bfloat16: stepwise rounding would stall at 512.
        let mut out = [bf16::ZERO];
        let src = vec![bf16::from_f32(1.01); 1000];
        let index = vec![0i64; 1000];
        run(ScatterReduce::Sum, &mut out, 1, &index, &src, 1000, 4).unwrap();
        let exact: f32 = src.iter().map(|v| v.to_f32()).sum();
        assert_eq!(out[0], bf16::from_f32(exact));
        assert_eq!(out[0].to_f32(), 1008.0);
    }

    #[test]
    fn strided_and_broadcast_source() {
        // out is the transpose of a 3x4 buffer (4x3 view), scatter along dim 0 a scalar source.
        let mut buf = [1f32; 12];
        let index = [3i64, 0, 3, 1, 1, 1];
        // index shape (2, 3), contiguous; out strides (1, 4) for the (4, 3) view.
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            scatter_reduce(
                Scatter { reduce: ScatterReduce::Prod, shape: &[2, 3], dim: 0, dim_size: 4 },
                DType::F32,
                Strided { ptr: buf.as_mut_ptr() as *mut u8, strides: &[1, 4] },
                Strided { ptr: [2f32].as_ptr() as *mut u8, strides: &[0, 0] },
                DType::I64,
                Strided { ptr: index.as_ptr() as *mut u8, strides: &[3, 1] },
                1,
            )
        }
        .unwrap();
        // view[r][c] = buf[r + 4c]; column 0 gets rows 3 and 1; column 1 rows 0, 1; column 2 rows 3, 1.
        let mut want = [1f32; 12];
        for (r, c) in [(3, 0), (1, 0), (0, 1), (1, 1), (3, 2), (1, 2)] {
            want[r + 4 * c] *= 2.0;
        }
        assert_eq!(buf, want);
    }

    #[test]
    fn errors_and_dtypes() {
        let mut out = [0i64; 3];
        let e = run(ScatterReduce::Sum, &mut out, 3, &[0, 3], &[1, 1], 2, 1).unwrap_err();
        assert_eq!(e.to_string(), "index 3 is out of bounds for dimension 1 with size 3");
        assert_eq!(out, [0; 3], "nothing written before the error");
        let e = run(ScatterReduce::Sum, &mut out, 3, &[-1], &[1], 1, 1).unwrap_err();
        assert!(matches!(e, Error::InvalidValue { .. }));
        let mut b = [false; 2];
        assert!(matches!(
            run(ScatterReduce::Mean, &mut b, 2, &[0], &[true], 1, 1),
            Err(Error::UnsupportedDtype { .. })
        ));
        run(ScatterReduce::Amax, &mut b, 2, &[1, 1], &[true, false], 2, 1).unwrap();
        assert_eq!(b, [false, true]);
        let mut u = [2u16; 2];
        run(ScatterReduce::Prod, &mut u, 2, &[1, 1], &[3, 5], 2, 1).unwrap();
        assert_eq!(u, [2, 30]);
        assert!(matches!(run(ScatterReduce::Amin, &mut u, 2, &[0], &[1], 1, 1), Err(Error::UnsupportedDtype { .. })));
        // empty index: nothing to do
        run::<f32>(ScatterReduce::Sum, &mut [], 0, &[], &[], 1, 1).unwrap();
    }

    fn masked(
        out: &mut [f32],
        strides: &[i64],
        shape: &[i64],
        mask: &[bool],
        mstrides: &[i64],
        source: &[f32],
        threads: usize,
    ) -> Result<()> {
        let it = TensorIter::new(
            "t",
            shape,
            vec![
                (Operand { ptr: out.as_mut_ptr() as *mut u8, dtype: DType::F32 }, strides),
                (Operand { ptr: mask.as_ptr() as *mut u8, dtype: DType::Bool }, mstrides),
            ],
            1,
            threads,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { masked_scatter(&it, source.as_ptr() as *const u8, source.len()) }
    }

    #[test]
    fn masked_scatter_in_order_and_parallel() {
        let n = 5 * crate::engine::iter::GRAIN + 11;
        let mut s = 7;
        let mask: Vec<bool> = (0..n).map(|_| lcg(&mut s).is_multiple_of(3)).collect();
        let source: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut want = vec![-1f32; n];
        let mut k = 0;
        for i in 0..n {
            if mask[i] {
                want[i] = source[k];
                k += 1;
            }
        }
        for threads in [1, 3, 8] {
            let mut out = vec![-1f32; n];
            masked(&mut out, &[4], &[n as i64], &mask, &[1], &source, threads).unwrap();
            assert_eq!(out, want);
        }
        // Broadcast mask (stride 0 along the outer dim), strided output (transposed 2x3).
        let mut out = [0f32; 6];
        masked(&mut out, &[8, 4], &[3, 2], &[true, false, true], &[1, 0], &[1.0, 2.0, 3.0, 4.0], 1).unwrap();
        // iteration order: (c0,r0) (c1,r0) (c2,r0) (c0,r1) ...; view[r][c] = out[2c + r]
        assert_eq!(out, [1.0, 3.0, 0.0, 0.0, 2.0, 4.0]);
        let mut out = [0f32; 3];
        let e = masked(&mut out, &[4], &[3], &[true, true, true], &[1], &[1.0, 2.0], 1).unwrap_err();
        assert_eq!(e.to_string(), "Number of elements of source < number of ones in mask");
        assert_eq!(out, [0.0; 3]);
    }
}
