//! The multi-label margin loss (`multilabel_margin_loss`), forward and backward.
//!
//! Layout: input `[n, c]` contiguous, targets `[n, c]` int64 contiguous, each row a
//! list of class indices ending at its first negative value ([`MarginShape`]).
//! float32 and float64 compute in their own type; float16 and bfloat16 compute in
//! float32 but round every intermediate to the element type, as CPU's loops (which
//! compute in `scalar_t`) do, so that the hinge `1 - x[y] + x[i] > 0` flips at the
//! same inputs. Per-sample sums accumulate in double.

use super::nll::Reduction;
use crate::dtype::{DType, Element};
use crate::engine::iter::{load, map_in_runs, store, thread_tasks};
use crate::engine::math::{round_to, Float};
use crate::engine::SendPtr;
use crate::error::{Error, Result};

/// Shape of a multi-label margin loss: `n` samples of `c` classes (a 1-d input is
/// one sample, a 0-d one a sample of one class).
#[derive(Debug, Clone, Copy)]
pub struct MarginShape {
    pub n: usize,
    pub c: usize,
    pub reduction: Reduction,
}

/// `v` converted to the element type `dt` (rounded once, from double), as a value of
/// the compute type `F`.
#[inline]
fn narrow<F: Float>(dt: DType, v: f64) -> F {
    F::from_f64(round_to(dt, v))
}

/// Refuses targets outside `[-1, c)` anywhere in the `n * c` targets (CPU checks the
/// whole tensor's min and max, entries after a row's terminator included), with
/// CPU's message naming the target's argument position `pos`.
///
/// # Safety
/// `target` holds `n * c` readable values.
unsafe fn check_targets(op: &'static str, sh: &MarginShape, target: *const i64, pos: u32) -> Result<()> {
    if sh.n * sh.c == 0 {
        // An empty tensor's data may be null.
        return Ok(());
    }
    // SAFETY: the caller's contract.
    let t = unsafe { std::slice::from_raw_parts(target, sh.n * sh.c) };
    if t.iter().any(|&v| v < -1 || v >= sh.c as i64) {
        return Err(Error::InvalidValue { op, reason: format!("argument #{pos} 'target' is out of range") });
    }
    Ok(())
}

/// The target classes of row `r`: its targets up to the first negative one.
///
/// # Safety
/// `target` holds `n * c` values, all checked by [`check_targets`]; `r < n`.
unsafe fn row_targets(sh: &MarginShape, target: SendPtr<i64>, r: usize) -> &[i64] {
    // SAFETY: row r lies inside the targets (caller).
    let row = unsafe { std::slice::from_raw_parts(target.get().add(r * sh.c) as *const i64, sh.c) };
    let len = row.iter().position(|&t| t < 0).unwrap_or(sh.c);
    &row[..len]
}

/// `multilabel_margin_loss` forward: for each sample, the sum over its target
/// classes `j` and over its non-target classes `i` of `max(0, 1 - (x[j] - x[i]))`,
/// divided by `c`. Writes `is_target` (`[n, c]`, 1 at each sample's target classes,
/// else 0) and `output`: the per-sample losses (`n` elements) for
/// [`Reduction::None`], else their sum (divided by `n` for Mean) in one element.
/// With no samples the reduced output is 0 (Sum) or NaN (Mean; CPU leaves it unwritten).
///
/// `input`, `output` and `is_target` share the floating dtype `dt`.
///
/// Errors: [`Error::UnsupportedDtype`], [`Error::InvalidValue`] for a target
/// outside `[-1, c)` (CPU raises RuntimeError).
///
/// # Safety
/// Pointers address the contiguous tensors described by `sh`: `input`, `target` and
/// `is_target` hold `n * c` elements, `output` `n` for None, else one; the outputs are writable.
pub unsafe fn multilabel_margin_loss(
    dt: DType,
    sh: MarginShape,
    input: *const u8,
    target: *const i64,
    output: *mut u8,
    is_target: *mut u8,
    threads: usize,
) -> Result<()> {
    dt.require_float("multilabel_margin_loss")?;
    // SAFETY: forwarded contract.
    unsafe {
        check_targets("multilabel_margin_loss", &sh, target, 2)?;
        match dt {
            DType::F64 => forward_in::<f64>(dt, sh, input, target, output, is_target, threads),
            _ => forward_in::<f32>(dt, sh, input, target, output, is_target, threads),
        }
    }
}

