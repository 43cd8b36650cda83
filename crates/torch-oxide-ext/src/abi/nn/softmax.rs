//! softmax and log_softmax, forward and backward (`oxide_kernels::ops::nn::softmax`).

use super::*;

/// `[outer, dim, inner]` of a contiguous tensor of `sizes` softmaxed along `dim` (PyTorch's
/// wrapping of a negative dim; a 0-d tensor is one element; an empty tensor does nothing).
fn softmax_span(
    op: &'static str,
    sizes: &[i64],
    dim: i64,
    log: bool,
) -> Result<oxide_kernels::ops::nn::softmax::Span, AbiError> {
    use oxide_kernels::ops::nn::softmax::Span;
    if sizes.is_empty() {
        return Ok(Span { outer: 1, dim: 1, inner: 1, log });
    }
    let nd = sizes.len() as i64;
    let d = if dim < 0 { dim + nd } else { dim };
    if !(0..nd).contains(&d) {
        return Err(AbiError::Invalid(format!("{op}: dimension {dim} out of range for sizes {sizes:?}")));
    }
    let d = d as usize;
    let p = |s: &[i64]| s.iter().map(|&e| e as usize).product::<usize>();
    let span = Span { outer: p(&sizes[..d]), dim: sizes[d] as usize, inner: p(&sizes[d + 1..]), log };
    if span.outer * span.dim * span.inner == 0 {
        return Ok(Span { outer: 0, dim: 0, inner: 0, log });
    }
    Ok(span)
}

/// Softmax (`log` false) or log-softmax (`log` true) of the contiguous `input`
/// along `dim` into the contiguous `out` of the same sizes (the same dtype, or
/// float32 for a half input).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_softmax(
    on: OxideLaunch,
    out: OxideTensor,
    input: OxideTensor,
    dim: i64,
    log: bool,
) -> i32 {
    const OP: &str = "softmax";
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, input] = unsafe { required(OP, [&out, &input]) }?;
        same_sizes(OP, &[&out, &input])?;
        input.contiguous(OP)?;
        out.contiguous(OP)?;
        let span = softmax_span(OP, &input.sizes, dim, log)?;
        launch(&on, move || {
            // SAFETY: both operands were decoded and checked contiguous with the sizes `span` covers.
            unsafe {
                oxide_kernels::ops::nn::softmax::softmax(
                    input.dtype,
                    input.src(),
                    out.dtype,
                    out.dst(),
                    span,
                    on.threads(),
                )
            }
        })
    })
}

/// Backward of [`oxide_softmax`]: `grad` and the forward `output` (one dtype)
/// to `grad_input` (the forward input's dtype), all contiguous of one size.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_softmax_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad: OxideTensor,
    output: OxideTensor,
    dim: i64,
    log: bool,
) -> i32 {
    const OP: &str = "softmax_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad, output] = unsafe { required(OP, [&grad_input, &grad, &output]) }?;
        same_sizes(OP, &[&grad_input, &grad, &output])?;
        let dt = common_dtype(OP, &[&grad, &output])?;
        for o in [&grad_input, &grad, &output] {
            o.contiguous(OP)?;
        }
        let span = softmax_span(OP, &output.sizes, dim, log)?;
        launch(&on, move || {
            // SAFETY: the three operands were decoded and checked contiguous with the sizes `span` covers.
            unsafe {
                oxide_kernels::ops::nn::softmax::softmax_backward(
                    dt,
                    grad.src(),
                    output.src(),
                    grad_input.dtype,
                    grad_input.dst(),
                    span,
                    on.threads(),
                )
            }
        })
    })
}
