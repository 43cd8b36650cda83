//! The unfold-and-multiply lowering's data movement: `im2col` / `col2im` between
//! images and column matrices (split over channels or planes), and the gathers,
//! scatters and bias additions around each GEMM `product`. Used by the
//! convolution's forward and backward and by `unfold` / `fold`.

use crate::engine::iter::{for_each_chunk_mut, tasks_for};
use crate::error::Result;

use super::{product, Acc, Window};

/// Runs `f(channel, chunk)` for the `channels` consecutive chunks of `per_channel`
/// elements of `data`, split over tasks when the work is large.
pub(super) fn for_each_channel<C: Send>(
    data: &mut [C],
    channels: usize,
    per_channel: usize,
    threads: usize,
    f: impl Fn(usize, &mut [C]) + Sync,
) {
    if per_channel == 0 {
        return;
    }
    let tasks = tasks_for(data.len(), 1, threads).min(channels);
    if tasks <= 1 {
        data.chunks_mut(per_channel).enumerate().for_each(|(c, chunk)| f(c, chunk));
        return;
    }
    for_each_chunk_mut(data, per_channel, tasks, f);
}

/// The shape of one column matrix of a [`Window`]: `channels * taps` rows, and grid
/// positions `[p0, p1)` of each of `nb` images side by side, `nb * (p1 - p0)` columns.
#[derive(Debug, Clone, Copy)]
pub(super) struct ColumnBlock {
    pub(super) channels: usize,
    pub(super) nb: usize,
    pub(super) p0: usize,
    pub(super) p1: usize,
}

impl ColumnBlock {
    /// Every grid position of `w`, for `nb` images of `channels` channels.
    pub(super) fn whole(w: &Window, channels: usize, nb: usize) -> ColumnBlock {
        ColumnBlock { channels, nb, p0: 0, p1: w.grid_len() }
    }
}

/// Shortest line with a stride other than 1 and 2 that [`im2col`] copies with
/// whole-stride steps (vector shuffles) rather than one indexed load per entry. Measured
/// (ARCHITECTURE.md, Measurements) with a stride known only at run time: faster for
/// 32-entry lines, not for 8 and 4. Stride 2 takes [`gather_strides`] at any length.
const MIN_SHUFFLED: usize = 16;

/// Unfolds grid positions `[p0, p1)` of `nb` images into one column matrix `cols`
/// `(channels * taps, nb * (p1 - p0))` (`blk`), row-major: image `j` `(channels, *w.image)`
/// starts at `image[j * sample]` and fills columns `[j * (p1 - p0), (j + 1) * (p1 - p0))`
/// of every row. Laying the samples side by side lets one GEMM cover them all, and a
/// part of the grid lets a large image's columns be made a cache-sized block at a time
/// (see [`Plan`](super::Plan)).
pub(super) fn im2col<C: Acc>(w: &Window, blk: ColumnBlock, image: &[C], sample: usize, cols: &mut [C], threads: usize) {
    let ColumnBlock { channels, nb, p0, p1 } = blk;
    let (il, taps, bl) = (w.image_len(), w.taps(), p1 - p0);
    let ld = nb * bl;
    let (g2, s2) = (w.grid[2], w.stride[2]);
    let flat = if w.flat() { w.flat_taps() } else { Vec::new() };
    for_each_channel(&mut cols[..channels * taps * ld], channels, taps * ld, threads, |c, rows| {
        for (t, row) in rows.chunks_mut(ld).enumerate() {
            let tap = w.tap(t);
            if let Some(ft) = flat.get(t) {
                for (j, part) in row.chunks_mut(bl).enumerate() {
                    ft.unfold(&image[j * sample + c * il..j * sample + (c + 1) * il], part, p0);
                }
                continue;
            }
            let off = w.offset(2, tap[2]);
            for (j, part) in row.chunks_mut(bl).enumerate() {
                let img = &image[j * sample + c * il..j * sample + (c + 1) * il];
                w.for_each_line(tap, |src, g, lo, hi| {
                    // The line is grid positions [g, g + g2); the block keeps [a, b) of it.
                    let (a, b) = (g.max(p0), (g + g2).min(p1));
                    if a >= b {
                        return;
                    }
                    let (ka, kb) = (a - g, b - g);
                    let (lo, hi) = (lo.clamp(ka, kb), hi.clamp(ka, kb));
                    let line = &mut part[a - p0..b - p0];
                    line[..lo - ka].fill(C::ZERO);
                    line[hi - ka..].fill(C::ZERO);
                    let Some(src) = src else { return };
                    let first = ((src + lo * s2) as isize + off) as usize;
                    let line = &mut line[lo - ka..hi - ka];
                    if s2 == 1 {
                        line.copy_from_slice(&img[first..first + line.len()]);
                    } else if let Some((last, rest)) =
                        line.split_last_mut().filter(|(_, rest)| s2 == 2 || rest.len() + 1 >= MIN_SHUFFLED)
                    {
                        // Whole strides (the last entry apart, whose stride may run past
                        // the image): a loop LLVM turns into vector shuffles.
                        let run = &img[first..first + rest.len() * s2];
                        if s2 == 2 {
                            gather_strides::<C, 2>(rest, run);
                        } else {
                            for (v, step) in rest.iter_mut().zip(run.chunks_exact(s2)) {
                                *v = step[0];
                            }
                        }
                        *last = img[first + rest.len() * s2];
                    } else {
                        for (k, v) in line.iter_mut().enumerate() {
                            *v = img[first + k * s2];
                        }
                    }
                });
            }
        }
    });
}

