//! Cumulative operations along one dimension of a strided tensor (PyTorch's
//! `cumsum`, `cumprod`, `cummax` and `cummin` CPU kernels).
//!
//! A *line* is the 1-d slice along the scanned dimension `dim` at one
//! position of every other dimension; lines are independent, so they are
//! split over rayon tasks when there are enough elements
//! ([`GRAIN`](crate::engine::iter::GRAIN) per task, at most `threads` tasks).
//! Within a line elements are staged in blocks of [`BLOCK`] elements, so a
//! block is read before any of it is written: in-place calls (output equal to
//! the input, element for element) are sound.
//!
//! Numerics follow CPU PyTorch:
//! - `cumsum`/`cumprod` first convert the input to the output's dtype (the
//!   `self.to(result.scalar_type())` of `impl_func_cum_ops`), then accumulate
//!   in `at::acc_type<out, /*is_cuda=*/false>`: double for float32/float64,
//!   float for float16/bfloat16, int64 (wrapping) for integers and bool, and
//!   round every running value to the output dtype;
//! - `cummax`/`cummin` compare in the input's own type (exact for every
//!   integer including uint64), ties take the later index and NaN sticks
//!   (`cummax_cummin_helper`).

use crate::dtype::{DType, Element};
use crate::engine::iter::{load, store, tasks_for, try_for_each_range, BLOCK};
use crate::engine::math::Num;
use crate::error::{Error, Result};
use crate::with_real_dtype;

/// Which cumulative operation [`scan`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOp {
    CumSum,
    CumProd,
    CumMax,
    CumMin,
}

impl ScanOp {
    /// PyTorch's name for the op (used in error messages).
    pub fn name(self) -> &'static str {
        match self {
            ScanOp::CumSum => "cumsum",
            ScanOp::CumProd => "cumprod",
            ScanOp::CumMax => "cummax",
            ScanOp::CumMin => "cummin",
        }
    }
}

/// The CPU accumulation type of an output dtype (`at::acc_type<T, false>`).
trait ScanAcc: Element {
    type Acc: Num;
}
macro_rules! scan_acc {
    ($($t:ty => $a:ty),*) => {$( impl ScanAcc for $t { type Acc = $a; } )*};
}
scan_acc!(u8 => i64, i8 => i64, i16 => i64, i32 => i64, i64 => i64, u16 => i64, u32 => i64, u64 => i64,
    bool => i64, half::f16 => f32, half::bf16 => f32, f32 => f64, f64 => f64);

/// The lines of a scan: every dimension but the scanned one, with the byte
/// strides of (input, output, indices) along each.
struct Lines {
    /// `(extent, [input, output, indices] byte strides)`, in dimension order.
    outer: Vec<(usize, [isize; 3])>,
    /// Number of lines (product of the outer extents).
    count: usize,
}

impl Lines {
    /// Byte offsets of line `l`'s first element (last dimension fastest).
    #[inline]
    fn offsets(&self, mut l: usize) -> [isize; 3] {
        let mut o = [0isize; 3];
        for &(ext, s) in self.outer.iter().rev() {
            let i = (l % ext) as isize;
            l /= ext;
            for (off, st) in o.iter_mut().zip(s) {
                *off += i * st;
            }
        }
        o
    }
}

fn check_real(op: &'static str, dtype: DType) -> Result<()> {
    match dtype {
        DType::C32 | DType::C64 | DType::C128 => Err(Error::UnsupportedDtype { op, dtype }),
        _ => Ok(()),
    }
}

/// A strided operand of [`scan`]: its dtype, first element and element
/// strides (one per dimension of the shape).
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub dtype: DType,
    pub ptr: *mut u8,
    pub strides: &'a [isize],
}

