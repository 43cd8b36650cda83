//! The three discrete Fourier transforms every `torch.fft` function reduces to
//! (PyTorch's `_fft_c2c`, `_fft_r2c`, `_fft_c2r`), over strided operands.
//!
//! A transform over several dimensions is one pass per dimension: each pass
//! transforms every 1-d line along its dimension (gathered into a contiguous
//! buffer, transformed by a cached rustfft plan, scattered back), the lines
//! split over the thread team. The first pass reads the input and writes the
//! output; later passes work on the output in place, each line reading and
//! writing only its own elements. The normalization scale is applied by the
//! last pass, so every element is scaled exactly once.
//!
//! - `c2c`: complex in, complex out of the same sizes.
//! - `r2c`: real in; the last transformed dimension first (a full complex
//!   transform of the real line, keeping `n / 2 + 1` values when one-sided, all
//!   `n` otherwise, so the two-sided result needs no Hermitian fill), then
//!   complex passes over the other dimensions.
//! - `c2r`: complex in, real out; backward complex passes over all but the last
//!   transformed dimension (into a temporary of the input's half sizes), then a
//!   Hermitian complex-to-real transform of the last: the first `n / 2 + 1`
//!   inputs along it are extended by `X[n - k] = conj(X[k])`, so the imaginary
//!   parts of the zero-frequency and (even `n`) Nyquist values do not matter,
//!   as in MKL and pocketfft.
//!
//! Directions and scales follow PyTorch: forward is `e^{-2 pi i jk/n}`, backward
//! `e^{+2 pi i jk/n}`, both unscaled unless `Norm` asks (`fft_norm_mode`:
//! 1/sqrt(N) or 1/N with N the product of the transformed sizes of the
//! full signal: the input's for `r2c`, the output's for `c2r`).
//!
//! Arithmetic is in the dtype's precision (f32 for complex64), as on CPU.

use rustfft::num_complex::Complex;
use rustfft::num_traits::Zero;

use super::plan::{plan, Precision};
use crate::dtype::DType;
use crate::engine::iter::{for_each_range, thread_tasks};
use crate::engine::ptr::SendPtr;
use crate::error::{Error, Result};

/// PyTorch's `fft_norm_mode`: how a transform is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// Unscaled (code 0).
    None,
    /// By `1 / sqrt(N)` (code 1).
    ByRootN,
    /// By `1 / N` (code 2).
    ByN,
}

impl Norm {
    /// The mode of PyTorch's code; any other code is an [`Error::InvalidValue`].
    pub fn from_code(op: &'static str, code: i64) -> Result<Norm> {
        match code {
            0 => Ok(Norm::None),
            1 => Ok(Norm::ByRootN),
            2 => Ok(Norm::ByN),
            _ => Err(Error::InvalidValue { op, reason: format!("{op}: unknown normalization mode {code}") }),
        }
    }

    /// The factor for a signal of `n` elements.
    fn scale(self, n: usize) -> f64 {
        match self {
            Norm::None => 1.0,
            Norm::ByRootN => 1.0 / (n as f64).sqrt(),
            Norm::ByN => 1.0 / n as f64,
        }
    }
}

/// Refuses `dims` unless they are distinct dimensions of an `ndim`-d tensor,
/// at least one, and the stride arrays match the sizes.
fn check(op: &'static str, sizes: &[usize], strides: [&[isize]; 2], dims: &[usize]) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidLayout { op, reason });
    if strides.iter().any(|s| s.len() != sizes.len()) {
        return invalid(format!("{} sizes but strides of lengths {:?}", sizes.len(), strides.map(|s| s.len())));
    }
    if dims.is_empty() {
        return invalid("no dimension to transform".into());
    }
    for (i, &d) in dims.iter().enumerate() {
        if d >= sizes.len() || dims[..i].contains(&d) {
            return invalid(format!("dimensions {dims:?} of a {}-d tensor", sizes.len()));
        }
    }
    Ok(())
}

/// Product of the `dims` extents of `sizes`.
fn signal_numel(sizes: &[usize], dims: &[usize]) -> usize {
    dims.iter().map(|&d| sizes[d]).product()
}

/// Runs `line(state, a, b)` once per 1-d line along `dim` of a tensor of
/// `sizes`, with `a` and `b` the element offsets of the line's first element
/// in two operands of strides `sa` and `sb`. The lines are split over the
/// thread team in contiguous runs; each task makes its `state` (buffers) once.
/// Lines are visited with the batch dimensions ordered by `sb`, largest
/// stride outermost, so consecutive lines write nearby memory.
fn for_each_line<S>(
    sizes: &[usize],
    dim: usize,
    sa: &[isize],
    sb: &[isize],
    threads: usize,
    state: impl Fn() -> S + Sync,
    line: impl Fn(&mut S, isize, isize) + Sync,
) {
    let mut batch: Vec<(usize, isize, isize)> =
        (0..sizes.len()).filter(|&d| d != dim).map(|d| (sizes[d], sa[d], sb[d])).collect();
    batch.sort_by_key(|&(_, _, b)| std::cmp::Reverse(b.unsigned_abs()));
    let count: usize = batch.iter().map(|b| b.0).product();
    if count == 0 || sizes[dim] == 0 {
        return;
    }
    // A line costs about n log n; `n` is the unit the task count needs.
    let tasks = thread_tasks(count, sizes[dim].max(16), threads);
    for_each_range(count, tasks, |start, end| {
        if start >= end {
            return;
        }
        let mut s = state();
        // The multi-index of line `start` (last batch dimension fastest) and its offsets.
        let mut index = vec![0usize; batch.len()];
        let (mut a, mut b) = (0isize, 0isize);
        let mut rest = start;
        for (k, &(size, da, db)) in batch.iter().enumerate().rev() {
            index[k] = rest % size;
            rest /= size;
            a += index[k] as isize * da;
            b += index[k] as isize * db;
        }
        for _ in start..end {
            line(&mut s, a, b);
            for (k, &(size, da, db)) in batch.iter().enumerate().rev() {
                index[k] += 1;
                a += da;
                b += db;
                if index[k] < size {
                    break;
                }
                index[k] = 0;
                a -= size as isize * da;
                b -= size as isize * db;
            }
        }
    });
}

