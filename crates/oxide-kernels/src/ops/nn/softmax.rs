//! Softmax, log-softmax and the negative log-likelihood loss, forward and backward.
//!
//! Layout: every tensor is contiguous and viewed as `[outer, dim, inner]`,
//! the reduced dimension in the middle (PyTorch's `_softmax(dim=d)` with
//! `outer` = product of the sizes before `d`, `inner` = product after).
//! A "row" is one `(outer, inner)` pair: `dim` elements `inner` apart.
//! float32, float16 and bfloat16 compute in float32, float64 in float64
//! (PyTorch's opmath types); `half_to_float` outputs are float32 while the
//! input is half.


use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::engine::iter::{load, store};
use crate::engine::lanes;
use crate::engine::math::Float;

/// Rows below this many elements in all run on the calling thread.
const GRAIN: usize = 32768;

fn check_floating(op: &'static str, dtype: DType) -> Result<()> {
    match dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        d => Err(Error::UnsupportedDtype { op, dtype: d }),
    }
}

/// Runs `f` over contiguous ranges of rows `0..rows` (one per task, up to
/// `threads` tasks), each row being `dim` elements; a task allocates its
/// buffers once for its range.
fn for_rows(rows: usize, dim: usize, threads: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    let work = rows.saturating_mul(dim.max(1));
    let tasks = if work < GRAIN { 1 } else { threads.max(1).min(rows) };
    if tasks <= 1 {
        f(0..rows);
        return;
    }
    let per = rows.div_ceil(tasks);
    crate::engine::iter::for_each_task(tasks, |t| f(t * per..((t + 1) * per).min(rows)));
}

/// Loads row `r` (`dst.len()` elements, `inner` apart) of a `[outer, dim, inner]` tensor.
unsafe fn load_row<F: Element>(dt: DType, p: Ptr, r: usize, inner: usize, dst: &mut [F]) {
    let sz = dt.size();
    // SAFETY: the row lies inside the tensor (caller contract).
    unsafe { load(dt, p.0.offset(at(r, 0, dst.len(), inner, sz)), (inner * sz) as isize, dst.len(), dst).expect("checked dtype") }
}

/// Stores `src` as row `r` of a `[outer, dim, inner]` tensor.
unsafe fn store_row<F: Element>(dt: DType, p: Ptr, r: usize, inner: usize, src: &[F]) {
    let sz = dt.size();
    // SAFETY: the row lies inside the tensor (caller contract).
    unsafe {
        let dst = p.0.offset(at(r, 0, src.len(), inner, sz));
        if dt == F::DTYPE && inner == 1 {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut F, src.len());
        } else {
            store(dt, dst, (inner * sz) as isize, src).expect("checked dtype");
        }
    }
}

/// A raw pointer that may cross into rayon tasks; each task touches disjoint rows.
#[derive(Clone, Copy)]
struct Ptr(*mut u8);
// SAFETY: tasks address disjoint rows (caller contract of the public functions).
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

/// Byte offset of element `k` of row `r` in a `[outer, dim, inner]` tensor of `size`-byte elements.
#[inline]
fn at(r: usize, k: usize, dim: usize, inner: usize, size: usize) -> isize {
    let (o, i) = (r / inner, r % inner);
    (((o * dim + k) * inner + i) * size) as isize
}

