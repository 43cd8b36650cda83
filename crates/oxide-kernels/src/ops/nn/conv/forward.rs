//! Convolution forward: `convolution` (see the module documentation of
//! [`super`] for layouts, dtypes and the lowering), its per-dtype entry, the
//! split of the batch over tasks (a [`Plan`]) and one chunk of samples.

use crate::dtype::DType;
use crate::engine::iter::try_for_each_chunk_mut;
use crate::error::{Error, Result};

use super::columns::{add_bias, col2im_scratch, columns, gather, im2col, product_to_samples, ColumnBlock, Planes};
use super::mec::Mec;
use super::{block_columns, product, Acc, Conv, Out, Plan, Scratch, Storage};

/// Output of `nb` consecutive samples: `x` `(nb, C_in, *input)` into `y` `(nb, C_out, *output)`.
fn forward_chunk<C: Acc>(
    cv: &Conv,
    x: &[C],
    w: &[C],
    bias: Option<&[C]>,
    y: &mut [C],
    nb: usize,
    s: &mut Scratch<C>,
) -> Result<()> {
    let win = cv.window();
    let (il, gl, taps) = (win.image_len(), win.grid_len(), win.taps());
    let (ic, gc) = cv.group_channels();
    let (kk, wg, cn) = (ic * taps, ic * gc * taps, nb * gl);
    let (xs, ys) = (x.len() / nb, y.len() / nb);
    // A 1x1 unit-stride window over one sample: the image is its own column matrix.
    let direct = win.is_identity() && nb == 1;
    let Scratch { cols, mat, out, threads } = s;
    let threads = *threads;
    for g in 0..cv.groups {
        let wgt = &w[g * wg..(g + 1) * wg];
        if let (false, Some(bc), 1) = (cv.transposed, block_columns(kk, gl), nb) {
            // y[:, g, p0..p1] (gc x bc, row stride L) = W[g] @ im2col(x[:, g])[:, p0..p1].
            let (xg, yg) = (&x[g * ic * il..], &mut y[g * gc * gl..(g + 1) * gc * gl]);
            for p0 in (0..gl).step_by(bc) {
                let p1 = (p0 + bc).min(gl);
                cols.resize(kk * (p1 - p0), C::ZERO);
                im2col(&win, ColumnBlock { channels: ic, nb: 1, p0, p1 }, xg, xs, cols, threads);
                product(gc, p1 - p0, kk, (wgt, kk, 1), (cols, p1 - p0, 1), 0.0, (&mut yg[p0..], gl))?;
                if let Some(b) = bias {
                    for (r, row) in yg.chunks_mut(gl).enumerate() {
                        let bv = b[g * gc + r];
                        row[p0..p1].iter_mut().for_each(|v| *v = v.add(bv));
                    }
                }
            }
        } else if !cv.transposed {
            // y[:, g] (gc x nb*L) = W[g] (gc x kk) @ im2col(x[:, g]) (kk x nb*L).
            let src = columns(&win, ic, &x[g * ic * il..], xs, nb, cols, threads);
            let bg = bias.map(|b| &b[g * gc..(g + 1) * gc]);
            product_to_samples(
                kk,
                (wgt, kk, 1),
                src,
                Planes { rows: gc, plane: gl, nb, sample: ys },
                &mut y[g * gc * gl..],
                out,
                bg,
            )?;
        } else {
            // y[:, g] = col2im(W[g]^T (kk x gc) @ x[:, g] (gc x nb*L)).
            let xg = gather(&x[g * gc * gl..], Planes { rows: gc, plane: gl, nb, sample: xs }, mat);
            let yg = &mut y[g * ic * il..];
            if direct {
                product(kk, gl, gc, (wgt, 1, kk), (xg, gl, 1), 0.0, (&mut yg[..kk * gl], gl))?;
            } else {
                cols.resize(kk * cn, C::ZERO);
                product(kk, cn, gc, (wgt, 1, kk), (xg, cn, 1), 0.0, (cols, cn))?;
                col2im_scratch(&win, ColumnBlock::whole(&win, ic, nb), cols, yg, ys, false, threads);
            }
        }
    }
    if let (Some(b), true) = (bias, cv.transposed) {
        add_bias(y, il, b);
    }
    Ok(())
}

