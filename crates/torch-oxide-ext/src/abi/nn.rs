//! Neural-network kernels (`csrc/aten/nn/`, `oxide_kernels::ops::nn`): softmax, NLL, norms,
//! pooling, convolution and unfold, RNN cells, embedding bags, grid sampling, attention.
//!
//! Every entry point decodes its operands once ([`operands`] / [`required`]), checks
//! what its kernel assumes (dtypes, contiguity, element counts and sizes the
//! kernel derives its loops from) and only then launches the kernel.

use super::*;

use oxide_kernels::DType;

// ---- operand decoding and checks shared by the family ----

/// Refuses `o` unless it is contiguous with `numel` elements (a kernel reading a flat buffer).
fn flat(op: &'static str, o: &Operand, numel: usize) -> Result<(), AbiError> {
    o.contiguous(op)?;
    o.numel_is(op, numel)?;
    Ok(())
}

/// [`flat`] for an optional operand.
fn flat_opt(op: &'static str, o: &Option<Operand>, numel: usize) -> Result<(), AbiError> {
    o.as_ref().map_or(Ok(()), |o| flat(op, o, numel))
}

/// The dtype the present operands among `ops` share; `fallback` when none is present.
fn optional_dtype(op: &'static str, ops: &[&Option<Operand>], fallback: DType) -> Result<DType, AbiError> {
    let given: Vec<&Operand> = ops.iter().filter_map(|o| o.as_ref()).collect();
    if given.is_empty() {
        return Ok(fallback);
    }
    common_dtype(op, &given)
}

/// The first element of an optional operand the kernel reads (null when absent).
fn src_or_null(o: &Option<Operand>) -> *const u8 {
    o.as_ref().map_or(std::ptr::null(), |o| o.src())
}

/// The first element of an optional operand the kernel writes (null when absent).
fn dst_or_null(o: &Option<Operand>) -> *mut u8 {
    o.as_ref().map_or(std::ptr::null_mut(), |o| o.dst())
}

/// A non-negative `i64` scalar or extent as `usize`.
fn size(op: &'static str, what: &str, v: i64) -> Result<usize, AbiError> {
    usize::try_from(v).map_err(|_| AbiError::Invalid(format!("{op}: negative {what} {v}")))
}

/// Refuses an operand whose rank is not `ndim`.
fn rank_is(op: &'static str, o: &Operand, ndim: usize) -> Result<(), AbiError> {
    if o.sizes.len() != ndim {
        return Err(AbiError::Invalid(format!("{op}: expected a {ndim}-d operand, got sizes {:?}", o.sizes)));
    }
    Ok(())
}

// ---- softmax ----

/// `[outer, dim, inner]` of a contiguous tensor of `sizes` softmaxed along `dim` (PyTorch's
/// wrapping of a negative dim; a 0-d tensor is one element; an empty tensor does nothing).
fn softmax_span(op: &'static str, sizes: &[i64], dim: i64, log: bool) -> Result<oxide_kernels::ops::nn::softmax::Span, AbiError> {
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
pub unsafe extern "C" fn oxide_softmax(on: OxideLaunch, out: OxideTensor, input: OxideTensor, dim: i64, log: bool) -> i32 {
    const OP: &str = "softmax";
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, input] = unsafe { required(OP, [&out, &input]) }?;
        same_sizes(OP, &[&out, &input])?;
        input.contiguous(OP)?;
        out.contiguous(OP)?;
        let span = softmax_span(OP, input.sizes, dim, log)?;
        launch(&on, || {
            // SAFETY: both operands were decoded and checked contiguous with the sizes `span` covers.
            unsafe { oxide_kernels::ops::nn::softmax::softmax(input.dtype, input.src(), out.dtype, out.dst(), span, on.threads()) }
        })
    })
}

/// Backward of [`oxide_softmax`]: `grad` and the forward `output` (one dtype)
/// to `grad_input` (the forward input's dtype), all contiguous of one size.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_softmax_backward(on: OxideLaunch, grad_input: OxideTensor, grad: OxideTensor, output: OxideTensor, dim: i64, log: bool) -> i32 {
    const OP: &str = "softmax_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad, output] = unsafe { required(OP, [&grad_input, &grad, &output]) }?;
        same_sizes(OP, &[&grad_input, &grad, &output])?;
        let dt = common_dtype(OP, &[&grad, &output])?;
        for o in [&grad_input, &grad, &output] {
            o.contiguous(OP)?;
        }
        let span = softmax_span(OP, output.sizes, dim, log)?;
        launch(&on, || {
            // SAFETY: the three operands were decoded and checked contiguous with the sizes `span` covers.
            unsafe { oxide_kernels::ops::nn::softmax::softmax_backward(dt, grad.src(), output.src(), grad_input.dtype, grad_input.dst(), span, on.threads()) }
        })
    })
}

// ---- nll_loss ----

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
pub unsafe extern "C" fn oxide_nll_loss(on: OxideLaunch, out: OxideTensor, total_weight: OxideTensor, input: OxideTensor, target: OxideTensor, weight: OxideTensor, reduction: i64, ignore_index: i64) -> i32 {
    use oxide_kernels::ops::nn::nll::{NllShape, Reduction};
    const OP: &str = "nll_loss";
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, total_weight, input, target, weight] = unsafe { operands(OP, [&out, &total_weight, &input, &target, &weight]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (out, total_weight, input, target) = (out.ok_or_else(missing)?, total_weight.ok_or_else(missing)?, input.ok_or_else(missing)?, target.ok_or_else(missing)?);
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
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe { oxide_kernels::ops::nn::nll::nll_loss(dt, sh, input.src(), target.src() as *const i64, src_or_null(&weight), out.dst(), total_weight.dst()) }
        })
    })
}

/// Backward of [`oxide_nll_loss`] into the zero-filled contiguous `grad_input`
/// (the input's sizes); `grad_output` holds `n * s` elements for reduction 0, else one.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_nll_loss_backward(on: OxideLaunch, grad_input: OxideTensor, grad_output: OxideTensor, target: OxideTensor, weight: OxideTensor, total_weight: OxideTensor, reduction: i64, ignore_index: i64) -> i32 {
    use oxide_kernels::ops::nn::nll::{NllShape, Reduction};
    const OP: &str = "nll_loss_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad_output, target, weight, total_weight] = unsafe { operands(OP, [&grad_input, &grad_output, &target, &weight, &total_weight]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_input, grad_output, target, total_weight) = (grad_input.ok_or_else(missing)?, grad_output.ok_or_else(missing)?, target.ok_or_else(missing)?, total_weight.ok_or_else(missing)?);
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
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe { oxide_kernels::ops::nn::nll::nll_loss_backward(dt, sh, grad_output.src(), target.src() as *const i64, src_or_null(&weight), total_weight.src(), grad_input.dst()) }
        })
    })
}

// ---- group / layer / batch norm ----

/// The split of a group norm input into `[n, c, s]` with `groups` groups of
/// channels (layer norm: `[M, N, 1]` with one group); checked against the operands.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideGroupShape {
    pub n: i64,
    pub c: i64,
    pub s: i64,
    pub groups: i64,
}

fn group_shape(op: &'static str, g: &OxideGroupShape) -> Result<oxide_kernels::ops::nn::norm::GroupShape, AbiError> {
    Ok(oxide_kernels::ops::nn::norm::GroupShape { n: size(op, "batch", g.n)?, c: size(op, "channels", g.c)?, s: size(op, "spatial size", g.s)?, g: size(op, "groups", g.groups)? })
}

