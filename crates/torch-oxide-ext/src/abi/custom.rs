//! The seed's custom-autograd examples, selu and swish (`csrc/custom/`,
//! `oxide_kernels::ops::custom`).

use super::*;

/// `out = f(x)` for activation `kind` over two strided device operands of `dtype_code`.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_activation_forward(
    device: i32,
    stream: i64,
    kind: i32,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    out: *mut c_void,
    out_strides: *const i64,
    x: *const c_void,
    x_strides: *const i64,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (sh, os, xs) = unsafe { (dims(shape, ndim), dims(out_strides, ndim), dims(x_strides, ndim)) };
        let layout = Layout::new("activation", sh, [os, xs])?;
        let (fw, _) = activation_kind(kind)?;
        let dt = dtype(dtype_code)?;
        launch(device, stream, layout.numel(), &[out, x], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::custom::activation::forward(fw, dt, &layout, out as *mut u8, x as *const u8) }
        })
    })
}

/// `dx = dy * f'(x)` for activation `kind` over three strided device operands of `dtype_code`.
///
/// # Safety
/// Every addressed element lies in live device memory; arrays hold `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn oxide_activation_backward(
    device: i32,
    stream: i64,
    kind: i32,
    dtype_code: i32,
    ndim: usize,
    shape: *const i64,
    dx: *mut c_void,
    dx_strides: *const i64,
    dy: *const c_void,
    dy_strides: *const i64,
    x: *const c_void,
    x_strides: *const i64,
) -> i32 {
    ffi(|| {
        // SAFETY: the glue passes ndim-long arrays.
        let (sh, a, b, c) = unsafe { (dims(shape, ndim), dims(dx_strides, ndim), dims(dy_strides, ndim), dims(x_strides, ndim)) };
        let layout = Layout::new("activation_backward", sh, [a, b, c])?;
        let (_, bw) = activation_kind(kind)?;
        let dt = dtype(dtype_code)?;
        launch(device, stream, layout.numel(), &[dx, dy, x], || {
            // SAFETY: see the function's contract.
            unsafe { oxide_kernels::ops::custom::activation::backward(bw, dt, &layout, dx as *mut u8, dy as *const u8, x as *const u8) }
        })
    })
}

/// Activation kinds of [`oxide_activation_forward`] / [`oxide_activation_backward`].
pub const OXIDE_ACT_SELU: i32 = 0;

pub const OXIDE_ACT_SWISH: i32 = 1;

fn activation_kind(kind: i32) -> Result<(oxide_kernels::ops::custom::activation::Forward, oxide_kernels::ops::custom::activation::Backward), AbiError> {
    use oxide_kernels::ops::custom::activation::{Backward, Forward};
    match kind {
        OXIDE_ACT_SELU => Ok((Forward::Selu, Backward::Selu)),
        OXIDE_ACT_SWISH => Ok((Forward::Swish, Backward::Swish)),
        k => Err(AbiError::Invalid(format!("unknown activation kind {k}"))),
    }
}