unsafe fn forward_in<F: Float + Element>(
    dt: DType,
    sh: MarginShape,
    input: *const u8,
    target: *const i64,
    output: *mut u8,
    is_target: *mut u8,
    threads: usize,
) -> Result<()> {
    let sz = dt.size();
    if sh.n * sh.c == 0 {
        // No samples (an empty tensor's data may be null): only a reduced output has an element.
        if sh.reduction != Reduction::None {
            let v = if sh.reduction == Reduction::Mean { f64::NAN } else { 0.0 };
            // SAFETY: output holds one element.
            unsafe { store(dt, output, sz as isize, &[F::from_f64(v)])? };
        }
        return Ok(());
    }
    let (src, tgt, mask) = (SendPtr::from_const(input), SendPtr::from_const(target), SendPtr::new(is_target));
    // Each sample's loss as CPU returns it from its inner loop: summed in double,
    // then rounded to the element type.
    let losses: Vec<F> = map_in_runs(sh.n, thread_tasks(sh.n, sh.c.max(1), threads), |r| {
        let (src, tgt, mask) = (src, tgt, mask);
        let mut x = vec![F::ZERO; sh.c];
        // SAFETY: row r of the input holds c elements (contract).
        unsafe { load(dt, src.get().add(r * sh.c * sz), sz as isize, sh.c, &mut x).expect("checked dtype") };
        // SAFETY: the targets were checked by the caller; r < n.
        let targets = unsafe { row_targets(&sh, tgt, r) };
        let mut is_t = vec![F::ZERO; sh.c];
        for &j in targets {
            is_t[j as usize] = F::ONE;
        }
        // SAFETY: row r of is_target holds c elements, written by this task only.
        unsafe { store(dt, mask.get().add(r * sh.c * sz), sz as isize, &is_t).expect("checked dtype") };
        let mut sum = 0f64;
        for &j in targets {
            let xj = x[j as usize];
            for (&xi, &ti) in x.iter().zip(&is_t) {
                if ti == F::ZERO {
                    let z = round_to(dt, round_to(dt, F::ONE - xj) + xi);
                    if z > F::ZERO {
                        sum += z.to_f64();
                    }
                }
            }
        }
        narrow::<F>(dt, sum)
    });
    if sh.reduction == Reduction::None {
        let c = narrow::<F>(dt, sh.c as f64);
        let per: Vec<F> = losses.iter().map(|&l| l / c).collect();
        // SAFETY: output holds n elements.
        return unsafe { store(dt, output, sz as isize, &per) };
    }
    let mut total = losses.iter().fold(0f64, |acc, l| acc + l.to_f64()) / sh.c as f64;
    if sh.reduction == Reduction::Mean {
        total /= sh.n as f64;
    }
    // SAFETY: output holds one element.
    unsafe { store(dt, output, sz as isize, &[F::from_f64(total)]) }
}

/// The operands of [`multilabel_margin_loss_backward`], all of the element type
/// except `target` (int64).
#[derive(Debug, Clone, Copy)]
pub struct MarginGrads {
    pub grad_output: *const u8,
    pub input: *const u8,
    pub target: *const i64,
    pub is_target: *const u8,
    pub grad_input: *mut u8,
}