/// Group norm forward (layer norm is `groups = 1, s = 1`): `x`, `y` contiguous
/// `[n, c, s]` of one dtype; optional `weight`/`bias` `[c]` of one parameter
/// dtype; `mean`/`rstd` `[n, groups]` contiguous, of one statistics dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_group_norm(on: OxideLaunch, y: OxideTensor, mean: OxideTensor, rstd: OxideTensor, x: OxideTensor, weight: OxideTensor, bias: OxideTensor, shape: OxideGroupShape, eps: f64) -> i32 {
    use oxide_kernels::ops::nn::norm::GroupNormIo;
    const OP: &str = "group_norm";
    ffi(|| {
        // SAFETY: the function's contract.
        let [y, mean, rstd, x, weight, bias] = unsafe { operands(OP, [&y, &mean, &rstd, &x, &weight, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (y, mean, rstd, x) = (y.ok_or_else(missing)?, mean.ok_or_else(missing)?, rstd.ok_or_else(missing)?, x.ok_or_else(missing)?);
        let sh = group_shape(OP, &shape)?;
        let dt = common_dtype(OP, &[&x, &y])?;
        let pdt = optional_dtype(OP, &[&weight, &bias], dt)?;
        let sdt = common_dtype(OP, &[&mean, &rstd])?;
        flat(OP, &x, sh.n * sh.c * sh.s)?;
        flat(OP, &y, sh.n * sh.c * sh.s)?;
        flat(OP, &mean, sh.n * sh.g)?;
        flat(OP, &rstd, sh.n * sh.g)?;
        flat_opt(OP, &weight, sh.c)?;
        flat_opt(OP, &bias, sh.c)?;
        let io = GroupNormIo { x: x.src(), param_dt: pdt, weight: src_or_null(&weight), bias: src_or_null(&bias), y: y.dst(), stat_dt: sdt, mean: mean.dst(), rstd: rstd.dst() };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe { oxide_kernels::ops::nn::norm::group_norm(dt, sh, io, eps, on.threads()) }
        })
    })
}

/// Group norm backward from `dy` and the forward's `x`, `mean`, `rstd`,
/// `weight` (optional); `dx`, `dweight`, `dbias` are each optional (not
/// computed). Layouts as [`oxide_group_norm`]; `dweight`/`dbias` have the parameter dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_group_norm_backward(
    on: OxideLaunch,
    dx: OxideTensor,
    dweight: OxideTensor,
    dbias: OxideTensor,
    dy: OxideTensor,
    x: OxideTensor,
    mean: OxideTensor,
    rstd: OxideTensor,
    weight: OxideTensor,
    shape: OxideGroupShape,
) -> i32 {
    use oxide_kernels::ops::nn::norm::GroupNormGrads;
    const OP: &str = "group_norm_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [dx, dweight, dbias, dy, x, mean, rstd, weight] = unsafe { operands(OP, [&dx, &dweight, &dbias, &dy, &x, &mean, &rstd, &weight]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (dy, x, mean, rstd) = (dy.ok_or_else(missing)?, x.ok_or_else(missing)?, mean.ok_or_else(missing)?, rstd.ok_or_else(missing)?);
        let sh = group_shape(OP, &shape)?;
        let dt = common_dtype(OP, &[&x, &dy])?;
        if let Some(d) = &dx {
            d.dtype_is(OP, dt)?;
        }
        let pdt = optional_dtype(OP, &[&weight, &dweight, &dbias], dt)?;
        let sdt = common_dtype(OP, &[&mean, &rstd])?;
        for o in [&x, &dy] {
            flat(OP, o, sh.n * sh.c * sh.s)?;
        }
        flat_opt(OP, &dx, sh.n * sh.c * sh.s)?;
        flat(OP, &mean, sh.n * sh.g)?;
        flat(OP, &rstd, sh.n * sh.g)?;
        for o in [&weight, &dweight, &dbias] {
            flat_opt(OP, o, sh.c)?;
        }
        let io = GroupNormGrads {
            dy: dy.src(),
            x: x.src(),
            stat_dt: sdt,
            mean: mean.src(),
            rstd: rstd.src(),
            param_dt: pdt,
            weight: src_or_null(&weight),
            dx: dst_or_null(&dx),
            dweight: dst_or_null(&dweight),
            dbias: dst_or_null(&dbias),
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe { oxide_kernels::ops::nn::norm::group_norm_backward(dt, sh, io, on.threads()) }
        })
    })
}

/// `[n, c, s]` of a batch norm input (at least 2-d: batch, channels, then spatial dims).
fn batch_shape(op: &'static str, x: &Operand) -> Result<oxide_kernels::ops::nn::norm::BatchShape, AbiError> {
    let e = x.extents();
    if e.len() < 2 {
        return Err(AbiError::Invalid(format!("{op}: expected an input of 2 or more dimensions, got sizes {:?}", x.sizes)));
    }
    let (n, c) = (e[0], e[1]);
    Ok(oxide_kernels::ops::nn::norm::BatchShape { n, c, s: x.numel.checked_div(n * c).unwrap_or(1) })
}

