//! Max and average pooling, fixed and adaptive, 1-3 spatial dims (`oxide_kernels::ops::nn::pool`).

use super::*;

/// The windows of one pooling call: `planes` contiguous (depth, height,
/// width) volumes; per axis (index 0 depth, 1 height, 2 width) the input and
/// output extents and, unless `adaptive`, PyTorch's kernel size, stride,
/// padding and dilation. 2-d pooling passes depth 1 with a kernel, stride and
/// dilation of 1 and no padding. The operands must hold `planes` volumes.
#[repr(C)]
pub struct OxidePoolGeometry {
    pub planes: i64,
    pub input: [i64; 3],
    pub output: [i64; 3],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
    pub dilation: [i64; 3],
    pub adaptive: bool,
}

/// Max pooling forward (`oxide_kernels::ops::nn::pool::max_pool`): the maxima
/// of the windows of the contiguous `input` (planes x input volume) into
/// `output` and their flat in-plane offsets into int64 `indices` (both
/// contiguous, planes x output volume).
///
/// # Safety
/// `geometry` is valid; each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_max_pool(
    on: OxideLaunch,
    output: OxideTensor,
    indices: OxideTensor,
    input: OxideTensor,
    geometry: *const OxidePoolGeometry,
) -> i32 {
    const OP: &str = "max_pool";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, indices, input] = unsafe { required(OP, [&output, &indices, &input]) }?;
        // SAFETY: the function's contract.
        let g = unsafe { geometry.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null geometry")))?;
        let (planes, axes) = pool_axes(g)?;
        let dt = common_dtype(OP, &[&input, &output])?;
        indices.dtype_is(OP, DType::I64)?;
        flat(OP, &input, planes * plane(&g.input))?;
        flat(OP, &output, planes * plane(&g.output))?;
        flat(OP, &indices, planes * plane(&g.output))?;
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the volumes `axes` covers.
            unsafe {
                oxide_kernels::ops::nn::pool::max_pool(
                    dt,
                    planes,
                    &axes,
                    input.src(),
                    output.dst(),
                    indices.dst() as *mut i64,
                    on.threads(),
                )
            }
        })
    })
}

/// Max pooling backward (`oxide_kernels::ops::nn::pool::max_pool_backward`):
/// zeroes the contiguous `grad_input` and adds each `grad_output` element at
/// its int64 `indices` offset (both contiguous, one size). The last `spatial`
/// dimensions of each operand are its pooled volume, the others its planes.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_max_pool_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad_output: OxideTensor,
    indices: OxideTensor,
    spatial: usize,
) -> i32 {
    const OP: &str = "max_pool_backward";
    ffi(|| {
        checks_values();
        // SAFETY: the function's contract.
        let [grad_input, grad_output, indices] = unsafe { required(OP, [&grad_input, &grad_output, &indices]) }?;
        let split = |o: &Operand| -> Result<(usize, usize), AbiError> {
            if o.sizes.len() < spatial {
                return Err(AbiError::Invalid(format!(
                    "{OP}: operand of sizes {:?} has fewer than {spatial} dimensions",
                    o.sizes
                )));
            }
            let e = o.extents();
            let k = e.len() - spatial;
            Ok((e[..k].iter().product(), e[k..].iter().product()))
        };
        let (planes, in_plane) = split(&grad_input)?;
        let (out_planes, out_plane) = split(&grad_output)?;
        if out_planes != planes {
            return Err(AbiError::Invalid(format!(
                "{OP}: grad_input of sizes {:?} and grad_output of sizes {:?} differ in planes",
                grad_input.sizes, grad_output.sizes
            )));
        }
        let dt = common_dtype(OP, &[&grad_input, &grad_output])?;
        indices.dtype_is(OP, DType::I64)?;
        flat(OP, &grad_input, planes * in_plane)?;
        flat(OP, &grad_output, planes * out_plane)?;
        flat(OP, &indices, planes * out_plane)?;
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the counts passed.
            unsafe {
                oxide_kernels::ops::nn::pool::max_pool_backward(
                    dt,
                    oxide_kernels::ops::nn::pool::Planes { count: planes, in_plane, out_plane },
                    grad_output.src(),
                    indices.src() as *const i64,
                    grad_input.dst(),
                    on.threads(),
                )
            }
        })
    })
}

