//! multilabel_margin_loss and its backward (`oxide_kernels::ops::nn::margin`).

use super::*;

use oxide_kernels::ops::nn::margin::MarginShape;
use oxide_kernels::ops::nn::nll::Reduction;

/// The kernel's shape of a multilabel_margin_loss input: `()` is one sample of
/// one class, `(C)` one sample, `(N, C)` `N` samples. `reduction` is PyTorch's code;
/// as on CPU, codes other than 0 (none) and 1 (mean) reduce like 2 (sum).
fn margin_shape(op: &'static str, input: &Operand, reduction: i64) -> Result<MarginShape, AbiError> {
    let e = input.extents();
    let (n, c) = match e.len() {
        0 => (1, 1),
        1 => (1, e[0]),
        2 => (e[0], e[1]),
        _ => return Err(AbiError::Invalid(format!("{op}: expected an input of at most 2 dimensions"))),
    };
    let reduction = match reduction {
        0 => Reduction::None,
        1 => Reduction::Mean,
        _ => Reduction::Sum,
    };
    Ok(MarginShape { n, c, reduction })
}

/// `multilabel_margin_loss_forward` over the contiguous `input` (`()`, `(C)` or
/// `(N, C)`) and the contiguous int64 `target` (as many elements): writes the
/// contiguous `is_target` (the input's dtype and element count) and `output`
/// (`N` elements for reduction 0, else one).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_multilabel_margin_loss(
    on: OxideLaunch,
    output: OxideTensor,
    is_target: OxideTensor,
    input: OxideTensor,
    target: OxideTensor,
    reduction: i64,
) -> i32 {
    const OP: &str = "multilabel_margin_loss";
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let [output, is_target, input, target] = unsafe { required(OP, [&output, &is_target, &input, &target]) }?;
        let sh = margin_shape(OP, &input, reduction)?;
        let dt = common_dtype(OP, &[&input, &output, &is_target])?;
        target.dtype_is(OP, DType::I64)?;
        input.contiguous(OP)?;
        flat(OP, &target, sh.n * sh.c)?;
        flat(OP, &is_target, sh.n * sh.c)?;
        flat(OP, &output, if sh.reduction == Reduction::None { sh.n } else { 1 })?;
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe {
                oxide_kernels::ops::nn::margin::multilabel_margin_loss(
                    dt,
                    sh,
                    input.src(),
                    target.src() as *const i64,
                    output.dst(),
                    is_target.dst(),
                    on.threads(),
                )
            }
        })
    })
}

/// Backward of [`oxide_multilabel_margin_loss`] into the contiguous `grad_input`
/// (the input's sizes; every element written), from `is_target` as the forward
/// wrote it; `grad_output` holds `N` elements for reduction 0, else one.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_multilabel_margin_loss_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad_output: OxideTensor,
    input: OxideTensor,
    target: OxideTensor,
    is_target: OxideTensor,
    reduction: i64,
) -> i32 {
    const OP: &str = "multilabel_margin_loss_backward";
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let [grad_input, grad_output, input, target, is_target] =
            unsafe { required(OP, [&grad_input, &grad_output, &input, &target, &is_target]) }?;
        let sh = margin_shape(OP, &input, reduction)?;
        let dt = common_dtype(OP, &[&input, &grad_input, &grad_output, &is_target])?;
        target.dtype_is(OP, DType::I64)?;
        input.contiguous(OP)?;
        grad_input.sizes_are(OP, &input.sizes)?;
        grad_input.contiguous(OP)?;
        flat(OP, &target, sh.n * sh.c)?;
        flat(OP, &is_target, sh.n * sh.c)?;
        flat(OP, &grad_output, if sh.reduction == Reduction::None { sh.n } else { 1 })?;
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe {
                let io = oxide_kernels::ops::nn::margin::MarginGrads {
                    grad_output: grad_output.src(),
                    input: input.src(),
                    target: target.src() as *const i64,
                    is_target: is_target.src(),
                    grad_input: grad_input.dst(),
                };
                oxide_kernels::ops::nn::margin::multilabel_margin_loss_backward(dt, sh, io, on.threads())
            }
        })
    })
}
