//! torchvision's operators (`csrc/torchvision/`, `oxide_kernels::ops::torchvision`):
//! non-maximum suppression, RoI align and pool (plain and position-sensitive),
//! deformable convolution.
//!
//! Every entry point decodes its operands once ([`required`]), checks what its
//! kernel assumes (dtypes, contiguity, the sizes the kernel derives its loops
//! from) and only then launches the kernel.

use super::*;

use oxide_kernels::ops::torchvision::roi::RoiPool;
use oxide_kernels::DType;

pub mod deform_conv;

/// The scalars of a RoI pooling op: torchvision's arguments.
#[repr(C)]
pub struct OxideRoiPool {
    pub spatial_scale: f64,
    pub pooled_height: i64,
    pub pooled_width: i64,
    /// Samples per bin side for the align ops (<= 0: adaptive); ignored by the pool ops.
    pub sampling_ratio: i64,
    /// `roi_align`'s half-pixel offset; ignored by the others.
    pub aligned: bool,
}

/// Which RoI op an entry point serves: the output channels it derives.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `roi_align`, `roi_pool`: one output channel per input channel.
    Plain,
    /// `ps_roi_align`, `ps_roi_pool`: `C / (PH * PW)` output channels.
    PositionSensitive,
}

/// The kernel's description from the `(B, C, H, W)` `image` (the input, or
/// the input gradient of a backward), the `(K, 5)` `rois`, and the `(K,
/// C_out, PH, PW)` `pooled` operand (output, or output gradient), which is
/// checked against them.
fn roi_desc(
    op: &'static str,
    kind: Kind,
    image: &Operand,
    rois: &Operand,
    pooled: &Operand,
    p: &OxideRoiPool,
) -> Result<RoiPool, AbiError> {
    let size =
        |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("{op}: negative {what} {v}")));
    if image.sizes.len() != 4 {
        return Err(AbiError::Invalid(format!("{op}: expected a 4-d input, got sizes {:?}", image.sizes)));
    }
    if rois.sizes.len() != 2 || rois.sizes[1] != 5 {
        return Err(AbiError::Invalid(format!("{op}: rois must have shape as Tensor[K, 5], got {:?}", rois.sizes)));
    }
    let i = image.extents();
    let r = RoiPool {
        rois: rois.extents()[0],
        batch: i[0],
        channels: i[1],
        height: i[2],
        width: i[3],
        pooled: [size("pooled_height", p.pooled_height)?, size("pooled_width", p.pooled_width)?],
        spatial_scale: p.spatial_scale,
        sampling_ratio: p.sampling_ratio,
        aligned: p.aligned,
    };
    let c_out = match kind {
        Kind::Plain => r.channels,
        Kind::PositionSensitive => {
            let bins = r.pooled[0] * r.pooled[1];
            if bins == 0 || !r.channels.is_multiple_of(bins) {
                return Err(AbiError::Invalid(format!(
                    "{op}: input channels must be a multiple of pooling height * pooling width"
                )));
            }
            r.channels_out()
        }
    };
    pooled.sizes_are(op, &[r.rois, c_out, r.pooled[0], r.pooled[1]].map(|e| e as i64))?;
    for o in [image, rois, pooled] {
        o.contiguous(op)?;
    }
    Ok(r)
}

/// An int32 side output (argmax, channel mapping) with the pooled operand's sizes.
fn index_like(op: &'static str, index: &Operand, pooled: &Operand) -> Result<(), AbiError> {
    index.dtype_is(op, DType::I32)?.sizes_are(op, &pooled.sizes)?.contiguous(op)?;
    Ok(())
}