/// Average pooling (`oxide_kernels::ops::nn::pool::avg_pool`, or
/// `avg_pool_backward` when `backward`): forward reads `src` (input volumes)
/// and writes `dst` (output volumes); backward reads `src` (grad_output,
/// output volumes) and writes `dst` (grad_input, input volumes); both
/// contiguous, one dtype. The divisor is PyTorch's: adaptive windows divide by
/// their extents, fixed ones by `divisor` when `has_divisor`, else by the
/// window volume with (`count_include_pad`) or without padding.
///
/// # Safety
/// `geometry` is valid; each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_avg_pool(
    on: OxideLaunch,
    dst: OxideTensor,
    src: OxideTensor,
    geometry: *const OxidePoolGeometry,
    backward: bool,
    count_include_pad: bool,
    has_divisor: bool,
    divisor: i64,
) -> i32 {
    const OP: &str = "avg_pool";
    ffi(|| {
        // SAFETY: the function's contract.
        let [dst, src] = unsafe { required(OP, [&dst, &src]) }?;
        // SAFETY: the function's contract.
        let g = unsafe { geometry.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null geometry")))?;
        let (planes, axes) = pool_axes(g)?;
        let dt = common_dtype(OP, &[&src, &dst])?;
        let div = pool_divisor(g.adaptive, count_include_pad, has_divisor, divisor);
        let (src_volume, dst_volume) = if backward { (&g.output, &g.input) } else { (&g.input, &g.output) };
        flat(OP, &src, planes * plane(src_volume))?;
        flat(OP, &dst, planes * plane(dst_volume))?;
        launch_op(&on, backward, move || {
            // SAFETY: the operands were decoded and checked contiguous with the volumes `axes` covers.
            unsafe {
                if backward {
                    oxide_kernels::ops::nn::pool::avg_pool_backward(
                        dt,
                        planes,
                        &axes,
                        div,
                        src.src(),
                        dst.dst(),
                        on.threads(),
                    )
                } else {
                    oxide_kernels::ops::nn::pool::avg_pool(dt, planes, &axes, div, src.src(), dst.dst(), on.threads())
                }
            }
        })
    })
}

/// The kernel crate's view of a geometry: plane count and the three axes.
fn pool_axes(g: &OxidePoolGeometry) -> Result<(usize, [oxide_kernels::ops::nn::pool::Axis; 3]), AbiError> {
    use oxide_kernels::ops::nn::pool::{Axis, Window};
    let size =
        |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("pooling: negative {what} {v}")));
    let mut axes = [Axis::unit(); 3];
    for (k, a) in axes.iter_mut().enumerate() {
        let window = if g.adaptive {
            Window::Adaptive
        } else {
            Window::Fixed {
                kernel: size("kernel size", g.kernel[k])?,
                stride: size("stride", g.stride[k])?,
                padding: size("padding", g.padding[k])?,
                dilation: size("dilation", g.dilation[k])?,
            }
        };
        *a = Axis { input: size("input size", g.input[k])?, output: size("output size", g.output[k])?, window };
    }
    Ok((size("plane count", g.planes)?, axes))
}

fn plane(extents: &[i64; 3]) -> usize {
    extents.iter().map(|&e| e.max(0) as usize).product()
}

fn pool_divisor(
    adaptive: bool,
    count_include_pad: bool,
    has_divisor: bool,
    divisor: i64,
) -> oxide_kernels::ops::nn::pool::Divisor {
    use oxide_kernels::ops::nn::pool::Divisor;
    if adaptive {
        Divisor::Adaptive
    } else if has_divisor {
        Divisor::Override(divisor)
    } else {
        Divisor::Window { count_include_pad }
    }
}