/// Batch norm forward over the contiguous `x` (`[N, C, ...]`) into `y` (same
/// sizes and dtype); the per-channel tensors (`[C]` contiguous, one parameter
/// dtype) are optional. Training writes `save_mean`/`save_invstd` (required
/// then) and updates the running statistics when given; evaluation reads the
/// running statistics (required then).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_batch_norm(
    on: OxideLaunch,
    y: OxideTensor,
    save_mean: OxideTensor,
    save_invstd: OxideTensor,
    running_mean: OxideTensor,
    running_var: OxideTensor,
    x: OxideTensor,
    weight: OxideTensor,
    bias: OxideTensor,
    training: bool,
    momentum: f64,
    eps: f64,
) -> i32 {
    use oxide_kernels::ops::nn::norm::{BatchNormIo, BatchParams};
    const OP: &str = "batch_norm";
    ffi(|| {
        // SAFETY: the function's contract.
        let [y, save_mean, save_invstd, running_mean, running_var, x, weight, bias] = unsafe { operands(OP, [&y, &save_mean, &save_invstd, &running_mean, &running_var, &x, &weight, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (y, x) = (y.ok_or_else(missing)?, x.ok_or_else(missing)?);
        if training && (save_mean.is_none() || save_invstd.is_none()) {
            return Err(AbiError::Invalid(format!("{OP}: training needs save_mean and save_invstd")));
        }
        if !training && (running_mean.is_none() || running_var.is_none()) {
            return Err(AbiError::Invalid(format!("{OP}: evaluation needs the running statistics")));
        }
        let sh = batch_shape(OP, &x)?;
        same_sizes(OP, &[&x, &y])?;
        let dt = common_dtype(OP, &[&x, &y])?;
        let per_channel = [&weight, &bias, &running_mean, &running_var, &save_mean, &save_invstd];
        let pdt = optional_dtype(OP, &per_channel, dt)?;
        x.contiguous(OP)?;
        y.contiguous(OP)?;
        for o in per_channel {
            flat_opt(OP, o, sh.c)?;
        }
        let p = BatchParams { weight: src_or_null(&weight), bias: src_or_null(&bias), running_mean: dst_or_null(&running_mean), running_var: dst_or_null(&running_var) };
        let io = BatchNormIo { x: x.src(), training, momentum, eps, y: y.dst(), save_mean: dst_or_null(&save_mean), save_invstd: dst_or_null(&save_invstd) };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe { oxide_kernels::ops::nn::norm::batch_norm(dt, sh, pdt, p, io, on.threads()) }
        })
    })
}

/// Batch norm backward from `dy` and the forward's `x` (contiguous, one size);
/// training reads `save_mean`/`save_invstd`, evaluation the running
/// statistics (each required then); `weight` is optional (ones). `dx`,
/// `dweight`, `dbias` are each optional (not computed).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_batch_norm_backward(
    on: OxideLaunch,
    dx: OxideTensor,
    dweight: OxideTensor,
    dbias: OxideTensor,
    dy: OxideTensor,
    x: OxideTensor,
    weight: OxideTensor,
    running_mean: OxideTensor,
    running_var: OxideTensor,
    save_mean: OxideTensor,
    save_invstd: OxideTensor,
    training: bool,
    eps: f64,
) -> i32 {
    use oxide_kernels::ops::nn::norm::{BatchNormGrads, BatchParams};
    const OP: &str = "batch_norm_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [dx, dweight, dbias, dy, x, weight, running_mean, running_var, save_mean, save_invstd] =
            unsafe { operands(OP, [&dx, &dweight, &dbias, &dy, &x, &weight, &running_mean, &running_var, &save_mean, &save_invstd]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (dy, x) = (dy.ok_or_else(missing)?, x.ok_or_else(missing)?);
        if training && (save_mean.is_none() || save_invstd.is_none()) {
            return Err(AbiError::Invalid(format!("{OP}: training needs save_mean and save_invstd")));
        }
        if !training && (running_mean.is_none() || running_var.is_none()) {
            return Err(AbiError::Invalid(format!("{OP}: evaluation needs the running statistics")));
        }
        let sh = batch_shape(OP, &x)?;
        same_sizes(OP, &[&x, &dy])?;
        let dt = common_dtype(OP, &[&x, &dy])?;
        if let Some(d) = &dx {
            d.sizes_are(OP, x.sizes)?;
            d.dtype_is(OP, dt)?;
            d.contiguous(OP)?;
        }
        let per_channel = [&weight, &running_mean, &running_var, &save_mean, &save_invstd, &dweight, &dbias];
        let pdt = optional_dtype(OP, &per_channel, dt)?;
        x.contiguous(OP)?;
        dy.contiguous(OP)?;
        for o in per_channel {
            flat_opt(OP, o, sh.c)?;
        }
        let p = BatchParams { weight: src_or_null(&weight), bias: std::ptr::null(), running_mean: src_or_null(&running_mean) as *mut u8, running_var: src_or_null(&running_var) as *mut u8 };
        let io = BatchNormGrads {
            dy: dy.src(),
            x: x.src(),
            save_mean: src_or_null(&save_mean),
            save_invstd: src_or_null(&save_invstd),
            training,
            eps,
            dx: dst_or_null(&dx),
            dweight: dst_or_null(&dweight),
            dbias: dst_or_null(&dbias),
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies;
            // the backward only reads the running statistics.
            unsafe { oxide_kernels::ops::nn::norm::batch_norm_backward(dt, sh, pdt, p, io, on.threads()) }
        })
    })
}

