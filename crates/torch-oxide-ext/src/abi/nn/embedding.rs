//! embedding_bag forward and backward, per-sample-weight gradients (`oxide_kernels::ops::nn::embedding`).

use super::*;

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
        checks_values();
        // SAFETY: the function's contract.
        let [output, offset2bag, bag_size, max_indices, indices, offsets, weight, psw] = unsafe {
            operands(
                OP,
                [&output, &offset2bag, &bag_size, &max_indices, &indices, &offsets, &weight, &per_sample_weights],
            )
        }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (output, offset2bag, bag_size, indices, offsets, weight) = (
            output.ok_or_else(missing)?,
            offset2bag.ok_or_else(missing)?,
            bag_size.ok_or_else(missing)?,
            indices.ok_or_else(missing)?,
            offsets.ok_or_else(missing)?,
            weight.ok_or_else(missing)?,
        );
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
            Some(m)
        } else {
            None
        };
        launch(&on, move || {
            let max_indices = max_indices.as_ref().map_or(std::ptr::null_mut(), |m| m.dst() as *mut i64);
            // SAFETY: every operand was decoded and checked contiguous with the element count the bags imply.
            unsafe {
                let bags = Bags {
                    indices: index_slice(&indices, n),
                    offsets: index_slice(&offsets, offsets.numel),
                    include_last_offset,
                    num_weights,
                    dim,
                    padding_idx,
                };
                let out = BagOutputs {
                    output: output.dst(),
                    offset2bag: offset2bag.dst() as *mut i64,
                    bag_size: bag_size.dst() as *mut i64,
                    max_indices,
                };
                embedding_bag(dt, &bags, mode, weight.src(), psw.as_ref().map(|p| p.src()), out, on.threads())
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
        checks_values();
        // SAFETY: the function's contract.
        let [grad_weight, grad, indices, offset2bag, bag_size, max_indices, psw] = unsafe {
            operands(OP, [&grad_weight, &grad, &indices, &offset2bag, &bag_size, &max_indices, &per_sample_weights])
        }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_weight, grad, indices, offset2bag, bag_size) = (
            grad_weight.ok_or_else(missing)?,
            grad.ok_or_else(missing)?,
            indices.ok_or_else(missing)?,
            offset2bag.ok_or_else(missing)?,
            bag_size.ok_or_else(missing)?,
        );
        let mode = Mode::from_code(mode)?;
        let (num_weights, dim) = matrix_dims(OP, &grad_weight)?;
        let (num_bags, grad_dim) = matrix_dims(OP, &grad)?;
        if grad_dim != dim {
            return Err(AbiError::Invalid(format!(
                "{OP}: gradient of sizes {:?} for a weight of sizes {:?}",
                grad.sizes, grad_weight.sizes
            )));
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
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count the bags imply.
            unsafe {
                let g = BagGrad {
                    indices: index_slice(&indices, n),
                    offset2bag: index_slice(&offset2bag, n),
                    bag_size: index_slice(&bag_size, num_bags),
                    max_indices: max_indices.as_ref().map(|m| index_slice(m, num_bags * dim)),
                    num_weights,
                    dim,
                    scale_grad_by_freq,
                    padding_idx,
                };
                embedding_bag_backward(
                    dt,
                    &g,
                    mode,
                    grad.src(),
                    psw.as_ref().map(|p| p.src()),
                    grad_weight.dst(),
                    on.threads(),
                )
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
pub unsafe extern "C" fn oxide_embedding_bag_per_sample_weights_backward(
    on: OxideLaunch,
    out: OxideTensor,
    grad: OxideTensor,
    weight: OxideTensor,
    indices: OxideTensor,
    offset2bag: OxideTensor,
    padding_idx: i64,
) -> i32 {
    use oxide_kernels::ops::nn::embedding::{per_sample_weights_backward, SampleBags};
    const OP: &str = "embedding_bag_per_sample_weights_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, grad, weight, indices, offset2bag] =
            unsafe { required(OP, [&out, &grad, &weight, &indices, &offset2bag]) }?;
        let (num_weights, dim) = matrix_dims(OP, &weight)?;
        let (num_bags, grad_dim) = matrix_dims(OP, &grad)?;
        if grad_dim != dim {
            return Err(AbiError::Invalid(format!(
                "{OP}: gradient of sizes {:?} for a weight of sizes {:?}",
                grad.sizes, weight.sizes
            )));
        }
        let n = indices.numel;
        let dt = common_dtype(OP, &[&out, &grad, &weight])?;
        grad.contiguous(OP)?;
        weight.contiguous(OP)?;
        flat(OP, &out, n)?;
        index_operand(OP, &indices, n)?;
        index_operand(OP, &offset2bag, n)?;
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked contiguous with the element count the bags imply.
            unsafe {
                let bags = SampleBags {
                    indices: index_slice(&indices, n),
                    offset2bag: index_slice(&offset2bag, n),
                    num_bags,
                    num_weights,
                    dim,
                    padding_idx,
                };
                per_sample_weights_backward(dt, &bags, grad.src(), weight.src(), out.dst(), on.threads())
            }
        })
    })
}
