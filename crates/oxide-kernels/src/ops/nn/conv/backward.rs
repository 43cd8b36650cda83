//! Convolution backward: `convolution_backward` (the input, weight and bias
//! gradients; layouts as [`super`] documents), its per-dtype entry, the split of
//! the batch over tasks with per-task weight-gradient partials, and one chunk.

use std::borrow::Cow;
use std::sync::Mutex;

use crate::dtype::DType;
use crate::engine::iter::{map_tasks, GRAIN};
use crate::error::{Error, Result};

use super::columns::{
    col2im_scratch, columns, for_each_channel, gather, im2col, product_to_samples, ColumnBlock, Planes,
};
use super::mec::Mec;
use super::{block_columns, product, Acc, Conv, Out, Plan, Scratch, Storage, MIN_DEPTH_COLUMNS};

/// What the backward reads, as compute-type slices: the output gradient `gy`, the
/// input `x` (read only for the weight gradient) and the weight `w` (read only for
/// the input gradient); either of the last two may be empty when not read.
#[derive(Clone, Copy)]
struct Inputs<'a, C> {
    gy: &'a [C],
    x: &'a [C],
    w: &'a [C],
}

/// Gradients of `nb` consecutive samples (`xs` and `ys` elements per sample of the
/// input and the output) from `ins` (those samples' `gy` and `x`, the whole `w`):
/// `gx` is overwritten, `gw` accumulated into.
fn backward_chunk<C: Acc>(
    cv: &Conv,
    ins: Inputs<C>,
    mut gx: Option<&mut [C]>,
    mut gw: Option<&mut [C]>,
    nb: usize,
    (xs, ys): (usize, usize),
    s: &mut Scratch<C>,
) -> Result<()> {
    let Inputs { gy, x, w } = ins;
    let win = cv.window();
    let (il, gl, taps) = (win.image_len(), win.grid_len(), win.taps());
    let (ic, gc) = cv.group_channels();
    let (kk, wg, cn) = (ic * taps, ic * gc * taps, nb * gl);
    let direct = win.is_identity() && nb == 1;
    let Scratch { cols, mat, out, threads } = s;
    let threads = *threads;
    for g in 0..cv.groups {
        let wr = g * wg..(g + 1) * wg;
        if let (false, Some(bc), 1) = (cv.transposed, block_columns(kk, gl), nb) {
            // As below, a block of grid positions [p0, p1) at a time (see BLOCK_ELEMENTS).
            let gyg = &gy[g * gc * gl..(g + 1) * gc * gl];
            if let Some(gx) = gx.as_deref_mut() {
                let gxg = &mut gx[g * ic * il..(g + 1) * ic * il];
                gxg.fill(C::ZERO);
                for p0 in (0..gl).step_by(bc) {
                    let p1 = (p0 + bc).min(gl);
                    cols.resize(kk * (p1 - p0), C::ZERO);
                    product(kk, p1 - p0, gc, (&w[wr.clone()], 1, kk), (&gyg[p0..], gl, 1), 0.0, (cols, p1 - p0))?;
                    col2im_scratch(&win, ColumnBlock { channels: ic, nb: 1, p0, p1 }, cols, gxg, xs, true, threads);
                }
            }
            if let Some(gw) = gw.as_deref_mut() {
                // The blocks are the product's inner dimension here: deeper ones (see
                // MIN_DEPTH_COLUMNS) at the cost of a column matrix that fits L2 less well.
                let bc = bc.max(MIN_DEPTH_COLUMNS).min(gl);
                for p0 in (0..gl).step_by(bc) {
                    let p1 = (p0 + bc).min(gl);
                    cols.resize(kk * (p1 - p0), C::ZERO);
                    im2col(&win, ColumnBlock { channels: ic, nb: 1, p0, p1 }, &x[g * ic * il..], xs, cols, threads);
                    product(gc, kk, p1 - p0, (&gyg[p0..], gl, 1), (cols, 1, p1 - p0), 1.0, (&mut gw[wr.clone()], kk))?;
                }
            }
        } else if !cv.transposed {
            let gyg = gather(&gy[g * gc * gl..], Planes { rows: gc, plane: gl, nb, sample: ys }, mat);
            if let Some(gx) = gx.as_deref_mut() {
                // gx[:, g] = col2im(W[g]^T (kk x gc) @ gy[:, g] (gc x nb*L)).
                let gxg = &mut gx[g * ic * il..];
                if direct {
                    product(kk, gl, gc, (&w[wr.clone()], 1, kk), (gyg, gl, 1), 0.0, (&mut gxg[..kk * gl], gl))?;
                } else {
                    cols.resize(kk * cn, C::ZERO);
                    product(kk, cn, gc, (&w[wr.clone()], 1, kk), (gyg, cn, 1), 0.0, (cols, cn))?;
                    col2im_scratch(&win, ColumnBlock::whole(&win, ic, nb), cols, gxg, xs, false, threads);
                }
            }
            if let Some(gw) = gw.as_deref_mut() {
                // gW[g] (gc x kk) += gy[:, g] (gc x nb*L) @ im2col(x[:, g])^T (nb*L x kk).
                let src = columns(&win, ic, &x[g * ic * il..], xs, nb, cols, threads);
                product(gc, kk, cn, (gyg, cn, 1), (src, 1, cn), 1.0, (&mut gw[wr], kk))?;
            }
        } else {
            // The image side is gy (ic channels), the column side x and gx (gc channels).
            let src = columns(&win, ic, &gy[g * ic * il..], ys, nb, cols, threads);
            if let Some(gx) = gx.as_deref_mut() {
                // gx[:, g] (gc x nb*L) = W[g] (gc x kk) @ im2col(gy[:, g]) (kk x nb*L): a convolution.
                product_to_samples(
                    kk,
                    (&w[wr.clone()], kk, 1),
                    src,
                    Planes { rows: gc, plane: gl, nb, sample: xs },
                    &mut gx[g * gc * gl..],
                    out,
                    None,
                )?;
            }
            if let Some(gw) = gw.as_deref_mut() {
                // gW[g] (gc x kk) += x[:, g] (gc x nb*L) @ im2col(gy[:, g])^T (nb*L x kk).
                let xg = gather(&x[g * gc * gl..], Planes { rows: gc, plane: gl, nb, sample: xs }, mat);
                product(gc, kk, cn, (xg, cn, 1), (src, 1, cn), 1.0, (&mut gw[wr], kk))?;
            }
        }
    }
    Ok(())
}