// ---- pooling ----

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
pub unsafe extern "C" fn oxide_max_pool(on: OxideLaunch, output: OxideTensor, indices: OxideTensor, input: OxideTensor, geometry: *const OxidePoolGeometry) -> i32 {
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
        launch(&on, || {
            // SAFETY: the operands were decoded and checked contiguous with the volumes `axes` covers.
            unsafe { oxide_kernels::ops::nn::pool::max_pool(dt, planes, &axes, input.src(), output.dst(), indices.dst() as *mut i64, on.threads()) }
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
pub unsafe extern "C" fn oxide_max_pool_backward(on: OxideLaunch, grad_input: OxideTensor, grad_output: OxideTensor, indices: OxideTensor, spatial: usize) -> i32 {
    const OP: &str = "max_pool_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad_output, indices] = unsafe { required(OP, [&grad_input, &grad_output, &indices]) }?;
        let split = |o: &Operand| -> Result<(usize, usize), AbiError> {
            if o.sizes.len() < spatial {
                return Err(AbiError::Invalid(format!("{OP}: operand of sizes {:?} has fewer than {spatial} dimensions", o.sizes)));
            }
            let e = o.extents();
            let k = e.len() - spatial;
            Ok((e[..k].iter().product(), e[k..].iter().product()))
        };
        let (planes, in_plane) = split(&grad_input)?;
        let (out_planes, out_plane) = split(&grad_output)?;
        if out_planes != planes {
            return Err(AbiError::Invalid(format!("{OP}: grad_input of sizes {:?} and grad_output of sizes {:?} differ in planes", grad_input.sizes, grad_output.sizes)));
        }
        let dt = common_dtype(OP, &[&grad_input, &grad_output])?;
        indices.dtype_is(OP, DType::I64)?;
        flat(OP, &grad_input, planes * in_plane)?;
        flat(OP, &grad_output, planes * out_plane)?;
        flat(OP, &indices, planes * out_plane)?;
        launch(&on, || {
            // SAFETY: the operands were decoded and checked contiguous with the counts passed.
            unsafe { oxide_kernels::ops::nn::pool::max_pool_backward(dt, oxide_kernels::ops::nn::pool::Planes { count: planes, in_plane, out_plane }, grad_output.src(), indices.src() as *const i64, grad_input.dst(), on.threads()) }
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
pub unsafe extern "C" fn oxide_avg_pool(on: OxideLaunch, dst: OxideTensor, src: OxideTensor, geometry: *const OxidePoolGeometry, backward: bool, count_include_pad: bool, has_divisor: bool, divisor: i64) -> i32 {
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
        launch(&on, || {
            // SAFETY: the operands were decoded and checked contiguous with the volumes `axes` covers.
            unsafe {
                if backward {
                    oxide_kernels::ops::nn::pool::avg_pool_backward(dt, planes, &axes, div, src.src(), dst.dst(), on.threads())
                } else {
                    oxide_kernels::ops::nn::pool::avg_pool(dt, planes, &axes, div, src.src(), dst.dst(), on.threads())
                }
            }
        })
    })
}

// ---- convolution ----

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
fn conv_operands(op: &'static str, c: &OxideConv, cv: &oxide_kernels::ops::nn::conv::Conv, input: &Option<Operand>, weight: &Option<Operand>, output: &Option<Operand>, bias: &Option<Operand>) -> Result<(), AbiError> {
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
pub unsafe extern "C" fn oxide_convolution(on: OxideLaunch, output: OxideTensor, input: OxideTensor, weight: OxideTensor, bias: OxideTensor, conv: *const OxideConv) -> i32 {
    const OP: &str = "convolution";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input, weight, bias] = unsafe { operands(OP, [&output, &input, &weight, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (o, i, w) = (output.ok_or_else(missing)?, input.ok_or_else(missing)?, weight.ok_or_else(missing)?);
        // SAFETY: the function's contract.
        let c = unsafe { conv.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        let cv = conv_desc(c)?;
        let dt = optional_dtype(OP, &[&output, &input, &weight, &bias], o.dtype)?;
        conv_operands(OP, c, &cv, &input, &weight, &output, &bias)?;
        let bias = bias.map(|b| b.src());
        launch(&on, || {
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
        let [grad_input, grad_weight, grad_bias, grad_output, input, weight] = unsafe { operands(OP, [&grad_input, &grad_weight, &grad_bias, &grad_output, &input, &weight]) }?;
        let go = grad_output.ok_or_else(|| AbiError::Invalid(format!("{OP}: a required operand is missing (null data)")))?;
        // SAFETY: the function's contract.
        let c = unsafe { conv.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        let cv = conv_desc(c)?;
        if (grad_input.is_some() && weight.is_none()) || (grad_weight.is_some() && input.is_none()) {
            return Err(AbiError::Invalid(format!("{OP}: a requested gradient needs a missing operand")));
        }
        let dt = optional_dtype(OP, &[&grad_output, &input, &weight, &grad_input, &grad_weight, &grad_bias], go.dtype)?;
        conv_operands(OP, c, &cv, &input, &weight, &grad_output, &grad_bias)?;
        conv_operands(OP, c, &cv, &grad_input, &grad_weight, &None, &None)?;
        let grads = Grads { input: grad_input.map(|g| g.dst()), weight: grad_weight.map(|g| g.dst()), bias: grad_bias.map(|g| g.dst()) };
        let (x, w) = (src_or_null(&input), src_or_null(&weight));
        launch(&on, || {
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
pub unsafe extern "C" fn oxide_unfold(on: OxideLaunch, dst: OxideTensor, src: OxideTensor, geometry: *const OxideUnfold, fold: bool) -> i32 {
    let op: &'static str = if fold { "col2im" } else { "im2col" };
    ffi(|| {
        // SAFETY: the function's contract.
        let [dst, src] = unsafe { required(op, [&dst, &src]) }?;
        // SAFETY: the function's contract.
        let g = unsafe { geometry.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{op}: null geometry")))?;
        let (images, columns) = if fold { (&dst, &src) } else { (&src, &dst) };
        rank_is(op, images, 4)?;
        let e = images.extents();
        let pair = |what: &str, a: [i64; 2]| -> Result<[usize; 2], AbiError> { Ok([size(op, what, a[0])?, size(op, what, a[1])?]) };
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
        launch(&on, || {
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

// ---- fused recurrent cells (oxide_kernels::ops::nn::rnn), called by csrc/aten/nn/rnn.cpp ----

/// A 2-d operand of `[rows, cols]` as the cell kernels read it (any strides); absent: a null matrix.
fn cell_mat(op: &'static str, o: &Option<Operand>, rows: usize, cols: usize) -> Result<oxide_kernels::ops::nn::rnn::Mat, AbiError> {
    use oxide_kernels::ops::nn::rnn::Mat;
    match o {
        None => Ok(Mat { ptr: std::ptr::null(), row_stride: 0, col_stride: 0 }),
        Some(o) => {
            o.sizes_are(op, &[rows as i64, cols as i64])?;
            Ok(Mat { ptr: o.src(), row_stride: o.strides[0] as isize, col_stride: o.strides[1] as isize })
        }
    }
}

/// `[batch, hidden]` of a 2-d state operand.
fn cell_dims(op: &'static str, state: &Operand) -> Result<(usize, usize), AbiError> {
    rank_is(op, state, 2)?;
    let e = state.extents();
    Ok((e[0], e[1]))
}

/// Refuses a cell whose operands differ in dtype (the kernels read one dtype throughout).
fn cell_dtype(op: &'static str, ops: &[&Option<Operand>]) -> Result<DType, AbiError> {
    let given: Vec<&Operand> = ops.iter().filter_map(|o| o.as_ref()).collect();
    common_dtype(op, &given)
}

/// `_thnn_fused_lstm_cell`: gate pre-activations `igates`, `hgates`
/// (`[batch, 4 hidden]`, any strides), cell state `cx` (`[batch, hidden]`, any
/// strides), optional biases `b_ih`, `b_hh` (`[4 hidden]` contiguous) to
/// contiguous `hy`, `cy` (`[batch, hidden]`) and `workspace` (`[batch, 4
/// hidden]`); one dtype throughout.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell(on: OxideLaunch, hy: OxideTensor, cy: OxideTensor, workspace: OxideTensor, igates: OxideTensor, hgates: OxideTensor, cx: OxideTensor, b_ih: OxideTensor, b_hh: OxideTensor) -> i32 {
    use oxide_kernels::ops::nn::rnn::LstmCell;
    const OP: &str = "_thnn_fused_lstm_cell";
    ffi(|| {
        // SAFETY: the function's contract.
        let all = unsafe { operands(OP, [&hy, &cy, &workspace, &igates, &hgates, &cx, &b_ih, &b_hh]) }?;
        let [hy, cy, workspace, igates, hgates, cx, b_ih, b_hh] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (hy_o, cy_o, ws_o) = (hy.ok_or_else(missing)?, cy.ok_or_else(missing)?, workspace.ok_or_else(missing)?);
        if igates.is_none() || hgates.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, cx.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &hy_o, batch * hidden)?;
        flat(OP, &cy_o, batch * hidden)?;
        flat(OP, &ws_o, batch * 4 * hidden)?;
        flat_opt(OP, b_ih, 4 * hidden)?;
        flat_opt(OP, b_hh, 4 * hidden)?;
        let io = LstmCell {
            igates: cell_mat(OP, igates, batch, 4 * hidden)?,
            hgates: cell_mat(OP, hgates, batch, 4 * hidden)?,
            cx: cell_mat(OP, cx, batch, hidden)?,
            b_ih: src_or_null(b_ih),
            b_hh: src_or_null(b_hh),
            hy: hy_o.dst(),
            cy: cy_o.dst(),
            workspace: ws_o.dst(),
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::lstm_cell(dt, batch, hidden, io, on.threads()) }
        })
    })
}

/// `_thnn_fused_lstm_cell_backward_impl`: from `grad_hy`, `grad_cy` (either
/// optional: zero; any strides), the forward's `cx`, `cy` (`[batch, hidden]`)
/// and `workspace` (`[batch, 4 hidden]`), to contiguous `grad_gates` (`[batch,
/// 4 hidden]`), `grad_cx` (`[batch, hidden]`) and the optional `grad_bias` (`[4 hidden]`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell_backward(
    on: OxideLaunch,
    grad_gates: OxideTensor,
    grad_cx: OxideTensor,
    grad_bias: OxideTensor,
    grad_hy: OxideTensor,
    grad_cy: OxideTensor,
    cx: OxideTensor,
    cy: OxideTensor,
    workspace: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::nn::rnn::LstmCellGrads;
    const OP: &str = "_thnn_fused_lstm_cell_backward_impl";
    ffi(|| {
        // SAFETY: the function's contract.
        let all = unsafe { operands(OP, [&grad_gates, &grad_cx, &grad_bias, &grad_hy, &grad_cy, &cx, &cy, &workspace]) }?;
        let [grad_gates, grad_cx, grad_bias, grad_hy, grad_cy, cx, cy, workspace] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (gg, gcx) = (grad_gates.ok_or_else(missing)?, grad_cx.ok_or_else(missing)?);
        if cy.is_none() || workspace.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, cx.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &gg, batch * 4 * hidden)?;
        flat(OP, &gcx, batch * hidden)?;
        flat_opt(OP, grad_bias, 4 * hidden)?;
        let io = LstmCellGrads {
            grad_hy: cell_mat(OP, grad_hy, batch, hidden)?,
            grad_cy: cell_mat(OP, grad_cy, batch, hidden)?,
            cx: cell_mat(OP, cx, batch, hidden)?,
            cy: cell_mat(OP, cy, batch, hidden)?,
            workspace: cell_mat(OP, workspace, batch, 4 * hidden)?,
            grad_gates: gg.dst(),
            grad_cx: gcx.dst(),
            grad_bias: dst_or_null(grad_bias),
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::lstm_cell_backward(dt, batch, hidden, io, on.threads()) }
        })
    })
}

/// `_thnn_fused_gru_cell`: gate pre-activations `igates`, `hgates` (`[batch,
/// 3 hidden]`, any strides), hidden state `hx` (`[batch, hidden]`, any
/// strides), optional biases (`[3 hidden]` contiguous) to contiguous `hy`
/// (`[batch, hidden]`) and `workspace` (`[batch, 5 hidden]`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell(on: OxideLaunch, hy: OxideTensor, workspace: OxideTensor, igates: OxideTensor, hgates: OxideTensor, hx: OxideTensor, b_ih: OxideTensor, b_hh: OxideTensor) -> i32 {
    use oxide_kernels::ops::nn::rnn::GruCell;
    const OP: &str = "_thnn_fused_gru_cell";
    ffi(|| {
        // SAFETY: the function's contract.
        let all = unsafe { operands(OP, [&hy, &workspace, &igates, &hgates, &hx, &b_ih, &b_hh]) }?;
        let [hy, workspace, igates, hgates, hx, b_ih, b_hh] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (hy_o, ws_o) = (hy.ok_or_else(missing)?, workspace.ok_or_else(missing)?);
        if igates.is_none() || hgates.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, hx.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &hy_o, batch * hidden)?;
        flat(OP, &ws_o, batch * 5 * hidden)?;
        flat_opt(OP, b_ih, 3 * hidden)?;
        flat_opt(OP, b_hh, 3 * hidden)?;
        let io = GruCell {
            igates: cell_mat(OP, igates, batch, 3 * hidden)?,
            hgates: cell_mat(OP, hgates, batch, 3 * hidden)?,
            hx: cell_mat(OP, hx, batch, hidden)?,
            b_ih: src_or_null(b_ih),
            b_hh: src_or_null(b_hh),
            hy: hy_o.dst(),
            workspace: ws_o.dst(),
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::gru_cell(dt, batch, hidden, io, on.threads()) }
        })
    })
}

/// `_thnn_fused_gru_cell_backward`: from `grad_hy` (`[batch, hidden]`, any
/// strides) and the forward's `workspace` (`[batch, 5 hidden]`) to contiguous
/// `grad_input_gates`, `grad_hidden_gates` (`[batch, 3 hidden]`), `grad_hx`
/// (`[batch, hidden]`) and the optional bias gradients (`[3 hidden]`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell_backward(
    on: OxideLaunch,
    grad_input_gates: OxideTensor,
    grad_hidden_gates: OxideTensor,
    grad_hx: OxideTensor,
    grad_input_bias: OxideTensor,
    grad_hidden_bias: OxideTensor,
    grad_hy: OxideTensor,
    workspace: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::nn::rnn::GruCellGrads;
    const OP: &str = "_thnn_fused_gru_cell_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let all = unsafe { operands(OP, [&grad_input_gates, &grad_hidden_gates, &grad_hx, &grad_input_bias, &grad_hidden_bias, &grad_hy, &workspace]) }?;
        let [gi, gh, ghx, gib, ghb, grad_hy, workspace] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (gi_o, gh_o, ghx_o) = (gi.ok_or_else(missing)?, gh.ok_or_else(missing)?, ghx.ok_or_else(missing)?);
        if workspace.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, grad_hy.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &gi_o, batch * 3 * hidden)?;
        flat(OP, &gh_o, batch * 3 * hidden)?;
        flat(OP, &ghx_o, batch * hidden)?;
        flat_opt(OP, gib, 3 * hidden)?;
        flat_opt(OP, ghb, 3 * hidden)?;
        let io = GruCellGrads {
            grad_hy: cell_mat(OP, grad_hy, batch, hidden)?,
            workspace: cell_mat(OP, workspace, batch, 5 * hidden)?,
            grad_input_gates: gi_o.dst(),
            grad_hidden_gates: gh_o.dst(),
            grad_hx: ghx_o.dst(),
            grad_input_bias: dst_or_null(gib),
            grad_hidden_bias: dst_or_null(ghb),
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::gru_cell_backward(dt, batch, hidden, io, on.threads()) }
        })
    })
}

// ---- embedding bags ----

/// A contiguous int64 operand of `n` elements as a slice (empty for `n == 0`).
///
/// # Safety
/// `o` was decoded and checked to be contiguous int64 with `n` elements.
unsafe fn index_slice<'a>(o: &Operand, n: usize) -> &'a [i64] {
    if n == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(o.src() as *const i64, n) }
    }
}