fn forward<C: Acc>(cv: &Conv, x: &[C], w: &[C], bias: Option<&[C]>, y: &mut [C], threads: usize) -> Result<()> {
    if cv.batch == 0 || y.is_empty() {
        return Ok(());
    }
    if let Some(mec) = Mec::new(cv) {
        return mec.forward(x, w, bias, y, threads);
    }
    let (xs, ys) = (x.len() / cv.batch, y.len() / cv.batch);
    let plan = Plan::new(cv, threads, true);
    let run = |first: usize, part: &mut [C]| -> Result<()> {
        let mut scratch = Scratch::new(plan.inner);
        for (k, yc) in part.chunks_mut(plan.chunk * ys).enumerate() {
            let (n, nb) = (first + k * plan.chunk, yc.len() / ys);
            forward_chunk(cv, &x[n * xs..(n + nb) * xs], w, bias, yc, nb, &mut scratch)?;
        }
        Ok(())
    };
    if plan.tasks <= 1 {
        run(0, y)
    } else {
        try_for_each_chunk_mut(y, plan.per_task * ys, plan.tasks, |t, part| run(t * plan.per_task, part))
    }
}

unsafe fn run_forward<T: Storage>(
    cv: &Conv,
    input: *const u8,
    weight: *const u8,
    bias: Option<*const u8>,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    let (xl, wl, yl) = cv.lens();
    // SAFETY: `convolution`'s contract.
    unsafe {
        let x = T::read(input, xl);
        let w = T::read(weight, wl);
        let b = bias.map(|b| T::read(b, cv.out_channels));
        let mut y = Out::<T>::new(output, yl);
        forward(cv, &x, &w, b.as_deref(), y.slice(), threads)?;
        y.finish();
    }
    Ok(())
}

/// The output of convolution `cv` (see the module documentation for layouts):
/// `output = conv(input, weight) + bias`, every operand contiguous and of `dtype`.
/// `bias` None means no bias; `threads` is the most threads to use (PyTorch's
/// `at::get_num_threads()`).
///
/// Errors: [`Error::UnsupportedDtype`] for bool, complex and the unsigned
/// 16/32/64-bit dtypes (nothing is written).
///
/// # Safety
/// Each pointer addresses the contiguous elements of its operand's shape
/// (input `batch * in_channels * prod(input)`, weight `in_channels / groups *
/// out_channels * prod(kernel)`, bias `out_channels`, output `batch *
/// out_channels * prod(output)`); the output overlaps no input.
pub unsafe fn convolution(
    dtype: DType,
    cv: &Conv,
    input: *const u8,
    weight: *const u8,
    bias: Option<*const u8>,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        match dtype {
            DType::F32 => run_forward::<f32>(cv, input, weight, bias, output, threads),
            DType::F64 => run_forward::<f64>(cv, input, weight, bias, output, threads),
            DType::F16 => run_forward::<half::f16>(cv, input, weight, bias, output, threads),
            DType::BF16 => run_forward::<half::bf16>(cv, input, weight, bias, output, threads),
            DType::U8 => run_forward::<u8>(cv, input, weight, bias, output, threads),
            DType::I8 => run_forward::<i8>(cv, input, weight, bias, output, threads),
            DType::I16 => run_forward::<i16>(cv, input, weight, bias, output, threads),
            DType::I32 => run_forward::<i32>(cv, input, weight, bias, output, threads),
            DType::I64 => run_forward::<i64>(cv, input, weight, bias, output, threads),
            d => Err(Error::UnsupportedDtype { op: "convolution", dtype: d }),
        }
    }
}