/// `line[k] = run[k * S]`: with the stride a constant, LLVM knows the loads' pattern
/// and turns them into two-register permutes. Stride 2 (every downsampling layer) is
/// worth its own copy of the loop: 32-entry lines took 8 ns instead of 15 with the
/// stride known only at run time, and 8-entry lines no longer than an indexed loop
/// (one thread, AVX-512 build, ARCHITECTURE.md, Measurements).
#[inline(always)]
fn gather_strides<C: Copy, const S: usize>(line: &mut [C], run: &[C]) {
    for (v, step) in line.iter_mut().zip(run.chunks_exact(S)) {
        *v = step[0];
    }
}

/// Folds `cols` `(channels * taps, nb * (p1 - p0))` (`blk`: the layout [`im2col`] writes
/// for grid positions `[p0, p1)`) into `nb` images, image `j` `(channels, *w.image)` at
/// `image[j * sample]`: each column entry is added onto the pixel it was read from,
/// each image overwritten with those sums first unless `add`.
pub(super) fn col2im<C: Acc>(
    w: &Window,
    blk: ColumnBlock,
    cols: &[C],
    image: &mut [C],
    sample: usize,
    add: bool,
    threads: usize,
) {
    let ColumnBlock { channels, nb, p0, p1 } = blk;
    let (il, taps, bl) = (w.image_len(), w.taps(), p1 - p0);
    if il == 0 || nb == 0 {
        return;
    }
    let ld = nb * bl;
    let (g2, s2) = (w.grid[2], w.stride[2]);
    let fold_plane = |j: usize, c: usize, img: &mut [C]| {
        if !add {
            img.fill(C::ZERO);
        }
        for t in 0..taps {
            let row = &cols[(c * taps + t) * ld + j * bl..(c * taps + t) * ld + (j + 1) * bl];
            let tap = w.tap(t);
            let off = w.offset(2, tap[2]);
            w.for_each_line(tap, |dst, g, lo, hi| {
                let Some(dst) = dst else { return };
                // Positions [g + lo, g + hi) read the image; the block holds [p0, p1).
                let (a, b) = ((g + lo).max(p0), (g + hi).min(p1).min(g + g2));
                if a >= b {
                    return;
                }
                let first = ((dst + (a - g) * s2) as isize + off) as usize;
                let line = &row[a - p0..b - p0];
                if s2 == 1 {
                    for (p, &v) in img[first..first + line.len()].iter_mut().zip(line) {
                        *p = p.add(v);
                    }
                } else {
                    for (k, &v) in line.iter().enumerate() {
                        let p = &mut img[first + k * s2];
                        *p = p.add(v);
                    }
                }
            });
        }
    };
    for_each_plane(nb, channels, il, image, sample, threads, fold_plane);
}

/// [`col2im`] of a column matrix the caller owns and no longer needs: for a
/// [`flat`](Window::flat) window the entries that read the padding are zeroed first,
/// so that each tap of each image plane is added as one contiguous run ([`FlatTap::fold`](super::FlatTap::fold));
/// the padding entries land, as zeros, on pixels of neighbouring rows.
pub(super) fn col2im_scratch<C: Acc>(
    w: &Window,
    blk: ColumnBlock,
    cols: &mut [C],
    image: &mut [C],
    sample: usize,
    add: bool,
    threads: usize,
) {
    let ColumnBlock { channels, nb, p0, p1 } = blk;
    let (il, taps, bl) = (w.image_len(), w.taps(), p1 - p0);
    if !w.flat() || il == 0 || nb == 0 {
        return col2im(w, blk, cols, image, sample, add, threads);
    }
    let flat = w.flat_taps();
    let ld = nb * bl;
    for_each_channel(&mut cols[..channels * taps * ld], channels * taps, ld, threads, |ct, row| {
        row.chunks_mut(bl).for_each(|part| flat[ct % taps].zero_padding_columns(part, p0));
    });
    let cols = &*cols;
    for_each_plane(nb, channels, il, image, sample, threads, |j, c, img| {
        if !add {
            img.fill(C::ZERO);
        }
        for (t, ft) in flat.iter().enumerate() {
            let row = (c * taps + t) * ld + j * bl;
            ft.fold(&cols[row..row + bl], img, p0);
        }
    });
}

