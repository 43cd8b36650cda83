//! Fused optimizer steps: Adam / AdamW (Kingma & Ba 2015; Loshchilov & Hutter
//! 2019 for the decoupled weight decay) and SGD with momentum, one pass over
//! each parameter tensor, following `torch.optim`'s update rules (the
//! `_fused_adam_`, `_fused_adamw_` and `_fused_sgd_` operators).
//!
//! Tensors are contiguous and share one floating dtype; float16 and bfloat16
//! compute in float32 (PyTorch's opmath), float32 in float32, float64 in float64.
//!
//! Speed: float32 and float64 update the tensors in place (no staging
//! buffers); every hyper-parameter test that does not change per element is a
//! const generic, so the element loop has no branches and LLVM vectorises it
//! (sqrt and division included) for the machine's widest SIMD. Half-precision
//! tensors are staged through float32 blocks of [`BLOCK`] elements. Tensors of
//! [`GRAIN`] elements or more are split over the rayon pool.

use crate::dtype::{DType, Element};
use crate::engine::iter::{load, store, BLOCK, GRAIN};
use crate::engine::math::Float;
use crate::engine::SendPtr;
use crate::error::{Error, Result};

// Blocks of the engine's `BLOCK` elements are the unit of parallel work and the
// size of the float32 staging buffers of half-precision tensors (5 x 4 KiB on
// the stack). Tensors below the engine's `GRAIN` run on the calling thread: an
// update reads and writes ~28 bytes per element, so a grain is ~1 MB of traffic,
// well above the cost of a fork/join.

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