/// A task's buffers: one line and the plan's scratch.
fn buffers<T: Precision>(n: usize, scratch: usize) -> (Vec<Complex<T>>, Vec<Complex<T>>) {
    (vec![Complex::zero(); n], vec![Complex::zero(); scratch])
}

/// One complex pass along `dim` of a tensor of `sizes`: every line read from
/// `src`, transformed (`forward` or backward), multiplied by `scale` and
/// written to `dst`.
///
/// # Safety
/// `src` and `dst` address every element of `sizes` at their strides; `dst`'s
/// elements are distinct, and `src` overlaps `dst` only by being the same
/// operand (same address and strides), so a line reads only what it writes.
#[allow(clippy::too_many_arguments)]
unsafe fn c2c_pass<T: Precision>(
    sizes: &[usize],
    dim: usize,
    src: *const Complex<T>,
    src_strides: &[isize],
    dst: *mut Complex<T>,
    dst_strides: &[isize],
    forward: bool,
    scale: T,
    threads: usize,
) {
    let n = sizes[dim];
    let fft = plan::<T>(n, forward);
    let (ss, ds) = (src_strides[dim], dst_strides[dim]);
    let (src, dst) = (SendPtr::from_const(src), SendPtr::new(dst));
    let scaled = scale != T::one();
    for_each_line(
        sizes,
        dim,
        src_strides,
        dst_strides,
        threads,
        || buffers::<T>(n, fft.get_inplace_scratch_len()),
        |(buf, scratch), a, b| {
            for (k, v) in buf.iter_mut().enumerate() {
                // SAFETY: element k of the line at offset `a` (the function's contract).
                *v = unsafe { *src.get().offset(a + k as isize * ss) };
            }
            fft.process_with_scratch(buf, scratch);
            for (k, v) in buf.iter().enumerate() {
                let v = if scaled { v * scale } else { *v };
                // SAFETY: element k of this task's own line in `dst` (the function's contract).
                unsafe { *dst.get().offset(b + k as isize * ds) = v };
            }
        },
    );
}

/// Complex-to-complex transform over `dims` (PyTorch's `_fft_c2c`): `input` and
/// `output` are complex64 or complex128 (`dtype`) of the same `sizes`.
///
/// Errors: [`Error::UnsupportedDtype`] for other dtypes; [`Error::InvalidLayout`]
/// for no, repeated or out-of-range `dims` or stride arrays of the wrong length.
///
/// # Safety
/// `input` and `output` address every element of `sizes` at their strides
/// (elements); `output`'s elements are distinct and overlap no input element.
#[allow(clippy::too_many_arguments)]
pub unsafe fn c2c(
    dtype: DType,
    sizes: &[usize],
    input: *const u8,
    in_strides: &[isize],
    output: *mut u8,
    out_strides: &[isize],
    dims: &[usize],
    norm: Norm,
    forward: bool,
    threads: usize,
) -> Result<()> {
    const OP: &str = "_fft_c2c";
    check(OP, sizes, [in_strides, out_strides], dims)?;
    match dtype {
        // SAFETY: forwarded contract.
        DType::C64 => unsafe {
            c2c_in::<f32>(sizes, input.cast(), in_strides, output.cast(), out_strides, dims, norm, forward, threads)
        },
        // SAFETY: forwarded contract.
        DType::C128 => unsafe {
            c2c_in::<f64>(sizes, input.cast(), in_strides, output.cast(), out_strides, dims, norm, forward, threads)
        },
        dtype => return Err(Error::UnsupportedDtype { op: OP, dtype }),
    }
    Ok(())
}

/// [`c2c`] in precision `T`.
///
/// # Safety
/// As for [`c2c`].
#[allow(clippy::too_many_arguments)]
unsafe fn c2c_in<T: Precision>(
    sizes: &[usize],
    input: *const Complex<T>,
    in_strides: &[isize],
    output: *mut Complex<T>,
    out_strides: &[isize],
    dims: &[usize],
    norm: Norm,
    forward: bool,
    threads: usize,
) {
    if sizes.contains(&0) {
        return;
    }
    let scale = T::from_f64(norm.scale(signal_numel(sizes, dims))).unwrap_or_else(T::one);
    for (i, &d) in dims.iter().enumerate() {
        let last = i + 1 == dims.len();
        let s = if last { scale } else { T::one() };
        // The first pass reads the input; later ones transform the output in place.
        let (src, src_strides) = if i == 0 { (input, in_strides) } else { (output as *const _, out_strides) };
        // SAFETY: the caller's contract; in place, source and destination are the same operand.
        unsafe { c2c_pass(sizes, d, src, src_strides, output, out_strides, forward, s, threads) };
    }
}