/// Runs `f(j, c, plane)` for the `channels` planes of `il` elements of each of `nb`
/// images (image `j` at `image[j * sample]`), split over rayon tasks when large.
pub(super) fn for_each_plane<C: Send>(
    nb: usize,
    channels: usize,
    il: usize,
    image: &mut [C],
    sample: usize,
    threads: usize,
    f: impl Fn(usize, usize, &mut [C]) + Sync,
) {
    // Planes (j, c) are disjoint and independent, so they split over tasks in any order.
    let mut planes: Vec<&mut [C]> = Vec::with_capacity(nb * channels);
    let mut rest = image;
    for j in 0..nb {
        let (head, tail) = if j + 1 < nb { rest.split_at_mut(sample) } else { (rest, &mut [][..]) };
        planes.extend(head[..channels * il].chunks_mut(il));
        rest = tail;
    }
    if tasks_for(nb * channels * il, 1, threads) <= 1 {
        planes.into_iter().enumerate().for_each(|(k, img)| f(k / channels, k % channels, img));
    } else {
        for_each_chunk_mut(&mut planes, 1, threads, |k, img| f(k / channels, k % channels, &mut *img[0]));
    }
}

/// `rows` planes of `plane` elements in each of `nb` samples `sample` elements apart
/// (sample `j`'s row `r` at `j * sample + r * plane`), and the matrix `(rows, nb * plane)`
/// they make side by side: the column side of a product over several samples.
#[derive(Debug, Clone, Copy)]
pub(super) struct Planes {
    pub(super) rows: usize,
    pub(super) plane: usize,
    pub(super) nb: usize,
    pub(super) sample: usize,
}

/// Copies the [`Planes`] `p` of `src` into their matrix `(rows, nb * plane)`.
/// One sample is already that matrix and is borrowed.
pub(super) fn gather<'a, C: Acc>(src: &'a [C], p: Planes, buf: &'a mut Vec<C>) -> &'a [C] {
    let Planes { rows, plane, nb, sample } = p;
    if nb == 1 {
        return &src[..rows * plane];
    }
    buf.clear();
    for r in 0..rows {
        for j in 0..nb {
            buf.extend_from_slice(&src[j * sample + r * plane..j * sample + (r + 1) * plane]);
        }
    }
    buf
}

/// The inverse of [`gather`]: writes the matrix `m` `(rows, nb * plane)` back into the
/// planes `p` of `dst`, plus `bias[r]` on row `r` when given (the copy is the pass that adds it).
pub(super) fn scatter<C: Acc>(m: &[C], p: Planes, dst: &mut [C], bias: Option<&[C]>) {
    let Planes { rows, plane, nb, sample } = p;
    for r in 0..rows {
        for j in 0..nb {
            let from = (r * nb + j) * plane;
            let (to, src) = (&mut dst[j * sample + r * plane..j * sample + (r + 1) * plane], &m[from..from + plane]);
            match bias {
                Some(b) => to.iter_mut().zip(src).for_each(|(d, &v)| *d = v.add(b[r])),
                None => to.copy_from_slice(src),
            }
        }
    }
}

/// The column matrix `(channels * taps, nb * grid_len)` of `nb` images (image `j` at
/// `image[j * sample]`): the image itself for an identity window over one sample,
/// else [`im2col`] into `cols`.
pub(super) fn columns<'a, C: Acc>(
    w: &Window,
    channels: usize,
    image: &'a [C],
    sample: usize,
    nb: usize,
    cols: &'a mut Vec<C>,
    threads: usize,
) -> &'a [C] {
    let rows = channels * w.taps();
    if w.is_identity() && nb == 1 {
        return &image[..rows * w.grid_len()];
    }
    cols.resize(rows * nb * w.grid_len(), C::ZERO);
    im2col(w, ColumnBlock::whole(w, channels, nb), image, sample, cols, threads);
    cols
}

/// `a (m x k) @ src (k x nb * plane)` written as the planes `p` of `dst` (`m` = `p.rows`
/// planes of each of `nb` samples), plus `bias[r]` on plane `r` when given: straight
/// into `dst` for one sample, else through `out` and [`scatter`].
pub(super) fn product_to_samples<C: Acc>(
    k: usize,
    a: (&[C], usize, usize),
    src: &[C],
    p: Planes,
    dst: &mut [C],
    out: &mut Vec<C>,
    bias: Option<&[C]>,
) -> Result<()> {
    let Planes { rows: m, plane, nb, .. } = p;
    if nb == 1 {
        let dst = &mut dst[..m * plane];
        product(m, plane, k, a, (src, plane, 1), 0.0, (dst, plane))?;
        if let Some(b) = bias {
            add_bias(dst, plane, b);
        }
        return Ok(());
    }
    let cn = nb * plane;
    out.resize(m * cn, C::ZERO);
    product(m, cn, k, a, (src, cn, 1), 0.0, (out, cn))?;
    scatter(out, p, dst, bias);
    Ok(())
}

/// Adds `bias[k % bias.len()]` to the `k`-th run of `plane` elements of `y`.
pub(super) fn add_bias<C: Acc>(y: &mut [C], plane: usize, bias: &[C]) {
    for (k, row) in y.chunks_mut(plane.max(1)).enumerate() {
        let bv = bias[k % bias.len()];
        row.iter_mut().for_each(|v| *v = v.add(bv));
    }
}
