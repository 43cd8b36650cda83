//! The seed's custom-autograd examples, selu and swish (`csrc/custom/`,
//! `oxide_kernels::ops::custom`).

use super::*;

/// `out = f(x)` for activation `kind` (an `OXIDE_ACT_*`) over two strided
/// device operands of one dtype and one shape.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_activation_forward(on: OxideLaunch, kind: i32, out: OxideTensor, x: OxideTensor) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, x] = unsafe { required("activation", [&out, &x]) }?;
        same_sizes("activation", &[&out, &x])?;
        let dt = common_dtype("activation", &[&out, &x])?;
        let layout = Layout::new("activation", &x.sizes, [&out.strides, &x.strides])?;
        let (fw, _) = activation_kind(kind)?;
        launch(&on, move || {
            // SAFETY: `layout` addresses only elements of the two decoded, checked operands.
            unsafe { oxide_kernels::ops::custom::activation::forward(fw, dt, &layout, out.dst(), x.src()) }
        })
    })
}

/// `dx = dy * f'(x)` for activation `kind` over three strided device operands
/// of one dtype and one shape.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_activation_backward(
    on: OxideLaunch,
    kind: i32,
    dx: OxideTensor,
    dy: OxideTensor,
    x: OxideTensor,
) -> i32 {
    ffi(|| {
        // SAFETY: the function's contract.
        let [dx, dy, x] = unsafe { required("activation_backward", [&dx, &dy, &x]) }?;
        same_sizes("activation_backward", &[&dx, &dy, &x])?;
        let dt = common_dtype("activation_backward", &[&dx, &dy, &x])?;
        let layout = Layout::new("activation_backward", &x.sizes, [&dx.strides, &dy.strides, &x.strides])?;
        let (_, bw) = activation_kind(kind)?;
        launch(&on, move || {
            // SAFETY: `layout` addresses only elements of the three decoded, checked operands.
            unsafe { oxide_kernels::ops::custom::activation::backward(bw, dt, &layout, dx.dst(), dy.src(), x.src()) }
        })
    })
}

/// Activation kinds of [`oxide_activation_forward`] / [`oxide_activation_backward`].
pub const OXIDE_ACT_SELU: i32 = 0;
/// See [`OXIDE_ACT_SELU`].
pub const OXIDE_ACT_SWISH: i32 = 1;

fn activation_kind(
    kind: i32,
) -> Result<(oxide_kernels::ops::custom::activation::Forward, oxide_kernels::ops::custom::activation::Backward), AbiError>
{
    use oxide_kernels::ops::custom::activation::{Backward, Forward};
    match kind {
        OXIDE_ACT_SELU => Ok((Forward::Selu, Backward::Selu)),
        OXIDE_ACT_SWISH => Ok((Forward::Swish, Backward::Swish)),
        k => Err(AbiError::Invalid(format!("unknown activation kind {k}"))),
    }
}