/// The tensors of one [`adam`] step: `n` contiguous elements each
/// (`max_exp_avg_sq` may be null without amsgrad).
#[derive(Debug, Clone, Copy)]
pub struct AdamTensors {
    pub param: *mut u8,
    pub grad: *mut u8,
    pub exp_avg: *mut u8,
    pub exp_avg_sq: *mut u8,
    pub max_exp_avg_sq: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for AdamTensors {}

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

/// Elements `[start, start + len)` of a tensor of `F` at `p` as a slice; empty for a null pointer.
///
/// # Safety
/// The range lies in the tensor and no other live slice overlaps it.
#[inline(always)]
unsafe fn slice<'a, F>(p: SendPtr<u8>, start: usize, len: usize) -> &'a mut [F] {
    if p.is_null() {
        return &mut [];
    }
    // SAFETY: caller contract: the range lies in the tensor, no other live slice overlaps it.
    unsafe { std::slice::from_raw_parts_mut((p.get() as *mut F).add(start), len) }
}

/// Runs `f(start, len)` over blocks of `0..n`, in parallel above [`GRAIN`];
/// each task takes a contiguous run of blocks (one run per thread).
fn blocks(n: usize, threads: usize, f: impl Fn(usize, usize) + Sync) {
    if threads <= 1 || n < GRAIN {
        f(0, n);
        return;
    }
    let count = n.div_ceil(BLOCK);
    let per = count.div_ceil(threads);
    crate::engine::iter::for_each_task(threads, |t| {
        let (b0, b1) = (t * per, ((t + 1) * per).min(count));
        if b0 < b1 {
            let start = b0 * BLOCK;
            f(start, (b1 * BLOCK).min(n) - start);
        }
    });
}

/// Runs `f` over `len` elements at `start`: directly on the tensors when the
/// storage type is the compute type `F`, else block by block through float32
/// staging buffers (float16/bfloat16). `writes[i]` says whether operand `i`
/// is stored back; null operands are passed as empty slices.
///
/// # Safety
/// Every non-null pointer addresses at least `start + len` elements of `dt`;
/// written operands overlap nothing else.
#[inline(always)]
unsafe fn staged<F: Float + Element, const N: usize>(
    dt: DType,
    ptrs: [SendPtr<u8>; N],
    writes: [bool; N],
    start: usize,
    len: usize,
    f: &impl Fn([&mut [F]; N]),
) {
    if dt == F::DTYPE {
        // SAFETY: caller contract.
        f(ptrs.map(|p| unsafe { slice::<F>(p, start, len) }));
        return;
    }
    let sz = dt.size();
    let mut bufs = [[F::ZERO; BLOCK]; N];
    let mut s = start;
    while s < start + len {
        let l = BLOCK.min(start + len - s);
        for (p, b) in ptrs.iter().zip(bufs.iter_mut()) {
            if !p.get().is_null() {
                // SAFETY: caller contract.
                unsafe { load(dt, p.get().add(s * sz), sz as isize, l, &mut b[..l]).expect("checked dtype") };
            }
        }
        let mut k = 0;
        f(bufs.each_mut().map(|b| {
            let present = !ptrs[k].is_null();
            k += 1;
            if present {
                &mut b[..l]
            } else {
                &mut b[..0]
            }
        }));
        for ((p, b), w) in ptrs.iter().zip(bufs.iter()).zip(writes) {
            if w && !p.get().is_null() {
                // SAFETY: caller contract.
                unsafe { store(dt, p.get().add(s * sz), sz as isize, &b[..l]).expect("checked dtype") };
            }
        }
        s += l;
    }
}

/// One Adam/AdamW step over `n` elements, in place on `param`, `exp_avg`,
/// `exp_avg_sq` and (with `amsgrad`) `max_exp_avg_sq`. With `grad_scale` set,
/// `grad` is overwritten with the unscaled gradient (as CPU PyTorch's and CUDA's
/// fused kernels do, so `p.grad` after `GradScaler.step` matches); otherwise it
/// is only read.
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes;
/// [`Error::InvalidValue`] when `amsgrad` is set without `max_exp_avg_sq`.
///
/// # Safety
/// Every non-null pointer addresses `n` contiguous elements of `dt`; the
/// written tensors do not overlap each other or `grad`.
pub unsafe fn adam(dt: DType, n: usize, t: AdamTensors, h: Adam, threads: usize) -> Result<()> {
    let AdamTensors { param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq } = t;
    dt.require_float("_fused_adam_")?;
    if h.amsgrad && max_exp_avg_sq.is_null() {
        return Err(Error::InvalidValue { op: "_fused_adam_", reason: "amsgrad needs max_exp_avg_sqs".into() });
    }
    let ptrs = [param, grad, exp_avg, exp_avg_sq, if h.amsgrad { max_exp_avg_sq } else { std::ptr::null_mut() }];
    let l2 = !h.decoupled && h.weight_decay != 0.0;
    // SAFETY: forwarded contract.
    unsafe {
        match (dt == DType::F64, l2, h.amsgrad) {
            (true, false, false) => adam_in::<f64, false, false>(dt, n, ptrs, h, threads),
            (true, false, true) => adam_in::<f64, false, true>(dt, n, ptrs, h, threads),
            (true, true, false) => adam_in::<f64, true, false>(dt, n, ptrs, h, threads),
            (true, true, true) => adam_in::<f64, true, true>(dt, n, ptrs, h, threads),
            (false, false, false) => adam_in::<f32, false, false>(dt, n, ptrs, h, threads),
            (false, false, true) => adam_in::<f32, false, true>(dt, n, ptrs, h, threads),
            (false, true, false) => adam_in::<f32, true, false>(dt, n, ptrs, h, threads),
            (false, true, true) => adam_in::<f32, true, true>(dt, n, ptrs, h, threads),
        }
    }
    Ok(())
}

/// `L2`: classic Adam weight decay (`g += wd * p`); `AMS`: amsgrad.
unsafe fn adam_in<F: Float + Element, const L2: bool, const AMS: bool>(
    dt: DType,
    n: usize,
    ptrs: [*mut u8; 5],
    h: Adam,
    threads: usize,
) {
    let ptrs = ptrs.map(SendPtr::new);
    let c = |v: f64| F::from_f64(v);
    // The sign flip of `maximize` is exact, so it may follow the unscaling.
    let (unscale, sign) = (c(h.grad_scale.map_or(1.0, |s| 1.0 / s)), c(if h.maximize { -1.0 } else { 1.0 }));
    let write_grad = h.grad_scale.is_some();
    let (beta1, beta2) = (c(h.beta1), c(h.beta2));
    let (one_m_b1, one_m_b2) = (c(1.0 - h.beta1), c(1.0 - h.beta2));
    let step_size = c(h.lr / (1.0 - h.beta1.powf(h.step)));
    let bc2_sqrt = c((1.0 - h.beta2.powf(h.step)).sqrt());
    let (wd, eps) = (c(h.weight_decay), c(h.eps));
    // Multiplying by 1 (Adam, or no decay) leaves every value, NaN included, as it is.
    let decay = c(if h.decoupled { 1.0 - h.lr * h.weight_decay } else { 1.0 });
    let update = |[p, g, m, v, vmax]: [&mut [F]; 5]| {
        // Values, not the captured references: LLVM cannot tell a store to the slices
        // from a write to a captured scalar, so it reloaded each one per element and
        // kept the loop scalar (see `sgd_in`).
        let (unscale, sign, write_grad, decay, wd) = (unscale, sign, write_grad, decay, wd);
        let (beta1, beta2, one_m_b1, one_m_b2, step_size, bc2_sqrt, eps) =
            (beta1, beta2, one_m_b1, one_m_b2, step_size, bc2_sqrt, eps);
        let len = p.len();
        let (g, m, v) = (&mut g[..len], &mut m[..len], &mut v[..len]);
        let vmax = if AMS { &mut vmax[..len] } else { vmax };
        for k in 0..len {
            let unscaled = g[k] * unscale;
            // Loop-invariant test: LLVM unswitches it out of the loop.
            if write_grad {
                g[k] = unscaled;
            }
            let mut gk = unscaled * sign;
            let pk = p[k] * decay;
            if L2 {
                gk = gk + wd * pk;
            }
            let mk = m[k] * beta1 + gk * one_m_b1;
            let vk = v[k] * beta2 + gk * gk * one_m_b2;
            m[k] = mk;
            v[k] = vk;
            let second = if AMS {
                let s = vmax[k].max_nan(vk);
                vmax[k] = s;
                s
            } else {
                vk
            };
            p[k] = pk - step_size * mk / (second.sqrt() / bc2_sqrt + eps);
        }
    };
    blocks(n, threads, |start, len| {
        // SAFETY: [start, start+len) lies in every tensor (contract); tasks are disjoint.
        unsafe { staged::<F, 5>(dt, ptrs, [true, write_grad, true, true, AMS], start, len, &update) };
    });
}

/// One SGD step over `n` elements, in place on `param` and (with momentum)
/// `momentum_buffer`; with `grad_scale` set, `grad` receives the unscaled gradient as in [`adam`].
///
/// Errors: [`Error::UnsupportedDtype`]; [`Error::InvalidValue`] for momentum without a buffer.
///
/// # Safety
/// As [`adam`].
pub unsafe fn sgd(
    dt: DType,
    n: usize,
    param: *mut u8,
    grad: *mut u8,
    momentum_buffer: *mut u8,
    h: Sgd,
    threads: usize,
) -> Result<()> {
    dt.require_float("_fused_sgd_")?;
    if h.momentum != 0.0 && momentum_buffer.is_null() {
        return Err(Error::InvalidValue { op: "_fused_sgd_", reason: "momentum needs momentum buffers".into() });
    }
    let has_mom = h.momentum != 0.0;
    let ptrs = [param, grad, if has_mom { momentum_buffer } else { std::ptr::null_mut() }];
    let wd = h.weight_decay != 0.0;
    // SAFETY: forwarded contract.
    unsafe {
        match (dt == DType::F64, wd, has_mom) {
            (true, false, false) => sgd_in::<f64, false, false>(dt, n, ptrs, h, threads),
            (true, false, true) => sgd_in::<f64, false, true>(dt, n, ptrs, h, threads),
            (true, true, false) => sgd_in::<f64, true, false>(dt, n, ptrs, h, threads),
            (true, true, true) => sgd_in::<f64, true, true>(dt, n, ptrs, h, threads),
            (false, false, false) => sgd_in::<f32, false, false>(dt, n, ptrs, h, threads),
            (false, false, true) => sgd_in::<f32, false, true>(dt, n, ptrs, h, threads),
            (false, true, false) => sgd_in::<f32, true, false>(dt, n, ptrs, h, threads),
            (false, true, true) => sgd_in::<f32, true, true>(dt, n, ptrs, h, threads),
        }
    }
    Ok(())
}

/// `WD`: weight decay (`g += wd * p`); `MOM`: momentum buffer.
unsafe fn sgd_in<F: Float + Element, const WD: bool, const MOM: bool>(
    dt: DType,
    n: usize,
    ptrs: [*mut u8; 3],
    h: Sgd,
    threads: usize,
) {
    let ptrs = ptrs.map(SendPtr::new);
    let c = |v: f64| F::from_f64(v);
    let (unscale, sign) = (c(h.grad_scale.map_or(1.0, |s| 1.0 / s)), c(if h.maximize { -1.0 } else { 1.0 }));
    let write_grad = h.grad_scale.is_some();
    let (lr, wd, mom, damp) = (c(h.lr), c(h.weight_decay), c(h.momentum), c(1.0 - h.dampening));
    let (first, nesterov) = (h.is_first_step, h.nesterov);
    let update = |[p, g, buf]: [&mut [F]; 3]| {
        // Values, not the captured references: with the references, LLVM reloaded
        // every scalar and flag per element (it cannot tell a store to the slices from
        // a write to them) and kept the loop scalar. A ResNet-18 `SGD(fused=True)`
        // step then took longer than the three foreach passes (ARCHITECTURE.md,
        // Measurements).
        let (unscale, sign, write_grad, lr, wd, mom, damp) = (unscale, sign, write_grad, lr, wd, mom, damp);
        let (first, nesterov) = (first, nesterov);
        let len = p.len();
        let g = &mut g[..len];
        let buf = if MOM { &mut buf[..len] } else { buf };
        for k in 0..len {
            let unscaled = g[k] * unscale;
            if write_grad {
                g[k] = unscaled;
            }
            let mut gk = unscaled * sign;
            if WD {
                gk = gk + wd * p[k];
            }
            if MOM {
                // Loop-invariant tests: LLVM unswitches them out of the loop.
                let b = if first { gk } else { buf[k] * mom + damp * gk };
                buf[k] = b;
                gk = if nesterov { gk + mom * b } else { b };
            }
            p[k] = p[k] - lr * gk;
        }
    };
    blocks(n, threads, |start, len| {
        // SAFETY: [start, start+len) lies in every tensor (contract); tasks are disjoint.
        unsafe { staged::<F, 3>(dt, ptrs, [true, write_grad, MOM], start, len, &update) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adamw_step_matches_the_reference_formula() {
        let n = 3000;
        let mut p: Vec<f64> = (0..n).map(|k| (k as f64 * 0.1).sin()).collect();
        let g0: Vec<f64> = (0..n).map(|k| (k as f64 * 0.7).cos()).collect();
        let mut g = g0.clone();
        let mut m: Vec<f64> = (0..n).map(|k| k as f64 * 1e-4).collect();
        let mut v: Vec<f64> = vec![0.01; n];
        let mut vmax: Vec<f64> = vec![0.02; n];
        let (p0, m0, v0) = (p.clone(), m.clone(), v.clone());
        let h = Adam {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.99,
            weight_decay: 0.1,
            eps: 1e-8,
            amsgrad: true,
            maximize: false,
            decoupled: true,
            step: 3.0,
            grad_scale: Some(2.0),
        };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            adam(
                DType::F64,
                n,
                AdamTensors {
                    param: p.as_mut_ptr() as _,
                    grad: g.as_mut_ptr() as _,
                    exp_avg: m.as_mut_ptr() as _,
                    exp_avg_sq: v.as_mut_ptr() as _,
                    max_exp_avg_sq: vmax.as_mut_ptr() as _,
                },
                h,
                2,
            )
        }
        .unwrap();
        for k in 0..n {
            let gk = g0[k] / 2.0;
            // With a grad scale the gradient is left unscaled, as CPU's fused kernel leaves it.
            assert_eq!(g[k], gk, "k={k}");
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
        let mut g = [0.5f32, 0.25];
        let mut buf = [9.0f32, 9.0];
        let h = Sgd {
            lr: 0.1,
            weight_decay: 0.0,
            momentum: 0.9,
            dampening: 0.0,
            nesterov: true,
            maximize: false,
            is_first_step: true,
            grad_scale: None,
        };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { sgd(DType::F32, 2, p.as_mut_ptr() as _, g.as_mut_ptr() as _, buf.as_mut_ptr() as _, h, 1) }.unwrap();
        assert_eq!(buf, g);
        assert!((p[0] - (1.0 - 0.1 * (0.5 + 0.9 * 0.5))).abs() < 1e-7);
        let h2 = Sgd { is_first_step: false, nesterov: false, ..h };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { sgd(DType::F32, 2, p.as_mut_ptr() as _, g.as_mut_ptr() as _, buf.as_mut_ptr() as _, h2, 1) }.unwrap();
        assert!((buf[1] - (0.9 * 0.25 + 0.25)).abs() < 1e-7);
    }

    /// Naive float64 Adam/AdamW on one element: (param, exp_avg, exp_avg_sq, max_exp_avg_sq).
    fn adam_ref(p: f64, g: f64, m: f64, v: f64, vmax: f64, h: &Adam) -> (f64, f64, f64, f64) {
        let mut g = g / h.grad_scale.unwrap_or(1.0);
        if h.maximize {
            g = -g;
        }
        let mut p = p;
        if h.decoupled {
            p *= 1.0 - h.lr * h.weight_decay;
        } else {
            g += h.weight_decay * p;
        }
        let m = h.beta1 * m + (1.0 - h.beta1) * g;
        let v = h.beta2 * v + (1.0 - h.beta2) * g * g;
        let vmax = if h.amsgrad { vmax.max(v) } else { vmax };
        let second = if h.amsgrad { vmax } else { v };
        let denom = second.sqrt() / (1.0 - h.beta2.powf(h.step)).sqrt() + h.eps;
        (p - h.lr / (1.0 - h.beta1.powf(h.step)) * m / denom, m, v, vmax)
    }

    #[test]
    fn adam_float32_and_float16_match_the_reference_for_every_flag_combination() {
        // 40000 elements: above GRAIN, so the parallel split (with a partial last block) runs too.
        let n = 40_000;
        let p0: Vec<f64> = (0..n).map(|k| (k as f64 * 0.37).sin()).collect();
        let g: Vec<f64> = (0..n).map(|k| (k as f64 * 0.11).cos() * 0.5).collect();
        let m0: Vec<f64> = (0..n).map(|k| (k as f64 * 0.05).sin() * 0.1).collect();
        let v0: Vec<f64> = (0..n).map(|k| 0.01 + (k % 7) as f64 * 1e-3).collect();
        let vmax0: Vec<f64> = (0..n).map(|k| 0.012 + (k % 5) as f64 * 1e-3).collect();
        for bits in 0..32u32 {
            let h = Adam {
                lr: 1e-2,
                beta1: 0.9,
                beta2: 0.999,
                weight_decay: if bits & 1 != 0 { 0.05 } else { 0.0 },
                eps: 1e-8,
                amsgrad: bits & 2 != 0,
                maximize: bits & 4 != 0,
                decoupled: bits & 8 != 0,
                step: 4.0,
                grad_scale: (bits & 16 != 0).then_some(4.0),
            };
            let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
            let (mut p, mut gf, mut m, mut v, mut vmax) = (f(&p0), f(&g), f(&m0), f(&v0), f(&vmax0));
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                adam(
                    DType::F32,
                    n,
                    AdamTensors {
                        param: p.as_mut_ptr() as _,
                        grad: gf.as_mut_ptr() as _,
                        exp_avg: m.as_mut_ptr() as _,
                        exp_avg_sq: v.as_mut_ptr() as _,
                        max_exp_avg_sq: vmax.as_mut_ptr() as _,
                    },
                    h,
                    2,
                )
            }
            .unwrap();
            let h16 = |v: &[f64]| v.iter().map(|&x| half::f16::from_f64(x)).collect::<Vec<_>>();
            let (mut p16, mut g16, mut m16, mut v16, mut vmax16) = (h16(&p0), h16(&g), h16(&m0), h16(&v0), h16(&vmax0));
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                adam(
                    DType::F16,
                    n,
                    AdamTensors {
                        param: p16.as_mut_ptr() as _,
                        grad: g16.as_mut_ptr() as _,
                        exp_avg: m16.as_mut_ptr() as _,
                        exp_avg_sq: v16.as_mut_ptr() as _,
                        max_exp_avg_sq: vmax16.as_mut_ptr() as _,
                    },
                    h,
                    2,
                )
            }
            .unwrap();
            for k in 0..n {
                let (pw, mw, vw, vmw) = adam_ref(p0[k], g[k], m0[k], v0[k], vmax0[k], &h);
                let close = |got: f64, want: f64, tol: f64| (got - want).abs() <= tol * (1.0 + want.abs());
                assert!(
                    close(p[k] as f64, pw, 1e-5) && close(m[k] as f64, mw, 1e-5) && close(v[k] as f64, vw, 1e-5),
                    "f32 bits={bits} k={k}"
                );
                assert!(close(vmax[k] as f64, vmw, 1e-5), "f32 vmax bits={bits} k={k}");
                // float16 inputs are rounded copies, so compare with the reference on those.
                let r = |x: f64| half::f16::from_f64(x).to_f64();
                let (pw, mw, ..) = adam_ref(r(p0[k]), r(g[k]), r(m0[k]), r(v0[k]), r(vmax0[k]), &h);
                assert!(close(p16[k].to_f64(), pw, 2e-3) && close(m16[k].to_f64(), mw, 2e-3), "f16 bits={bits} k={k}");
                if !h.amsgrad {
                    assert_eq!(vmax16[k], half::f16::from_f64(vmax0[k]), "untouched without amsgrad");
                }
                // The gradient: unscaled in place with a grad scale (exact: the scale is 4), else untouched.
                let gw = g[k] as f32 / h.grad_scale.unwrap_or(1.0) as f32;
                assert_eq!(gf[k], gw, "f32 grad bits={bits} k={k}");
                assert_eq!(
                    g16[k],
                    half::f16::from_f64(r(g[k]) / h.grad_scale.unwrap_or(1.0)),
                    "f16 grad bits={bits} k={k}"
                );
            }
        }
    }

    #[test]
    fn sgd_float32_matches_the_reference_in_parallel() {
        let n = 70_001;
        let p0: Vec<f32> = (0..n).map(|k| (k as f32 * 0.3).sin()).collect();
        let g: Vec<f32> = (0..n).map(|k| (k as f32 * 0.7).cos()).collect();
        let b0: Vec<f32> = (0..n).map(|k| (k as f32 * 0.2).sin() * 0.1).collect();
        for bits in 0..16u32 {
            let h = Sgd {
                lr: 0.1,
                weight_decay: if bits & 1 != 0 { 0.01 } else { 0.0 },
                momentum: if bits & 2 != 0 { 0.9 } else { 0.0 },
                dampening: 0.1,
                nesterov: bits & 4 != 0,
                maximize: bits & 8 != 0,
                is_first_step: false,
                grad_scale: None,
            };
            let (mut p, mut b, mut gm) = (p0.clone(), b0.clone(), g.clone());
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { sgd(DType::F32, n, p.as_mut_ptr() as _, gm.as_mut_ptr() as _, b.as_mut_ptr() as _, h, 2) }
                .unwrap();
            for k in 0..n {
                let (pk, gk0) = (p0[k] as f64, g[k] as f64);
                let mut gk = if h.maximize { -gk0 } else { gk0 } + h.weight_decay * pk;
                let mut bk = b0[k] as f64;
                if h.momentum != 0.0 {
                    bk = bk * 0.9 + 0.9 * gk;
                    gk = if h.nesterov { gk + 0.9 * bk } else { bk };
                }
                assert!(
                    (p[k] as f64 - (pk - 0.1 * gk)).abs() < 1e-5 && (b[k] as f64 - bk).abs() < 1e-5,
                    "bits={bits} k={k}"
                );
            }
        }
    }
}
