//! Deformable convolution, forward and backward (`torchvision::deform_conv2d`,
//! `torchvision::_deform_conv2d_backward`; `oxide_kernels::ops::torchvision::deform_conv`).

use super::*;

use oxide_kernels::ops::torchvision::deform_conv::DeformConv2d;

/// The scalars of `torchvision::deform_conv2d` and its backward, as the schema
/// orders them: (height, width) pairs, the convolution groups (`n_weight_grps`),
/// the offset groups and `use_mask`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideDeformConv2d {
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
    pub groups: i64,
    pub offset_groups: i64,
    pub use_mask: bool,
}

/// A non-negative scalar as `usize`.
fn count(op: &'static str, what: &str, v: i64) -> Result<usize, AbiError> {
    usize::try_from(v).map_err(|_| AbiError::Invalid(format!("{op}: negative {what} {v}")))
}

/// Refuses an operand that is not 4-d.
fn four_d(op: &'static str, what: &str, o: &Operand) -> Result<(), AbiError> {
    if o.sizes.len() != 4 {
        return Err(AbiError::Invalid(format!("{op}: expected a 4-d {what}, got sizes {:?}", o.sizes)));
    }
    Ok(())
}

/// The kernel's description from the 4-d `input` `(N, C, H, W)`, `weight`
/// `(O, C / groups, kh, kw)` and `offset` `(N, offset_groups * kh * kw * 2, Ho, Wo)`
/// (whose last extents are the output's), checked against torchvision's rules
/// ([`DeformConv2d::validate`]); `mask`, present exactly with `use_mask`, must be
/// `(N, offset_groups * kh * kw, Ho, Wo)`. Every operand is checked contiguous.
fn deform_desc(
    op: &'static str,
    input: &Operand,
    weight: &Operand,
    offset: &Operand,
    mask: Option<&Operand>,
    p: &OxideDeformConv2d,
) -> Result<DeformConv2d, AbiError> {
    four_d(op, "input", input)?;
    four_d(op, "weight", weight)?;
    four_d(op, "offset", offset)?;
    let (i, w, o) = (input.extents(), weight.extents(), offset.extents());
    let pair = |what: &str, v: [i64; 2]| -> Result<[usize; 2], AbiError> {
        Ok([count(op, what, v[0])?, count(op, what, v[1])?])
    };
    let d = DeformConv2d {
        batch: i[0],
        in_channels: i[1],
        height: i[2],
        width: i[3],
        out_channels: w[0],
        kernel: [w[2], w[3]],
        stride: pair("stride", p.stride)?,
        padding: pair("padding", p.padding)?,
        dilation: pair("dilation", p.dilation)?,
        groups: count(op, "groups", p.groups)?,
        offset_groups: count(op, "offset groups", p.offset_groups)?,
        out: [o[2], o[3]],
        use_mask: p.use_mask,
    };
    d.validate()?;
    let taps = d.kernel[0] * d.kernel[1];
    let sizes = |dims: [usize; 4]| dims.map(|e| e as i64);
    weight.sizes_are(op, &sizes([d.out_channels, d.in_channels / d.groups, d.kernel[0], d.kernel[1]]))?;
    offset.sizes_are(op, &sizes([d.batch, d.offset_groups * taps * 2, d.out[0], d.out[1]]))?;
    match mask {
        Some(m) if d.use_mask => {
            m.sizes_are(op, &sizes([d.batch, d.offset_groups * taps, d.out[0], d.out[1]]))?.contiguous(op)?;
        }
        None if !d.use_mask => {}
        _ => {
            return Err(AbiError::Invalid(format!(
                "{op}: use_mask is {} but the mask operand is {}",
                d.use_mask,
                if mask.is_some() { "present" } else { "absent" }
            )))
        }
    }
    for o in [input, weight, offset] {
        o.contiguous(op)?;
    }
    Ok(d)
}

