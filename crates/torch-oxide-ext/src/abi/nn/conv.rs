//! Convolution (direct and transposed, forward and backward) and fold/unfold (`oxide_kernels::ops::nn::conv`).

use super::*;

/// One convolution (PyTorch's `ConvParams` with the operands' extents): the
/// first `ndim` (1 to 3) entries of each spatial array are used. The operands
/// are checked against it: input `[batch, in_channels, input...]`, output (or
/// its gradient) `[batch, out_channels, output...]`, weight and bias of the
/// element counts the convolution implies, all contiguous.
#[repr(C)]
pub struct OxideConv {
    pub ndim: usize,
    pub batch: i64,
    pub in_channels: i64,
    pub out_channels: i64,
    pub groups: i64,
    pub transposed: bool,
    pub input: [i64; 3],
    pub output: [i64; 3],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
    pub dilation: [i64; 3],
}

/// Refuses convolution operands that do not match `c` (see [`OxideConv`]).
fn conv_operands(
    op: &'static str,
    c: &OxideConv,
    cv: &oxide_kernels::ops::nn::conv::Conv,
    input: &Option<Operand>,
    weight: &Option<Operand>,
    output: &Option<Operand>,
    bias: &Option<Operand>,
) -> Result<(), AbiError> {
    let (_, wl, _) = cv.lens();
    let nd = c.ndim;
    let expect = |o: &Option<Operand>, channels: i64, spatial: &[i64; 3]| -> Result<(), AbiError> {
        if let Some(o) = o {
            let sizes: Vec<i64> = [c.batch, channels].into_iter().chain(spatial[..nd].iter().copied()).collect();
            o.sizes_are(op, &sizes)?;
            o.contiguous(op)?;
        }
        Ok(())
    };
    expect(input, c.in_channels, &c.input)?;
    expect(output, c.out_channels, &c.output)?;
    flat_opt(op, weight, wl)?;
    flat_opt(op, bias, cv.out_channels)?;
    Ok(())
}

/// `output = convolution(input, weight) + bias` (`bias` optional) for
/// convolution `conv`, all operands contiguous of one dtype.
///
/// # Safety
/// `conv` is valid; each [`OxideTensor`] describes live memory (see
/// [`operands`]); the output overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_convolution(
    on: OxideLaunch,
    output: OxideTensor,
    input: OxideTensor,
    weight: OxideTensor,
    bias: OxideTensor,
    conv: *const OxideConv,
) -> i32 {
    const OP: &str = "convolution";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input, weight, bias] = unsafe { operands(OP, [&output, &input, &weight, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (o, i, w) = (
            output.clone().ok_or_else(missing)?,
            input.clone().ok_or_else(missing)?,
            weight.clone().ok_or_else(missing)?,
        );
        // SAFETY: the function's contract.
        let c = unsafe { conv.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        let cv = conv_desc(c)?;
        let dt = optional_dtype(OP, &[&output, &input, &weight, &bias], o.dtype)?;
        conv_operands(OP, c, &cv, &input, &weight, &output, &bias)?;
        launch(&on, move || {
            let bias = bias.as_ref().map(|b| b.src());
            // SAFETY: every operand was decoded and checked contiguous with the sizes `cv` implies.
            unsafe { oxide_kernels::ops::nn::conv::convolution(dt, &cv, i.src(), w.src(), bias, o.dst(), on.threads()) }
        })
    })
}

/// Gradients of convolution `conv` from `grad_output`: `grad_input`,
/// `grad_weight`, `grad_bias` (each optional: PyTorch's `output_mask`).
/// `input` is read (and required) only for the weight gradient and `weight`
/// only for the input gradient.
///
/// # Safety
/// As [`oxide_convolution`]; the gradients overlap no operand and each other.
#[no_mangle]
pub unsafe extern "C" fn oxide_convolution_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad_weight: OxideTensor,
    grad_bias: OxideTensor,
    grad_output: OxideTensor,
    input: OxideTensor,
    weight: OxideTensor,
    conv: *const OxideConv,
) -> i32 {
    use oxide_kernels::ops::nn::conv::Grads;
    const OP: &str = "convolution_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad_weight, grad_bias, grad_output, input, weight] =
            unsafe { operands(OP, [&grad_input, &grad_weight, &grad_bias, &grad_output, &input, &weight]) }?;
        let go = grad_output
            .clone()
            .ok_or_else(|| AbiError::Invalid(format!("{OP}: a required operand is missing (null data)")))?;
        // SAFETY: the function's contract.
        let c = unsafe { conv.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        let cv = conv_desc(c)?;
        if (grad_input.is_some() && weight.is_none()) || (grad_weight.is_some() && input.is_none()) {
            return Err(AbiError::Invalid(format!("{OP}: a requested gradient needs a missing operand")));
        }
        let dt = optional_dtype(OP, &[&grad_output, &input, &weight, &grad_input, &grad_weight, &grad_bias], go.dtype)?;
        conv_operands(OP, c, &cv, &input, &weight, &grad_output, &grad_bias)?;
        conv_operands(OP, c, &cv, &grad_input, &grad_weight, &None, &None)?;
        launch(&on, move || {
            let grads = Grads {
                input: grad_input.as_ref().map(|g| g.dst()),
                weight: grad_weight.as_ref().map(|g| g.dst()),
                bias: grad_bias.as_ref().map(|g| g.dst()),
            };
            let (x, w) = (src_or_null(&input), src_or_null(&weight));
            // SAFETY: every operand was decoded and checked contiguous with the sizes `cv` implies;
            // an absent input or weight is only read for a gradient that is absent too (checked above).
            unsafe { oxide_kernels::ops::nn::conv::convolution_backward(dt, &cv, go.src(), x, w, grads, on.threads()) }
        })
    })
}