/// Cumulative `op` of `input` along dimension `dim`, written to `out` (and,
/// for `CumMax`/`CumMin`, the index of each running extreme to `indices`).
///
/// Shapes: `shape` is shared by the input and every output; strides are in
/// elements of each operand's own dtype (0 = broadcast, negative allowed),
/// one per dimension; `dim < shape.len()` (a 0-dim tensor is passed as shape
/// `[1]`). `indices` is an int64 tensor with its own strides.
///
/// Dtypes: any real dtype for input and output. For `CumSum`/`CumProd` the
/// output dtype may differ from the input's (e.g. int8 -> int64): the input is
/// converted to the output dtype first, then accumulated in the output's CPU
/// accumulation type (double for float32/float64, float for
/// float16/bfloat16, int64 for integers and bool). For `CumMax`/`CumMin` the
/// values are compared in the input dtype and converted to `out_dtype` (PyTorch
/// makes them equal).
///
/// A tensor with a zero extent returns `Ok` without touching memory.
///
/// Errors: [`Error::InvalidLayout`] when a stride array's length differs from
/// `shape.len()`, `dim` is out of range, or `indices` is missing for
/// `CumMax`/`CumMin`; [`Error::UnsupportedDtype`] (naming the op) for a
/// complex input or output.
///
/// # Safety
/// For every index in `shape`, the addressed element of `input` must be
/// readable as `input.dtype`, those of `out` writable as `out.dtype` and those
/// of `indices` writable as i64, for the duration of the call. Outputs must
/// not overlap each other, and may overlap the input only element for element
/// (same address for the same index).
pub unsafe fn scan(
    op: ScanOp,
    shape: &[usize],
    dim: usize,
    input: View,
    out: View,
    indices: Option<(*mut i64, &[isize])>,
    threads: usize,
) -> Result<()> {
    let (
        View { dtype: in_dtype, ptr: input, strides: in_strides },
        View { dtype: out_dtype, ptr: out, strides: out_strides },
    ) = (input, out);
    let name = op.name();
    let nd = shape.len();
    let layout = |reason: String| Err(Error::InvalidLayout { op: name, reason });
    if dim >= nd {
        return layout(format!("dimension {dim} out of range for {nd} dimensions"));
    }
    if in_strides.len() != nd || out_strides.len() != nd {
        return layout(format!(
            "{} input and {} output strides for {nd} dimensions",
            in_strides.len(),
            out_strides.len()
        ));
    }
    let extremum = matches!(op, ScanOp::CumMax | ScanOp::CumMin);
    let (idx_ptr, idx_strides): (*mut i64, &[isize]) = match indices {
        Some((p, s)) => {
            if s.len() != nd {
                return layout(format!("{} index strides for {nd} dimensions", s.len()));
            }
            (p, s)
        }
        None if extremum => return layout("an int64 indices output is required".into()),
        None => (std::ptr::null_mut(), &[]),
    };
    check_real(name, in_dtype)?;
    check_real(name, out_dtype)?;
    if shape.contains(&0) {
        return Ok(());
    }

    let (isz, osz, xsz) = (in_dtype.size() as isize, out_dtype.size() as isize, 8isize);
    let idx_stride = |d: usize| if idx_ptr.is_null() { 0 } else { idx_strides[d] * xsz };
    let mut outer = Vec::with_capacity(nd - 1);
    for d in (0..nd).filter(|&d| d != dim) {
        if shape[d] > 1 {
            outer.push((shape[d], [in_strides[d] * isz, out_strides[d] * osz, idx_stride(d)]));
        }
    }
    let lines = Lines { count: outer.iter().map(|o| o.0).product(), outer };
    let line = Line {
        n: shape[dim],
        input: input as usize,
        in_dtype,
        in_stride: in_strides[dim] * isz,
        out: out as usize,
        out_dtype,
        out_stride: out_strides[dim] * osz,
        idx: idx_ptr as usize,
        idx_stride: idx_stride(dim),
    };

    match op {
        ScanOp::CumSum | ScanOp::CumProd => {
            let prod = op == ScanOp::CumProd;
            with_real_dtype!(out_dtype, name, |O| {
                try_for_each_range(lines.count, tasks_for(lines.count, line.n, threads), |start, end| {
                    // SAFETY: caller contract; ranges are disjoint lines.
                    unsafe { sum_prod::<O>(prod, &line, &lines, start, end) }
                })
            })
        }
        ScanOp::CumMax | ScanOp::CumMin => {
            let max = op == ScanOp::CumMax;
            with_real_dtype!(in_dtype, name, |T| {
                try_for_each_range(lines.count, tasks_for(lines.count, line.n, threads), |start, end| {
                    // SAFETY: caller contract; ranges are disjoint lines.
                    unsafe { extremum_lines::<T>(max, &line, &lines, start, end) }
                })
            })
        }
    }
}

