//! 2-d grid sampling, forward and backward (`oxide_kernels::ops::nn::grid_sample`).

use super::*;

/// The kernel's description of a 2-d grid sampling of the 4-d `input` `(N, C,
/// H, W)` at the 4-d `grid` `(N, H_out, W_out, 2)`.
fn grid_sample_desc(
    op: &'static str,
    input: &Operand,
    grid: &Operand,
    interpolation: i64,
    padding: i64,
    align_corners: bool,
) -> Result<oxide_kernels::ops::nn::grid_sample::GridSample, AbiError> {
    use oxide_kernels::ops::nn::grid_sample::GridSample;
    rank_is(op, input, 4)?;
    rank_is(op, grid, 4)?;
    let (i, g) = (input.extents(), grid.extents());
    if g[0] != i[0] || g[3] != 2 {
        return Err(AbiError::Invalid(format!(
            "{op}: grid of sizes {:?} for an input of sizes {:?}",
            grid.sizes, input.sizes
        )));
    }
    let (interpolation, padding) = GridSample::modes(interpolation, padding)?;
    Ok(GridSample {
        batch: i[0],
        channels: i[1],
        input: [i[2], i[3]],
        output: [g[1], g[2]],
        interpolation,
        padding,
        align_corners,
    })
}

/// `grid_sampler_2d` (`oxide_kernels::ops::nn::grid_sample::grid_sample_2d`):
/// contiguous input `(N, C, H, W)`, grid `(N, H_out, W_out, 2)`, output `(N,
/// C, H_out, W_out)`, one dtype. `interpolation` and `padding` are PyTorch's
/// codes (0 bilinear, 1 nearest, 2 bicubic; 0 zeros, 1 border, 2 reflection).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_grid_sample_2d(
    on: OxideLaunch,
    output: OxideTensor,
    input: OxideTensor,
    grid: OxideTensor,
    interpolation: i64,
    padding: i64,
    align_corners: bool,
) -> i32 {
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
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `gs` describes.
            unsafe {
                oxide_kernels::ops::nn::grid_sample::grid_sample_2d(
                    dt,
                    &gs,
                    input.src(),
                    grid.src(),
                    output.dst(),
                    on.threads(),
                )
            }
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
        let [grad_input, grad_grid, grad_output, input, grid] =
            unsafe { operands(OP, [&grad_input, &grad_grid, &grad_output, &input, &grid]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_grid, grad_output, input, grid) = (
            grad_grid.ok_or_else(missing)?,
            grad_output.ok_or_else(missing)?,
            input.ok_or_else(missing)?,
            grid.ok_or_else(missing)?,
        );
        let gs = grid_sample_desc(OP, &input, &grid, interpolation, padding, align_corners)?;
        let dt = common_dtype(OP, &[&input, &grid, &grad_output, &grad_grid])?;
        input.contiguous(OP)?;
        grid.contiguous(OP)?;
        grad_output.sizes_are(OP, &[gs.batch, gs.channels, gs.output[0], gs.output[1]].map(|e| e as i64))?;
        grad_output.contiguous(OP)?;
        grad_grid.sizes_are(OP, &grid.sizes)?;
        grad_grid.contiguous(OP)?;
        if let Some(gi) = &grad_input {
            gi.sizes_are(OP, &input.sizes)?;
            gi.dtype_is(OP, dt)?;
            gi.contiguous(OP)?;
        }
        let grads = GridGrads { input: grad_input.map(|g| g.dst()), grid: grad_grid.dst() };
        launch(&on, move || {
            // SAFETY: the operands were decoded and checked contiguous with the sizes `gs` describes.
            unsafe {
                oxide_kernels::ops::nn::grid_sample::grid_sample_2d_backward(
                    dt,
                    &gs,
                    grad_output.src(),
                    input.src(),
                    grid.src(),
                    grads,
                    on.threads(),
                )
            }
        })
    })
}