/// Refuses `o` unless it is contiguous int64 with `n` elements.
fn index_operand(op: &'static str, o: &Operand, n: usize) -> Result<(), AbiError> {
    o.dtype_is(op, DType::I64)?;
    flat(op, o, n)
}

/// `(rows, cols)` of a 2-d operand.
fn matrix_dims(op: &'static str, o: &Operand) -> Result<(usize, usize), AbiError> {
    rank_is(op, o, 2)?;
    let e = o.extents();
    Ok((e[0], e[1]))
}

/// `_embedding_bag` forward (`oxide_kernels::ops::nn::embedding::embedding_bag`):
/// the bags (int64 `indices`, `n`; int64 `offsets`) of the 2-d `weight`
/// (`(num_weights, dim)`) into `output` `(num_bags, dim)` (the weight's
/// dtype), int64 `offset2bag` `(n)`, `bag_size` `(num_bags)` and, in max mode
/// (`mode` 2; 0 sum, 1 mean), `max_indices` `(num_bags, dim)` (required then,
/// else ignored). `per_sample_weights` (`n`, the weight's dtype) is optional.
/// All contiguous. Invalid offsets or indices are reported with CPU PyTorch's messages.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); outputs overlap nothing.
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag(
    on: OxideLaunch,
    output: OxideTensor,
    offset2bag: OxideTensor,
    bag_size: OxideTensor,
    max_indices: OxideTensor,
    indices: OxideTensor,
    offsets: OxideTensor,
    weight: OxideTensor,
    per_sample_weights: OxideTensor,
    mode: i64,
    padding_idx: i64,
    include_last_offset: bool,
) -> i32 {
    use oxide_kernels::ops::nn::embedding::{embedding_bag, BagOutputs, Bags, Mode};
    const OP: &str = "embedding_bag";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, offset2bag, bag_size, max_indices, indices, offsets, weight, psw] =
            unsafe { operands(OP, [&output, &offset2bag, &bag_size, &max_indices, &indices, &offsets, &weight, &per_sample_weights]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (output, offset2bag, bag_size, indices, offsets, weight) =
            (output.ok_or_else(missing)?, offset2bag.ok_or_else(missing)?, bag_size.ok_or_else(missing)?, indices.ok_or_else(missing)?, offsets.ok_or_else(missing)?, weight.ok_or_else(missing)?);
        let mode = Mode::from_code(mode)?;
        let (num_weights, dim) = matrix_dims(OP, &weight)?;
        let n = indices.numel;
        let num_bags = offsets.numel.saturating_sub(usize::from(include_last_offset));
        let dt = common_dtype(OP, &[&weight, &output])?;
        weight.contiguous(OP)?;
        index_operand(OP, &indices, n)?;
        index_operand(OP, &offsets, offsets.numel)?;
        index_operand(OP, &offset2bag, n)?;
        index_operand(OP, &bag_size, num_bags)?;
        flat(OP, &output, num_bags * dim)?;
        if let Some(p) = &psw {
            p.dtype_is(OP, dt)?;
            flat(OP, p, n)?;
        }
        let max_indices = if mode == Mode::Max {
            let m = max_indices.ok_or_else(missing)?;
            index_operand(OP, &m, num_bags * dim)?;
            m.dst() as *mut i64
        } else {
            std::ptr::null_mut()
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count the bags imply.
            unsafe {
                let bags = Bags { indices: index_slice(&indices, n), offsets: index_slice(&offsets, offsets.numel), include_last_offset, num_weights, dim, padding_idx };
                let out = BagOutputs { output: output.dst(), offset2bag: offset2bag.dst() as *mut i64, bag_size: bag_size.dst() as *mut i64, max_indices };
                embedding_bag(dt, &bags, mode, weight.src(), psw.map(|p| p.src()), out, on.threads())
            }
        })
    })
}

