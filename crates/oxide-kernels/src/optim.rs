//! Fused optimizer steps: Adam / AdamW (Kingma & Ba 2015; Loshchilov & Hutter
//! 2019 for the decoupled weight decay) and SGD with momentum, one pass over
//! each parameter tensor, following `torch.optim`'s update rules (the
//! `_fused_adam_`, `_fused_adamw_` and `_fused_sgd_` operators).
//!
//! Tensors are contiguous and share one floating dtype; float16 and bfloat16
//! compute in float32 (PyTorch's opmath), float32 in float32, float64 in float64.

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::iter::{load, store};
use crate::math::Float;

/// Elements per block: loads and stores go through stack-sized buffers.
const BLOCK: usize = 1024;
/// Tensors smaller than this run on the calling thread.
const GRAIN: usize = 32768;

/// Hyper-parameters of one Adam/AdamW step.
#[derive(Debug, Clone, Copy)]
pub struct Adam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub eps: f64,
    pub amsgrad: bool,
    pub maximize: bool,
    /// AdamW: decay the parameter (`p *= 1 - lr * weight_decay`) instead of adding `weight_decay * p` to the gradient.
    pub decoupled: bool,
    /// The step count after this step (1 on the first step).
    pub step: f64,
    /// Gradients are divided by this (GradScaler's scale), when set.
    pub grad_scale: Option<f64>,
}

/// Hyper-parameters of one SGD step.
#[derive(Debug, Clone, Copy)]
pub struct Sgd {
    pub lr: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub maximize: bool,
    /// The momentum buffer is initialised to the gradient on the first step.
    pub is_first_step: bool,
    pub grad_scale: Option<f64>,
}

#[derive(Clone, Copy)]
struct Ptr(*mut u8);
// SAFETY: tasks address disjoint blocks.
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

fn check(op: &'static str, dt: DType) -> Result<()> {
    match dt {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        d => Err(Error::UnsupportedDtype { op, dtype: d }),
    }
}

/// Runs `f(start, len)` over blocks of `0..n`, in parallel above [`GRAIN`].
fn blocks(n: usize, threads: usize, f: impl Fn(usize, usize) + Sync) {
    let count = n.div_ceil(BLOCK);
    let run = |b: usize| f(b * BLOCK, BLOCK.min(n - b * BLOCK));
    if threads <= 1 || n < GRAIN {
        (0..count).for_each(run);
    } else {
        (0..count).into_par_iter().with_min_len(count.div_ceil(threads)).for_each(run);
    }
}

/// Loads `len` elements at element `start` of each pointer into `bufs` (null pointers are skipped).
unsafe fn load_all<F: Element>(dt: DType, ptrs: &[Ptr], start: usize, len: usize, bufs: &mut [[F; BLOCK]]) {
    let sz = dt.size();
    for (p, b) in ptrs.iter().zip(bufs.iter_mut()) {
        if !p.0.is_null() {
            // SAFETY: caller: the block lies inside every tensor.
            unsafe { load(dt, p.0.add(start * sz), sz as isize, len, &mut b[..len]).expect("checked dtype") };
        }
    }
}

unsafe fn store_one<F: Element>(dt: DType, p: Ptr, start: usize, src: &[F]) {
    let sz = dt.size();
    // SAFETY: caller: the block lies inside the tensor.
    unsafe { store(dt, p.0.add(start * sz), sz as isize, src).expect("checked dtype") };
}

/// One Adam/AdamW step over `n` elements, in place on `param`, `exp_avg`,
/// `exp_avg_sq` and (with `amsgrad`) `max_exp_avg_sq`; `grad` is read only.
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes;
/// [`Error::InvalidValue`] when `amsgrad` is set without `max_exp_avg_sq`.
///
/// # Safety
/// Every non-null pointer addresses `n` contiguous elements of `dt`; the
/// written tensors do not overlap each other or `grad`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn adam(dt: DType, n: usize, param: *mut u8, grad: *const u8, exp_avg: *mut u8, exp_avg_sq: *mut u8, max_exp_avg_sq: *mut u8, h: Adam, threads: usize) -> Result<()> {
    check("_fused_adam_", dt)?;
    if h.amsgrad && max_exp_avg_sq.is_null() {
        return Err(Error::InvalidValue { op: "_fused_adam_", reason: "amsgrad needs max_exp_avg_sqs".into() });
    }
    // SAFETY: forwarded contract.
    unsafe {
        if dt == DType::F64 {
            adam_in::<f64>(dt, n, [param, grad as *mut u8, exp_avg, exp_avg_sq, max_exp_avg_sq], h, threads)
        } else {
            adam_in::<f32>(dt, n, [param, grad as *mut u8, exp_avg, exp_avg_sq, max_exp_avg_sq], h, threads)
        }
    }
    Ok(())
}