/// `nms` (`oxide_kernels::ops::torchvision::nms::nms`): contiguous `boxes`
/// `(N, 4)` and `scores` `(N)` of one float dtype; writes the kept indices to
/// the front of the contiguous int64 `keep` `(N)` and their number to `count`.
/// Runs at the call (the host needs the count), after the stream's queued work.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn oxide_nms(
    on: OxideLaunch,
    keep: OxideTensor,
    boxes: OxideTensor,
    scores: OxideTensor,
    iou_threshold: f64,
    count: *mut usize,
) -> i32 {
    const OP: &str = "nms";
    ffi(|| {
        // SAFETY: the function's contract.
        let [keep, boxes, scores] = unsafe { required(OP, [&keep, &boxes, &scores]) }?;
        let n = scores.numel;
        let dt = common_dtype(OP, &[&boxes, &scores])?;
        boxes.sizes_are(OP, &[n as i64, 4])?.contiguous(OP)?;
        scores.contiguous(OP)?;
        keep.dtype_is(OP, DType::I64)?.sizes_are(OP, &[n as i64])?.contiguous(OP)?;
        let k = launch_now(&on, || {
            // SAFETY: the operands were decoded and checked contiguous with `n` boxes, scores and slots.
            unsafe {
                oxide_kernels::ops::torchvision::nms::nms(
                    dt,
                    n,
                    boxes.src(),
                    scores.src(),
                    iou_threshold,
                    keep.dst() as *mut i64,
                )
            }
        })?;
        put(count, k)
    })
}

/// `roi_align` (`oxide_kernels::ops::torchvision::roi::roi_align`): contiguous
/// `input` `(B, C, H, W)`, `rois` `(K, 5)` and `output` `(K, C, PH, PW)`, one dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); the output overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_roi_align(
    on: OxideLaunch,
    output: OxideTensor,
    input: OxideTensor,
    rois: OxideTensor,
    p: OxideRoiPool,
) -> i32 {
    const OP: &str = "roi_align";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input, rois] = unsafe { required(OP, [&output, &input, &rois]) }?;
        let r = roi_desc(OP, Kind::Plain, &input, &rois, &output, &p)?;
        let dt = common_dtype(OP, &[&input, &rois, &output])?;
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `r` describes.
            unsafe {
                oxide_kernels::ops::torchvision::roi::roi_align(
                    dt,
                    &r,
                    input.src(),
                    rois.src(),
                    output.dst(),
                    on.threads(),
                )
            }
        })
    })
}

/// `_roi_align_backward`: `grad_input` `(B, C, H, W)`, overwritten, from
/// `grad` `(K, C, PH, PW)`; contiguous, one dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `grad_input` overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_roi_align_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad: OxideTensor,
    rois: OxideTensor,
    p: OxideRoiPool,
) -> i32 {
    const OP: &str = "roi_align_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad, rois] = unsafe { required(OP, [&grad_input, &grad, &rois]) }?;
        let r = roi_desc(OP, Kind::Plain, &grad_input, &rois, &grad, &p)?;
        let dt = common_dtype(OP, &[&grad_input, &rois, &grad])?;
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `r` describes.
            unsafe {
                oxide_kernels::ops::torchvision::roi::roi_align_backward(
                    dt,
                    &r,
                    grad.src(),
                    rois.src(),
                    grad_input.dst(),
                    on.threads(),
                )
            }
        })
    })
}

/// `roi_pool`: contiguous `input` `(B, C, H, W)` and `rois` `(K, 5)`; writes
/// `output` and the int32 `argmax`, both `(K, C, PH, PW)`.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); the outputs overlap no input or each other.
#[no_mangle]
pub unsafe extern "C" fn oxide_roi_pool(
    on: OxideLaunch,
    output: OxideTensor,
    argmax: OxideTensor,
    input: OxideTensor,
    rois: OxideTensor,
    p: OxideRoiPool,
) -> i32 {
    const OP: &str = "roi_pool";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, argmax, input, rois] = unsafe { required(OP, [&output, &argmax, &input, &rois]) }?;
        let r = roi_desc(OP, Kind::Plain, &input, &rois, &output, &p)?;
        let dt = common_dtype(OP, &[&input, &rois, &output])?;
        index_like(OP, &argmax, &output)?;
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `r` describes.
            unsafe {
                oxide_kernels::ops::torchvision::roi::roi_pool(
                    dt,
                    &r,
                    input.src(),
                    rois.src(),
                    output.dst(),
                    argmax.dst() as *mut i32,
                    on.threads(),
                )
            }
        })
    })
}