/// `_embedding_bag_dense_backward` (`oxide_kernels::ops::nn::embedding::embedding_bag_backward`):
/// the 2-d `grad` `(num_bags, dim)` into `grad_weight` `(num_weights, dim)`
/// (overwritten), from int64 `indices` and the forward's `offset2bag` (`n`
/// each), `bag_size` (`num_bags`) and, in max mode, `max_indices` (`num_bags *
/// dim`; required then, else ignored). `per_sample_weights` (`n`) is optional.
/// All contiguous.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `grad_weight` overlaps nothing.
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag_backward(
    on: OxideLaunch,
    grad_weight: OxideTensor,
    grad: OxideTensor,
    indices: OxideTensor,
    offset2bag: OxideTensor,
    bag_size: OxideTensor,
    max_indices: OxideTensor,
    per_sample_weights: OxideTensor,
    mode: i64,
    padding_idx: i64,
    scale_grad_by_freq: bool,
) -> i32 {
    use oxide_kernels::ops::nn::embedding::{embedding_bag_backward, BagGrad, Mode};
    const OP: &str = "embedding_bag_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_weight, grad, indices, offset2bag, bag_size, max_indices, psw] =
            unsafe { operands(OP, [&grad_weight, &grad, &indices, &offset2bag, &bag_size, &max_indices, &per_sample_weights]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_weight, grad, indices, offset2bag, bag_size) =
            (grad_weight.ok_or_else(missing)?, grad.ok_or_else(missing)?, indices.ok_or_else(missing)?, offset2bag.ok_or_else(missing)?, bag_size.ok_or_else(missing)?);
        let mode = Mode::from_code(mode)?;
        let (num_weights, dim) = matrix_dims(OP, &grad_weight)?;
        let (num_bags, grad_dim) = matrix_dims(OP, &grad)?;
        if grad_dim != dim {
            return Err(AbiError::Invalid(format!("{OP}: gradient of sizes {:?} for a weight of sizes {:?}", grad.sizes, grad_weight.sizes)));
        }
        let n = indices.numel;
        let dt = common_dtype(OP, &[&grad, &grad_weight])?;
        grad.contiguous(OP)?;
        grad_weight.contiguous(OP)?;
        index_operand(OP, &indices, n)?;
        index_operand(OP, &offset2bag, n)?;
        index_operand(OP, &bag_size, num_bags)?;
        if let Some(p) = &psw {
            p.dtype_is(OP, dt)?;
            flat(OP, p, n)?;
        }
        let max_indices = if mode == Mode::Max {
            let m = max_indices.ok_or_else(missing)?;
            index_operand(OP, &m, num_bags * dim)?;
            Some(m)
        } else {
            None
        };
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count the bags imply.
            unsafe {
                let g = BagGrad {
                    indices: index_slice(&indices, n),
                    offset2bag: index_slice(&offset2bag, n),
                    bag_size: index_slice(&bag_size, num_bags),
                    max_indices: max_indices.map(|m| index_slice(&m, num_bags * dim)),
                    num_weights,
                    dim,
                    scale_grad_by_freq,
                    padding_idx,
                };
                embedding_bag_backward(dt, &g, mode, grad.src(), psw.map(|p| p.src()), grad_weight.dst(), on.threads())
            }
        })
    })
}

/// `_embedding_bag_per_sample_weights_backward`
/// (`oxide_kernels::ops::nn::embedding::per_sample_weights_backward`): `out[i]`
/// (`n`, the gradient's dtype) is the dot product of `grad[offset2bag[i]]`
/// (`grad` `(num_bags, dim)`) and `weight[indices[i]]` (`weight` `(num_weights,
/// dim)`, the gradient's dtype); int64 `indices` and `offset2bag` (`n`). All contiguous.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `out` overlaps nothing.
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag_per_sample_weights_backward(on: OxideLaunch, out: OxideTensor, grad: OxideTensor, weight: OxideTensor, indices: OxideTensor, offset2bag: OxideTensor, padding_idx: i64) -> i32 {
    use oxide_kernels::ops::nn::embedding::{per_sample_weights_backward, SampleBags};
    const OP: &str = "embedding_bag_per_sample_weights_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, grad, weight, indices, offset2bag] = unsafe { required(OP, [&out, &grad, &weight, &indices, &offset2bag]) }?;
        let (num_weights, dim) = matrix_dims(OP, &weight)?;
        let (num_bags, grad_dim) = matrix_dims(OP, &grad)?;
        if grad_dim != dim {
            return Err(AbiError::Invalid(format!("{OP}: gradient of sizes {:?} for a weight of sizes {:?}", grad.sizes, weight.sizes)));
        }
        let n = indices.numel;
        let dt = common_dtype(OP, &[&out, &grad, &weight])?;
        grad.contiguous(OP)?;
        weight.contiguous(OP)?;
        flat(OP, &out, n)?;
        index_operand(OP, &indices, n)?;
        index_operand(OP, &offset2bag, n)?;
        launch(&on, || {
            // SAFETY: every operand was decoded and checked contiguous with the element count the bags imply.
            unsafe {
                let bags = SampleBags { indices: index_slice(&indices, n), offset2bag: index_slice(&offset2bag, n), num_bags, num_weights, dim, padding_idx };
                per_sample_weights_backward(dt, &bags, grad.src(), weight.src(), out.dst(), on.threads())
            }
        })
    })
}

// ---- grid sampling ----

/// The kernel's description of a 2-d grid sampling of the 4-d `input` `(N, C,
/// H, W)` at the 4-d `grid` `(N, H_out, W_out, 2)`.
fn grid_sample_desc(op: &'static str, input: &Operand, grid: &Operand, interpolation: i64, padding: i64, align_corners: bool) -> Result<oxide_kernels::ops::nn::grid_sample::GridSample, AbiError> {
    use oxide_kernels::ops::nn::grid_sample::GridSample;
    rank_is(op, input, 4)?;
    rank_is(op, grid, 4)?;
    let (i, g) = (input.extents(), grid.extents());
    if g[0] != i[0] || g[3] != 2 {
        return Err(AbiError::Invalid(format!("{op}: grid of sizes {:?} for an input of sizes {:?}", grid.sizes, input.sizes)));
    }
    let (interpolation, padding) = GridSample::modes(interpolation, padding)?;
    Ok(GridSample { batch: i[0], channels: i[1], input: [i[2], i[3]], output: [g[1], g[2]], interpolation, padding, align_corners })
}

