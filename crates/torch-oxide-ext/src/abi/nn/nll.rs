//! nll_loss and its backward, 1-d and 2-d (`oxide_kernels::ops::nn::nll`).

use super::*;

/// `[n, c, s]` of an nll_loss input: `(C)`, `(N, C)` or `(N, C, spatial...)`.
fn nll_ncs(op: &'static str, input: &Operand) -> Result<(usize, usize, usize), AbiError> {
    let e = input.extents();
    match e.len() {
        0 => Err(AbiError::Invalid(format!("{op}: expected an input of 1 or more dimensions"))),
        1 => Ok((1, e[0], 1)),
        _ => {
            let (n, c) = (e[0], e[1]);
            Ok((n, c, input.numel.checked_div(n * c).unwrap_or(1)))
        }
    }
}

/// `nll_loss` / `nll_loss2d` forward over the contiguous log-probabilities
/// `input` (`(C)`, `(N, C)` or `(N, C, spatial...)`) and contiguous int64
/// `target` (`n * s` elements); `weight` (`c` elements) is optional.
/// `reduction` is PyTorch's code (0 none, 1 mean, 2 sum): `out` holds `n * s`
/// elements for reduction 0, else one; `total_weight` one.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_nll_loss(
    on: OxideLaunch,
    out: OxideTensor,
    total_weight: OxideTensor,
    input: OxideTensor,
    target: OxideTensor,
    weight: OxideTensor,
    reduction: i64,
    ignore_index: i64,
) -> i32 {
    use oxide_kernels::ops::nn::nll::{NllShape, Reduction};
    const OP: &str = "nll_loss";
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let [out, total_weight, input, target, weight] =
            unsafe { operands(OP, [&out, &total_weight, &input, &target, &weight]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (out, total_weight, input, target) = (
            out.ok_or_else(missing)?,
            total_weight.ok_or_else(missing)?,
            input.ok_or_else(missing)?,
            target.ok_or_else(missing)?,
        );
        let (n, c, s) = nll_ncs(OP, &input)?;
        let reduction = Reduction::from_code(reduction)?;
        let dt = common_dtype(OP, &[&input, &out, &total_weight])?;
        input.contiguous(OP)?;
        flat(OP, &target, n * s)?;
        target.dtype_is(OP, DType::I64)?;
        if let Some(w) = &weight {
            w.dtype_is(OP, dt)?;
        }
        flat_opt(OP, &weight, c)?;
        flat(OP, &out, if reduction == Reduction::None { n * s } else { 1 })?;
        flat(OP, &total_weight, 1)?;
        let sh = NllShape { n, c, s, ignore_index, reduction };
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe {
                oxide_kernels::ops::nn::nll::nll_loss(
                    dt,
                    sh,
                    input.src(),
                    target.src() as *const i64,
                    src_or_null(&weight),
                    out.dst(),
                    total_weight.dst(),
                )
            }
        })
    })
}

/// Backward of [`oxide_nll_loss`] into the zero-filled contiguous `grad_input`
/// (the input's sizes); `grad_output` holds `n * s` elements for reduction 0, else one.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_nll_loss_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad_output: OxideTensor,
    target: OxideTensor,
    weight: OxideTensor,
    total_weight: OxideTensor,
    reduction: i64,
    ignore_index: i64,
) -> i32 {
    use oxide_kernels::ops::nn::nll::{NllShape, Reduction};
    const OP: &str = "nll_loss_backward";
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let [grad_input, grad_output, target, weight, total_weight] =
            unsafe { operands(OP, [&grad_input, &grad_output, &target, &weight, &total_weight]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_input, grad_output, target, total_weight) = (
            grad_input.ok_or_else(missing)?,
            grad_output.ok_or_else(missing)?,
            target.ok_or_else(missing)?,
            total_weight.ok_or_else(missing)?,
        );
        let (n, c, s) = nll_ncs(OP, &grad_input)?;
        let reduction = Reduction::from_code(reduction)?;
        let dt = common_dtype(OP, &[&grad_input, &grad_output, &total_weight])?;
        grad_input.contiguous(OP)?;
        flat(OP, &target, n * s)?;
        target.dtype_is(OP, DType::I64)?;
        if let Some(w) = &weight {
            w.dtype_is(OP, dt)?;
        }
        flat_opt(OP, &weight, c)?;
        flat(OP, &grad_output, if reduction == Reduction::None { n * s } else { 1 })?;
        flat(OP, &total_weight, 1)?;
        let sh = NllShape { n, c, s, ignore_index, reduction };
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe {
                oxide_kernels::ops::nn::nll::nll_loss_backward(
                    dt,
                    sh,
                    grad_output.src(),
                    target.src() as *const i64,
                    src_or_null(&weight),
                    total_weight.src(),
                    grad_input.dst(),
                )
            }
        })
    })
}