fn backward<C: Acc>(
    cv: &Conv,
    ins: Inputs<C>,
    mut gx: Option<&mut [C]>,
    mut gw: Option<&mut [C]>,
    gb: Option<&mut [C]>,
    threads: usize,
) -> Result<()> {
    let Inputs { gy, x, .. } = ins;
    let (xl, wl, yl) = cv.lens();
    let (xs, ys) = (xl.checked_div(cv.batch).unwrap_or(0), yl.checked_div(cv.batch).unwrap_or(0));
    if let Some(gb) = gb {
        let plane = ys / cv.out_channels.max(1);
        let threads = if yl > GRAIN { threads } else { 1 };
        for_each_channel(gb, cv.out_channels, 1, threads, |c, v| {
            v[0] = C::total((0..cv.batch).map(|n| &gy[n * ys + c * plane..n * ys + (c + 1) * plane]));
        });
    }
    if let Some(gw) = gw.as_deref_mut() {
        gw.fill(C::ZERO);
    }
    if xs == 0 || ys == 0 {
        // An empty side: the other side's gradient is zero.
        if let Some(gx) = gx {
            gx.fill(C::ZERO);
        }
        return Ok(());
    }
    // The input gradient through the MEC lowering where it applies (see `mec`);
    // im2col below for the rest.
    if let (Some(mec), Some(g)) = (Mec::flipped(cv).as_ref().and_then(Mec::new), gx.as_deref_mut()) {
        mec.forward(gy, &Mec::flip_weight(cv, ins.w), None, g, threads)?;
        gx = None;
    }
    if gx.is_none() && gw.is_none() {
        return Ok(());
    }
    let plan = Plan::new(cv, threads, false);
    let run = |t: usize, mut part: Option<&mut [C]>, mut partial: Option<&mut [C]>| -> Result<()> {
        let mut scratch = Scratch::new(plan.inner);
        let first = t * plan.per_task;
        let count = plan.per_task.min(cv.batch - first);
        let mut j = 0;
        while j < count {
            let (n, nb) = (first + j, plan.chunk.min(count - j));
            let gxc = part.as_deref_mut().map(|p| &mut p[j * xs..(j + nb) * xs]);
            let xc = if x.is_empty() { x } else { &x[n * xs..(n + nb) * xs] };
            let chunk = Inputs { gy: &gy[n * ys..(n + nb) * ys], x: xc, w: ins.w };
            backward_chunk(cv, chunk, gxc, partial.as_deref_mut(), nb, (xs, ys), &mut scratch)?;
            j += nb;
        }
        Ok(())
    };
    if plan.tasks <= 1 {
        return run(0, gx, gw);
    }
    let want_gw = gw.is_some();
    let parts: Vec<Mutex<Option<&mut [C]>>> = match gx {
        Some(gx) => gx.chunks_mut(plan.per_task * xs).map(|p| Mutex::new(Some(p))).collect(),
        None => (0..plan.tasks).map(|_| Mutex::new(None)).collect(),
    };
    let partials = map_tasks(plan.tasks, |t| {
        let part = parts.get(t).and_then(|p| p.lock().unwrap_or_else(|e| e.into_inner()).take());
        let mut partial = if want_gw { vec![C::ZERO; wl] } else { Vec::new() };
        run(t, part, want_gw.then_some(&mut partial[..]))?;
        Ok(partial)
    })
    .into_iter()
    .collect::<Result<Vec<Vec<C>>>>()?;
    if let Some(gw) = gw {
        for p in &partials {
            gw.iter_mut().zip(p).for_each(|(a, &b)| *a = a.add(b));
        }
    }
    Ok(())
}