/// What every line shares: its length, and each operand's base address,
/// dtype and byte stride along the scanned dimension (addresses as `usize`
/// so the description can cross threads).
struct Line {
    n: usize,
    input: usize,
    in_dtype: DType,
    in_stride: isize,
    out: usize,
    out_dtype: DType,
    out_stride: isize,
    idx: usize,
    idx_stride: isize,
}

/// `cumsum`/`cumprod` of lines `start..end`, output element type `O`.
///
/// # Safety
/// As [`scan`]; `out_dtype` is `O`'s dtype.
unsafe fn sum_prod<O: ScanAcc>(prod: bool, line: &Line, lines: &Lines, start: usize, end: usize) -> Result<()> {
    let n = line.n;
    let mut buf = vec![O::from_i64(0); n.min(BLOCK)];
    for l in start..end {
        let o = lines.offsets(l);
        let mut acc = if prod { O::Acc::ONE } else { O::Acc::ZERO };
        let mut i = 0;
        while i < n {
            let m = (n - i).min(BLOCK);
            // SAFETY: caller contract: elements i..i+m of this line are readable.
            unsafe {
                let src = (line.input as *const u8).offset(o[0] + i as isize * line.in_stride);
                load::<O>(line.in_dtype, src, line.in_stride, m, &mut buf)?;
            }
            for v in &mut buf[..m] {
                let x: O::Acc = v.cast();
                acc = if prod { acc.mul(x) } else { acc.add(x) };
                *v = acc.cast();
            }
            // SAFETY: caller contract: elements i..i+m of this output line are writable as O.
            unsafe {
                let dst = (line.out as *mut u8).offset(o[1] + i as isize * line.out_stride);
                for (j, &v) in buf[..m].iter().enumerate() {
                    (dst.offset(j as isize * line.out_stride) as *mut O).write_unaligned(v);
                }
            }
            i += m;
        }
    }
    Ok(())
}

