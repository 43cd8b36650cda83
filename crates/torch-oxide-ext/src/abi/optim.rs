//! Fused optimizer steps and GradScaler kernels (`csrc/aten/optim/`, `csrc/amp/`,
//! `oxide_kernels::ops::optim`).

use super::*;

/// `_amp_foreach_non_finite_check_and_unscale_` for one strided operand:
/// scales it in place by the one-element float32 `inv_scale` and sets the
/// one-element float32 `found_inf` to 1 when it meets a NaN or an infinity.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_amp_unscale(
    on: OxideLaunch,
    t: OxideTensor,
    inv_scale: OxideTensor,
    found_inf: OxideTensor,
) -> i32 {
    use oxide_kernels::DType;
    const OP: &str = "_amp_foreach_non_finite_check_and_unscale_";
    ffi(|| {
        // SAFETY: the function's contract.
        let [t, inv_scale, found_inf] = unsafe { required(OP, [&t, &inv_scale, &found_inf]) }?;
        inv_scale.dtype_is(OP, DType::F32)?.numel_is(OP, 1)?;
        found_inf.dtype_is(OP, DType::F32)?.numel_is(OP, 1)?;
        let layout = Layout::new(OP, &t.sizes, [&t.strides])?;
        // As on CUDA, the scale is read and the flag written by the kernel, in
        // stream order: GradScaler's step reads found_inf later, on the device.
        launch(&on, move || -> Result<(), AbiError> {
            // SAFETY: `inv_scale` is one float32 element (checked above).
            let inv = unsafe { (inv_scale.src() as *const f32).read_unaligned() };
            // SAFETY: `layout` addresses only elements of the decoded operand.
            let any = unsafe {
                oxide_kernels::ops::optim::amp::unscale_and_check(t.dtype, &layout, t.dst(), f64::from(inv))
            }?;
            if any {
                // SAFETY: `found_inf` is one float32 element (checked above).
                unsafe { (found_inf.dst() as *mut f32).write_unaligned(1.0) };
            }
            Ok(())
        })
    })
}