// ---- fold / unfold ----

/// The window of one `im2col` / `col2im` call over 2-d images: kernel size,
/// stride, padding and dilation per (height, width). Batch, channels and image
/// extents come from the image operand (`[batch, channels, height, width]`).
#[repr(C)]
pub struct OxideUnfold {
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
}

/// `im2col` (`fold` false: `src` images -> `dst` columns) or `col2im` (`fold`
/// true: `src` columns -> `dst` images), `oxide_kernels::ops::nn::conv::unfold`
/// / `fold`; both operands contiguous of one dtype, the images 4-d and the
/// columns of the element count the window implies.
///
/// # Safety
/// `geometry` is valid; each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_unfold(
    on: OxideLaunch,
    dst: OxideTensor,
    src: OxideTensor,
    geometry: *const OxideUnfold,
    fold: bool,
) -> i32 {
    let op: &'static str = if fold { "col2im" } else { "im2col" };
    ffi(|| {
        // SAFETY: the function's contract.
        let [dst, src] = unsafe { required(op, [&dst, &src]) }?;
        // SAFETY: the function's contract.
        let g = unsafe { geometry.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{op}: null geometry")))?;
        let (images, columns) = if fold { (&dst, &src) } else { (&src, &dst) };
        rank_is(op, images, 4)?;
        let e = images.extents();
        let pair = |what: &str, a: [i64; 2]| -> Result<[usize; 2], AbiError> {
            Ok([size(op, what, a[0])?, size(op, what, a[1])?])
        };
        let u = oxide_kernels::ops::nn::conv::Unfold {
            batch: e[0],
            channels: e[1],
            image: [e[2], e[3]],
            kernel: pair("kernel size", g.kernel)?,
            stride: pair("stride", g.stride)?,
            padding: pair("padding", g.padding)?,
            dilation: pair("dilation", g.dilation)?,
        };
        let dt = common_dtype(op, &[&src, &dst])?;
        let (il, cl) = u.elements(op)?;
        flat(op, images, il)?;
        flat(op, columns, cl)?;
        launch_op(&on, fold, move || {
            // SAFETY: both operands were decoded and checked contiguous with the element counts `u` implies.
            unsafe {
                if fold {
                    oxide_kernels::ops::nn::conv::fold(dt, &u, src.src(), dst.dst(), on.threads())
                } else {
                    oxide_kernels::ops::nn::conv::unfold(dt, &u, src.src(), dst.dst(), on.threads())
                }
            }
        })
    })
}

fn conv_desc(c: &OxideConv) -> Result<oxide_kernels::ops::nn::conv::Conv, AbiError> {
    use oxide_kernels::ops::nn::conv::{Conv, Spatial, MAX_SPATIAL};
    if c.ndim == 0 || c.ndim > MAX_SPATIAL {
        return Err(AbiError::Invalid(format!(
            "convolution over {} spatial dimensions (1 to {MAX_SPATIAL} supported)",
            c.ndim
        )));
    }
    let s = |a: &[i64; 3]| -> Vec<i64> { a[..c.ndim].to_vec() };
    let (input, output, kernel, stride, padding, dilation) =
        (s(&c.input), s(&c.output), s(&c.kernel), s(&c.stride), s(&c.padding), s(&c.dilation));
    let spatial = Spatial {
        input: &input,
        output: &output,
        kernel: &kernel,
        stride: &stride,
        padding: &padding,
        dilation: &dilation,
    };
    Ok(Conv::new(c.batch, c.in_channels, c.out_channels, c.groups, c.transposed, spatial)?)
}
