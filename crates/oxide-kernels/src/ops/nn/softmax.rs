//! Softmax and log-softmax, forward and backward.
//!
//! Layout: every tensor is contiguous and viewed as `[outer, dim, inner]`,
//! the reduced dimension in the middle (PyTorch's `_softmax(dim=d)` with
//! `outer` = product of the sizes before `d`, `inner` = product after).
//! A "row" is one `(outer, inner)` pair: `dim` elements `inner` apart.
//! float32, float16 and bfloat16 compute in float32, float64 in float64
//! (PyTorch's opmath types); `half_to_float` outputs are float32 while the
//! input is half.

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_range, load, store, thread_tasks};
use crate::engine::lanes;
use crate::engine::math::Float;
use crate::engine::SendPtr;
use crate::error::Result;

/// The `[outer, dim, inner]` geometry of a call (softmax runs along `dim`),
/// whether it is the log variant, and the threads allowed.
#[derive(Clone, Copy)]
struct Rows {
    outer: usize,
    dim: usize,
    inner: usize,
    log: bool,
    threads: usize,
}

/// Loads row `r` (`dst.len()` elements, `inner` apart) of a `[outer, dim, inner]` tensor.
unsafe fn load_row<F: Element>(dt: DType, p: SendPtr<u8>, r: usize, inner: usize, dst: &mut [F]) {
    let sz = dt.size();
    // SAFETY: the row lies inside the tensor (caller contract).
    unsafe {
        load(dt, p.get().offset(at(r, 0, dst.len(), inner, sz)), (inner * sz) as isize, dst.len(), dst)
            .expect("checked dtype")
    }
}

/// Stores `src` as row `r` of a `[outer, dim, inner]` tensor.
unsafe fn store_row<F: Element>(dt: DType, p: SendPtr<u8>, r: usize, inner: usize, src: &[F]) {
    let sz = dt.size();
    // SAFETY: the row lies inside the tensor (caller contract).
    unsafe {
        let dst = p.get().offset(at(r, 0, src.len(), inner, sz));
        if dt == F::DTYPE && inner == 1 {
            crate::engine::convert::copy_elements(src.as_ptr(), dst as *mut F, src.len());
        } else {
            store(dt, dst, (inner * sz) as isize, src).expect("checked dtype");
        }
    }
}

/// Byte offset of element `k` of row `r` in a `[outer, dim, inner]` tensor of `size`-byte elements.
#[inline]
fn at(r: usize, k: usize, dim: usize, inner: usize, size: usize) -> isize {
    let (o, i) = (r / inner, r % inner);
    (((o * dim + k) * inner + i) * size) as isize
}

/// The extents of one softmax call: `[outer, dim, inner]` contiguous, reduced
/// along the middle dimension; `log` selects log-softmax.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub outer: usize,
    pub dim: usize,
    pub inner: usize,
    pub log: bool,
}