/// `_amp_update_scale_` on one-element device tensors: `scale` (float32),
/// `growth_tracker` (int32) and `found_inf` (float32).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_amp_update_scale(
    on: OxideLaunch,
    scale: OxideTensor,
    growth_tracker: OxideTensor,
    found_inf: OxideTensor,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
) -> i32 {
    use oxide_kernels::DType;
    const OP: &str = "_amp_update_scale_";
    ffi(|| {
        // SAFETY: the function's contract.
        let [scale, growth_tracker, found_inf] = unsafe { required(OP, [&scale, &growth_tracker, &found_inf]) }?;
        scale.dtype_is(OP, DType::F32)?.numel_is(OP, 1)?;
        growth_tracker.dtype_is(OP, DType::I32)?.numel_is(OP, 1)?;
        found_inf.dtype_is(OP, DType::F32)?.numel_is(OP, 1)?;
        launch(&on, move || -> Result<(), AbiError> {
            let (sp, tp) = (scale.dst() as *mut f32, growth_tracker.dst() as *mut i32);
            let fp = found_inf.src() as *const f32;
            // SAFETY: each operand is one element of the dtype read here (checked above).
            unsafe {
                let (mut s, mut t) = (sp.read_unaligned(), tp.read_unaligned());
                oxide_kernels::ops::optim::amp::update_scale(
                    &mut s,
                    &mut t,
                    fp.read_unaligned(),
                    growth_factor,
                    backoff_factor,
                    growth_interval,
                );
                sp.write_unaligned(s);
                tp.write_unaligned(t);
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
    pub amsgrad: bool,
    pub maximize: bool,
    /// AdamW's decoupled weight decay.
    pub decoupled: bool,
    /// Step count after this step.
    pub step: f64,
    /// Gradients are divided by this when `has_grad_scale`.
    pub grad_scale: f64,
    pub has_grad_scale: bool,
}

/// One-element device tensors a fused optimizer step reads when its launch runs, as
/// CUDA's fused kernels take them by pointer: the host never reads them, so the
/// step's launches are queued like any other (torch.optim increments the step
/// counts, and GradScaler writes `found_inf`, with kernels queued just before).
/// Each is absent (see [`OxideTensor`]) when the caller passes a host value instead.
#[repr(C)]
pub struct OxideStepScalars {
    /// The learning rate (a tensor `lr`); absent: the hyper-parameters' `lr`.
    pub lr: OxideTensor,
    /// Adam's step count after this step; absent: the hyper-parameters' `step`.
    pub step: OxideTensor,
    /// GradScaler's scale, dividing the gradients; absent: no scaling.
    pub grad_scale: OxideTensor,
    /// GradScaler's flag: nonzero skips the step; absent: never skipped.
    pub found_inf: OxideTensor,
}

/// [`OxideStepScalars`] decoded: each present one is a one-element floating-point device tensor.
struct StepScalars {
    lr: Option<Operand>,
    step: Option<Operand>,
    grad_scale: Option<Operand>,
    found_inf: Option<Operand>,
}

impl StepScalars {
    /// # Safety
    /// Each present [`OxideTensor`] of `s` describes live memory (see [`operands`]).
    unsafe fn decode(op: &'static str, s: &OxideStepScalars) -> Result<StepScalars, AbiError> {
        // SAFETY: the caller's contract.
        let [lr, step, grad_scale, found_inf] = unsafe { operands(op, [&s.lr, &s.step, &s.grad_scale, &s.found_inf]) }?;
        for o in [&lr, &step, &grad_scale, &found_inf].into_iter().flatten() {
            o.numel_is(op, 1)?;
            if !matches!(o.dtype, oxide_kernels::DType::F32 | oxide_kernels::DType::F64) {
                return Err(AbiError::Invalid(format!(
                    "{op}: a step scalar (lr, step, grad_scale, found_inf) of dtype {}, expected float32 or float64",
                    o.dtype.name()
                )));
            }
        }
        Ok(StepScalars { lr, step, grad_scale, found_inf })
    }

    /// The value of a one-element operand, read when the launch runs.
    fn value(o: &Option<Operand>) -> Option<f64> {
        let o = o.as_ref()?;
        let p = o.src();
        // SAFETY: `decode` checked one element of float32 or float64.
        Some(unsafe {
            if o.dtype == oxide_kernels::DType::F64 {
                (p as *const f64).read_unaligned()
            } else {
                f64::from((p as *const f32).read_unaligned())
            }
        })
    }

    /// True when GradScaler found an infinity or NaN: the step is skipped.
    fn skip(&self) -> bool {
        Self::value(&self.found_inf).is_some_and(|v| v != 0.0)
    }
}

/// The contiguous operands of a fused step: one dtype, `numel` elements each.
fn fused_operands(op: &'static str, ops: &[&Operand]) -> Result<(oxide_kernels::DType, usize), AbiError> {
    let dt = common_dtype(op, ops)?;
    let n = ops[0].numel;
    for o in ops {
        o.contiguous(op)?.numel_is(op, n)?;
    }
    Ok((dt, n))
}

/// The first element of an optional operand (null when absent).
fn data_or_null(o: Option<&Operand>) -> *mut u8 {
    o.map_or(std::ptr::null_mut(), |o| o.data as *mut u8)
}

/// One fused Adam/AdamW step on contiguous tensors of one dtype and element
/// count (`max_exp_avg_sq` absent without amsgrad). With a grad scale, `grad`
/// is overwritten with the unscaled gradient.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `h` points to a valid struct.
#[no_mangle]
pub unsafe extern "C" fn oxide_fused_adam(
    on: OxideLaunch,
    param: OxideTensor,
    grad: OxideTensor,
    exp_avg: OxideTensor,
    exp_avg_sq: OxideTensor,
    max_exp_avg_sq: OxideTensor,
    scalars: OxideStepScalars,
    h: *const OxideAdam,
) -> i32 {
    use oxide_kernels::ops::optim::fused::{adam, Adam, AdamTensors};
    const OP: &str = "_fused_adam_";
    ffi(|| {
        // SAFETY: the function's contract.
        let [param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq] =
            unsafe { operands(OP, [&param, &grad, &exp_avg, &exp_avg_sq, &max_exp_avg_sq]) }?;
        let (param, grad, exp_avg, exp_avg_sq) =
            (present(OP, param)?, present(OP, grad)?, present(OP, exp_avg)?, present(OP, exp_avg_sq)?);
        let mut all = vec![&param, &grad, &exp_avg, &exp_avg_sq];
        all.extend(max_exp_avg_sq.as_ref());
        let (dt, n) = fused_operands(OP, &all)?;
        // SAFETY: the function's contract.
        let sc = unsafe { StepScalars::decode(OP, &scalars) }?;
        // SAFETY: the function's contract.
        let h = unsafe { h.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null hyper-parameters")))?;
        let mut hp = Adam {
            lr: h.lr,
            beta1: h.beta1,
            beta2: h.beta2,
            weight_decay: h.weight_decay,
            eps: h.eps,
            amsgrad: h.amsgrad,
            maximize: h.maximize,
            decoupled: h.decoupled,
            step: h.step,
            grad_scale: h.has_grad_scale.then_some(h.grad_scale),
        };
        // Checked at the call (the kernel checks again): a queued launch must not defer an argument error.
        if hp.amsgrad && max_exp_avg_sq.is_none() {
            return Err(AbiError::Invalid(format!("{OP}: amsgrad needs max_exp_avg_sqs")));
        }
        let ts = AdamTensors {
            param: param.dst(),
            grad: grad.dst(),
            exp_avg: exp_avg.dst(),
            exp_avg_sq: exp_avg_sq.dst(),
            max_exp_avg_sq: data_or_null(max_exp_avg_sq.as_ref()),
        };
        launch(&on, move || {
            if sc.skip() {
                return Ok(());
            }
            hp.lr = StepScalars::value(&sc.lr).unwrap_or(hp.lr);
            hp.step = StepScalars::value(&sc.step).unwrap_or(hp.step);
            hp.grad_scale = StepScalars::value(&sc.grad_scale).or(hp.grad_scale);
            // SAFETY: every present operand holds n contiguous elements of `dt` (checked above).
            unsafe { adam(dt, n, ts, hp, on.threads()) }
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
    pub nesterov: bool,
    pub maximize: bool,
    pub is_first_step: bool,
    pub grad_scale: f64,
    pub has_grad_scale: bool,
}

/// One fused SGD step on contiguous tensors of one dtype and element count
/// (`momentum_buffer` absent without momentum).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `h` points to a valid struct.
#[no_mangle]
pub unsafe extern "C" fn oxide_fused_sgd(
    on: OxideLaunch,
    param: OxideTensor,
    grad: OxideTensor,
    momentum_buffer: OxideTensor,
    scalars: OxideStepScalars,
    h: *const OxideSgd,
) -> i32 {
    const OP: &str = "_fused_sgd_";
    ffi(|| {
        // SAFETY: the function's contract.
        let [param, grad, momentum_buffer] = unsafe { operands(OP, [&param, &grad, &momentum_buffer]) }?;
        let (param, grad) = (present(OP, param)?, present(OP, grad)?);
        let mut all = vec![&param, &grad];
        all.extend(momentum_buffer.as_ref());
        let (dt, n) = fused_operands(OP, &all)?;
        // SAFETY: the function's contract.
        let sc = unsafe { StepScalars::decode(OP, &scalars) }?;
        // SAFETY: the function's contract.
        let h = unsafe { h.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null hyper-parameters")))?;
        let mut hp = oxide_kernels::ops::optim::fused::Sgd {
            lr: h.lr,
            weight_decay: h.weight_decay,
            momentum: h.momentum,
            dampening: h.dampening,
            nesterov: h.nesterov,
            maximize: h.maximize,
            is_first_step: h.is_first_step,
            grad_scale: h.has_grad_scale.then_some(h.grad_scale),
        };
        // Checked at the call (the kernel checks again): a queued launch must not defer an argument error.
        if hp.momentum != 0.0 && momentum_buffer.is_none() {
            return Err(AbiError::Invalid(format!("{OP}: momentum needs momentum buffers")));
        }
        launch(&on, move || {
            if sc.skip() {
                return Ok(());
            }
            hp.lr = StepScalars::value(&sc.lr).unwrap_or(hp.lr);
            hp.grad_scale = StepScalars::value(&sc.grad_scale).or(hp.grad_scale);
            let buf = data_or_null(momentum_buffer.as_ref());
            // SAFETY: every present operand holds n contiguous elements of `dt` (checked above).
            unsafe { oxide_kernels::ops::optim::fused::sgd(dt, n, param.dst(), grad.dst(), buf, hp, on.threads()) }
        })
    })
}