/// `multilabel_margin_loss` backward into `grad_input` (`[n, c]`, every element
/// written): for each target class `j` and non-target class `i` (per `is_target`,
/// as the forward wrote it) with a positive hinge, `-g` at `j` and `+g` at `i`,
/// with `g = 1 / c` (`1 / (n * c)` for Mean), then the row times its `grad_output`
/// (`n` elements for [`Reduction::None`], else one). The additions run in CPU's
/// order and precision, so the results match CPU's bit for bit.
///
/// Errors: [`Error::UnsupportedDtype`], [`Error::InvalidValue`] for a target
/// outside `[-1, c)` or an `is_target` value outside `[0, 1]` (CPU raises RuntimeError).
///
/// # Safety
/// As [`multilabel_margin_loss`]; `is_target` is read, `grad_input` holds `n * c`
/// writable elements, `grad_output` holds `n` elements for None, else one.
pub unsafe fn multilabel_margin_loss_backward(
    dt: DType,
    sh: MarginShape,
    io: MarginGrads,
    threads: usize,
) -> Result<()> {
    dt.require_float("multilabel_margin_loss_backward")?;
    // SAFETY: forwarded contract.
    unsafe {
        check_targets("multilabel_margin_loss_backward", &sh, io.target, 3)?;
        match dt {
            DType::F64 => backward_in::<f64>(dt, sh, io, threads),
            _ => backward_in::<f32>(dt, sh, io, threads),
        }
    }
}