/// `_roi_pool_backward`: `grad_input` `(B, C, H, W)`, overwritten, from `grad`
/// and the forward's int32 `argmax` (both `(K, C, PH, PW)`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `grad_input` overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_roi_pool_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad: OxideTensor,
    rois: OxideTensor,
    argmax: OxideTensor,
    p: OxideRoiPool,
) -> i32 {
    const OP: &str = "roi_pool_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad, rois, argmax] = unsafe { required(OP, [&grad_input, &grad, &rois, &argmax]) }?;
        let r = roi_desc(OP, Kind::Plain, &grad_input, &rois, &grad, &p)?;
        let dt = common_dtype(OP, &[&grad_input, &rois, &grad])?;
        index_like(OP, &argmax, &grad)?;
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `r` describes.
            unsafe {
                oxide_kernels::ops::torchvision::roi::roi_pool_backward(
                    dt,
                    &r,
                    grad.src(),
                    rois.src(),
                    argmax.src() as *const i32,
                    grad_input.dst(),
                    on.threads(),
                )
            }
        })
    })
}

/// `ps_roi_align` (`ps` = 0) or `ps_roi_pool` (`ps` = 1): contiguous `input`
/// `(B, C, H, W)` and `rois` `(K, 5)`; writes `output` and the int32 channel
/// `mapping`, both `(K, C / (PH * PW), PH, PW)`.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); the outputs overlap no input or each other.
#[no_mangle]
pub unsafe extern "C" fn oxide_ps_roi(
    on: OxideLaunch,
    output: OxideTensor,
    mapping: OxideTensor,
    input: OxideTensor,
    rois: OxideTensor,
    p: OxideRoiPool,
    ps: i32,
) -> i32 {
    use oxide_kernels::ops::torchvision::roi::{ps_roi_align, ps_roi_pool};
    let op = if ps == 0 { "ps_roi_align" } else { "ps_roi_pool" };
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, mapping, input, rois] = unsafe { required(op, [&output, &mapping, &input, &rois]) }?;
        let r = roi_desc(op, Kind::PositionSensitive, &input, &rois, &output, &p)?;
        let dt = common_dtype(op, &[&input, &rois, &output])?;
        index_like(op, &mapping, &output)?;
        let kernel = match ps {
            0 => ps_roi_align,
            1 => ps_roi_pool,
            v => return Err(AbiError::Invalid(format!("oxide_ps_roi: unknown op {v}"))),
        };
        launch_op(&on, ps, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `r` describes.
            unsafe { kernel(dt, &r, input.src(), rois.src(), output.dst(), mapping.dst() as *mut i32, on.threads()) }
        })
    })
}

/// The backward of [`oxide_ps_roi`] (same `ps` codes): `grad_input` `(B, C,
/// H, W)`, overwritten, from `grad` and the forward's int32 channel `mapping`.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `grad_input` overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_ps_roi_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad: OxideTensor,
    rois: OxideTensor,
    mapping: OxideTensor,
    p: OxideRoiPool,
    ps: i32,
) -> i32 {
    use oxide_kernels::ops::torchvision::roi::{ps_roi_align_backward, ps_roi_pool_backward};
    let op = if ps == 0 { "ps_roi_align_backward" } else { "ps_roi_pool_backward" };
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad, rois, mapping] = unsafe { required(op, [&grad_input, &grad, &rois, &mapping]) }?;
        let r = roi_desc(op, Kind::PositionSensitive, &grad_input, &rois, &grad, &p)?;
        let dt = common_dtype(op, &[&grad_input, &rois, &grad])?;
        index_like(op, &mapping, &grad)?;
        let kernel = match ps {
            0 => ps_roi_align_backward,
            1 => ps_roi_pool_backward,
            v => return Err(AbiError::Invalid(format!("oxide_ps_roi_backward: unknown op {v}"))),
        };
        launch_op(&on, ps, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `r` describes.
            unsafe {
                kernel(dt, &r, grad.src(), rois.src(), mapping.src() as *const i32, grad_input.dst(), on.threads())
            }
        })
    })
}