/// Softmax (`log = false`) or log-softmax (`log = true`) along the middle
/// dimension: `out = exp(x - max) / sum(exp(x - max))`, or
/// `x - max - log(sum(exp(x - max)))`, the max subtracted for stability.
///
/// `input` has dtype `in_dt`, `out` dtype `out_dt` (equal, or float32 out of a
/// half input); both `[outer, dim, inner]` contiguous.
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes.
///
/// # Safety
/// `input` and `out` hold `outer * dim * inner` elements of their dtypes; `out` is writable.
pub unsafe fn softmax(in_dt: DType, input: *const u8, out_dt: DType, out: *mut u8, outer: usize, dim: usize, inner: usize, log: bool, threads: usize) -> Result<()> {
    check_floating("softmax", in_dt)?;
    check_floating("softmax", out_dt)?;
    if in_dt == DType::F64 {
        // SAFETY: forwarded contract.
        unsafe { softmax_in::<f64>(in_dt, input, out_dt, out, outer, dim, inner, log, threads) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { softmax_in::<f32>(in_dt, input, out_dt, out, outer, dim, inner, log, threads) }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn softmax_in<F: Float + Element>(in_dt: DType, input: *const u8, out_dt: DType, out: *mut u8, outer: usize, dim: usize, inner: usize, log: bool, threads: usize) -> Result<()> {
    if dim == 0 || outer * inner == 0 {
        return Ok(());
    }
    let (src, dst) = (Ptr(input as *mut u8), Ptr(out));
    // Rows along the last dimension of a float32/float64 tensor are read and written in
    // place: the copies into and out of row buffers were two of the five passes.
    let direct = inner == 1 && in_dt == F::DTYPE && out_dt == F::DTYPE && input != out as *const u8;
    // Along the last dimension CPU keeps log_softmax's row sum, and its log, in the element
    // type (other dimensions, and half_to_float, stay in float): round likewise for half types.
    let keep = inner == 1 && out_dt == in_dt;
    let round = |v: F| match in_dt {
        DType::F16 if keep => F::from_f64(half::f16::from_f64(v.to_f64()).to_f64()),
        DType::BF16 if keep => F::from_f64(half::bf16::from_f64(v.to_f64()).to_f64()),
        _ => v,
    };
    for_rows(outer * inner, dim, threads, |rows| {
        let (src, dst) = (src, dst);
        let staged = if direct { 0 } else { dim };
        let (mut xb, mut yb) = (vec![F::ZERO; staged], vec![F::ZERO; staged]);
        let mut e = vec![F::ZERO; if log { dim } else { 0 }];
        for r in rows {
            if direct {
                // SAFETY: row r lies inside both tensors (contract), which are distinct; rows are disjoint between tasks.
                let (x, y) = unsafe {
                    (std::slice::from_raw_parts((src.0 as *const F).add(r * dim), dim), std::slice::from_raw_parts_mut((dst.0 as *mut F).add(r * dim), dim))
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
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes.
///
/// # Safety
/// All three hold `outer * dim * inner` elements, `[outer, dim, inner]` contiguous.
#[allow(clippy::too_many_arguments)]
pub unsafe fn softmax_backward(dt: DType, grad: *const u8, output: *const u8, gin_dt: DType, grad_input: *mut u8, outer: usize, dim: usize, inner: usize, log: bool, threads: usize) -> Result<()> {
    check_floating("softmax_backward", dt)?;
    check_floating("softmax_backward", gin_dt)?;
    if dt == DType::F64 {
        // SAFETY: forwarded contract.
        unsafe { softmax_backward_in::<f64>(dt, grad, output, gin_dt, grad_input, outer, dim, inner, log, threads) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { softmax_backward_in::<f32>(dt, grad, output, gin_dt, grad_input, outer, dim, inner, log, threads) }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn softmax_backward_in<F: Float + Element>(dt: DType, grad: *const u8, output: *const u8, gin_dt: DType, grad_input: *mut u8, outer: usize, dim: usize, inner: usize, log: bool, threads: usize) -> Result<()> {
    if dim == 0 || outer * inner == 0 {
        return Ok(());
    }
    let (g, y, gi) = (Ptr(grad as *mut u8), Ptr(output as *mut u8), Ptr(grad_input));
    // As in the forward: float32/float64 rows along the last dimension in place, unless
    // grad_input shares memory with an input (then the buffers keep the reads first).
    let direct = inner == 1 && dt == F::DTYPE && gin_dt == F::DTYPE && grad_input as *const u8 != grad && grad_input as *const u8 != output;
    for_rows(outer * inner, dim, threads, |rows| {
        let (g, y, gi) = (g, y, gi);
        let staged = if direct { 0 } else { dim };
        let (mut gb, mut yb, mut ob) = (vec![F::ZERO; staged], vec![F::ZERO; staged], vec![F::ZERO; staged]);
        for r in rows {
            if direct {
                // SAFETY: row r lies inside every tensor (contract); grad_input is distinct from both inputs; rows are disjoint between tasks.
                let (gr, yr, out) = unsafe {
                    let row = |p: Ptr| (p.0 as *mut F).add(r * dim);
                    (std::slice::from_raw_parts(row(g), dim), std::slice::from_raw_parts(row(y), dim), std::slice::from_raw_parts_mut(row(gi), dim))
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

/// How [`nll_loss`] reduces: PyTorch's `at::Reduction` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    None = 0,
    Mean = 1,
    Sum = 2,
}

impl Reduction {
    /// From PyTorch's integer code. Errors: [`Error::InvalidValue`] for others.
    pub fn from_code(code: i64) -> Result<Reduction> {
        match code {
            0 => Ok(Reduction::None),
            1 => Ok(Reduction::Mean),
            2 => Ok(Reduction::Sum),
            _ => Err(Error::InvalidValue { op: "nll_loss", reason: format!("{code} is not a valid value for reduction") }),
        }
    }
}

/// Shape of an NLL loss problem: log-probabilities `[n, c, s]` contiguous
/// (`s` = product of spatial sizes, 1 for `nll_loss`, H*W for `nll_loss2d`),
/// targets `[n, s]` int64 contiguous, optional weights `[c]`.
#[derive(Debug, Clone, Copy)]
pub struct NllShape {
    pub n: usize,
    pub c: usize,
    pub s: usize,
    pub ignore_index: i64,
    pub reduction: Reduction,
}

/// The class of position `p` (in `0..n*s`) and its weight, or `None` when ignored.
///
/// Errors: [`Error::OutOfRange`] for a target outside `[0, c)`.
unsafe fn class_of<F: Float + Element>(sh: &NllShape, target: *const i64, weight: Option<&[F]>, p: usize) -> Result<Option<(usize, F)>> {
    // SAFETY: p < n*s (caller).
    let t = unsafe { *target.add(p) };
    if t == sh.ignore_index {
        return Ok(None);
    }
    if t < 0 || t as usize >= sh.c {
        return Err(Error::OutOfRange { op: "nll_loss", reason: format!("Target {t} is out of bounds.") });
    }
    let w = weight.map_or(F::ONE, |w| w[t as usize]);
    Ok(Some((t as usize, w)))
}

/// `nll_loss` / `nll_loss2d` forward. Writes `out` (`[n, s]` for
/// [`Reduction::None`], else one element) and `total_weight` (one element:
/// the sum of the weights of the non-ignored targets; 0 for `None`).
/// Mean divides by `total_weight` (NaN when every target is ignored, as on CPU).
/// Sums accumulate in double.
///
/// `input`, `weight`, `out` and `total_weight` share the floating dtype `dt`.
///
/// Errors: [`Error::UnsupportedDtype`], [`Error::OutOfRange`] for a target outside `[0, c)`
/// other than `ignore_index`.
///
/// # Safety
/// Pointers address the contiguous tensors described by `sh`; `weight` may be null.
pub unsafe fn nll_loss(dt: DType, sh: NllShape, input: *const u8, target: *const i64, weight: *const u8, out: *mut u8, total_weight: *mut u8) -> Result<()> {
    check_floating("nll_loss", dt)?;
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => nll_loss_in::<f64>(dt, sh, input, target, weight, out, total_weight),
            _ => nll_loss_in::<f32>(dt, sh, input, target, weight, out, total_weight),
        }
    }
}

unsafe fn nll_loss_in<F: Float + Element>(dt: DType, sh: NllShape, input: *const u8, target: *const i64, weight: *const u8, out: *mut u8, total_weight: *mut u8) -> Result<()> {
    let sz = dt.size() as isize;
    let mut w = vec![F::ZERO; if weight.is_null() { 0 } else { sh.c }];
    if !weight.is_null() {
        // SAFETY: weight holds c elements.
        unsafe { load(dt, weight, sz, sh.c, &mut w)? };
    }
    let w = if weight.is_null() { None } else { Some(&w[..]) };
    let value = |p: usize, class: usize| -> F {
        let (i, j) = (p / sh.s, p % sh.s);
        let mut v = [F::ZERO];
        // SAFETY: element (i, class, j) lies in the [n, c, s] input.
        unsafe { load(dt, input.offset((((i * sh.c + class) * sh.s + j) as isize) * sz), sz, 1, &mut v).expect("checked dtype") };
        v[0]
    };
    let positions = sh.n * sh.s;
    if sh.reduction == Reduction::None {
        let mut res = vec![F::ZERO; positions];
        for (p, r) in res.iter_mut().enumerate() {
            // SAFETY: p < n*s.
            if let Some((class, wt)) = unsafe { class_of(&sh, target, w, p)? } {
                *r = -(wt * value(p, class));
            }
        }
        // SAFETY: out holds n*s elements; total_weight one.
        unsafe {
            store(dt, out, sz, &res)?;
            store(dt, total_weight, sz, &[F::ZERO])?;
        }
        return Ok(());
    }
    let (mut sum, mut total) = (0f64, 0f64);
    for p in 0..positions {
        // SAFETY: p < n*s.
        if let Some((class, wt)) = unsafe { class_of(&sh, target, w, p)? } {
            sum -= (wt * value(p, class)).to_f64();
            total += wt.to_f64();
        }
    }
    let loss = if sh.reduction == Reduction::Mean { sum / total } else { sum };
    // SAFETY: one element each.
    unsafe {
        store(dt, out, sz, &[F::from_f64(loss)])?;
        store(dt, total_weight, sz, &[F::from_f64(total)])?;
    }
    Ok(())
}

/// `nll_loss` / `nll_loss2d` backward into the zero-filled `grad_input`
/// (`[n, c, s]` contiguous): at each non-ignored position `p` with class `t`,
/// `grad_input[p, t] = -weight[t] * g`, with `g = grad_output[p]` for
/// [`Reduction::None`], else the single `grad_output` value (divided by
/// `total_weight` for Mean).
///
/// Errors: [`Error::UnsupportedDtype`], [`Error::OutOfRange`] as [`nll_loss`].
///
/// # Safety
/// As [`nll_loss`]; `grad_output` holds `n*s` elements for None, else one; `total_weight` one.
pub unsafe fn nll_loss_backward(dt: DType, sh: NllShape, grad_output: *const u8, target: *const i64, weight: *const u8, total_weight: *const u8, grad_input: *mut u8) -> Result<()> {
    check_floating("nll_loss_backward", dt)?;
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => nll_backward_in::<f64>(dt, sh, grad_output, target, weight, total_weight, grad_input),
            _ => nll_backward_in::<f32>(dt, sh, grad_output, target, weight, total_weight, grad_input),
        }
    }
}

unsafe fn nll_backward_in<F: Float + Element>(dt: DType, sh: NllShape, grad_output: *const u8, target: *const i64, weight: *const u8, total_weight: *const u8, grad_input: *mut u8) -> Result<()> {
    let sz = dt.size() as isize;
    let mut w = vec![F::ZERO; if weight.is_null() { 0 } else { sh.c }];
    if !weight.is_null() {
        // SAFETY: weight holds c elements.
        unsafe { load(dt, weight, sz, sh.c, &mut w)? };
    }
    let w = if weight.is_null() { None } else { Some(&w[..]) };
    let positions = sh.n * sh.s;
    let mut g = vec![F::ZERO; if sh.reduction == Reduction::None { positions } else { 1 }];
    // SAFETY: grad_output holds g.len() elements.
    unsafe { load(dt, grad_output, sz, g.len(), &mut g)? };
    if sh.reduction == Reduction::Mean {
        let mut t = [F::ZERO];
        // SAFETY: one element.
        unsafe { load(dt, total_weight, sz, 1, &mut t)? };
        g[0] = g[0] / t[0];
    }
    for p in 0..positions {
        // SAFETY: p < n*s.
        if let Some((class, wt)) = unsafe { class_of(&sh, target, w, p)? } {
            let gv = if sh.reduction == Reduction::None { g[p] } else { g[0] };
            let (i, j) = (p / sh.s, p % sh.s);
            // SAFETY: element (i, class, j) lies in grad_input.
            unsafe { store(dt, grad_input.offset((((i * sh.c + class) * sh.s + j) as isize) * sz), sz, &[-(wt * gv)])? };
        }
    }
    Ok(())
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
                unsafe { softmax(DType::F64, x.as_ptr() as *const u8, DType::F64, y.as_mut_ptr() as *mut u8, outer, dim, inner, log, 2) }.unwrap();
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
            unsafe {
                softmax(DType::F64, x.as_ptr() as *const u8, DType::F64, y.as_mut_ptr() as *mut u8, outer, dim, inner, log, 1).unwrap();
                softmax_backward(DType::F64, g.as_ptr() as *const u8, y.as_ptr() as *const u8, DType::F64, gi.as_mut_ptr() as *mut u8, outer, dim, inner, log, 1).unwrap();
            }
            let f = |x: &[f64]| -> f64 { naive_softmax(x, outer, dim, inner, log).iter().zip(&g).map(|(a, b)| a * b).sum() };
            for k in 0..12 {
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp[k] += 1e-6;
                xm[k] -= 1e-6;
                let fd = (f(&xp) - f(&xm)) / 2e-6;
                assert!((fd - gi[k]).abs() < 1e-6, "log={log} k={k}: {fd} vs {}", gi[k]);
            }
        }
    }

    #[test]
    fn nll_loss_reductions_weights_and_ignore_index() {
        // n=3, c=2, s=1
        let x = [-0.1f32, -2.0, -1.5, -0.3, -0.7, -0.9];
        let t = [0i64, 1, -100];
        let w = [2.0f32, 0.5];
        let mut out = [0f32; 3];
        let mut tw = [0f32];
        let sh = |r| NllShape { n: 3, c: 2, s: 1, ignore_index: -100, reduction: r };
        unsafe { nll_loss(DType::F32, sh(Reduction::None), x.as_ptr() as _, t.as_ptr(), w.as_ptr() as _, out.as_mut_ptr() as _, tw.as_mut_ptr() as _) }.unwrap();
        assert_eq!(out, [0.2, 0.15, 0.0]);
        unsafe { nll_loss(DType::F32, sh(Reduction::Mean), x.as_ptr() as _, t.as_ptr(), w.as_ptr() as _, out.as_mut_ptr() as _, tw.as_mut_ptr() as _) }.unwrap();
        assert!((out[0] - 0.35 / 2.5).abs() < 1e-7 && tw[0] == 2.5);
        let mut gi = [0f32; 6];
        let g = [1.0f32];
        unsafe { nll_loss_backward(DType::F32, sh(Reduction::Mean), g.as_ptr() as _, t.as_ptr(), w.as_ptr() as _, tw.as_ptr() as _, gi.as_mut_ptr() as _) }.unwrap();
        assert_eq!(gi, [-0.8, 0.0, 0.0, -0.2, 0.0, 0.0]);
        let bad = [0i64, 2, 0];
        let err = unsafe { nll_loss(DType::F32, sh(Reduction::Sum), x.as_ptr() as _, bad.as_ptr(), std::ptr::null(), out.as_mut_ptr() as _, tw.as_mut_ptr() as _) }.unwrap_err();
        assert!(matches!(err, Error::OutOfRange { .. }), "{err}");
    }
}
