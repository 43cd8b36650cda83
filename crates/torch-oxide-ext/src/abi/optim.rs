//! Fused optimizer steps and GradScaler kernels (`csrc/aten/optim/`, `csrc/amp/`,
//! `oxide_kernels::ops::optim`).

use super::*;

/// `_amp_foreach_non_finite_check_and_unscale_` for one strided device operand:
/// scales it in place by `inv_scale` and ORs "found a NaN/inf" into `*found`.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_amp_unscale(
    device: i32,
    stream: i64,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    data: *mut c_void,
    strides: *const i64,
    inv_scale: f64,
    found: *mut bool,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let layout = Layout::new("_amp_foreach_non_finite_check_and_unscale_", unsafe { dims(shape, ndim) }, [unsafe { dims(strides, ndim) }])?;
        let dt = dtype(dtype_code)?;
        let any = launch_raw(device, stream, layout.numel(), &[data], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::optim::amp::unscale_and_check(dt, &layout, data as *mut u8, inv_scale) }
        })?;
        // SAFETY: found is the glue's local.
        if any && !found.is_null() {
            unsafe { *found = true };
        }
        Ok(())
    })
}

/// `_amp_update_scale_` on one-element device tensors: `scale` (float32),
/// `growth_tracker` (int32) and `found_inf` (float32).
///
/// # Safety
/// The three pointers address one live device element each.
#[no_mangle]
pub unsafe extern "C" fn oxide_amp_update_scale(
    device: i32,
    stream: i64,
    scale: *mut f32,
    growth_tracker: *mut i32,
    found_inf: *const f32,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
) -> i32 {
    ffi(|| {
        let operands = [scale as *const c_void, growth_tracker as *const c_void, found_inf as *const c_void];
        launch_raw(device, stream, 1, &operands, || -> Result<(), AbiError> {
            // SAFETY: one element each, per the contract.
            unsafe {
                let (mut s, mut t) = (scale.read_unaligned(), growth_tracker.read_unaligned());
                oxide_kernels::ops::optim::amp::update_scale(&mut s, &mut t, found_inf.read_unaligned(), growth_factor, backoff_factor, growth_interval);
                scale.write_unaligned(s);
                growth_tracker.write_unaligned(t);
            }
            Ok(())
        })
    })
}

/// Hyper-parameters of [`oxide_fused_adam`], as `torch.optim.Adam(W)` passes them.
#[repr(C)]
pub struct OxideAdam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub eps: f64,
    pub amsgrad: i32,
    pub maximize: i32,
    /// Nonzero for AdamW's decoupled weight decay.
    pub decoupled: i32,
    /// Step count after this step.
    pub step: f64,
    /// Gradients are divided by this when `has_grad_scale` is nonzero.
    pub grad_scale: f64,
    pub has_grad_scale: i32,
}

/// One fused Adam/AdamW step on `n` contiguous elements of each tensor
/// (`max_exp_avg_sq` may be null without amsgrad).
///
/// # Safety
/// Non-null pointers address `n` elements of `dtype_code` in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_fused_adam(device: i32, stream: i64, dtype_code: i32, n: usize, param: *mut c_void, grad: *mut c_void, exp_avg: *mut c_void, exp_avg_sq: *mut c_void, max_exp_avg_sq: *mut c_void, h: *const OxideAdam, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        // SAFETY: caller passes a valid struct.
        let h = unsafe { &*h };
        let hp = oxide_kernels::ops::optim::fused::Adam {
            lr: h.lr, beta1: h.beta1, beta2: h.beta2, weight_decay: h.weight_decay, eps: h.eps,
            amsgrad: h.amsgrad != 0, maximize: h.maximize != 0, decoupled: h.decoupled != 0, step: h.step,
            grad_scale: (h.has_grad_scale != 0).then_some(h.grad_scale),
        };
        launch_raw(device, stream, n, &[param as *const c_void, grad as *const c_void, exp_avg as *const c_void, exp_avg_sq as *const c_void], || unsafe {
            oxide_kernels::ops::optim::fused::adam(dt, n, param as _, grad as _, exp_avg as _, exp_avg_sq as _, max_exp_avg_sq as _, hp, threads.max(1) as usize)
        })
    })
}

/// Hyper-parameters of [`oxide_fused_sgd`], as `torch.optim.SGD` passes them.
#[repr(C)]
pub struct OxideSgd {
    pub lr: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: i32,
    pub maximize: i32,
    pub is_first_step: i32,
    pub grad_scale: f64,
    pub has_grad_scale: i32,
}

/// One fused SGD step on `n` contiguous elements (`momentum_buffer` may be null without momentum).
///
/// # Safety
/// Non-null pointers address `n` elements of `dtype_code` in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_fused_sgd(device: i32, stream: i64, dtype_code: i32, n: usize, param: *mut c_void, grad: *mut c_void, momentum_buffer: *mut c_void, h: *const OxideSgd, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        // SAFETY: caller passes a valid struct.
        let h = unsafe { &*h };
        let hp = oxide_kernels::ops::optim::fused::Sgd {
            lr: h.lr, weight_decay: h.weight_decay, momentum: h.momentum, dampening: h.dampening,
            nesterov: h.nesterov != 0, maximize: h.maximize != 0, is_first_step: h.is_first_step != 0,
            grad_scale: (h.has_grad_scale != 0).then_some(h.grad_scale),
        };
        launch_raw(device, stream, n, &[param as *const c_void, grad as *const c_void], || unsafe {
            oxide_kernels::ops::optim::fused::sgd(dt, n, param as _, grad as _, momentum_buffer as _, hp, threads.max(1) as usize)
        })
    })
}