/// `grid_sampler_2d` (`oxide_kernels::ops::nn::grid_sample::grid_sample_2d`):
/// contiguous input `(N, C, H, W)`, grid `(N, H_out, W_out, 2)`, output `(N,
/// C, H_out, W_out)`, one dtype. `interpolation` and `padding` are PyTorch's
/// codes (0 bilinear, 1 nearest, 2 bicubic; 0 zeros, 1 border, 2 reflection).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_grid_sample_2d(on: OxideLaunch, output: OxideTensor, input: OxideTensor, grid: OxideTensor, interpolation: i64, padding: i64, align_corners: bool) -> i32 {
    const OP: &str = "grid_sampler_2d";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input, grid] = unsafe { required(OP, [&output, &input, &grid]) }?;
        let gs = grid_sample_desc(OP, &input, &grid, interpolation, padding, align_corners)?;
        let dt = common_dtype(OP, &[&input, &grid, &output])?;
        input.contiguous(OP)?;
        grid.contiguous(OP)?;
        output.sizes_are(OP, &[gs.batch, gs.channels, gs.output[0], gs.output[1]].map(|e| e as i64))?;
        output.contiguous(OP)?;
        launch(&on, || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `gs` describes.
            unsafe { oxide_kernels::ops::nn::grid_sample::grid_sample_2d(dt, &gs, input.src(), grid.src(), output.dst(), on.threads()) }
        })
    })
}

/// `grid_sampler_2d_backward` (`oxide_kernels::ops::nn::grid_sample::grid_sample_2d_backward`):
/// `grad_input` (optional: not requested; the input's sizes) and `grad_grid`
/// (the grid's sizes), overwritten, from `grad_output` (the output's sizes);
/// layouts and codes as [`oxide_grid_sample_2d`].
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); the gradients overlap no operand and each other.
#[no_mangle]
pub unsafe extern "C" fn oxide_grid_sample_2d_backward(
    on: OxideLaunch,
    grad_input: OxideTensor,
    grad_grid: OxideTensor,
    grad_output: OxideTensor,
    input: OxideTensor,
    grid: OxideTensor,
    interpolation: i64,
    padding: i64,
    align_corners: bool,
) -> i32 {
    use oxide_kernels::ops::nn::grid_sample::GridGrads;
    const OP: &str = "grid_sampler_2d_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [grad_input, grad_grid, grad_output, input, grid] = unsafe { operands(OP, [&grad_input, &grad_grid, &grad_output, &input, &grid]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_grid, grad_output, input, grid) = (grad_grid.ok_or_else(missing)?, grad_output.ok_or_else(missing)?, input.ok_or_else(missing)?, grid.ok_or_else(missing)?);
        let gs = grid_sample_desc(OP, &input, &grid, interpolation, padding, align_corners)?;
        let dt = common_dtype(OP, &[&input, &grid, &grad_output, &grad_grid])?;
        input.contiguous(OP)?;
        grid.contiguous(OP)?;
        grad_output.sizes_are(OP, &[gs.batch, gs.channels, gs.output[0], gs.output[1]].map(|e| e as i64))?;
        grad_output.contiguous(OP)?;
        grad_grid.sizes_are(OP, grid.sizes)?;
        grad_grid.contiguous(OP)?;
        if let Some(gi) = &grad_input {
            gi.sizes_are(OP, input.sizes)?;
            gi.dtype_is(OP, dt)?;
            gi.contiguous(OP)?;
        }
        let grads = GridGrads { input: grad_input.map(|g| g.dst()), grid: grad_grid.dst() };
        launch(&on, || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `gs` describes.
            unsafe { oxide_kernels::ops::nn::grid_sample::grid_sample_2d_backward(dt, &gs, grad_output.src(), input.src(), grid.src(), grads, on.threads()) }
        })
    })
}

// ---- scaled dot-product attention (oxide_kernels::ops::nn::attention) ----

/// The scalars of one attention call: the causal flag (top-left aligned), the
/// resolved `scale`, the dropout probability (0: none) with its Philox state.
/// Extents come from the operands: query `[B, Hq, L, E]`, key `[B, Hkv, S,
/// E]`, value `[B, Hkv, S, Ev]` (`Hkv` dividing `Hq`), any strides.
#[repr(C)]
pub struct OxideAttention {
    pub causal: bool,
    pub scale: f64,
    pub dropout_p: f64,
    pub philox: OxidePhilox,
}

/// The extents of an attention call, checked across query, key and value.
fn attention_dims(op: &'static str, q: &Operand, k: &Operand, v: &Operand) -> Result<oxide_kernels::ops::nn::attention::Dims, AbiError> {
    for o in [q, k, v] {
        rank_is(op, o, 4)?;
    }
    let (qe, ke, ve) = (q.extents(), k.extents(), v.extents());
    let (batch, heads_q, len_q, dim_qk) = (qe[0], qe[1], qe[2], qe[3]);
    let (heads_kv, len_kv, dim_v) = (ke[1], ke[2], ve[3]);
    let consistent = ke[0] == batch && ve[0] == batch && ve[1] == heads_kv && ke[3] == dim_qk && ve[2] == len_kv && heads_kv > 0 && heads_q % heads_kv == 0;
    if !consistent {
        return Err(AbiError::Invalid(format!("{op}: query {:?}, key {:?} and value {:?} do not match", q.sizes, k.sizes, v.sizes)));
    }
    Ok(oxide_kernels::ops::nn::attention::Dims { batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v })
}

/// A decoded 4-d operand as the attention kernels take it.
fn attention_operand(o: &Operand) -> oxide_kernels::ops::nn::attention::Operand {
    oxide_kernels::ops::nn::attention::Operand { ptr: o.data as *mut u8, strides: [o.strides[0], o.strides[1], o.strides[2], o.strides[3]] }
}

/// The dtype logsumexp is kept in: float64 for float64 inputs, else float32.
fn lse_dtype(dt: DType) -> DType {
    if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Philox blocks the dropout mask of an attention over `query`, `key` and
/// `value` consumes (the generator offset must advance by this much; see
/// `oxide_kernels::ops::nn::attention`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `out` is a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_dropout_blocks(query: OxideTensor, key: OxideTensor, value: OxideTensor, out: *mut u64) -> i32 {
    const OP: &str = "scaled_dot_product_attention";
    ffi(|| {
        // SAFETY: the function's contract.
        let [q, k, v] = unsafe { required(OP, [&query, &key, &value]) }?;
        put(out, oxide_kernels::ops::nn::attention::dropout_blocks(&attention_dims(OP, &q, &k, &v)?))
    })
}

/// Runs `f` with the kernel's description of the attention over `q`, `k`, `v`
/// and the optional `bias` (`[B, Hq, L, S]`, any strides; stride 0 on broadcast
/// dims), after checking every operand's sizes and dtype (dropout bits borrowed
/// from the Philox state of `a`).
fn with_attention<T>(
    op: &'static str,
    on: &OxideLaunch,
    a: &OxideAttention,
    [q, k, v]: [&Operand; 3],
    bias: &Option<Operand>,
    f: impl FnOnce(&oxide_kernels::ops::nn::attention::Attention) -> Result<T, AbiError>,
) -> Result<T, AbiError> {
    use oxide_kernels::ops::nn::attention::{Attention, Dropout};
    let dims = attention_dims(op, q, k, v)?;
    let dt = common_dtype(op, &[q, k, v])?;
    if let Some(b) = bias {
        b.sizes_are(op, &[dims.batch, dims.heads_q, dims.len_q, dims.len_kv].map(|e| e as i64))?;
        b.dtype_is(op, dt)?;
    }
    let bits = philox(&a.philox);
    let att = Attention {
        dims,
        dtype: dt,
        query: attention_operand(q),
        key: attention_operand(k),
        value: attention_operand(v),
        bias: bias.as_ref().map(attention_operand),
        causal: a.causal,
        scale: a.scale,
        dropout: (a.dropout_p > 0.0).then_some(Dropout { p: a.dropout_p, bits: &bits }),
        threads: on.threads(),
    };
    f(&att)
}