/// Real-to-complex forward transform over `dims` (PyTorch's `_fft_r2c`):
/// `input` float32 or float64 (`dtype`) of `sizes`; `output` of the matching
/// complex dtype, of `sizes` except along the last of `dims`, where it holds
/// `n / 2 + 1` values when `onesided` and all `n` otherwise.
///
/// Errors: [`Error::UnsupportedDtype`] for other dtypes; [`Error::InvalidLayout`]
/// as for [`c2c`]; [`Error::InvalidValue`] for an empty signal with a non-empty
/// output (a one-sided transform of length 0).
///
/// # Safety
/// `input` addresses every element of `sizes` and `output` every element of
/// its sizes, at their strides; `output`'s elements are distinct and overlap no
/// input element.
#[allow(clippy::too_many_arguments)]
pub unsafe fn r2c(
    dtype: DType,
    sizes: &[usize],
    input: *const u8,
    in_strides: &[isize],
    output: *mut u8,
    out_strides: &[isize],
    dims: &[usize],
    norm: Norm,
    onesided: bool,
    threads: usize,
) -> Result<()> {
    const OP: &str = "_fft_r2c";
    check(OP, sizes, [in_strides, out_strides], dims)?;
    let last = dims[dims.len() - 1];
    let mut out_sizes = sizes.to_vec();
    if onesided {
        out_sizes[last] = sizes[last] / 2 + 1;
    }
    if out_sizes.contains(&0) {
        return match dtype {
            DType::F32 | DType::F64 => Ok(()),
            dtype => Err(Error::UnsupportedDtype { op: OP, dtype }),
        };
    }
    if sizes[last] == 0 {
        return Err(Error::InvalidValue {
            op: OP,
            reason: format!("{OP}: cannot transform a signal of 0 elements along dimension {last}"),
        });
    }
    match dtype {
        // SAFETY: forwarded contract.
        DType::F32 => unsafe {
            r2c_in::<f32>(sizes, &out_sizes, input.cast(), in_strides, output.cast(), out_strides, dims, norm, threads)
        },
        // SAFETY: forwarded contract.
        DType::F64 => unsafe {
            r2c_in::<f64>(sizes, &out_sizes, input.cast(), in_strides, output.cast(), out_strides, dims, norm, threads)
        },
        dtype => return Err(Error::UnsupportedDtype { op: OP, dtype }),
    }
    Ok(())
}

/// [`r2c`] in precision `T`, for a non-empty output of `out_sizes`.
///
/// # Safety
/// As for [`r2c`].
#[allow(clippy::too_many_arguments)]
unsafe fn r2c_in<T: Precision>(
    sizes: &[usize],
    out_sizes: &[usize],
    input: *const T,
    in_strides: &[isize],
    output: *mut Complex<T>,
    out_strides: &[isize],
    dims: &[usize],
    norm: Norm,
    threads: usize,
) {
    let (&last, rest) = dims.split_last().expect("checked: at least one dimension");
    let scale = T::from_f64(norm.scale(signal_numel(sizes, dims))).unwrap_or_else(T::one);
    let (n, m) = (sizes[last], out_sizes[last]);
    // The last dimension: real lines to (the first m values of) their full spectrum.
    let fft = plan::<T>(n, true);
    let first_scale = if rest.is_empty() { scale } else { T::one() };
    let scaled = first_scale != T::one();
    let (is, os) = (in_strides[last], out_strides[last]);
    let (src, dst) = (SendPtr::from_const(input), SendPtr::new(output));
    // Lines are counted over the output's sizes: along every other dimension they equal the input's.
    for_each_line(
        out_sizes,
        last,
        in_strides,
        out_strides,
        threads,
        || buffers::<T>(n, fft.get_inplace_scratch_len()),
        |(buf, scratch), a, b| {
            for (k, v) in buf.iter_mut().enumerate() {
                // SAFETY: element k of the input line at offset `a` (the caller's contract).
                *v = Complex::new(unsafe { *src.get().offset(a + k as isize * is) }, T::zero());
            }
            fft.process_with_scratch(buf, scratch);
            for (k, v) in buf[..m].iter().enumerate() {
                let v = if scaled { v * first_scale } else { *v };
                // SAFETY: element k of this task's own output line (the caller's contract).
                unsafe { *dst.get().offset(b + k as isize * os) = v };
            }
        },
    );
    for (i, &d) in rest.iter().enumerate() {
        let s = if i + 1 == rest.len() { scale } else { T::one() };
        // SAFETY: in place on the output, which the caller vouches for.
        unsafe { c2c_pass(out_sizes, d, output, out_strides, output, out_strides, true, s, threads) };
    }
}

/// Complex-to-real backward transform over `dims` (PyTorch's `_fft_c2r`):
/// `output` float32 or float64 of `sizes`; `input` of the matching complex
/// dtype (`dtype`), of `sizes` except along the last of `dims`, where only its
/// first `sizes[last] / 2 + 1` values are read (the caller checks it has them).
///
/// Errors: [`Error::UnsupportedDtype`] unless `dtype` is complex64/128;
/// [`Error::InvalidLayout`] as for [`c2c`].
///
/// # Safety
/// `input` addresses `sizes` (with the last of `dims` at `sizes[last] / 2 + 1`)
/// and `output` every element of `sizes`, at their strides; `output`'s
/// elements are distinct and overlap no input element.
#[allow(clippy::too_many_arguments)]
pub unsafe fn c2r(
    dtype: DType,
    sizes: &[usize],
    input: *const u8,
    in_strides: &[isize],
    output: *mut u8,
    out_strides: &[isize],
    dims: &[usize],
    norm: Norm,
    threads: usize,
) -> Result<()> {
    const OP: &str = "_fft_c2r";
    check(OP, sizes, [in_strides, out_strides], dims)?;
    match dtype {
        // SAFETY: forwarded contract.
        DType::C64 => unsafe {
            c2r_in::<f32>(sizes, input.cast(), in_strides, output.cast(), out_strides, dims, norm, threads)
        },
        // SAFETY: forwarded contract.
        DType::C128 => unsafe {
            c2r_in::<f64>(sizes, input.cast(), in_strides, output.cast(), out_strides, dims, norm, threads)
        },
        dtype => return Err(Error::UnsupportedDtype { op: OP, dtype }),
    }
    Ok(())
}