unsafe fn adam_in<F: Float + Element>(dt: DType, n: usize, ptrs: [*mut u8; 5], h: Adam, threads: usize) {
    let ptrs = ptrs.map(Ptr);
    let c = |v: f64| F::from_f64(v);
    let (beta1, beta2) = (c(h.beta1), c(h.beta2));
    let (one_m_b1, one_m_b2) = (c(1.0 - h.beta1), c(1.0 - h.beta2));
    let step_size = c(h.lr / (1.0 - h.beta1.powf(h.step)));
    let bc2_sqrt = c((1.0 - h.beta2.powf(h.step)).sqrt());
    let (wd, eps) = (c(h.weight_decay), c(h.eps));
    let decay = c(1.0 - h.lr * h.weight_decay);
    let inv_scale = h.grad_scale.map(|s| c(1.0 / s));
    blocks(n, threads, |start, len| {
        let ptrs = ptrs;
        let mut b = [[F::ZERO; BLOCK]; 5];
        // SAFETY: block [start, start+len) lies in every tensor (contract).
        unsafe { load_all(dt, &ptrs, start, len, &mut b) };
        let [p, g, m, v, vmax] = &mut b;
        for k in 0..len {
            let mut gk = g[k];
            if let Some(s) = inv_scale {
                gk = gk * s;
            }
            if h.maximize {
                gk = -gk;
            }
            if h.weight_decay != 0.0 {
                if h.decoupled {
                    p[k] = p[k] * decay;
                } else {
                    gk = gk + wd * p[k];
                }
            }
            m[k] = m[k] * beta1 + gk * one_m_b1;
            v[k] = v[k] * beta2 + gk * gk * one_m_b2;
            let second = if h.amsgrad {
                vmax[k] = vmax[k].max_nan(v[k]);
                vmax[k]
            } else {
                v[k]
            };
            let denom = second.sqrt() / bc2_sqrt + eps;
            p[k] = p[k] - step_size * m[k] / denom;
        }
        // SAFETY: as above.
        unsafe {
            store_one(dt, ptrs[0], start, &p[..len]);
            store_one(dt, ptrs[2], start, &m[..len]);
            store_one(dt, ptrs[3], start, &v[..len]);
            if h.amsgrad {
                store_one(dt, ptrs[4], start, &vmax[..len]);
            }
        }
    });
}

/// One SGD step over `n` elements, in place on `param` and (with momentum) `momentum_buffer`.
///
/// Errors: [`Error::UnsupportedDtype`]; [`Error::InvalidValue`] for momentum without a buffer.
///
/// # Safety
/// As [`adam`].
pub unsafe fn sgd(dt: DType, n: usize, param: *mut u8, grad: *const u8, momentum_buffer: *mut u8, h: Sgd, threads: usize) -> Result<()> {
    check("_fused_sgd_", dt)?;
    if h.momentum != 0.0 && momentum_buffer.is_null() {
        return Err(Error::InvalidValue { op: "_fused_sgd_", reason: "momentum needs momentum buffers".into() });
    }
    // SAFETY: forwarded contract.
    unsafe {
        if dt == DType::F64 {
            sgd_in::<f64>(dt, n, [param, grad as *mut u8, momentum_buffer], h, threads)
        } else {
            sgd_in::<f32>(dt, n, [param, grad as *mut u8, momentum_buffer], h, threads)
        }
    }
    Ok(())
}

