//! Group, layer and batch norm, forward and backward (`oxide_kernels::ops::nn::norm`).

use super::*;

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
    Ok(oxide_kernels::ops::nn::norm::GroupShape {
        n: size(op, "batch", g.n)?,
        c: size(op, "channels", g.c)?,
        s: size(op, "spatial size", g.s)?,
        g: size(op, "groups", g.groups)?,
    })
}

/// Group norm forward (layer norm is `groups = 1, s = 1`): `x`, `y` contiguous
/// `[n, c, s]` of one dtype; optional `weight`/`bias` `[c]` of one parameter
/// dtype; `mean`/`rstd` `[n, groups]` contiguous, of one statistics dtype.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_group_norm(
    on: OxideLaunch,
    y: OxideTensor,
    mean: OxideTensor,
    rstd: OxideTensor,
    x: OxideTensor,
    weight: OxideTensor,
    bias: OxideTensor,
    shape: OxideGroupShape,
    eps: f64,
) -> i32 {
    use oxide_kernels::ops::nn::norm::GroupNormIo;
    const OP: &str = "group_norm";
    ffi(|| {
        // SAFETY: the function's contract.
        let [y, mean, rstd, x, weight, bias] = unsafe { operands(OP, [&y, &mean, &rstd, &x, &weight, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (y, mean, rstd, x) =
            (y.ok_or_else(missing)?, mean.ok_or_else(missing)?, rstd.ok_or_else(missing)?, x.ok_or_else(missing)?);
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
        let io = GroupNormIo {
            x: x.src(),
            param_dt: pdt,
            weight: src_or_null(&weight),
            bias: src_or_null(&bias),
            y: y.dst(),
            stat_dt: sdt,
            mean: mean.dst(),
            rstd: rstd.dst(),
        };
        launch(&on, move || {
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
        let [dx, dweight, dbias, dy, x, mean, rstd, weight] =
            unsafe { operands(OP, [&dx, &dweight, &dbias, &dy, &x, &mean, &rstd, &weight]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (dy, x, mean, rstd) =
            (dy.ok_or_else(missing)?, x.ok_or_else(missing)?, mean.ok_or_else(missing)?, rstd.ok_or_else(missing)?);
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
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies.
            unsafe { oxide_kernels::ops::nn::norm::group_norm_backward(dt, sh, io, on.threads()) }
        })
    })
}

/// `[n, c, s]` of a batch norm input (at least 2-d: batch, channels, then spatial dims).
fn batch_shape(op: &'static str, x: &Operand) -> Result<oxide_kernels::ops::nn::norm::BatchShape, AbiError> {
    let e = x.extents();
    if e.len() < 2 {
        return Err(AbiError::Invalid(format!(
            "{op}: expected an input of 2 or more dimensions, got sizes {:?}",
            x.sizes
        )));
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
        let [y, save_mean, save_invstd, running_mean, running_var, x, weight, bias] =
            unsafe { operands(OP, [&y, &save_mean, &save_invstd, &running_mean, &running_var, &x, &weight, &bias]) }?;
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
        let p = BatchParams {
            weight: src_or_null(&weight),
            bias: src_or_null(&bias),
            running_mean: dst_or_null(&running_mean),
            running_var: dst_or_null(&running_var),
        };
        let io = BatchNormIo {
            x: x.src(),
            training,
            momentum,
            eps,
            y: y.dst(),
            save_mean: dst_or_null(&save_mean),
            save_invstd: dst_or_null(&save_invstd),
        };
        launch(&on, move || {
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
        let [dx, dweight, dbias, dy, x, weight, running_mean, running_var, save_mean, save_invstd] = unsafe {
            operands(
                OP,
                [&dx, &dweight, &dbias, &dy, &x, &weight, &running_mean, &running_var, &save_mean, &save_invstd],
            )
        }?;
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
            d.sizes_are(OP, &x.sizes)?;
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
        let p = BatchParams {
            weight: src_or_null(&weight),
            bias: std::ptr::null(),
            running_mean: src_or_null(&running_mean) as *mut u8,
            running_var: src_or_null(&running_var) as *mut u8,
        };
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
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count `sh` implies;
            // the backward only reads the running statistics.
            unsafe { oxide_kernels::ops::nn::norm::batch_norm_backward(dt, sh, pdt, p, io, on.threads()) }
        })
    })
}