/// Row-major contiguous strides of `sizes`.
fn contiguous_strides(sizes: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; sizes.len()];
    let mut s = 1isize;
    for (st, &size) in strides.iter_mut().zip(sizes).rev() {
        *st = s;
        s *= size.max(1) as isize;
    }
    strides
}

/// [`c2r`] in precision `T`.
///
/// # Safety
/// As for [`c2r`].
#[allow(clippy::too_many_arguments)]
unsafe fn c2r_in<T: Precision>(
    sizes: &[usize],
    input: *const Complex<T>,
    in_strides: &[isize],
    output: *mut T,
    out_strides: &[isize],
    dims: &[usize],
    norm: Norm,
    threads: usize,
) {
    if sizes.contains(&0) {
        return;
    }
    let (&last, rest) = dims.split_last().expect("checked: at least one dimension");
    let scale = T::from_f64(norm.scale(signal_numel(sizes, dims))).unwrap_or_else(T::one);
    let n = sizes[last];
    let h = n / 2 + 1;
    let mut half = sizes.to_vec();
    half[last] = h;
    // The other dimensions first, backward, into a temporary of the half sizes
    // (the output is real and cannot hold them).
    let mut temp: Vec<Complex<T>> = Vec::new();
    let (src, src_strides) = if rest.is_empty() {
        (input, in_strides.to_vec())
    } else {
        temp.resize(half.iter().product(), Complex::zero());
        let t = temp.as_mut_ptr();
        let ts = contiguous_strides(&half);
        for (i, &d) in rest.iter().enumerate() {
            let (s, ss) = if i == 0 { (input, in_strides) } else { (t as *const _, &ts[..]) };
            // SAFETY: the input per the caller's contract; `temp` holds every element of
            // `half` at `ts`, and later passes are in place on it.
            unsafe { c2c_pass(&half, d, s, ss, t, &ts, false, T::one(), threads) };
        }
        (t as *const _, ts)
    };
    let fft = plan::<T>(n, false);
    let scaled = scale != T::one();
    let (is, os) = (src_strides[last], out_strides[last]);
    let (src, dst) = (SendPtr::from_const(src), SendPtr::new(output));
    for_each_line(
        sizes,
        last,
        &src_strides,
        out_strides,
        threads,
        || buffers::<T>(n, fft.get_inplace_scratch_len()),
        |(buf, scratch), a, b| {
            for (k, v) in buf[..h].iter_mut().enumerate() {
                // SAFETY: element k < h of the source line at offset `a` (the caller's
                // contract, or `temp`, which is alive until the passes return).
                *v = unsafe { *src.get().offset(a + k as isize * is) };
            }
            // The Hermitian extension: X[n - k] = conj(X[k]).
            for k in h..n {
                buf[k] = buf[n - k].conj();
            }
            fft.process_with_scratch(buf, scratch);
            for (k, v) in buf.iter().enumerate() {
                let v = if scaled { v.re * scale } else { v.re };
                // SAFETY: element k of this task's own output line (the caller's contract).
                unsafe { *dst.get().offset(b + k as isize * os) = v };
            }
        },
    );
    drop(temp);
}

#[cfg(test)]
mod tests {
    use super::*;

    type C = Complex<f64>;

    const SIZES: [usize; 8] = [1, 2, 3, 5, 8, 12, 17, 64];
    const NORMS: [Norm; 3] = [Norm::None, Norm::ByRootN, Norm::ByN];

    /// A deterministic pseudo-random value in [-1, 1).
    fn rand(seed: &mut u64) -> f64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    fn numel(sizes: &[usize]) -> usize {
        sizes.iter().product()
    }