unsafe fn backward_in<F: Float + Element>(dt: DType, sh: MarginShape, io: MarginGrads, threads: usize) -> Result<()> {
    let MarginGrads { grad_output, input, target, is_target, grad_input } = io;
    let sz = dt.size();
    let total = sh.n * sh.c;
    if total == 0 {
        return Ok(());
    }
    let mut mask = vec![F::ZERO; total];
    // SAFETY: is_target holds n*c elements.
    unsafe { load(dt, is_target, sz as isize, total, &mut mask)? };
    // CPU checks is_target's min and max (NaN fails both).
    if mask.iter().any(|&m| !(m >= F::ZERO && m <= F::ONE)) {
        return Err(Error::InvalidValue {
            op: "multilabel_margin_loss_backward",
            reason: "argument #5 'is_target' is out of range".into(),
        });
    }
    let per_sample = sh.reduction == Reduction::None;
    let mut go = vec![F::ZERO; if per_sample { sh.n } else { 1 }];
    // SAFETY: grad_output holds go.len() elements.
    unsafe { load(dt, grad_output, sz as isize, go.len(), &mut go)? };
    let g = F::from_f64(round_to(
        dt,
        if sh.reduction == Reduction::Mean { 1.0 / (total as f64) } else { 1.0 / sh.c as f64 },
    ));
    let (src, tgt, dst) = (SendPtr::from_const(input), SendPtr::from_const(target), SendPtr::new(grad_input));
    let (mask, go) = (&mask, &go);
    map_in_runs(sh.n, thread_tasks(sh.n, sh.c.max(1), threads), |r| {
        let (src, tgt, dst) = (src, tgt, dst);
        let mut x = vec![F::ZERO; sh.c];
        // SAFETY: row r of the input holds c elements (contract).
        unsafe { load(dt, src.get().add(r * sh.c * sz), sz as isize, sh.c, &mut x).expect("checked dtype") };
        let is_t = &mask[r * sh.c..(r + 1) * sh.c];
        let mut gi = vec![F::ZERO; sh.c];
        // SAFETY: the targets were checked by the caller; r < n.
        for &j in unsafe { row_targets(&sh, tgt, r) } {
            let j = j as usize;
            let xj = x[j];
            for i in 0..sh.c {
                if is_t[i] == F::ZERO {
                    let z = round_to(dt, round_to(dt, F::ONE - xj) + x[i]);
                    if z > F::ZERO {
                        gi[j] = round_to(dt, gi[j] - g);
                        gi[i] = round_to(dt, gi[i] + g);
                    }
                }
            }
        }
        let scale = go[if per_sample { r } else { 0 }];
        for v in &mut gi {
            *v = *v * scale;
        }
        // SAFETY: row r of grad_input holds c elements, written by this task only.
        unsafe { store(dt, dst.get().add(r * sh.c * sz), sz as isize, &gi).expect("checked dtype") };
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loss and gradient as the definition states them, in f64.
    fn reference(x: &[f64], t: &[i64], n: usize, c: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (mut loss, mut is_t, mut grad) = (vec![0.0; n], vec![0.0; n * c], vec![0.0; n * c]);
        for r in 0..n {
            let row = &t[r * c..(r + 1) * c];
            let ts: Vec<usize> = row.iter().take_while(|&&v| v >= 0).map(|&v| v as usize).collect();
            for &j in &ts {
                is_t[r * c + j] = 1.0;
            }
            for &j in &ts {
                for i in 0..c {
                    if is_t[r * c + i] == 0.0 {
                        let z = 1.0 - x[r * c + j] + x[r * c + i];
                        if z > 0.0 {
                            loss[r] += z / c as f64;
                            grad[r * c + j] -= 1.0 / c as f64;
                            grad[r * c + i] += 1.0 / c as f64;
                        }
                    }
                }
            }
        }
        (loss, is_t, grad)
    }

    fn sample(n: usize, c: usize) -> (Vec<f64>, Vec<i64>) {
        let x: Vec<f64> = (0..n * c).map(|k| ((k * 37 % 23) as f64 - 11.0) / 7.0).collect();
        let mut t = vec![-1i64; n * c];
        for r in 0..n {
            // row r: r % (c + 1) targets, some repeated; row 0 has none, row c all classes
            for k in 0..(r % (c + 1)) {
                t[r * c + k] = ((r + 3 * k) % c) as i64;
            }
            if r % (c + 1) == c {
                for k in 0..c {
                    t[r * c + k] = k as i64;
                }
            }
        }
        (x, t)
    }

    fn forward(dt: DType, sh: MarginShape, x: &[u8], t: &[i64], threads: usize) -> Result<(Vec<f64>, Vec<f64>)> {
        let sz = dt.size();
        let out_len = if sh.reduction == Reduction::None { sh.n } else { 1 };
        let (mut out, mut is_t) = (vec![0u8; out_len * sz], vec![0u8; sh.n * sh.c * sz]);
        // SAFETY: the buffers are sized for the shape.
        unsafe {
            multilabel_margin_loss(dt, sh, x.as_ptr(), t.as_ptr(), out.as_mut_ptr(), is_t.as_mut_ptr(), threads)?
        };
        Ok((to_f64(dt, &out), to_f64(dt, &is_t)))
    }

    fn from_f64(dt: DType, v: &[f64]) -> Vec<u8> {
        let mut b = vec![0u8; v.len() * dt.size()];
        // SAFETY: b holds v.len() elements of dt.
        unsafe { store(dt, b.as_mut_ptr(), dt.size() as isize, v).unwrap() };
        b
    }

    fn to_f64(dt: DType, b: &[u8]) -> Vec<f64> {
        let mut v = vec![0f64; b.len() / dt.size()];
        // SAFETY: b holds v.len() elements of dt.
        unsafe { load(dt, b.as_ptr(), dt.size() as isize, v.len(), &mut v).unwrap() };
        v
    }

    fn close(a: &[f64], b: &[f64], tol: f64) {
        assert_eq!(a.len(), b.len());
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "element {k}: {x} vs {y}");
        }
    }

    #[test]
    fn multilabel_margin_matches_reference() {
        let (n, c) = (11, 5);
        let (xf, t) = sample(n, c);
        for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5), (DType::BF16, 3e-2), (DType::F16, 3e-3)] {
            let x = from_f64(dt, &xf);
            let xr = to_f64(dt, &x);
            let (loss, is_t, grad) = reference(&xr, &t, n, c);
            for threads in [1, 4] {
                for red in [Reduction::None, Reduction::Mean, Reduction::Sum] {
                    let sh = MarginShape { n, c, reduction: red };
                    let (out, mask) = forward(dt, sh, &x, &t, threads).unwrap();
                    assert_eq!(mask, is_t);
                    let sum: f64 = loss.iter().sum();
                    match red {
                        Reduction::None => close(&out, &loss, tol),
                        Reduction::Mean => close(&out, &[sum / n as f64], tol),
                        Reduction::Sum => close(&out, &[sum], tol),
                    }
                    let go: Vec<f64> = match red {
                        Reduction::None => (0..n).map(|r| 0.5 + r as f64).collect(),
                        _ => vec![2.0],
                    };
                    let want: Vec<f64> = (0..n * c)
                        .map(|k| match red {
                            Reduction::None => grad[k] * go[k / c],
                            Reduction::Mean => grad[k] * 2.0 / n as f64,
                            Reduction::Sum => grad[k] * 2.0,
                        })
                        .collect();
                    let (gob, mb) = (from_f64(dt, &go), from_f64(dt, &mask));
                    let mut gi = vec![0xffu8; n * c * dt.size()];
                    // SAFETY: the buffers are sized for the shape.
                    unsafe {
                        let io = MarginGrads {
                            grad_output: gob.as_ptr(),
                            input: x.as_ptr(),
                            target: t.as_ptr(),
                            is_target: mb.as_ptr(),
                            grad_input: gi.as_mut_ptr(),
                        };
                        multilabel_margin_loss_backward(dt, sh, io, threads)
                    }
                    .unwrap();
                    close(&to_f64(dt, &gi), &want, tol);
                }
            }
        }
    }

    #[test]
    fn multilabel_margin_rejects_bad_targets_and_is_target() {
        let (n, c) = (2, 3);
        let x = from_f64(DType::F32, &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]);
        let sh = MarginShape { n, c, reduction: Reduction::Mean };
        // out of range after a row's terminator still fails, as on CPU
        for bad in [[0i64, 3, -1, 1, -1, 0], [0, -1, -2, 1, -1, 0], [-2, 0, 0, 0, 0, 0]] {
            let err = forward(DType::F32, sh, &x, &bad, 1).unwrap_err();
            assert!(matches!(err, Error::InvalidValue { .. }), "{err}");
            assert_eq!(err.to_string(), "argument #2 'target' is out of range");
        }
        let t = [0i64, -1, 0, 2, 1, -1];
        let (go, mut gi) = (from_f64(DType::F32, &[1.0]), vec![0u8; n * c * 4]);
        let mask = from_f64(DType::F32, &[1.0, 0.0, 0.0, 0.0, 2.0, 1.0]);
        // SAFETY: the buffers are sized for the shape.
        let err = unsafe {
            let io = MarginGrads {
                grad_output: go.as_ptr(),
                input: x.as_ptr(),
                target: t.as_ptr(),
                is_target: mask.as_ptr(),
                grad_input: gi.as_mut_ptr(),
            };
            multilabel_margin_loss_backward(DType::F32, sh, io, 1)
        }
        .unwrap_err();
        assert_eq!(err.to_string(), "argument #5 'is_target' is out of range");
        let err = forward(DType::I64, sh, &x, &t, 1).unwrap_err();
        assert!(matches!(err, Error::UnsupportedDtype { .. }), "{err}");
    }

    #[test]
    fn multilabel_margin_empty_batch() {
        let sh = |reduction| MarginShape { n: 0, c: 3, reduction };
        assert!(forward(DType::F32, sh(Reduction::None), &[], &[], 1).unwrap().0.is_empty());
        assert_eq!(forward(DType::F32, sh(Reduction::Sum), &[], &[], 1).unwrap().0, [0.0]);
        assert!(forward(DType::F32, sh(Reduction::Mean), &[], &[], 1).unwrap().0[0].is_nan());
    }
}
