//! The negative log-likelihood loss (`nll_loss`, `nll_loss2d`), forward and backward.
//!
//! Layout: log-probabilities `[n, c, s]` contiguous (`s` = product of the
//! spatial sizes), targets `[n, s]` int64, optional per-class weights `[c]`
//! ([`NllShape`]). float32, float16 and bfloat16 compute in float32, float64
//! in float64 (PyTorch's opmath types); sums accumulate in double.

use crate::dtype::{DType, Element};
use crate::engine::iter::{load, store};
use crate::engine::math::Float;
use crate::error::{Error, Result};

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
            _ => Err(Error::InvalidValue {
                op: "nll_loss",
                reason: format!("{code} is not a valid value for reduction"),
            }),
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
unsafe fn class_of<F: Float + Element>(
    sh: &NllShape,
    target: *const i64,
    weight: Option<&[F]>,
    p: usize,
) -> Result<Option<(usize, F)>> {
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
pub unsafe fn nll_loss(
    dt: DType,
    sh: NllShape,
    input: *const u8,
    target: *const i64,
    weight: *const u8,
    out: *mut u8,
    total_weight: *mut u8,
) -> Result<()> {
    dt.require_float("nll_loss")?;
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => nll_loss_in::<f64>(dt, sh, input, target, weight, out, total_weight),
            _ => nll_loss_in::<f32>(dt, sh, input, target, weight, out, total_weight),
        }
    }
}

unsafe fn nll_loss_in<F: Float + Element>(
    dt: DType,
    sh: NllShape,
    input: *const u8,
    target: *const i64,
    weight: *const u8,
    out: *mut u8,
    total_weight: *mut u8,
) -> Result<()> {
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
        unsafe {
            load(dt, input.offset((((i * sh.c + class) * sh.s + j) as isize) * sz), sz, 1, &mut v)
                .expect("checked dtype")
        };
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
pub unsafe fn nll_loss_backward(
    dt: DType,
    sh: NllShape,
    grad_output: *const u8,
    target: *const i64,
    weight: *const u8,
    total_weight: *const u8,
    grad_input: *mut u8,
) -> Result<()> {
    dt.require_float("nll_loss_backward")?;
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => nll_backward_in::<f64>(dt, sh, grad_output, target, weight, total_weight, grad_input),
            _ => nll_backward_in::<f32>(dt, sh, grad_output, target, weight, total_weight, grad_input),
        }
    }
}

unsafe fn nll_backward_in<F: Float + Element>(
    dt: DType,
    sh: NllShape,
    grad_output: *const u8,
    target: *const i64,
    weight: *const u8,
    total_weight: *const u8,
    grad_input: *mut u8,
) -> Result<()> {
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
            unsafe {
                store(dt, grad_input.offset((((i * sh.c + class) * sh.s + j) as isize) * sz), sz, &[-(wt * gv)])?
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_loss_reductions_weights_and_ignore_index() {
        // n=3, c=2, s=1
        let x = [-0.1f32, -2.0, -1.5, -0.3, -0.7, -0.9];
        let t = [0i64, 1, -100];
        let w = [2.0f32, 0.5];
        let mut out = [0f32; 3];
        let mut tw = [0f32];
        let sh = |r| NllShape { n: 3, c: 2, s: 1, ignore_index: -100, reduction: r };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            nll_loss(
                DType::F32,
                sh(Reduction::None),
                x.as_ptr() as _,
                t.as_ptr(),
                w.as_ptr() as _,
                out.as_mut_ptr() as _,
                tw.as_mut_ptr() as _,
            )
        }
        .unwrap();
        assert_eq!(out, [0.2, 0.15, 0.0]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            nll_loss(
                DType::F32,
                sh(Reduction::Mean),
                x.as_ptr() as _,
                t.as_ptr(),
                w.as_ptr() as _,
                out.as_mut_ptr() as _,
                tw.as_mut_ptr() as _,
            )
        }
        .unwrap();
        assert!((out[0] - 0.35 / 2.5).abs() < 1e-7 && tw[0] == 2.5);
        let mut gi = [0f32; 6];
        let g = [1.0f32];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            nll_loss_backward(
                DType::F32,
                sh(Reduction::Mean),
                g.as_ptr() as _,
                t.as_ptr(),
                w.as_ptr() as _,
                tw.as_ptr() as _,
                gi.as_mut_ptr() as _,
            )
        }
        .unwrap();
        assert_eq!(gi, [-0.8, 0.0, 0.0, -0.2, 0.0, 0.0]);
        let bad = [0i64, 2, 0];
        // SAFETY: the pointers address live local buffers sized for the call.
        let err = unsafe {
            nll_loss(
                DType::F32,
                sh(Reduction::Sum),
                x.as_ptr() as _,
                bad.as_ptr(),
                std::ptr::null(),
                out.as_mut_ptr() as _,
                tw.as_mut_ptr() as _,
            )
        }
        .unwrap_err();
        assert!(matches!(err, Error::OutOfRange { .. }), "{err}");
    }
}