/// Fused attention forward (`oxide_kernels::ops::nn::attention::forward`):
/// writes `out` (`[B, Hq, L, Ev]`, any strides, the inputs' dtype) and
/// `logsumexp` (`[B, Hq, L]` contiguous; float64 for float64 inputs, else
/// float32) from `query`, `key`, `value` and the optional `bias`.
///
/// # Safety
/// `attention` is valid; each [`OxideTensor`] describes live memory (see
/// [`operands`]); outputs overlap no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_forward(on: OxideLaunch, out: OxideTensor, logsumexp: OxideTensor, query: OxideTensor, key: OxideTensor, value: OxideTensor, bias: OxideTensor, attention: *const OxideAttention) -> i32 {
    const OP: &str = "scaled_dot_product_attention";
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, lse, q, k, v, bias] = unsafe { operands(OP, [&out, &logsumexp, &query, &key, &value, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (out, lse, q, k, v) = (out.ok_or_else(missing)?, lse.ok_or_else(missing)?, q.ok_or_else(missing)?, k.ok_or_else(missing)?, v.ok_or_else(missing)?);
        // SAFETY: the function's contract.
        let a = unsafe { attention.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        with_attention(OP, &on, a, [&q, &k, &v], &bias, |att| {
            let d = att.dims;
            out.sizes_are(OP, &[d.batch, d.heads_q, d.len_q, d.dim_v].map(|e| e as i64))?;
            out.dtype_is(OP, att.dtype)?;
            lse.dtype_is(OP, lse_dtype(att.dtype))?;
            flat(OP, &lse, d.batch * d.heads_q * d.len_q)?;
            launch(&on, || {
                // SAFETY: every operand was decoded and checked to have the sizes `att.dims` implies;
                // the kernel addresses them through their own strides.
                unsafe { oxide_kernels::ops::nn::attention::forward(att, attention_operand(&out), lse.dst()) }
            })
        })
    })
}

/// Fused attention backward (`oxide_kernels::ops::nn::attention::backward`)
/// from the forward's `out` and `logsumexp` and `grad_out` (`out`'s sizes):
/// writes each gradient that is present (`grad_bias` is the full `[B, Hq, L,
/// S]` gradient; the caller reduces it to the bias's shape). Dropout must use
/// the forward's Philox state.
///
/// # Safety
/// As [`oxide_attention_forward`]; the gradients overlap each other and no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_backward(
    on: OxideLaunch,
    grad_query: OxideTensor,
    grad_key: OxideTensor,
    grad_value: OxideTensor,
    grad_bias: OxideTensor,
    grad_out: OxideTensor,
    out: OxideTensor,
    logsumexp: OxideTensor,
    query: OxideTensor,
    key: OxideTensor,
    value: OxideTensor,
    bias: OxideTensor,
    attention: *const OxideAttention,
) -> i32 {
    use oxide_kernels::ops::nn::attention::Grads;
    const OP: &str = "scaled_dot_product_attention_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [gq, gk, gv, gb, grad_out, out, lse, q, k, v, bias] = unsafe { operands(OP, [&grad_query, &grad_key, &grad_value, &grad_bias, &grad_out, &out, &logsumexp, &query, &key, &value, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_out, out, lse, q, k, v) = (grad_out.ok_or_else(missing)?, out.ok_or_else(missing)?, lse.ok_or_else(missing)?, q.ok_or_else(missing)?, k.ok_or_else(missing)?, v.ok_or_else(missing)?);
        // SAFETY: the function's contract.
        let a = unsafe { attention.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        with_attention(OP, &on, a, [&q, &k, &v], &bias, |att| {
            let d = att.dims;
            let out_sizes = [d.batch, d.heads_q, d.len_q, d.dim_v].map(|e| e as i64);
            for o in [&out, &grad_out] {
                o.sizes_are(OP, &out_sizes)?;
                o.dtype_is(OP, att.dtype)?;
            }
            lse.dtype_is(OP, lse_dtype(att.dtype))?;
            flat(OP, &lse, d.batch * d.heads_q * d.len_q)?;
            let bias_sizes = [d.batch, d.heads_q, d.len_q, d.len_kv].map(|e| e as i64);
            for (g, sizes) in [(&gq, q.sizes), (&gk, k.sizes), (&gv, v.sizes), (&gb, &bias_sizes[..])] {
                if let Some(g) = g {
                    g.sizes_are(OP, sizes)?;
                    g.dtype_is(OP, att.dtype)?;
                }
            }
            let op4 = |o: &Option<Operand>| o.as_ref().map(attention_operand);
            let grads = Grads { query: op4(&gq), key: op4(&gk), value: op4(&gv), bias: op4(&gb) };
            launch(&on, || {
                // SAFETY: every operand was decoded and checked to have the sizes `att.dims` implies;
                // the kernel addresses them through their own strides.
                unsafe { oxide_kernels::ops::nn::attention::backward(att, attention_operand(&out), attention_operand(&grad_out), lse.src(), grads) }
            })
        })
    })
}

// ---- descriptors as the kernels take them ----

/// The kernel crate's view of a geometry: plane count and the three axes.
fn pool_axes(g: &OxidePoolGeometry) -> Result<(usize, [oxide_kernels::ops::nn::pool::Axis; 3]), AbiError> {
    use oxide_kernels::ops::nn::pool::{Axis, Window};
    let size = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("pooling: negative {what} {v}")));
    let mut axes = [Axis::unit(); 3];
    for (k, a) in axes.iter_mut().enumerate() {
        let window = if g.adaptive {
            Window::Adaptive
        } else {
            Window::Fixed { kernel: size("kernel size", g.kernel[k])?, stride: size("stride", g.stride[k])?, padding: size("padding", g.padding[k])?, dilation: size("dilation", g.dilation[k])? }
        };
        *a = Axis { input: size("input size", g.input[k])?, output: size("output size", g.output[k])?, window };
    }
    Ok((size("plane count", g.planes)?, axes))
}

fn plane(extents: &[i64; 3]) -> usize {
    extents.iter().map(|&e| e.max(0) as usize).product()
}

fn pool_divisor(adaptive: bool, count_include_pad: bool, has_divisor: bool, divisor: i64) -> oxide_kernels::ops::nn::pool::Divisor {
    use oxide_kernels::ops::nn::pool::Divisor;
    if adaptive {
        Divisor::Adaptive
    } else if has_divisor {
        Divisor::Override(divisor)
    } else {
        Divisor::Window { count_include_pad }
    }
}

fn conv_desc(c: &OxideConv) -> Result<oxide_kernels::ops::nn::conv::Conv, AbiError> {
    use oxide_kernels::ops::nn::conv::{Conv, Spatial, MAX_SPATIAL};
    if c.ndim == 0 || c.ndim > MAX_SPATIAL {
        return Err(AbiError::Invalid(format!("convolution over {} spatial dimensions (1 to {MAX_SPATIAL} supported)", c.ndim)));
    }
    let s = |a: &[i64; 3]| -> Vec<i64> { a[..c.ndim].to_vec() };
    let (input, output, kernel, stride, padding, dilation) = (s(&c.input), s(&c.output), s(&c.kernel), s(&c.stride), s(&c.padding), s(&c.dilation));
    let spatial = Spatial { input: &input, output: &output, kernel: &kernel, stride: &stride, padding: &padding, dilation: &dilation };
    Ok(Conv::new(c.batch, c.in_channels, c.out_channels, c.groups, c.transposed, spatial)?)
}