/// Softmax (`log = false`) or log-softmax (`log = true`) along the middle
/// dimension: `out = exp(x - max) / sum(exp(x - max))`, or
/// `x - max - log(sum(exp(x - max)))`, the max subtracted for stability.
///
/// `input` has dtype `in_dt`, `out` dtype `out_dt` (equal, or float32 out of a
/// half input); both `[outer, dim, inner]` contiguous.
///
/// Errors: [`Error::UnsupportedDtype`](crate::error::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// `input` and `out` hold `outer * dim * inner` elements of their dtypes; `out` is writable.
pub unsafe fn softmax(
    in_dt: DType,
    input: *const u8,
    out_dt: DType,
    out: *mut u8,
    span: Span,
    threads: usize,
) -> Result<()> {
    let Span { outer, dim, inner, log } = span;
    in_dt.require_float("softmax")?;
    out_dt.require_float("softmax")?;
    let geo = Rows { outer, dim, inner, log, threads };
    if in_dt == DType::F64 {
        // SAFETY: forwarded contract.
        unsafe { softmax_in::<f64>(in_dt, input, out_dt, out, geo) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { softmax_in::<f32>(in_dt, input, out_dt, out, geo) }
    }
}

unsafe fn softmax_in<F: Float + Element>(
    in_dt: DType,
    input: *const u8,
    out_dt: DType,
    out: *mut u8,
    geo: Rows,
) -> Result<()> {
    let Rows { outer, dim, inner, log, threads } = geo;
    if dim == 0 || outer * inner == 0 {
        return Ok(());
    }
    let (src, dst) = (SendPtr::from_const(input), SendPtr::new(out));
    // Rows along the last dimension of a float32/float64 tensor are read and written in
    // place: the copies into and out of row buffers were two of the five passes.
    let direct = inner == 1 && in_dt == F::DTYPE && out_dt == F::DTYPE && !std::ptr::eq(input, out);
    // Along the last dimension CPU keeps log_softmax's row sum, and its log, in the element
    // type (other dimensions, and half_to_float, stay in float): round likewise for half types.
    let keep = inner == 1 && out_dt == in_dt;
    let round = |v: F| if keep { crate::engine::math::round_to(in_dt, v) } else { v };
    let rows = outer * inner;
    for_each_range(rows, thread_tasks(rows, dim.max(1), threads), |first, end| {
        let (src, dst) = (src, dst);
        let staged = if direct { 0 } else { dim };
        let (mut xb, mut yb) = (vec![F::ZERO; staged], vec![F::ZERO; staged]);
        let mut e = vec![F::ZERO; if log { dim } else { 0 }];
        for r in first..end {
            if direct {
                // SAFETY: row r lies inside both tensors (contract), which are distinct; rows are disjoint between tasks.
                let (x, y) = unsafe {
                    (
                        std::slice::from_raw_parts((src.get() as *const F).add(r * dim), dim),
                        std::slice::from_raw_parts_mut((dst.get() as *mut F).add(r * dim), dim),
                    )
                };
                softmax_row(x, y, &mut e, log, round);
            } else {
                // SAFETY: row r lies inside both tensors (contract); rows are disjoint between tasks.
                unsafe { load_row(in_dt, src, r, inner, &mut xb) };
                softmax_row(&xb, &mut yb, &mut e, log, round);
                // SAFETY: as above.
                unsafe { store_row(out_dt, dst, r, inner, &yb) };
            }
        }
    });
    Ok(())
}

/// One row of [`softmax`]: `y` from `x` (`e`, `x.len()` long, is scratch for log-softmax);
/// `round` rounds log-softmax's row sum and its log as the output dtype keeps them.
fn softmax_row<F: Float>(x: &[F], y: &mut [F], e: &mut [F], log: bool, round: impl Fn(F) -> F) {
    // A NaN element makes the row NaN through the sum; the shift only needs the largest number.
    let max = lanes::max(x);
    if log {
        e.iter_mut().zip(x).for_each(|(d, &v)| *d = (v - max).exp());
        let log_sum = round(round(lanes::sum(e)).ln());
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = (v - max) - log_sum);
    } else {
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = (v - max).exp());
        let inv = F::ONE / lanes::sum(y);
        y.iter_mut().for_each(|v| *v = *v * inv);
    }
}