/// `torchvision::deform_conv2d` (`oxide_kernels::ops::torchvision::deform_conv::deform_conv2d`):
/// contiguous `input` `(N, C, H, W)`, `weight` `(O, C / groups, kh, kw)`, `offset`
/// `(N, offset_groups * kh * kw * 2, Ho, Wo)`, `mask` `(N, offset_groups * kh * kw,
/// Ho, Wo)` (absent exactly without `use_mask`), `bias` `(O)` (optional: absent, no
/// bias) and `output` `(N, O, Ho, Wo)`, one dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); the output overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_deform_conv2d(
    on: OxideLaunch,
    output: OxideTensor,
    input: OxideTensor,
    weight: OxideTensor,
    offset: OxideTensor,
    mask: OxideTensor,
    bias: OxideTensor,
    p: OxideDeformConv2d,
) -> i32 {
    const OP: &str = "deform_conv2d";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input, weight, offset, mask, bias] =
            unsafe { operands(OP, [&output, &input, &weight, &offset, &mask, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing"));
        let (output, input, weight, offset) = (
            output.ok_or_else(missing)?,
            input.ok_or_else(missing)?,
            weight.ok_or_else(missing)?,
            offset.ok_or_else(missing)?,
        );
        let d = deform_desc(OP, &input, &weight, &offset, mask.as_ref(), &p)?;
        let mut all = vec![&input, &weight, &offset, &output];
        all.extend(mask.as_ref());
        all.extend(bias.as_ref());
        let dt = common_dtype(OP, &all)?;
        if let Some(b) = &bias {
            b.numel_is(OP, d.out_channels)?.contiguous(OP)?;
        }
        output.sizes_are(OP, &[d.batch, d.out_channels, d.out[0], d.out[1]].map(|e| e as i64))?.contiguous(OP)?;
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `d` describes.
            unsafe {
                oxide_kernels::ops::torchvision::deform_conv::deform_conv2d(
                    dt,
                    &d,
                    input.src(),
                    weight.src(),
                    offset.src(),
                    mask.as_ref().map(|m| m.src()),
                    bias.as_ref().map(|b| b.src()),
                    output.dst(),
                    on.threads(),
                )
            }
        })
    })
}

/// `torchvision::_deform_conv2d_backward`
/// (`oxide_kernels::ops::torchvision::deform_conv::deform_conv2d_backward`): from
/// `grad_output` `(N, O, Ho, Wo)` and the forward's operands (layouts as
/// [`oxide_deform_conv2d`]), overwrites `grad_input`, `grad_weight`, `grad_offset`
/// (their operands' sizes), `grad_mask` (the mask's sizes; absent exactly without
/// `use_mask`) and `grad_bias` `(O)` (optional: absent, not computed). Contiguous, one dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); the gradients
/// overlap no operand and each other.
#[no_mangle]
pub unsafe extern "C" fn oxide_deform_conv2d_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad_weight: OxideTensor,
    grad_offset: OxideTensor,
    grad_mask: OxideTensor,
    grad_bias: OxideTensor,
    grad_output: OxideTensor,
    input: OxideTensor,
    weight: OxideTensor,
    offset: OxideTensor,
    mask: OxideTensor,
    p: OxideDeformConv2d,
) -> i32 {
    use oxide_kernels::ops::torchvision::deform_conv::DeformGrads;
    const OP: &str = "_deform_conv2d_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad_weight, grad_offset, grad_mask, grad_bias, grad_output, input, weight, offset, mask] = unsafe {
            operands(
                OP,
                [
                    &grad_input,
                    &grad_weight,
                    &grad_offset,
                    &grad_mask,
                    &grad_bias,
                    &grad_output,
                    &input,
                    &weight,
                    &offset,
                    &mask,
                ],
            )
        }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing"));
        let (grad_input, grad_weight, grad_offset, grad_output, input, weight, offset) = (
            grad_input.ok_or_else(missing)?,
            grad_weight.ok_or_else(missing)?,
            grad_offset.ok_or_else(missing)?,
            grad_output.ok_or_else(missing)?,
            input.ok_or_else(missing)?,
            weight.ok_or_else(missing)?,
            offset.ok_or_else(missing)?,
        );
        let d = deform_desc(OP, &input, &weight, &offset, mask.as_ref(), &p)?;
        let mut all = vec![&input, &weight, &offset, &grad_output, &grad_input, &grad_weight, &grad_offset];
        all.extend(mask.as_ref());
        all.extend(grad_mask.as_ref());
        all.extend(grad_bias.as_ref());
        let dt = common_dtype(OP, &all)?;
        grad_output.sizes_are(OP, &[d.batch, d.out_channels, d.out[0], d.out[1]].map(|e| e as i64))?.contiguous(OP)?;
        for (g, o) in [(&grad_input, &input), (&grad_weight, &weight), (&grad_offset, &offset)] {
            g.sizes_are(OP, &o.sizes)?.contiguous(OP)?;
        }
        match (&grad_mask, &mask) {
            (Some(g), Some(m)) => {
                g.sizes_are(OP, &m.sizes)?.contiguous(OP)?;
            }
            (None, None) => {}
            _ => return Err(AbiError::Invalid(format!("{OP}: grad_mask must be given exactly with the mask"))),
        }
        if let Some(g) = &grad_bias {
            g.sizes_are(OP, &[d.out_channels as i64])?.contiguous(OP)?;
        }
        let grads = DeformGrads {
            input: grad_input.dst(),
            weight: grad_weight.dst(),
            offset: grad_offset.dst(),
            mask: grad_mask.map(|g| g.dst()),
            bias: grad_bias.map(|g| g.dst()),
        };
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `d` describes.
            unsafe {
                oxide_kernels::ops::torchvision::deform_conv::deform_conv2d_backward(
                    dt,
                    &d,
                    grad_output.src(),
                    input.src(),
                    weight.src(),
                    offset.src(),
                    mask.as_ref().map(|m| m.src()),
                    grads,
                    on.threads(),
                )
            }
        })
    })
}