    /// The multi-index of row-major position `i`.
    fn unravel(mut i: usize, sizes: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; sizes.len()];
        for d in (0..sizes.len()).rev() {
            idx[d] = i % sizes[d];
            i /= sizes[d];
        }
        idx
    }

    fn offset(idx: &[usize], strides: &[isize]) -> isize {
        idx.iter().zip(strides).map(|(&i, &s)| i as isize * s).sum()
    }

    /// Strides of a non-contiguous layout of `sizes`: dimensions nested in `order`
    /// (outermost first), each with one element of padding, so neither the
    /// element order nor the density is row-major. Returns the strides and the
    /// buffer length the layout needs.
    fn strided(sizes: &[usize], order: &[usize]) -> (Vec<isize>, usize) {
        let mut strides = vec![0isize; sizes.len()];
        let mut s = 1isize;
        for &d in order.iter().rev() {
            strides[d] = s;
            s *= sizes[d] as isize + 1;
        }
        (strides, s as usize + 1)
    }

    /// `values` (row-major) written into a buffer of `len` at `strides`, the gaps filled with a marker.
    fn place<E: Copy>(values: &[E], sizes: &[usize], strides: &[isize], len: usize, gap: E) -> Vec<E> {
        let mut buf = vec![gap; len];
        for (i, &v) in values.iter().enumerate() {
            buf[offset(&unravel(i, sizes), strides) as usize] = v;
        }
        buf
    }

    /// The elements of `sizes` at `strides` in `buf`, row-major.
    fn gather<E: Copy>(buf: &[E], sizes: &[usize], strides: &[isize]) -> Vec<E> {
        (0..numel(sizes)).map(|i| buf[offset(&unravel(i, sizes), strides) as usize]).collect()
    }

    /// Naive O(n^2) DFT along `dim` of a row-major array, in f64.
    fn dft_along(x: &[C], sizes: &[usize], dim: usize, forward: bool) -> Vec<C> {
        let n = sizes[dim];
        let sign = if forward { -1.0 } else { 1.0 };
        let inner: usize = sizes[dim + 1..].iter().product();
        let mut out = vec![C::zero(); x.len()];
        for (i, o) in out.iter_mut().enumerate() {
            let k = (i / inner) % n;
            let base = i - k * inner;
            for j in 0..n {
                let w = C::from_polar(1.0, sign * 2.0 * std::f64::consts::PI * (j * k % n) as f64 / n as f64);
                *o += x[base + j * inner] * w;
            }
        }
        out
    }

    fn dft(x: &[C], sizes: &[usize], dims: &[usize], forward: bool, norm: Norm) -> Vec<C> {
        let mut y = x.to_vec();
        for &d in dims {
            y = dft_along(&y, sizes, d, forward);
        }
        let s = norm.scale(signal_numel(sizes, dims));
        y.iter().map(|v| v * s).collect()
    }

    /// Largest error relative to the reference's largest magnitude (at least 1).
    fn close(got: &[C], want: &[C], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        let scale = want.iter().map(|v| v.norm()).fold(1.0, f64::max);
        let err = got.iter().zip(want).map(|(a, b)| (a - b).norm()).fold(0.0, f64::max);
        assert!(err <= tol * scale, "{what}: error {err} (scale {scale})\n got {got:?}\nwant {want:?}");
    }

    fn random_complex(n: usize, seed: &mut u64) -> Vec<C> {
        (0..n).map(|_| C::new(rand(seed), rand(seed))).collect()
    }

    /// Runs [`c2c`] in `dtype` with the input and output at the given layouts.
    #[allow(clippy::too_many_arguments)]
    fn run_c2c(
        dtype: DType,
        x: &[C],
        sizes: &[usize],
        (is, ilen): (&[isize], usize),
        (os, olen): (&[isize], usize),
        dims: &[usize],
        norm: Norm,
        forward: bool,
        threads: usize,
    ) -> Vec<C> {
        let gap = C::new(1e30, -1e30);
        let input = place(x, sizes, is, ilen, gap);
        if dtype == DType::C64 {
            let input: Vec<Complex<f32>> = input.iter().map(|v| Complex::new(v.re as f32, v.im as f32)).collect();
            let mut out = vec![Complex::new(7e30f32, 7e30); olen];
            // SAFETY: the buffers hold every element of `sizes` at their layouts.
            unsafe {
                c2c(dtype, sizes, input.as_ptr().cast(), is, out.as_mut_ptr().cast(), os, dims, norm, forward, threads)
            }
            .unwrap();
            let gaps = out.iter().filter(|v| v.re == 7e30).count();
            assert_eq!(gaps, olen - numel(sizes), "the output's gaps are untouched");
            gather(&out, sizes, os).iter().map(|v| C::new(v.re as f64, v.im as f64)).collect()
        } else {
            let mut out = vec![C::new(7e30, 7e30); olen];
            // SAFETY: as above.
            unsafe {
                c2c(dtype, sizes, input.as_ptr().cast(), is, out.as_mut_ptr().cast(), os, dims, norm, forward, threads)
            }
            .unwrap();
            let gaps = out.iter().filter(|v| v.re == 7e30).count();
            assert_eq!(gaps, olen - numel(sizes), "the output's gaps are untouched");
            gather(&out, sizes, os)
        }
    }

    fn tol(dtype: DType) -> f64 {
        if matches!(dtype, DType::C64 | DType::F32) {
            2e-5
        } else {
            1e-12
        }
    }

    #[test]
    fn c2c_1d_matches_the_naive_dft() {
        let mut seed = 1;
        for dtype in [DType::C64, DType::C128] {
            for &n in &SIZES {
                let x = random_complex(n, &mut seed);
                let contiguous = (&[1isize][..], n);
                for norm in NORMS {
                    for forward in [true, false] {
                        let got = run_c2c(dtype, &x, &[n], contiguous, contiguous, &[0], norm, forward, 1);
                        let want = dft(&x, &[n], &[0], forward, norm);
                        close(&got, &want, tol(dtype), &format!("c2c {dtype:?} n={n} {norm:?} forward={forward}"));
                    }
                }
            }
        }
    }

    #[test]
    fn c2c_multi_dim_strided() {
        let mut seed = 2;
        let sizes = [3, 5, 4];
        let x = random_complex(numel(&sizes), &mut seed);
        let (is, ilen) = strided(&sizes, &[2, 0, 1]);
        let (os, olen) = strided(&sizes, &[1, 2, 0]);
        for dims in [&[0][..], &[2], &[1], &[0, 2], &[2, 0, 1], &[1, 2]] {
            for norm in NORMS {
                for dtype in [DType::C64, DType::C128] {
                    for threads in [1, 4] {
                        let got = run_c2c(dtype, &x, &sizes, (&is, ilen), (&os, olen), dims, norm, false, threads);
                        let want = dft(&x, &sizes, dims, false, norm);
                        close(&got, &want, tol(dtype), &format!("c2c {dtype:?} dims {dims:?} {norm:?}"));
                    }
                }
            }
        }
    }

    #[test]
    fn c2c_reads_broadcast_inputs() {
        // A stride-0 dimension (an expanded tensor): every row the same.
        let mut seed = 3;
        let row = random_complex(8, &mut seed);
        let sizes = [4, 8];
        let mut out = vec![C::zero(); 32];
        // SAFETY: the input holds 8 elements, read at strides (0, 1); the output 32 contiguous.
        unsafe {
            c2c(
                DType::C128,
                &sizes,
                row.as_ptr().cast(),
                &[0, 1],
                out.as_mut_ptr().cast(),
                &[8, 1],
                &[1],
                Norm::None,
                true,
                2,
            )
        }
        .unwrap();
        let want = dft(&row, &[8], &[0], true, Norm::None);
        for r in 0..4 {
            close(&out[r * 8..(r + 1) * 8], &want, 1e-12, "broadcast row");
        }
    }

    /// Runs [`r2c`] in `dtype` (f32 or f64) at the given layouts; returns the output row-major.
    #[allow(clippy::too_many_arguments)]
    fn run_r2c(
        dtype: DType,
        x: &[f64],
        sizes: &[usize],
        (is, ilen): (&[isize], usize),
        out_order: &[usize],
        dims: &[usize],
        norm: Norm,
        onesided: bool,
    ) -> (Vec<usize>, Vec<C>) {
        let last = *dims.last().unwrap();
        let mut out_sizes = sizes.to_vec();
        if onesided {
            out_sizes[last] = sizes[last] / 2 + 1;
        }
        let (os, olen) = strided(&out_sizes, out_order);
        let input = place(x, sizes, is, ilen, 1e30);
        let got = if dtype == DType::F32 {
            let input: Vec<f32> = input.iter().map(|&v| v as f32).collect();
            let mut out = vec![Complex::<f32>::zero(); olen];
            // SAFETY: the buffers hold every element of their sizes at their layouts.
            unsafe {
                r2c(dtype, sizes, input.as_ptr().cast(), is, out.as_mut_ptr().cast(), &os, dims, norm, onesided, 3)
            }
            .unwrap();
            gather(&out, &out_sizes, &os).iter().map(|v| C::new(v.re as f64, v.im as f64)).collect()
        } else {
            let mut out = vec![C::zero(); olen];
            // SAFETY: as above.
            unsafe {
                r2c(dtype, sizes, input.as_ptr().cast(), is, out.as_mut_ptr().cast(), &os, dims, norm, onesided, 3)
            }
            .unwrap();
            gather(&out, &out_sizes, &os)
        };
        (out_sizes, got)
    }

    /// The reference of a one-sided or full r2c: the full complex DFT, cut along the last dim.
    fn r2c_reference(x: &[f64], sizes: &[usize], dims: &[usize], norm: Norm, out_sizes: &[usize]) -> Vec<C> {
        let xc: Vec<C> = x.iter().map(|&v| C::new(v, 0.0)).collect();
        let full = dft(&xc, sizes, dims, true, norm);
        (0..numel(out_sizes))
            .map(|i| {
                let idx = unravel(i, out_sizes);
                full[offset(&idx, &contiguous_strides(sizes)) as usize]
            })
            .collect()
    }

    #[test]
    fn r2c_1d_matches_the_naive_dft() {
        let mut seed = 4;
        for dtype in [DType::F32, DType::F64] {
            for &n in &SIZES {
                let x: Vec<f64> = (0..n).map(|_| rand(&mut seed)).collect();
                for norm in NORMS {
                    for onesided in [true, false] {
                        let (os, got) = run_r2c(dtype, &x, &[n], (&[1], n), &[0], &[0], norm, onesided);
                        let want = r2c_reference(&x, &[n], &[0], norm, &os);
                        close(&got, &want, tol(dtype), &format!("r2c {dtype:?} n={n} {norm:?} onesided={onesided}"));
                    }
                }
            }
        }
    }

    #[test]
    fn r2c_multi_dim_strided() {
        let mut seed = 5;
        let sizes = [4, 3, 6];
        let x: Vec<f64> = (0..numel(&sizes)).map(|_| rand(&mut seed)).collect();
        let (is, ilen) = strided(&sizes, &[1, 2, 0]);
        for dims in [&[0, 2][..], &[1, 2], &[2, 0], &[0], &[2, 1, 0]] {
            for norm in NORMS {
                for onesided in [true, false] {
                    for dtype in [DType::F32, DType::F64] {
                        let (os, got) = run_r2c(dtype, &x, &sizes, (&is, ilen), &[2, 0, 1], dims, norm, onesided);
                        let want = r2c_reference(&x, &sizes, dims, norm, &os);
                        close(&got, &want, tol(dtype), &format!("r2c {dtype:?} {dims:?} {norm:?} {onesided}"));
                    }
                }
            }
        }
    }

    /// Naive c2r: backward DFTs over all but the last of `dims`, then along the
    /// last `out[j] = Re X0 + 2 sum_{0<k<n/2} Re(X_k w^{jk}) + [n even] Re(X_{n/2}) (-1)^j`,
    /// the Hermitian sum written out (so it shares nothing with the kernel's extension).
    fn c2r_reference(x: &[C], in_sizes: &[usize], dims: &[usize], n: usize, norm: Norm) -> (Vec<usize>, Vec<f64>) {
        let (&last, rest) = dims.split_last().unwrap();
        let h = n / 2 + 1;
        // Cut the input to h along `last`.
        let mut half = in_sizes.to_vec();
        half[last] = h;
        let mut y: Vec<C> =
            (0..numel(&half)).map(|i| x[offset(&unravel(i, &half), &contiguous_strides(in_sizes)) as usize]).collect();
        for &d in rest {
            y = dft_along(&y, &half, d, false);
        }
        let mut out_sizes = in_sizes.to_vec();
        out_sizes[last] = n;
        let mut full = in_sizes.to_vec();
        full[last] = n;
        let s = norm.scale(signal_numel(&full, dims));
        let out = (0..numel(&out_sizes))
            .map(|i| {
                let idx = unravel(i, &out_sizes);
                let j = idx[last];
                let at = |k: usize| {
                    let mut ik = idx.clone();
                    ik[last] = k;
                    y[offset(&ik, &contiguous_strides(&half)) as usize]
                };
                let w = |k: usize| C::from_polar(1.0, 2.0 * std::f64::consts::PI * (j * k % n) as f64 / n as f64);
                let mut v = at(0).re;
                for k in 1..n.div_ceil(2) {
                    v += 2.0 * (at(k) * w(k)).re;
                }
                if n.is_multiple_of(2) && n > 0 {
                    v += at(n / 2).re * if j.is_multiple_of(2) { 1.0 } else { -1.0 };
                }
                v * s
            })
            .collect();
        (out_sizes, out)
    }

    /// Runs [`c2r`] on `x` (row-major, `in_sizes`) placed at `in_order`, output at `out_order`.
    #[allow(clippy::too_many_arguments)]
    fn run_c2r(
        dtype: DType,
        x: &[C],
        in_sizes: &[usize],
        in_order: &[usize],
        out_order: &[usize],
        dims: &[usize],
        n: usize,
        norm: Norm,
    ) -> Vec<f64> {
        let last = *dims.last().unwrap();
        let mut out_sizes = in_sizes.to_vec();
        out_sizes[last] = n;
        let (is, ilen) = strided(in_sizes, in_order);
        let (os, olen) = strided(&out_sizes, out_order);
        let input = place(x, in_sizes, &is, ilen, C::new(1e30, 1e30));
        if dtype == DType::C64 {
            let input: Vec<Complex<f32>> = input.iter().map(|v| Complex::new(v.re as f32, v.im as f32)).collect();
            let mut out = vec![0f32; olen];
            // SAFETY: the buffers hold every element of their sizes at their layouts.
            unsafe { c2r(dtype, &out_sizes, input.as_ptr().cast(), &is, out.as_mut_ptr().cast(), &os, dims, norm, 2) }
                .unwrap();
            gather(&out, &out_sizes, &os).iter().map(|&v| v as f64).collect()
        } else {
            let mut out = vec![0f64; olen];
            // SAFETY: as above.
            unsafe { c2r(dtype, &out_sizes, input.as_ptr().cast(), &is, out.as_mut_ptr().cast(), &os, dims, norm, 2) }
                .unwrap();
            gather(&out, &out_sizes, &os)
        }
    }

    fn real(v: &[f64]) -> Vec<C> {
        v.iter().map(|&r| C::new(r, 0.0)).collect()
    }

    #[test]
    fn c2r_1d_matches_the_hermitian_sum() {
        let mut seed = 6;
        for dtype in [DType::C64, DType::C128] {
            for &n in &SIZES {
                // Not Hermitian at 0 and n/2 on purpose: their imaginary parts are ignored.
                // Two extra inputs beyond n/2 + 1 are never read.
                let len = n / 2 + 3;
                let x = random_complex(len, &mut seed);
                for norm in NORMS {
                    let got = run_c2r(dtype, &x, &[len], &[0], &[0], &[0], n, norm);
                    let (_, want) = c2r_reference(&x, &[len], &[0], n, norm);
                    close(&real(&got), &real(&want), tol(dtype), &format!("c2r {dtype:?} n={n} {norm:?}"));
                }
            }
        }
    }

    #[test]
    fn c2r_multi_dim_strided() {
        let mut seed = 7;
        for n in [5, 6] {
            let in_sizes = [3, n / 2 + 1, 4];
            let x = random_complex(numel(&in_sizes), &mut seed);
            for dims in [&[0, 1][..], &[2, 0, 1], &[1], &[2, 1]] {
                for norm in NORMS {
                    for dtype in [DType::C64, DType::C128] {
                        let got = run_c2r(dtype, &x, &in_sizes, &[2, 1, 0], &[1, 0, 2], dims, n, norm);
                        let (_, want) = c2r_reference(&x, &in_sizes, dims, n, norm);
                        close(&real(&got), &real(&want), tol(dtype), &format!("c2r {dtype:?} {dims:?} n={n} {norm:?}"));
                    }
                }
            }
        }
    }

    #[test]
    fn c2r_known_values_and_round_trip() {
        // CPU PyTorch: _fft_c2r([1+5j, 2+1j, 3+7j], [0], 0, 4) = [8, -4, 0, 0].
        let x = [C::new(1.0, 5.0), C::new(2.0, 1.0), C::new(3.0, 7.0)];
        let got = run_c2r(DType::C128, &x, &[3], &[0], &[0], &[0], 4, Norm::None);
        close(&real(&got), &real(&[8.0, -4.0, 0.0, 0.0]), 1e-14, "known values");
        // irfftn(rfftn(x)) = x with the backward transform scaled by 1/N.
        let mut seed = 8;
        let sizes = [5, 4, 7];
        let x: Vec<f64> = (0..numel(&sizes)).map(|_| rand(&mut seed)).collect();
        let dims = [0, 2];
        let (os, spectrum) = run_r2c(DType::F64, &x, &sizes, (&[28, 7, 1], 140), &[0, 1, 2], &dims, Norm::None, true);
        let back = run_c2r(DType::C128, &spectrum, &os, &[0, 1, 2], &[2, 1, 0], &dims, 7, Norm::ByN);
        close(&real(&back), &real(&x), 1e-12, "round trip");
    }

    #[test]
    fn parallel_passes_match_serial_ones() {
        // Large enough for the lines to be split over several tasks (at least one
        // GRAIN of work); each line is transformed the same way whoever takes it, so
        // the results are identical. `run_r2c` and `run_c2r` allow 3 and 2 threads.
        let mut seed = 9;
        let sizes = [40, 30, 64];
        let x = random_complex(numel(&sizes), &mut seed);
        let (is, ilen) = strided(&sizes, &[2, 0, 1]);
        let (os, olen) = strided(&sizes, &[1, 2, 0]);
        for dims in [&[2][..], &[0, 1, 2], &[1, 0]] {
            let serial = run_c2c(DType::C128, &x, &sizes, (&is, ilen), (&os, olen), dims, Norm::ByN, true, 1);
            let parallel = run_c2c(DType::C128, &x, &sizes, (&is, ilen), (&os, olen), dims, Norm::ByN, true, 4);
            assert_eq!(serial, parallel, "c2c dims {dims:?}");
        }
        let re: Vec<f64> = x.iter().map(|v| v.re).collect();
        let (out_sizes, got) = run_r2c(DType::F64, &re, &sizes, (&is, ilen), &[0, 2, 1], &[0, 2], Norm::None, true);
        let want = r2c_reference(&re, &sizes, &[0, 2], Norm::None, &out_sizes);
        close(&got, &want, 1e-12, "parallel r2c");
        let half = [40, 30, 33];
        let spectrum = &x[..numel(&half)];
        let got = run_c2r(DType::C128, spectrum, &half, &[2, 1, 0], &[0, 1, 2], &[1, 2], 64, Norm::ByN);
        let (_, want) = c2r_reference(spectrum, &half, &[1, 2], 64, Norm::ByN);
        close(&real(&got), &real(&want), 1e-12, "parallel c2r");
    }

    #[test]
    fn refusals() {
        let x = [0f64; 4];
        let mut y = [C::zero(); 4];
        let call = |dtype: DType, dims: &[usize], y: &mut [C]| {
            // SAFETY: both buffers hold 4 elements of 16 bytes at most; only dtype/dims checks run.
            unsafe { c2c(dtype, &[4], x.as_ptr().cast(), &[1], y.as_mut_ptr().cast(), &[1], dims, Norm::None, true, 1) }
        };
        assert!(matches!(call(DType::F32, &[0], &mut y), Err(Error::UnsupportedDtype { .. })));
        assert!(matches!(call(DType::C64, &[], &mut y), Err(Error::InvalidLayout { .. })));
        assert!(matches!(call(DType::C64, &[1], &mut y), Err(Error::InvalidLayout { .. })));
        assert!(matches!(call(DType::C64, &[0, 0], &mut y), Err(Error::InvalidLayout { .. })));
        // SAFETY: as above; the real input is refused before anything is read.
        let r =
            unsafe { c2r(DType::F64, &[4], x.as_ptr().cast(), &[1], y.as_mut_ptr().cast(), &[1], &[0], Norm::None, 1) };
        assert!(matches!(r, Err(Error::UnsupportedDtype { .. })));
        // SAFETY: as above.
        let r = unsafe {
            r2c(DType::C64, &[4], x.as_ptr().cast(), &[1], y.as_mut_ptr().cast(), &[1], &[0], Norm::None, true, 1)
        };
        assert!(matches!(r, Err(Error::UnsupportedDtype { .. })));
        // An empty signal with a one-sided output of 1 value.
        // SAFETY: nothing is read from the empty input; the check comes first.
        let r = unsafe {
            r2c(DType::F64, &[0], x.as_ptr().cast(), &[1], y.as_mut_ptr().cast(), &[1], &[0], Norm::None, true, 1)
        };
        assert!(matches!(r, Err(Error::InvalidValue { .. })));
        assert!(matches!(Norm::from_code("t", 3), Err(Error::InvalidValue { .. })));
    }

    #[test]
    fn empty_outputs_do_nothing() {
        let mut y = [C::new(3.0, 3.0); 1];
        let x = [C::zero(); 1];
        // SAFETY: no element is addressed: the tensors have no elements.
        unsafe {
            c2c(
                DType::C128,
                &[0, 4],
                x.as_ptr().cast(),
                &[4, 1],
                y.as_mut_ptr().cast(),
                &[4, 1],
                &[1],
                Norm::ByN,
                true,
                1,
            )
        }
        .unwrap();
        // SAFETY: as above.
        unsafe {
            c2r(DType::C128, &[3, 0], x.as_ptr().cast(), &[1, 1], y.as_mut_ptr().cast(), &[1, 1], &[1], Norm::ByN, 1)
        }
        .unwrap();
        assert_eq!(y[0], C::new(3.0, 3.0));
    }
}