/// Backward of [`softmax`]: with `y` the forward output and `g` its gradient,
/// softmax gives `g_in = y * (g - sum(g * y))`, log-softmax gives
/// `g_in = g - exp(y) * sum(g)`.
///
/// `grad` and `output` have dtype `dt`; `grad_input` has `gin_dt` (the forward input's dtype).
///
/// Errors: [`Error::UnsupportedDtype`](crate::error::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// All three hold `outer * dim * inner` elements, `[outer, dim, inner]` contiguous.
pub unsafe fn softmax_backward(
    dt: DType,
    grad: *const u8,
    output: *const u8,
    gin_dt: DType,
    grad_input: *mut u8,
    span: Span,
    threads: usize,
) -> Result<()> {
    let Span { outer, dim, inner, log } = span;
    dt.require_float("softmax_backward")?;
    gin_dt.require_float("softmax_backward")?;
    let geo = Rows { outer, dim, inner, log, threads };
    if dt == DType::F64 {
        // SAFETY: forwarded contract.
        unsafe { softmax_backward_in::<f64>(dt, grad, output, gin_dt, grad_input, geo) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { softmax_backward_in::<f32>(dt, grad, output, gin_dt, grad_input, geo) }
    }
}

unsafe fn softmax_backward_in<F: Float + Element>(
    dt: DType,
    grad: *const u8,
    output: *const u8,
    gin_dt: DType,
    grad_input: *mut u8,
    geo: Rows,
) -> Result<()> {
    let Rows { outer, dim, inner, log, threads } = geo;
    if dim == 0 || outer * inner == 0 {
        return Ok(());
    }
    let (g, y, gi) = (SendPtr::from_const(grad), SendPtr::from_const(output), SendPtr::new(grad_input));
    // As in the forward: float32/float64 rows along the last dimension in place, unless
    // grad_input shares memory with an input (then the buffers keep the reads first).
    let direct = inner == 1
        && dt == F::DTYPE
        && gin_dt == F::DTYPE
        && !std::ptr::eq(grad_input, grad)
        && !std::ptr::eq(grad_input, output);
    let rows = outer * inner;
    for_each_range(rows, thread_tasks(rows, dim.max(1), threads), |first, end| {
        let (g, y, gi) = (g, y, gi);
        let staged = if direct { 0 } else { dim };
        let (mut gb, mut yb, mut ob) = (vec![F::ZERO; staged], vec![F::ZERO; staged], vec![F::ZERO; staged]);
        for r in first..end {
            if direct {
                // SAFETY: row r lies inside every tensor (contract); grad_input is distinct from both inputs; rows are disjoint between tasks.
                let (gr, yr, out) = unsafe {
                    let row = |p: SendPtr<u8>| (p.get() as *mut F).add(r * dim);
                    (
                        std::slice::from_raw_parts(row(g), dim),
                        std::slice::from_raw_parts(row(y), dim),
                        std::slice::from_raw_parts_mut(row(gi), dim),
                    )
                };
                softmax_backward_row(gr, yr, out, log);
            } else {
                // SAFETY: row r lies inside every tensor (contract); rows are disjoint between tasks.
                unsafe {
                    load_row(dt, g, r, inner, &mut gb);
                    load_row(dt, y, r, inner, &mut yb);
                }
                softmax_backward_row(&gb, &yb, &mut ob, log);
                // SAFETY: as above.
                unsafe { store_row(gin_dt, gi, r, inner, &ob) };
            }
        }
    });
    Ok(())
}

/// One row of [`softmax_backward`]: `out` from the gradient `g` and the forward output `y`.
fn softmax_backward_row<F: Float>(g: &[F], y: &[F], out: &mut [F], log: bool) {
    if log {
        let sum = lanes::sum(g);
        out.iter_mut().zip(g.iter().zip(y)).for_each(|(o, (&gv, &yv))| *o = gv - yv.exp() * sum);
    } else {
        let dot = lanes::dot(g, y);
        out.iter_mut().zip(g.iter().zip(y)).for_each(|(o, (&gv, &yv))| *o = yv * (gv - dot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_softmax(x: &[f64], outer: usize, dim: usize, inner: usize, log: bool) -> Vec<f64> {
        let mut y = vec![0.0; x.len()];
        for o in 0..outer {
            for i in 0..inner {
                let idx = |k: usize| (o * dim + k) * inner + i;
                let m = (0..dim).map(|k| x[idx(k)]).fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (0..dim).map(|k| (x[idx(k)] - m).exp()).sum();
                for k in 0..dim {
                    y[idx(k)] = if log { x[idx(k)] - m - s.ln() } else { (x[idx(k)] - m).exp() / s };
                }
            }
        }
        y
    }

    #[test]
    fn softmax_matches_naive_for_every_layout() {
        for &(outer, dim, inner) in &[(1, 5, 1), (3, 4, 2), (2, 1, 3), (4, 7, 5), (200, 300, 1)] {
            let x: Vec<f64> = (0..outer * dim * inner).map(|k| ((k * 37 % 23) as f64 - 11.0) * 0.7).collect();
            for log in [false, true] {
                let mut y = vec![0.0; x.len()];
                // SAFETY: the pointers address live local buffers sized for the call.
                unsafe {
                    softmax(
                        DType::F64,
                        x.as_ptr() as *const u8,
                        DType::F64,
                        y.as_mut_ptr() as *mut u8,
                        Span { outer, dim, inner, log },
                        2,
                    )
                }
                .unwrap();
                let r = naive_softmax(&x, outer, dim, inner, log);
                for (a, b) in y.iter().zip(&r) {
                    assert!((a - b).abs() < 1e-12, "{outer},{dim},{inner} log={log}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn softmax_backward_matches_finite_differences() {
        let (outer, dim, inner) = (2, 3, 2);
        let x: Vec<f64> = (0..12).map(|k| (k as f64 * 0.37).sin()).collect();
        let g: Vec<f64> = (0..12).map(|k| (k as f64 * 0.91).cos()).collect();
        for log in [false, true] {
            let mut y = vec![0.0; 12];
            let mut gi = vec![0.0; 12];
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                softmax(
                    DType::F64,
                    x.as_ptr() as *const u8,
                    DType::F64,
                    y.as_mut_ptr() as *mut u8,
                    Span { outer, dim, inner, log },
                    1,
                )
                .unwrap();
                softmax_backward(
                    DType::F64,
                    g.as_ptr() as *const u8,
                    y.as_ptr() as *const u8,
                    DType::F64,
                    gi.as_mut_ptr() as *mut u8,
                    Span { outer, dim, inner, log },
                    1,
                )
                .unwrap();
            }
            let f = |x: &[f64]| -> f64 {
                naive_softmax(x, outer, dim, inner, log).iter().zip(&g).map(|(a, b)| a * b).sum()
            };
            for k in 0..12 {
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp[k] += 1e-6;
                xm[k] -= 1e-6;
                let fd = (f(&xp) - f(&xm)) / 2e-6;
                assert!((fd - gi[k]).abs() < 1e-6, "log={log} k={k}: {fd} vs {}", gi[k]);
            }
        }
    }
}