unsafe fn sgd_in<F: Float + Element>(dt: DType, n: usize, ptrs: [*mut u8; 3], h: Sgd, threads: usize) {
    let ptrs = ptrs.map(Ptr);
    let c = |v: f64| F::from_f64(v);
    let (lr, wd, mom, damp) = (c(h.lr), c(h.weight_decay), c(h.momentum), c(1.0 - h.dampening));
    let inv_scale = h.grad_scale.map(|s| c(1.0 / s));
    blocks(n, threads, |start, len| {
        let ptrs = ptrs;
        let mut b = [[F::ZERO; BLOCK]; 3];
        // SAFETY: block [start, start+len) lies in every tensor (contract).
        unsafe { load_all(dt, &ptrs, start, len, &mut b) };
        let [p, g, buf] = &mut b;
        for k in 0..len {
            let mut gk = g[k];
            if let Some(s) = inv_scale {
                gk = gk * s;
            }
            if h.maximize {
                gk = -gk;
            }
            if h.weight_decay != 0.0 {
                gk = gk + wd * p[k];
            }
            if h.momentum != 0.0 {
                buf[k] = if h.is_first_step { gk } else { buf[k] * mom + damp * gk };
                gk = if h.nesterov { gk + mom * buf[k] } else { buf[k] };
            }
            p[k] = p[k] - lr * gk;
        }
        // SAFETY: as above.
        unsafe {
            store_one(dt, ptrs[0], start, &p[..len]);
            if h.momentum != 0.0 {
                store_one(dt, ptrs[2], start, &buf[..len]);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adamw_step_matches_the_reference_formula() {
        let n = 3000;
        let mut p: Vec<f64> = (0..n).map(|k| (k as f64 * 0.1).sin()).collect();
        let g: Vec<f64> = (0..n).map(|k| (k as f64 * 0.7).cos()).collect();
        let mut m: Vec<f64> = (0..n).map(|k| k as f64 * 1e-4).collect();
        let mut v: Vec<f64> = vec![0.01; n];
        let mut vmax: Vec<f64> = vec![0.02; n];
        let (p0, m0, v0) = (p.clone(), m.clone(), v.clone());
        let h = Adam { lr: 1e-2, beta1: 0.9, beta2: 0.99, weight_decay: 0.1, eps: 1e-8, amsgrad: true, maximize: false, decoupled: true, step: 3.0, grad_scale: Some(2.0) };
        unsafe { adam(DType::F64, n, p.as_mut_ptr() as _, g.as_ptr() as _, m.as_mut_ptr() as _, v.as_mut_ptr() as _, vmax.as_mut_ptr() as _, h, 2) }.unwrap();
        for k in 0..n {
            let gk = g[k] / 2.0;
            let pk = p0[k] * (1.0 - 1e-2 * 0.1);
            let mk = 0.9 * m0[k] + 0.1 * gk;
            let vk = 0.99 * v0[k] + 0.01 * gk * gk;
            let vm = vk.max(0.02);
            let want = pk - 1e-2 / (1.0 - 0.9f64.powi(3)) * mk / (vm.sqrt() / (1.0 - 0.99f64.powi(3)).sqrt() + 1e-8);
            assert!((p[k] - want).abs() < 1e-14 && (m[k] - mk).abs() < 1e-15 && vmax[k] == vm, "k={k}");
        }
    }

    #[test]
    fn sgd_nesterov_momentum_and_first_step() {
        let mut p = [1.0f32, -2.0];
        let g = [0.5f32, 0.25];
        let mut buf = [9.0f32, 9.0];
        let h = Sgd { lr: 0.1, weight_decay: 0.0, momentum: 0.9, dampening: 0.0, nesterov: true, maximize: false, is_first_step: true, grad_scale: None };
        unsafe { sgd(DType::F32, 2, p.as_mut_ptr() as _, g.as_ptr() as _, buf.as_mut_ptr() as _, h, 1) }.unwrap();
        assert_eq!(buf, g);
        assert!((p[0] - (1.0 - 0.1 * (0.5 + 0.9 * 0.5))).abs() < 1e-7);
        let h2 = Sgd { is_first_step: false, nesterov: false, ..h };
        unsafe { sgd(DType::F32, 2, p.as_mut_ptr() as _, g.as_ptr() as _, buf.as_mut_ptr() as _, h2, 1) }.unwrap();
        assert!((buf[1] - (0.9 * 0.25 + 0.25)).abs() < 1e-7);
    }
}