/// `cummax`/`cummin` of lines `start..end`, input element type `T`.
///
/// # Safety
/// As [`scan`]; `in_dtype` is `T`'s dtype and `line.idx` is non-null.
unsafe fn extremum_lines<T: Element + PartialOrd>(
    max: bool,
    line: &Line,
    lines: &Lines,
    start: usize,
    end: usize,
) -> Result<()> {
    #[inline(always)]
    fn is_nan<T: PartialOrd>(x: T) -> bool {
        x.partial_cmp(&x).is_none()
    }
    let n = line.n;
    let mut vals = Vec::with_capacity(n.min(BLOCK));
    for l in start..end {
        let o = lines.offsets(l);
        let src = (line.input as *const u8).wrapping_offset(o[0]);
        // SAFETY: caller contract: the line's first element is readable (n > 0).
        let mut best = unsafe { (src as *const T).read_unaligned() };
        let mut at = 0i64;
        let mut i = 0;
        while i < n {
            let m = (n - i).min(BLOCK);
            vals.clear();
            for j in i..i + m {
                // SAFETY: caller contract: element j of this line is readable as T.
                let c = unsafe { (src.offset(j as isize * line.in_stride) as *const T).read_unaligned() };
                let wins = if max { c >= best } else { c <= best };
                if is_nan(c) || (!is_nan(best) && wins) {
                    best = c;
                    at = j as i64;
                }
                vals.push(best);
                // SAFETY: caller contract: element j of the index line is writable as i64.
                unsafe {
                    ((line.idx as *mut u8).offset(o[2] + j as isize * line.idx_stride) as *mut i64).write_unaligned(at)
                };
            }
            // SAFETY: caller contract: elements i..i+m of the value line are writable as out_dtype.
            unsafe {
                let dst = (line.out as *mut u8).offset(o[1] + i as isize * line.out_stride);
                store::<T>(line.out_dtype, dst, line.out_stride, &vals)?;
            }
            i += m;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Element offsets (row-major index order) of every element of `shape` with `strides`.
    fn offsets(shape: &[usize], strides: &[isize]) -> Vec<isize> {
        let numel: usize = shape.iter().product();
        (0..numel)
            .map(|mut l| {
                let mut o = 0;
                for d in (0..shape.len()).rev() {
                    o += (l % shape[d]) as isize * strides[d];
                    l /= shape[d];
                }
                o
            })
            .collect()
    }

    fn contiguous(shape: &[usize]) -> Vec<isize> {
        let mut s = vec![1isize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * shape[d + 1] as isize;
        }
        s
    }

    /// Reference: `f(line values) -> outputs` applied to each line of a
    /// logical tensor `x` (row-major, contiguous) along `dim`.
    fn per_line<X: Copy, Y: Copy + Default>(
        shape: &[usize],
        dim: usize,
        x: &[X],
        f: impl Fn(&[X]) -> Vec<Y>,
    ) -> Vec<Y> {
        let cs = contiguous(shape);
        let step = cs[dim] as usize;
        let mut y = vec![Y::default(); x.len()];
        for l in 0..x.len() {
            if !(l / step).is_multiple_of(shape[dim]) {
                continue; // not a line start
            }
            let pos: Vec<usize> = (0..shape[dim]).map(|i| l + i * step).collect();
            let line: Vec<X> = pos.iter().map(|&p| x[p]).collect();
            for (&p, v) in pos.iter().zip(f(&line)) {
                y[p] = v;
            }
        }
        y
    }

    /// Runs `scan` on logical tensor `x` laid out with `in_strides` (in a
    /// buffer large enough), writing a contiguous output of `O`.
    fn run<I: Element + Default, O: Element + Default>(
        op: ScanOp,
        shape: &[usize],
        dim: usize,
        x: &[I],
        in_strides: &[isize],
        threads: usize,
    ) -> (Vec<O>, Vec<i64>) {
        let cs = contiguous(shape);
        let lin = offsets(shape, &cs);
        let phys = offsets(shape, in_strides);
        let size = phys.iter().map(|&o| o as usize + 1).max().unwrap_or(0);
        let mut buf = vec![I::default(); size];
        for (l, &p) in lin.iter().zip(&phys) {
            buf[p as usize] = x[*l as usize];
        }
        let mut out = vec![O::default(); x.len()];
        let mut idx = vec![-1i64; x.len()];
        let with_idx = matches!(op, ScanOp::CumMax | ScanOp::CumMin);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            scan(
                op,
                shape,
                dim,
                View { dtype: I::DTYPE, ptr: buf.as_ptr() as *mut u8, strides: in_strides },
                View { dtype: O::DTYPE, ptr: out.as_mut_ptr() as *mut u8, strides: &cs },
                if with_idx { Some((idx.as_mut_ptr(), &cs[..])) } else { None },
                threads,
            )
        }
        .unwrap();
        (out, idx)
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }

    fn cumsum_ref(line: &[f64]) -> Vec<f64> {
        let mut acc = 0.0;
        line.iter()
            .map(|&v| {
                acc += v;
                acc
            })
            .collect()
    }

    /// PyTorch's cummax/cummin rule, in f64.
    fn cumext_ref(max: bool, line: &[f64]) -> Vec<(f64, i64)> {
        let (mut out, mut idx) = (line[0], 0i64);
        line.iter()
            .enumerate()
            .map(|(i, &c)| {
                if c.is_nan() || (!out.is_nan() && if max { c >= out } else { c <= out }) {
                    out = c;
                    idx = i as i64;
                }
                (out, idx)
            })
            .collect()
    }

    #[test]
    fn cumsum_f32_every_dim_and_layout() {
        let shape = [3usize, 4, 5];
        let mut seed = 1;
        let x: Vec<f32> = (0..60).map(|_| (lcg(&mut seed) % 1000) as f32 / 7.0 - 50.0).collect();
        let cs = contiguous(&shape);
        // Contiguous, a permuted (transposed) layout, and one with gaps.
        let layouts: [Vec<isize>; 3] = [cs.clone(), vec![1, 3, 12], vec![40, 2, 8]];
        for dim in 0..3 {
            let want = per_line(&shape, dim, &x, |l| {
                cumsum_ref(&l.iter().map(|&v| v as f64).collect::<Vec<_>>()).into_iter().map(|v| v as f32).collect()
            });
            for st in &layouts {
                for threads in [1, 4] {
                    let (got, _) = run::<f32, f32>(ScanOp::CumSum, &shape, dim, &x, st, threads);
                    assert_eq!(got, want, "dim {dim} strides {st:?}");
                }
            }
        }
    }

    #[test]
    fn cumprod_and_dtype_conversions() {
        // int8 -> int64 cumsum, and cumprod in int64 with wrapping.
        let x: Vec<i8> = vec![100, 100, -7, 3, 120, 1];
        let (got, _) = run::<i8, i64>(ScanOp::CumSum, &[6], 0, &x, &[1], 1);
        assert_eq!(got, vec![100, 200, 193, 196, 316, 317]);
        // uint8 output wraps per element (accumulated in int64).
        let x: Vec<u8> = vec![200, 100, 10];
        let (got, _) = run::<u8, u8>(ScanOp::CumSum, &[3], 0, &x, &[1], 1);
        assert_eq!(got, vec![200, 44, 54]);
        let x: Vec<i64> = vec![3, -2, 5, 1 << 40, 1 << 40];
        let (got, _) = run::<i64, i64>(ScanOp::CumProd, &[5], 0, &x, &[1], 1);
        let mut acc = 1i64;
        let want: Vec<i64> = x
            .iter()
            .map(|&v| {
                acc = acc.wrapping_mul(v);
                acc
            })
            .collect();
        assert_eq!(got, want);
        // Float input to an int64 output truncates each element first.
        let x: Vec<f32> = vec![1.7, 1.7, -0.5, 2.9];
        let (got, _) = run::<f32, i64>(ScanOp::CumSum, &[4], 0, &x, &[1], 1);
        assert_eq!(got, vec![1, 2, 2, 4]);
        // bool -> int64 cumsum counts; bool -> bool cumprod is a running `and`.
        let x = vec![true, false, true, true];
        let (got, _) = run::<bool, i64>(ScanOp::CumSum, &[4], 0, &x, &[1], 1);
        assert_eq!(got, vec![1, 1, 2, 3]);
        let (got, _) = run::<bool, bool>(ScanOp::CumProd, &[4], 0, &x, &[1], 1);
        assert_eq!(got, vec![true, false, false, false]);
        // float32 accumulates in double: 1e8 + 1 + 1 ... is exact before each rounding to float.
        let x: Vec<f32> = std::iter::once(1e8).chain(std::iter::repeat_n(1.0, 12)).collect();
        let (got, _) = run::<f32, f32>(ScanOp::CumSum, &[13], 0, &x, &[1], 1);
        let want: Vec<f32> = (0..13).map(|i| (1e8 + i as f64) as f32).collect();
        assert_eq!(got, want);
        assert_eq!(got[12], 100_000_016.0);
        // float16 accumulates in float and rounds each running value.
        let x: Vec<f16> = [2048.0f32, 1.0, 1.0, 1.0, 0.25].map(f16::from_f32).to_vec();
        let (got, _) = run::<f16, f16>(ScanOp::CumSum, &[5], 0, &x, &[1], 1);
        let want: Vec<f16> = [2048.0f32, 2049.0, 2050.0, 2051.0, 2051.25].map(f16::from_f32).to_vec();
        assert_eq!(got, want);
        let x: Vec<bf16> = [1.5f32, 2.0, -0.75].map(bf16::from_f32).to_vec();
        let (got, _) = run::<bf16, f32>(ScanOp::CumProd, &[3], 0, &x, &[1], 1);
        assert_eq!(got, vec![1.5, 3.0, -2.25]);
        // NaN propagates through cumsum.
        let x = vec![1.0f64, f64::NAN, 2.0];
        let (got, _) = run::<f64, f64>(ScanOp::CumSum, &[3], 0, &x, &[1], 1);
        assert!(got[0] == 1.0 && got[1].is_nan() && got[2].is_nan());
    }

    #[test]
    fn broadcast_input() {
        // Input broadcast along the scanned dim (stride 0) and along the other dim.
        let shape = [3usize, 4];
        let x: Vec<f64> = (0..12).map(|i| [1.5, -2.0, 4.0][i / 4]).collect(); // x[i][j] = v[i]
        let want = per_line(&shape, 1, &x, cumsum_ref);
        let (got, _) = run::<f64, f64>(ScanOp::CumSum, &shape, 1, &x, &[1, 0], 1);
        assert_eq!(got, want);
        let x: Vec<i64> = (0..12).map(|i| [5, -1, 3, 2][i % 4]).collect(); // x[i][j] = v[j]
        let (got, idx) = run::<i64, i64>(ScanOp::CumMax, &shape, 0, &x, &[0, 1], 1);
        assert_eq!(got, x);
        assert_eq!(idx, vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]); // ties take the later index
    }

    #[test]
    fn cummax_cummin_rules() {
        let n = f64::NAN;
        let lines: [&[f64]; 5] = [
            &[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, -1.0],
            &[n, 1.0, 2.0, n, 0.5],
            &[2.0, n, 7.0, -7.0],
            &[-0.0, 0.0, -0.0, 1.0],
            &[4.0, 4.0, 4.0],
        ];
        for line in lines {
            let len = line.len();
            for (op, max) in [(ScanOp::CumMax, true), (ScanOp::CumMin, false)] {
                let want = cumext_ref(max, line);
                let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
                let x32: Vec<f32> = line.iter().map(|&v| v as f32).collect();
                let (v, i) = run::<f32, f32>(op, &[len], 0, &x32, &[1], 1);
                for k in 0..len {
                    assert!(same(v[k] as f64, want[k].0) && i[k] == want[k].1, "{op:?} {line:?} at {k}");
                }
                let xh: Vec<f16> = line.iter().map(|&v| f16::from_f64(v)).collect();
                let (v, i) = run::<f16, f16>(op, &[len], 0, &xh, &[1], 1);
                for k in 0..len {
                    assert!(same(v[k].to_f64(), want[k].0) && i[k] == want[k].1, "{op:?} f16 {line:?} at {k}");
                }
            }
        }
        // Integers compare exactly (2^60 + 1 and 2^60 are equal as doubles).
        let big = 1i64 << 60;
        let (v, i) = run::<i64, i64>(ScanOp::CumMax, &[3], 0, &[big + 1, big, big + 1], &[1], 1);
        assert_eq!((v, i), (vec![big + 1, big + 1, big + 1], vec![0, 0, 2]));
        let (v, i) = run::<u64, u64>(ScanOp::CumMin, &[3], 0, &[u64::MAX, u64::MAX - 1, 1 << 63], &[1], 1);
        assert_eq!((v, i), (vec![u64::MAX, u64::MAX - 1, 1 << 63], vec![0, 1, 2]));
        let (v, i) = run::<u8, u8>(ScanOp::CumMin, &[4], 0, &[9, 200, 3, 3], &[1], 1);
        assert_eq!((v, i), (vec![9, 9, 3, 3], vec![0, 0, 2, 3]));
        let (v, i) = run::<bool, bool>(ScanOp::CumMax, &[4], 0, &[false, true, false, true], &[1], 1);
        assert_eq!((v, i), (vec![false, true, true, true], vec![0, 1, 1, 3]));
    }

    #[test]
    fn cummax_random_strided_parallel() {
        let shape = [7usize, 300, 40];
        let numel = 7 * 300 * 40;
        let mut seed = 7;
        let x: Vec<f32> = (0..numel)
            .map(|_| match lcg(&mut seed) % 50 {
                0 => f32::NAN,
                r => (r % 9) as f32 - 4.0,
            })
            .collect();
        let transposed = vec![300 * 40 / 40, 1, 7 * 300]; // dim 2 slowest in memory
        for dim in 0..3 {
            for (op, max) in [(ScanOp::CumMax, true), (ScanOp::CumMin, false)] {
                let want =
                    per_line(&shape, dim, &x, |l| cumext_ref(max, &l.iter().map(|&v| v as f64).collect::<Vec<_>>()));
                for st in [contiguous(&shape), transposed.clone()] {
                    for threads in [1, 8] {
                        let (v, i) = run::<f32, f32>(op, &shape, dim, &x, &st, threads);
                        for k in 0..numel {
                            let (wv, wi) = want[k];
                            assert!((wv.is_nan() && v[k].is_nan()) || wv == v[k] as f64, "{op:?} dim {dim} at {k}");
                            assert_eq!(i[k], wi, "{op:?} dim {dim} at {k}");
                        }
                    }
                }
            }
        }
        // Long lines cross block boundaries.
        let x: Vec<i64> = (0..3 * BLOCK as i64 + 5).map(|i| (i * 7919) % 1013).collect();
        let (v, i) = run::<i64, i64>(ScanOp::CumMax, &[x.len()], 0, &x, &[1], 1);
        let want = cumext_ref(true, &x.iter().map(|&v| v as f64).collect::<Vec<_>>());
        assert!(want.iter().zip(v.iter().zip(&i)).all(|(w, (&a, &b))| w.0 == a as f64 && w.1 == b));
        let (s, _) = run::<i64, i64>(ScanOp::CumSum, &[x.len()], 0, &x, &[1], 4);
        let mut acc = 0;
        assert!(x.iter().zip(&s).all(|(&a, &b)| {
            acc += a;
            acc == b
        }));
    }

    #[test]
    fn in_place_cumsum() {
        let mut x: Vec<f64> = (0..2 * BLOCK + 3).map(|i| i as f64).collect();
        let n = x.len();
        let p = x.as_mut_ptr() as *mut u8;
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            scan(
                ScanOp::CumSum,
                &[n],
                0,
                View { dtype: DType::F64, ptr: p, strides: &[1] },
                View { dtype: DType::F64, ptr: p, strides: &[1] },
                None,
                1,
            )
        }
        .unwrap();
        assert!(x.iter().enumerate().all(|(i, &v)| v == (i * (i + 1) / 2) as f64));
    }

    #[test]
    fn empty_zero_dim_and_errors() {
        // Zero extent: nothing is touched (null pointers).
        let null = std::ptr::null_mut::<u8>();
        for op in [ScanOp::CumSum, ScanOp::CumMax] {
            let idx = Some((std::ptr::null_mut::<i64>(), &[1isize, 1][..]));
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                scan(
                    op,
                    &[0, 3],
                    1,
                    View { dtype: DType::F32, ptr: null, strides: &[3, 1] },
                    View { dtype: DType::F32, ptr: null, strides: &[3, 1] },
                    idx,
                    4,
                )
            }
            .unwrap();
        }
        // 0-dim as shape [1].
        let (v, _) = run::<f32, f64>(ScanOp::CumProd, &[1], 0, &[2.5], &[0], 1);
        assert_eq!(v, vec![2.5]);
        let (v, i) = run::<i32, i32>(ScanOp::CumMin, &[1], 0, &[-3], &[1], 1);
        assert_eq!((v, i), (vec![-3], vec![0]));
        let mut b = [0u8; 64];
        let p = b.as_mut_ptr();
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            scan(
                ScanOp::CumSum,
                &[2],
                0,
                View { dtype: DType::C64, ptr: p, strides: &[1] },
                View { dtype: DType::C64, ptr: p, strides: &[1] },
                None,
                1,
            )
        };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "cumsum", dtype: DType::C64 }));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            scan(
                ScanOp::CumProd,
                &[2],
                0,
                View { dtype: DType::F32, ptr: p, strides: &[1] },
                View { dtype: DType::C128, ptr: p, strides: &[1] },
                None,
                1,
            )
        };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "cumprod", dtype: DType::C128 }));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            scan(
                ScanOp::CumMax,
                &[2],
                0,
                View { dtype: DType::F32, ptr: p, strides: &[1] },
                View { dtype: DType::F32, ptr: p, strides: &[1] },
                None,
                1,
            )
        };
        assert!(matches!(e, Err(Error::InvalidLayout { op: "cummax", .. })));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            scan(
                ScanOp::CumSum,
                &[2],
                1,
                View { dtype: DType::F32, ptr: p, strides: &[1] },
                View { dtype: DType::F32, ptr: p, strides: &[1] },
                None,
                1,
            )
        };
        assert!(matches!(e, Err(Error::InvalidLayout { .. })));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            scan(
                ScanOp::CumSum,
                &[2, 2],
                1,
                View { dtype: DType::F32, ptr: p, strides: &[1] },
                View { dtype: DType::F32, ptr: p, strides: &[2, 1] },
                None,
                1,
            )
        };
        assert!(matches!(e, Err(Error::InvalidLayout { .. })));
    }
}