/// The gradients requested from [`convolution_backward`] (None: not computed).
#[derive(Debug, Clone, Copy)]
pub struct Grads {
    /// Shape of the input.
    pub input: Option<*mut u8>,
    /// Shape of the weight.
    pub weight: Option<*mut u8>,
    /// `(out_channels)`.
    pub bias: Option<*mut u8>,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for Grads {}

unsafe fn run_backward<T: Storage>(
    cv: &Conv,
    grad_output: *const u8,
    input: *const u8,
    weight: *const u8,
    grads: Grads,
    threads: usize,
) -> Result<()> {
    let (xl, wl, yl) = cv.lens();
    // SAFETY: `convolution_backward`'s contract. The input is read
    // only for the weight gradient and the weight only for the input gradient.
    unsafe {
        let gy = T::read(grad_output, yl);
        let x = if grads.weight.is_some() { T::read(input, xl) } else { Cow::Borrowed(&[][..]) };
        let w = if grads.input.is_some() { T::read(weight, wl) } else { Cow::Borrowed(&[][..]) };
        let mut gx = grads.input.map(|p| Out::<T>::new(p, xl));
        let mut gw = grads.weight.map(|p| Out::<T>::new(p, wl));
        let mut gb = grads.bias.map(|p| Out::<T>::new(p, cv.out_channels));
        let ins = Inputs { gy: &gy, x: &x, w: &w };
        backward(
            cv,
            ins,
            gx.as_mut().map(|o| o.slice()),
            gw.as_mut().map(|o| o.slice()),
            gb.as_mut().map(|o| o.slice()),
            threads,
        )?;
        for o in [gx, gw, gb].into_iter().flatten() {
            o.finish();
        }
    }
    Ok(())
}

/// Gradients of convolution `cv` with respect to its input, weight and bias
/// (each only when its pointer in `grads` is given), from `grad_output` (the
/// output's shape); `input` is read only for the weight gradient and `weight`
/// only for the input gradient. Layouts, dtypes and `threads` as [`convolution`](super::convolution).
///
/// Errors: [`Error::UnsupportedDtype`] as [`convolution`](super::convolution).
///
/// # Safety
/// As [`convolution`](super::convolution) for every pointer that is read (null otherwise is fine);
/// the gradients overlap no operand and each other.
pub unsafe fn convolution_backward(
    dtype: DType,
    cv: &Conv,
    grad_output: *const u8,
    input: *const u8,
    weight: *const u8,
    grads: Grads,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        match dtype {
            DType::F32 => run_backward::<f32>(cv, grad_output, input, weight, grads, threads),
            DType::F64 => run_backward::<f64>(cv, grad_output, input, weight, grads, threads),
            DType::F16 => run_backward::<half::f16>(cv, grad_output, input, weight, grads, threads),
            DType::BF16 => run_backward::<half::bf16>(cv, grad_output, input, weight, grads, threads),
            DType::U8 => run_backward::<u8>(cv, grad_output, input, weight, grads, threads),
            DType::I8 => run_backward::<i8>(cv, grad_output, input, weight, grads, threads),
            DType::I16 => run_backward::<i16>(cv, grad_output, input, weight, grads, threads),
            DType::I32 => run_backward::<i32>(cv, grad_output, input, weight, grads, threads),
            DType::I64 => run_backward::<i64>(cv, grad_output, input, weight, grads, threads),
            d => Err(Error::UnsupportedDtype { op: "convolution_backward", dtype: d }),
        }
    }
}
