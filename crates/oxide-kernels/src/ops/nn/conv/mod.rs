//! Convolution and transposed convolution with 1 to 3 spatial dimensions
//! (PyTorch's `convolution` / `convolution_backward`), lowered to GEMM.
//!
//! Layouts. Every operand is contiguous and channels-first; the glue makes
//! them so before calling:
//! - input `(N, C_in, *input)`, output `(N, C_out, *output)`;
//! - weight `(C_out, C_in / groups, *kernel)`, or `(C_in, C_out / groups, *kernel)`
//!   for a transposed convolution (PyTorch's weight layouts);
//! - bias `(C_out)`.
//!
//! Spatial extents are given with 1 to 3 entries and padded at the front to three
//! (extent 1, kernel 1, stride 1, padding 0, dilation 1), so conv1d, conv2d and
//! conv3d share one code path.
//!
//! Algorithm: the unfold-and-multiply lowering (K. Chellapilla, S. Puri, P. Simard,
//! "High Performance Convolutional Neural Networks for Document Processing", 2006;
//! the im2col of Caffe). `im2col` copies every receptive field of an image
//! `(C, *image)` into a column matrix `(C * K, L)`, K = prod(kernel) taps and L
//! window positions, row `(c, tap)` holding channel c's pixel under that tap at
//! every position (0 where the window hangs over the padding); `col2im` is its
//! adjoint (each column entry is added back onto the pixel it came from). With
//! `W[g]` the weight rows of group g viewed as a matrix, per sample n and group g:
//!
//! | | convolution | transposed convolution |
//! |---|---|---|
//! | output | `W[g] @ im2col(x)` | `col2im(W[g]^T @ x)` |
//! | grad input | `col2im(W[g]^T @ gy)` | `W[g] @ im2col(gy)` |
//! | grad weight | `sum_n gy @ im2col(x)^T` | `sum_n x @ im2col(gy)^T` |
//!
//! plus the bias (broadcast over positions) and its gradient (the sum of `gy`
//! over batch and positions). In both directions the image is the larger spatial
//! side (conv input, transposed-conv output) and the columns the other one.
//! The products run on [`crate::ops::linalg::gemm::gemm`] (the `gemm` crate).
//!
//! dtypes: float32 and float64 compute in place; float16 and bfloat16 are widened
//! to float32 on entry, computed in float32 (GEMM and every sum) and rounded
//! once on exit, as PyTorch's opmath. uint8, int8, int16, int32 and int64 compute
//! in their own type with wrapping arithmetic (CPU PyTorch convolves integers too;
//! `linalg::gemm`'s plain loop, nothing fast). Other dtypes: [`Error::UnsupportedDtype`].
//!
//! Batching and parallelism: consecutive samples share one GEMM, their columns
//! side by side (`(C * K, nb * L)`), about [`TARGET_COLUMNS`] columns per product
//! (in the forward, fewer where they fit [`FORWARD_CACHE_COLUMNS`]) and at most
//! [`COLUMNS_BUDGET`] column elements; operands and results on the
//! column side are gathered and scattered around the product ([`Plan`]). A sample
//! of a (non-transposed) convolution whose columns alone pass [`BLOCK_ELEMENTS`] goes
//! the other way: it is unfolded, multiplied and folded a block of
//! [`block_columns`] output positions at a time, so the column block stays in L2
//! between im2col and the GEMM, and products land in the output with no scatter. Samples
//! are split over up to `threads` tasks, each with its own buffers and weight
//! gradient partial, when the products are small or at least as wide as tall;
//! otherwise (a large weight, few columns) [`crate::ops::linalg::gemm::gemm`] splits each
//! product over threads and im2col/col2im split channels.

use std::borrow::Cow;
use std::sync::Mutex;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::engine::iter::{for_each_chunk_mut, map_tasks, try_for_each_chunk_mut, GRAIN};
use crate::ops::linalg::gemm::{gemm, GemmShape, Matrix, SPLIT_MACS};
use crate::engine::math::Num;

/// Spatial dimensions the kernels handle.
pub const MAX_SPATIAL: usize = 3;

/// Shape and parameters of one convolution. Spatial arrays are front-padded to
/// [`MAX_SPATIAL`] entries (see [`Conv::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv {
    pub batch: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub groups: usize,
    /// Spatial extents of the input.
    pub input: [usize; MAX_SPATIAL],
    /// Spatial extents of the output.
    pub output: [usize; MAX_SPATIAL],
    /// Spatial extents of the weight.
    pub kernel: [usize; MAX_SPATIAL],
    pub stride: [usize; MAX_SPATIAL],
    pub padding: [usize; MAX_SPATIAL],
    pub dilation: [usize; MAX_SPATIAL],
    /// Transposed convolution (the adjoint of the convolution's input map).
    pub transposed: bool,
}

/// Per-dimension spatial lists of a [`Conv`], 1 to 3 entries each.
#[derive(Debug, Clone, Copy)]
pub struct Spatial<'a> {
    pub input: &'a [i64],
    pub output: &'a [i64],
    pub kernel: &'a [i64],
    pub stride: &'a [i64],
    pub padding: &'a [i64],
    pub dilation: &'a [i64],
}

impl Conv {
    /// Builds and validates a convolution description.
    ///
    /// Errors: [`Error::InvalidLayout`] when the spatial lists differ in length
    /// or are not 1 to 3 long, an extent or padding is negative, a stride,
    /// dilation, kernel extent or `groups` is below 1, `groups` does not divide
    /// both channel counts, or the output extents are not those the input,
    /// kernel, stride, padding and dilation give (for a transposed convolution:
    /// the input is larger than the convolution of the output would be). PyTorch
    /// checks all of this before the kernel runs; the check here keeps a wrong
    /// call from touching memory outside its operands.
    pub fn new(batch: i64, in_channels: i64, out_channels: i64, groups: i64, transposed: bool, s: Spatial) -> Result<Conv> {
        let bad = |reason: String| Error::InvalidLayout { op: "convolution", reason };
        let nd = s.input.len();
        if !(1..=MAX_SPATIAL).contains(&nd) || [s.output, s.kernel, s.stride, s.padding, s.dilation].iter().any(|l| l.len() != nd) {
            return Err(bad(format!("spatial lists of lengths {:?}", [s.input, s.output, s.kernel, s.stride, s.padding, s.dilation].map(|l| l.len()))));
        }
        let count = |v: i64, what: &str, min: i64| usize::try_from(v).ok().filter(|&u| u as i64 >= min).ok_or_else(|| bad(format!("{what} {v}")));
        let spatial = |l: &[i64], what: &str, min: i64, fill: usize| -> Result<[usize; MAX_SPATIAL]> {
            let mut a = [fill; MAX_SPATIAL];
            for (k, &v) in l.iter().enumerate() {
                a[MAX_SPATIAL - nd + k] = count(v, what, min)?;
            }
            Ok(a)
        };
        let cv = Conv {
            batch: count(batch, "batch size", 0)?,
            in_channels: count(in_channels, "input channels", 0)?,
            out_channels: count(out_channels, "output channels", 0)?,
            groups: count(groups, "groups", 1)?,
            input: spatial(s.input, "input extent", 0, 1)?,
            output: spatial(s.output, "output extent", 0, 1)?,
            kernel: spatial(s.kernel, "kernel extent", 1, 1)?,
            stride: spatial(s.stride, "stride", 1, 1)?,
            padding: spatial(s.padding, "padding", 0, 0)?,
            dilation: spatial(s.dilation, "dilation", 1, 1)?,
            transposed,
        };
        if !cv.in_channels.is_multiple_of(cv.groups) || !cv.out_channels.is_multiple_of(cv.groups) {
            return Err(bad(format!("{} groups for {} input and {} output channels", cv.groups, cv.in_channels, cv.out_channels)));
        }
        let w = cv.window();
        for d in 0..MAX_SPATIAL {
            let fits = w.positions(d).is_some_and(|p| if transposed { w.grid[d] <= p } else { w.grid[d] == p });
            if !fits {
                return Err(bad(format!("input extents {:?} and output extents {:?} do not match the kernel {:?}", cv.input, cv.output, cv.kernel)));
            }
        }
        Ok(cv)
    }

    fn window(&self) -> Window {
        let (image, grid) = if self.transposed { (self.output, self.input) } else { (self.input, self.output) };
        Window { image, grid, kernel: self.kernel, stride: self.stride, padding: self.padding, dilation: self.dilation }
    }

    /// Channels of the image side (conv input, transposed-conv output) and of the column side, per group.
    fn group_channels(&self) -> (usize, usize) {
        let (i, o) = (self.in_channels / self.groups, self.out_channels / self.groups);
        if self.transposed { (o, i) } else { (i, o) }
    }

    /// Elements of the input, weight and output.
    fn lens(&self) -> (usize, usize, usize) {
        let p = |a: [usize; MAX_SPATIAL]| a.iter().product::<usize>();
        let weight = self.in_channels / self.groups * self.out_channels * p(self.kernel);
        (self.batch * self.in_channels * p(self.input), weight, self.batch * self.out_channels * p(self.output))
    }
}

/// The sliding window between an image and its column grid: grid position `o`
/// and tap `t` read image index `o * stride - padding + t * dilation` per dimension.
#[derive(Debug, Clone, Copy)]
struct Window {
    image: [usize; MAX_SPATIAL],
    grid: [usize; MAX_SPATIAL],
    kernel: [usize; MAX_SPATIAL],
    stride: [usize; MAX_SPATIAL],
    padding: [usize; MAX_SPATIAL],
    dilation: [usize; MAX_SPATIAL],
}

impl Window {
    fn image_len(&self) -> usize {
        self.image.iter().product()
    }
    fn grid_len(&self) -> usize {
        self.grid.iter().product()
    }
    fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Window positions that fit in the padded image along `d` (None: not one).
    fn positions(&self, d: usize) -> Option<usize> {
        let span = self.dilation[d] * (self.kernel[d] - 1) + 1;
        (self.image[d] + 2 * self.padding[d]).checked_sub(span).map(|r| r / self.stride[d] + 1)
    }

    /// Columns equal the image: 1-tap window, unit stride, no padding, same extents.
    fn is_identity(&self) -> bool {
        self.taps() == 1 && self.stride == [1; MAX_SPATIAL] && self.padding == [0; MAX_SPATIAL] && self.image == self.grid
    }

    /// Image offset of tap `t` along `d` relative to `o * stride`.
    fn offset(&self, d: usize, t: usize) -> isize {
        (t * self.dilation[d]) as isize - self.padding[d] as isize
    }

    /// Grid positions `[lo, hi)` along `d` whose tap `t` lands inside the image.
    fn inside(&self, d: usize, t: usize) -> (usize, usize) {
        let (off, s) = (self.offset(d, t), self.stride[d]);
        // o * s + off in [0, image): o >= ceil(-off / s) and o < ceil((image - off) / s).
        let lo = if off >= 0 { 0 } else { (off.unsigned_abs()).div_ceil(s) };
        let limit = self.image[d] as isize - off;
        let hi = if limit <= 0 { 0 } else { (limit as usize).div_ceil(s).min(self.grid[d]) };
        (lo.min(hi), hi)
    }

    /// Calls `f(image_row, grid_row, lo, hi)` for every line of tap `tap`: the grid
    /// row (`grid[2]` long) starting at `grid_row` and the image row (`image[2]`
    /// long) at `image_row`, where grid positions `[lo, hi)` of the line read the
    /// image; `image_row` is None for lines entirely in the padding.
    fn for_each_line(&self, tap: [usize; MAX_SPATIAL], mut f: impl FnMut(Option<usize>, usize, usize, usize)) {
        let r: [(usize, usize); MAX_SPATIAL] = std::array::from_fn(|d| self.inside(d, tap[d]));
        let (lo, hi) = r[2];
        for o0 in 0..self.grid[0] {
            for o1 in 0..self.grid[1] {
                let g = (o0 * self.grid[1] + o1) * self.grid[2];
                if (r[0].0..r[0].1).contains(&o0) && (r[1].0..r[1].1).contains(&o1) {
                    let i0 = (o0 * self.stride[0]) as isize + self.offset(0, tap[0]);
                    let i1 = (o1 * self.stride[1]) as isize + self.offset(1, tap[1]);
                    f(Some((i0 as usize * self.image[1] + i1 as usize) * self.image[2]), g, lo, hi);
                } else {
                    f(None, g, 0, 0);
                }
            }
        }
    }

    /// Unit stride along the two inner dimensions and columns as wide as the image
    /// (3x3 "same" convolutions, 1x1 unit-stride ones): a tap's grid positions in one
    /// outer-dimension slab then read one contiguous run of the image, shifted by a
    /// constant, apart from the entries that fall in the left/right padding and wrap
    /// onto a neighbouring row. [`FlatTap::unfold`] and [`FlatTap::fold`] copy or add
    /// that run in one go instead of one short line at a time.
    fn flat(&self) -> bool {
        self.stride[1] == 1 && self.stride[2] == 1 && self.grid[2] == self.image[2]
    }

    /// Where each tap of a [`flat`](Window::flat) window reads the image (see [`FlatTap`]),
    /// computed once per call rather than once per image plane.
    fn flat_taps(&self) -> Vec<FlatTap> {
        let (width, slab) = (self.grid[2], self.grid[1] * self.grid[2]);
        (0..self.taps())
            .map(|t| {
                let tap = self.tap(t);
                let (r0, rows, cols) = (self.inside(0, tap[0]), self.inside(1, tap[1]), self.inside(2, tap[2]));
                let mut runs = Vec::new();
                if rows.0 < rows.1 && cols.0 < cols.1 {
                    let (first, last) = (rows.0 * width + cols.0, (rows.1 - 1) * width + cols.1);
                    let shift = self.offset(1, tap[1]) * width as isize + self.offset(2, tap[2]);
                    for o0 in r0.0..r0.1 {
                        let i0 = ((o0 * self.stride[0]) as isize + self.offset(0, tap[0])) as usize;
                        let src = (i0 * self.image[1] * width) as isize + first as isize + shift;
                        runs.push((o0 * slab + first, o0 * slab + last, src as usize));
                    }
                }
                FlatTap { runs, rows, cols, width, slab }
            })
            .collect()
    }

    /// Tap index `t` (row-major over the kernel) as per-dimension taps.
    fn tap(&self, t: usize) -> [usize; MAX_SPATIAL] {
        [t / (self.kernel[1] * self.kernel[2]), t / self.kernel[2] % self.kernel[1], t % self.kernel[2]]
    }
}

/// One tap of a [`flat`](Window::flat) window: within one image's column row
/// (`grid_len` entries), `runs` lists `(begin, end, src)`: entries `[begin, end)` read
/// image entries `[src, src + end - begin)` one to one, except those in columns outside
/// `cols` (they fall in the left/right padding and would read a neighbouring row); rows
/// outside `rows` and entries outside every run read the padding.
#[derive(Debug, Clone)]
struct FlatTap {
    runs: Vec<(usize, usize, usize)>,
    rows: (usize, usize),
    cols: (usize, usize),
    width: usize,
    slab: usize,
}

impl FlatTap {
    /// Whether some columns of the rows read the padding.
    fn partial_rows(&self) -> bool {
        self.cols.0 > 0 || self.cols.1 < self.width
    }

    /// Zeroes the entries of `part` (grid positions `[p0, p0 + part.len())` of one
    /// image's column row) in padding columns of this tap's rows: one or two entries per row, written one at a time (a
    /// `fill` of so few would be a `memset` call each).
    fn zero_padding_columns<C: Acc>(&self, part: &mut [C], p0: usize) {
        if !self.partial_rows() || self.runs.is_empty() {
            return;
        }
        let (p1, slab) = (p0 + part.len(), self.slab.max(1));
        let mut at = p0 / slab * slab;
        while at < p1 {
            for row in self.rows.0..self.rows.1 {
                let line = at + row * self.width;
                if line >= p1 {
                    break;
                }
                for x in (0..self.cols.0).chain(self.cols.1..self.width) {
                    if let Some(v) = (line + x).checked_sub(p0).and_then(|k| part.get_mut(k)) {
                        // SAFETY: `v` is a valid exclusive reference. Volatile keeps the
                        // compiler from turning these few stores into a `memset` call.
                        unsafe { std::ptr::write_volatile(v, C::ZERO) };
                    }
                }
            }
            at += slab;
        }
    }

    /// `part`, grid positions `[p0, p0 + part.len())` of one image's column row, from
    /// image plane `img`: the runs copied, the rest zero.
    fn unfold<C: Acc>(&self, img: &[C], part: &mut [C], p0: usize) {
        let p1 = p0 + part.len();
        let mut filled = p0;
        for &(begin, end, src) in &self.runs {
            let (b, e) = (begin.max(p0), end.min(p1));
            if b >= e {
                continue;
            }
            part[filled - p0..b - p0].fill(C::ZERO);
            part[b - p0..e - p0].copy_from_slice(&img[src + (b - begin)..src + (e - begin)]);
            filled = e;
        }
        part[filled - p0..].fill(C::ZERO);
        self.zero_padding_columns(part, p0);
    }

    /// `img += part` over the runs, `part` holding grid positions `[p0, p0 + part.len())`
    /// of one image's column row; its padding-column entries must be zero.
    fn fold<C: Acc>(&self, part: &[C], img: &mut [C], p0: usize) {
        let p1 = p0 + part.len();
        for &(begin, end, src) in &self.runs {
            let (b, e) = (begin.max(p0), end.min(p1));
            if b >= e {
                continue;
            }
            for (p, &v) in img[src + (b - begin)..src + (e - begin)].iter_mut().zip(&part[b - p0..e - p0]) {
                *p = p.add(v);
            }
        }
    }
}

/// How many rayon tasks `work` elements deserve with `threads` allowed.
fn tasks_for(work: usize, threads: usize) -> usize {
    if threads <= 1 { 1 } else { (work / GRAIN).clamp(1, threads) }
}

/// Runs `f(channel, chunk)` for the `channels` consecutive chunks of `per_channel`
/// elements of `data`, split over tasks when the work is large.
fn for_each_channel<C: Send>(data: &mut [C], channels: usize, per_channel: usize, threads: usize, f: impl Fn(usize, &mut [C]) + Sync) {
    if per_channel == 0 {
        return;
    }
    let tasks = tasks_for(data.len(), threads).min(channels);
    if tasks <= 1 {
        data.chunks_mut(per_channel).enumerate().for_each(|(c, chunk)| f(c, chunk));
        return;
    }
    for_each_chunk_mut(data, per_channel, tasks, f);
}

/// Unfolds grid positions `[p0, p1)` of `nb` images into one column matrix `cols`
/// `(channels * taps, nb * (p1 - p0))`, row-major: image `j` `(channels, *w.image)`
/// starts at `image[j * sample]` and fills columns `[j * (p1 - p0), (j + 1) * (p1 - p0))`
/// of every row. Laying the samples side by side lets one GEMM cover them all, and a
/// part of the grid lets a large image's columns be made a cache-sized block at a time
/// (see [`Plan`]).
#[allow(clippy::too_many_arguments)]
fn im2col<C: Acc>(w: &Window, channels: usize, image: &[C], sample: usize, nb: usize, (p0, p1): (usize, usize), cols: &mut [C], threads: usize) {
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

/// Folds `cols` `(channels * taps, nb * (p1 - p0))` (the layout [`im2col`] writes for
/// grid positions `[p0, p1)`) into `nb` images, image `j` `(channels, *w.image)` at
/// `image[j * sample]`: each column entry is added onto the pixel it was read from,
/// each image overwritten with those sums first unless `add`.
#[allow(clippy::too_many_arguments)]
fn col2im<C: Acc>(w: &Window, channels: usize, cols: &[C], nb: usize, (p0, p1): (usize, usize), image: &mut [C], sample: usize, add: bool, threads: usize) {
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
/// so that each tap of each image plane is added as one contiguous run ([`FlatTap::fold`]);
/// the padding entries land, as zeros, on pixels of neighbouring rows.
#[allow(clippy::too_many_arguments)]
fn col2im_scratch<C: Acc>(w: &Window, channels: usize, cols: &mut [C], nb: usize, range: (usize, usize), image: &mut [C], sample: usize, add: bool, threads: usize) {
    let (il, taps, bl) = (w.image_len(), w.taps(), range.1 - range.0);
    if !w.flat() || il == 0 || nb == 0 {
        return col2im(w, channels, cols, nb, range, image, sample, add, threads);
    }
    let flat = w.flat_taps();
    let ld = nb * bl;
    for_each_channel(&mut cols[..channels * taps * ld], channels * taps, ld, threads, |ct, row| {
        row.chunks_mut(bl).for_each(|part| flat[ct % taps].zero_padding_columns(part, range.0));
    });
    let cols = &*cols;
    for_each_plane(nb, channels, il, image, sample, threads, |j, c, img| {
        if !add {
            img.fill(C::ZERO);
        }
        for (t, ft) in flat.iter().enumerate() {
            let row = (c * taps + t) * ld + j * bl;
            ft.fold(&cols[row..row + bl], img, range.0);
        }
    });
}

/// Runs `f(j, c, plane)` for the `channels` planes of `il` elements of each of `nb`
/// images (image `j` at `image[j * sample]`), split over rayon tasks when large.
fn for_each_plane<C: Send>(nb: usize, channels: usize, il: usize, image: &mut [C], sample: usize, threads: usize, f: impl Fn(usize, usize, &mut [C]) + Sync) {
    // Planes (j, c) are disjoint and independent, so they split over tasks in any order.
    let mut planes: Vec<&mut [C]> = Vec::with_capacity(nb * channels);
    let mut rest = image;
    for j in 0..nb {
        let (head, tail) = if j + 1 < nb { rest.split_at_mut(sample) } else { (rest, &mut [][..]) };
        planes.extend(head[..channels * il].chunks_mut(il));
        rest = tail;
    }
    if tasks_for(nb * channels * il, threads) <= 1 {
        planes.into_iter().enumerate().for_each(|(k, img)| f(k / channels, k % channels, img));
    } else {
        for_each_chunk_mut(&mut planes, 1, threads, |k, img| f(k / channels, k % channels, &mut *img[0]));
    }
}

/// Copies `rows` planes of `plane` elements from each of `nb` samples into the matrix
/// `(rows, nb * plane)`: sample `j`'s row `r` starts at `src[j * sample + r * plane]`.
/// One sample is already that matrix and is borrowed.
fn gather<'a, C: Acc>(src: &'a [C], sample: usize, rows: usize, plane: usize, nb: usize, buf: &'a mut Vec<C>) -> &'a [C] {
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
/// samples, plus `bias[r]` on row `r` when given (the copy is the pass that adds it).
fn scatter<C: Acc>(m: &[C], rows: usize, plane: usize, nb: usize, dst: &mut [C], sample: usize, bias: Option<&[C]>) {
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
/// `image[j * sample]`): the images themselves when `direct` (an identity window over
/// one sample), else [`im2col`] into `cols`.
#[allow(clippy::too_many_arguments)]
fn columns<'a, C: Acc>(w: &Window, channels: usize, image: &'a [C], sample: usize, nb: usize, direct: bool, cols: &'a mut Vec<C>, threads: usize) -> &'a [C] {
    let rows = channels * w.taps();
    if direct {
        return &image[..rows * w.grid_len()];
    }
    cols.resize(rows * nb * w.grid_len(), C::ZERO);
    im2col(w, channels, image, sample, nb, (0, w.grid_len()), cols, threads);
    cols
}

/// `a (m x k) @ src (k x nb * plane)` written as `m` planes of each of `nb` samples,
/// sample `j` at `dst[j * sample]`, plus `bias[r]` on plane `r` when given: straight
/// into `dst` for one sample, else through `out` and [`scatter`].
#[allow(clippy::too_many_arguments)]
fn product_to_samples<C: Acc>(m: usize, k: usize, a: (&[C], usize, usize), src: &[C], plane: usize, nb: usize, dst: &mut [C], sample: usize, out: &mut Vec<C>, bias: Option<&[C]>) -> Result<()> {
    if nb == 1 {
        let dst = &mut dst[..m * plane];
        product(m, plane, k, a, (src, plane, 1), 0.0, dst, plane)?;
        if let Some(b) = bias {
            add_bias(dst, plane, b);
        }
        return Ok(());
    }
    let cn = nb * plane;
    out.resize(m * cn, C::ZERO);
    product(m, cn, k, a, (src, cn, 1), 0.0, out, cn)?;
    scatter(out, m, plane, nb, dst, sample, bias);
    Ok(())
}

/// Adds `bias[k % bias.len()]` to the `k`-th run of `plane` elements of `y`.
fn add_bias<C: Acc>(y: &mut [C], plane: usize, bias: &[C]) {
    for (k, row) in y.chunks_mut(plane.max(1)).enumerate() {
        let bv = bias[k % bias.len()];
        row.iter_mut().for_each(|v| *v = v.add(bv));
    }
}

/// The compute types: float32, float64 and the integers (wrapping, as C++).
trait Acc: Num + Send + Sync {
    /// The sum of every element of `planes` (the bias gradient).
    fn total<'a>(planes: impl Iterator<Item = &'a [Self]>) -> Self;
}
macro_rules! acc {
    (float: $($t:ty),*; int: $($i:ty),*) => {
        $(impl Acc for $t {
            // Summed in double (close to any order of summation CPU uses), in
            // independent lanes so that the loop vectorises.
            fn total<'a>(planes: impl Iterator<Item = &'a [Self]>) -> Self {
                planes.map(crate::engine::lanes::sum_f64).sum::<f64>() as $t
            }
        })*
        $(impl Acc for $i {
            fn total<'a>(planes: impl Iterator<Item = &'a [Self]>) -> Self {
                planes.flatten().fold(0, |a, &v| <$i>::wrapping_add(a, v))
            }
        })*
    };
}
acc!(float: f32, f64; int: u8, i8, i16, i32, i64);

/// A storage dtype and its compute type.
trait Storage: Element {
    type Acc: Acc;
    /// `n` elements at `p` as compute type: borrowed when they already are, else a widened copy.
    ///
    /// # Safety
    /// `p` addresses `n` readable elements (it may be dangling when `n == 0`).
    unsafe fn read<'a>(p: *const u8, n: usize) -> Cow<'a, [Self::Acc]>;
    /// Rounds a computed value to storage.
    fn narrow(v: Self::Acc) -> Self;
    /// True when the compute type is the storage type (outputs are written in place).
    const IN_PLACE: bool;
}

macro_rules! storage {
    ($t:ty, $acc:ty, $in_place:expr, |$x:ident| $widen:expr, |$v:ident| $narrow:expr) => {
        impl Storage for $t {
            type Acc = $acc;
            unsafe fn read<'a>(p: *const u8, n: usize) -> Cow<'a, [$acc]> {
                if n == 0 {
                    return Cow::Borrowed(&[]);
                }
                // SAFETY: caller contract; device memory of a tensor is element-aligned.
                let s = unsafe { std::slice::from_raw_parts(p as *const $t, n) };
                #[allow(clippy::useless_conversion)]
                if $in_place {
                    // SAFETY: `$t` and `$acc` are the same type in this arm.
                    Cow::Borrowed(unsafe { std::slice::from_raw_parts(s.as_ptr() as *const $acc, n) })
                } else {
                    Cow::Owned(s.iter().map(|&$x| $widen).collect())
                }
            }
            fn narrow($v: $acc) -> Self {
                $narrow
            }
            const IN_PLACE: bool = $in_place;
        }
    };
}
storage!(f32, f32, true, |x| x, |v| v);
storage!(f64, f64, true, |x| x, |v| v);
storage!(u8, u8, true, |x| x, |v| v);
storage!(i8, i8, true, |x| x, |v| v);
storage!(i16, i16, true, |x| x, |v| v);
storage!(i32, i32, true, |x| x, |v| v);
storage!(i64, i64, true, |x| x, |v| v);
storage!(half::f16, f32, false, |x| x.to_f32(), |v| half::f16::from_f32(v));
storage!(half::bf16, f32, false, |x| x.to_f32(), |v| half::bf16::from_f32(v));

/// An output of `n` elements of `T` at `p`, written through a compute-type
/// slice: the memory itself for float32/float64, else a buffer rounded into it
/// by [`Out::finish`].
struct Out<'a, T: Storage> {
    ptr: *mut T,
    buf: Option<Vec<T::Acc>>,
    direct: &'a mut [T::Acc],
}

impl<'a, T: Storage> Out<'a, T> {
    /// # Safety
    /// `p` addresses `n` writable elements of `T` nothing else references during the call.
    unsafe fn new(p: *mut u8, n: usize) -> Out<'a, T> {
        if T::IN_PLACE && n > 0 {
            // SAFETY: caller contract; `T` is its own compute type.
            let direct = unsafe { std::slice::from_raw_parts_mut(p as *mut T::Acc, n) };
            Out { ptr: p as *mut T, buf: None, direct }
        } else {
            Out { ptr: p as *mut T, buf: Some(vec![T::Acc::ZERO; n]), direct: &mut [] }
        }
    }
    fn slice(&mut self) -> &mut [T::Acc] {
        match &mut self.buf {
            Some(b) => b,
            None => self.direct,
        }
    }
    fn finish(self) {
        if let Some(b) = self.buf {
            for (k, &v) in b.iter().enumerate() {
                // SAFETY: `new`'s contract: `ptr` addresses `b.len()` elements.
                unsafe { self.ptr.add(k).write(T::narrow(v)) };
            }
        }
    }
}

/// `c (m x n, row stride ldc) = a @ b + beta * c`, operands as (slice, row stride, column stride).
#[allow(clippy::too_many_arguments)]
fn product<C: Acc>(m: usize, n: usize, k: usize, a: (&[C], usize, usize), b: (&[C], usize, usize), beta: f64, c: &mut [C], ldc: usize) -> Result<()> {
    let mat = |p: *const C, rs: usize, cs: usize| Matrix { ptr: p as *mut u8, batch_stride: 0, row_stride: rs as isize, col_stride: cs as isize };
    // SAFETY: every slice covers the rows and columns its strides address (the callers size them so).
    unsafe { gemm(C::DTYPE, GemmShape { batch: 1, m, n, k }, 1.0, mat(a.0.as_ptr(), a.1, a.2), mat(b.0.as_ptr(), b.1, b.2), beta, mat(c.as_mut_ptr(), ldc, 1)) }
}

/// Columns a convolution's GEMM should have at least. The GEMM packs the
/// weight operand again for every product, so one product per sample on small
/// feature maps (ResNet's 2x2 to 8x8 late stages) spends its time packing the
/// weight; laying about this many columns of consecutive samples side by side
/// amortises the packing over them.
const TARGET_COLUMNS: usize = 2048;

/// The forward's chunks are smaller where a few samples' columns fit in a core's
/// L2 cache: at most this many column elements (128 KiB of float32), but at least
/// [`FORWARD_MIN_COLUMNS`] columns. im2col writes the matrix and the GEMM packs it
/// right after, so a cache-resident matrix is read back from L2 instead of memory;
/// the digits CNN's 16->32-channel 3x3 conv on 8x8 maps (9,216 column elements
/// per sample) ran about 25% faster on two threads with 4-sample chunks than with 32. The backward keeps [`TARGET_COLUMNS`]: its weight
/// gradient's inner dimension is the column count, and short ones made it slower.
const FORWARD_CACHE_COLUMNS: usize = 1 << 15;

/// Fewest columns a forward chunk that fits [`FORWARD_CACHE_COLUMNS`] gets: the
/// weight is packed once per product, which at 256 columns is under 0.5% of the
/// product's multiply-adds.
const FORWARD_MIN_COLUMNS: usize = 256;

/// Most column-matrix elements (512 KiB of float32) one sample's forward or weight
/// gradient unfolds at a time when the whole sample's columns would not fit a core's
/// L2 cache (2 MiB here): the sample is then taken a block of [`block_columns`] grid
/// positions at a time, so that the GEMM packs a block im2col has just written
/// while it is still in L2, and the product lands in the output with no scatter. The
/// benchmark's 64-channel 3x3 convolution on 32x32 maps (2.4 MB of columns per
/// sample) spent about a third of its forward writing and re-reading columns
/// through memory.
const BLOCK_ELEMENTS: usize = 1 << 17;

/// Fewest grid positions of a column block: narrower products lose GEMM speed.
const MIN_BLOCK_COLUMNS: usize = 256;

/// Fewest grid positions of a weight gradient's column block. That product sums
/// over the block (`gy @ cols^T`), so each block re-reads and re-writes the whole
/// weight gradient: on the 64-channel 32x32 benchmark convolution blocks of 256
/// took 2.7 ms against 2.3 ms for 512 or 1024 (unblocked two-sample chunks: 2.4 ms).
const MIN_DEPTH_COLUMNS: usize = 1024;

/// Grid positions per column block of one sample with `kk` column rows and `gl`
/// grid positions, or None when the sample is unfolded whole (its columns fit
/// [`BLOCK_ELEMENTS`], or its grid is too small to cut into two blocks).
fn block_columns(kk: usize, gl: usize) -> Option<usize> {
    if kk * gl <= BLOCK_ELEMENTS || gl < 2 * MIN_BLOCK_COLUMNS {
        return None;
    }
    let blocks = gl.div_ceil((BLOCK_ELEMENTS / kk.max(1)).max(MIN_BLOCK_COLUMNS));
    Some(gl.div_ceil(blocks))
}

/// Most elements one chunk's column matrix may hold (32 MiB of float32), so that
/// batching samples never costs much more memory than one sample's columns.
const COLUMNS_BUDGET: usize = 1 << 23;

/// How a batch is cut: `chunk` consecutive samples share each GEMM; samples are
/// split into `tasks` tasks of `per_task` samples, each given `inner` threads.
#[derive(Debug, Clone, Copy)]
struct Plan {
    chunk: usize,
    per_task: usize,
    tasks: usize,
    inner: usize,
}

impl Plan {
    /// The plan of the forward pass (`forward`) or of the backward.
    fn new(cv: &Conv, threads: usize, forward: bool) -> Plan {
        let win = cv.window();
        let (ic, gc) = cv.group_channels();
        let (kk, gl) = (ic * win.taps(), win.grid_len().max(1));
        let batch = cv.batch.max(1);
        let chunk = TARGET_COLUMNS.div_ceil(gl).min(COLUMNS_BUDGET / (kk * gl).max(1));
        let cached = FORWARD_CACHE_COLUMNS / (kk * gl).max(1);
        let cached = if cached >= 1 { chunk.min(cached.max(FORWARD_MIN_COLUMNS.div_ceil(gl))) } else { chunk };
        let blocked = block_columns(kk, gl).is_some() && !cv.transposed;
        let chunk = if blocked { 1 } else if forward { cached } else { chunk }.clamp(1, batch);
        let per_task = batch.div_ceil(threads.clamp(1, batch));
        // `linalg::gemm` splits a product over threads only from SPLIT_MACS
        // multiply-adds; below that, splitting samples is the parallelism there is.
        let small = gc * kk * chunk * gl < SPLIT_MACS;
        // Above it, the GEMM would split a product wider than tall into column blocks
        // anyway, each thread packing the whole weight; splitting samples instead costs
        // no more packing and lets every task do its own im2col, scatter and col2im
        // without a fork and join per step (the digits CNN's 8x8 maps: 2x faster). A
        // taller product (ResNet's 2x2 and 4x4 stages: a big weight, few columns) is
        // split by rows, each thread packing half the weight, which sample tasks cannot do.
        let wide = per_task * gl >= gc;
        if threads > 1 && batch > 1 && (small || wide) {
            Plan { chunk: chunk.min(per_task), per_task, tasks: batch.div_ceil(per_task), inner: 1 }
        } else {
            Plan { chunk, per_task: batch, tasks: 1, inner: threads }
        }
    }
}

/// Reusable buffers of one task: the column matrix, a gathered operand and a product
/// waiting to be scattered.
struct Scratch<C> {
    cols: Vec<C>,
    mat: Vec<C>,
    out: Vec<C>,
}

impl<C> Default for Scratch<C> {
    fn default() -> Self {
        Scratch { cols: Vec::new(), mat: Vec::new(), out: Vec::new() }
    }
}

/// Output of `nb` consecutive samples: `x` `(nb, C_in, *input)` into `y` `(nb, C_out, *output)`.
#[allow(clippy::too_many_arguments)]
fn forward_chunk<C: Acc>(cv: &Conv, x: &[C], w: &[C], bias: Option<&[C]>, y: &mut [C], nb: usize, s: &mut Scratch<C>, threads: usize) -> Result<()> {
    let win = cv.window();
    let (il, gl, taps) = (win.image_len(), win.grid_len(), win.taps());
    let (ic, gc) = cv.group_channels();
    let (kk, wg, cn) = (ic * taps, ic * gc * taps, nb * gl);
    let (xs, ys) = (x.len() / nb, y.len() / nb);
    // A 1x1 unit-stride window over one sample: the image is its own column matrix.
    let direct = win.is_identity() && nb == 1;
    let Scratch { cols, mat, out } = s;
    for g in 0..cv.groups {
        let wgt = &w[g * wg..(g + 1) * wg];
        if let (false, Some(bc), 1) = (cv.transposed, block_columns(kk, gl), nb) {
            // y[:, g, p0..p1] (gc x bc, row stride L) = W[g] @ im2col(x[:, g])[:, p0..p1].
            let (xg, yg) = (&x[g * ic * il..], &mut y[g * gc * gl..(g + 1) * gc * gl]);
            for p0 in (0..gl).step_by(bc) {
                let p1 = (p0 + bc).min(gl);
                cols.resize(kk * (p1 - p0), C::ZERO);
                im2col(&win, ic, xg, xs, 1, (p0, p1), cols, threads);
                product(gc, p1 - p0, kk, (wgt, kk, 1), (cols, p1 - p0, 1), 0.0, &mut yg[p0..], gl)?;
                if let Some(b) = bias {
                    for (r, row) in yg.chunks_mut(gl).enumerate() {
                        let bv = b[g * gc + r];
                        row[p0..p1].iter_mut().for_each(|v| *v = v.add(bv));
                    }
                }
            }
        } else if !cv.transposed {
            // y[:, g] (gc x nb*L) = W[g] (gc x kk) @ im2col(x[:, g]) (kk x nb*L).
            let src = columns(&win, ic, &x[g * ic * il..], xs, nb, direct, cols, threads);
            let bg = bias.map(|b| &b[g * gc..(g + 1) * gc]);
            product_to_samples(gc, kk, (wgt, kk, 1), src, gl, nb, &mut y[g * gc * gl..], ys, out, bg)?;
        } else {
            // y[:, g] = col2im(W[g]^T (kk x gc) @ x[:, g] (gc x nb*L)).
            let xg = gather(&x[g * gc * gl..], xs, gc, gl, nb, mat);
            let yg = &mut y[g * ic * il..];
            if direct {
                product(kk, gl, gc, (wgt, 1, kk), (xg, gl, 1), 0.0, &mut yg[..kk * gl], gl)?;
            } else {
                cols.resize(kk * cn, C::ZERO);
                product(kk, cn, gc, (wgt, 1, kk), (xg, cn, 1), 0.0, cols, cn)?;
                col2im_scratch(&win, ic, cols, nb, (0, gl), yg, ys, false, threads);
            }
        }
    }
    if let (Some(b), true) = (bias, cv.transposed) {
        add_bias(y, il, b);
    }
    Ok(())
}

/// Gradients of `nb` consecutive samples (`xs` and `ys` elements per sample of the
/// input and the output): `gx` is overwritten, `gw` accumulated into. `x` is read
/// only for `gw` and `w` only for `gx` (either may be empty otherwise).
#[allow(clippy::too_many_arguments)]
fn backward_chunk<C: Acc>(cv: &Conv, gy: &[C], x: &[C], w: &[C], mut gx: Option<&mut [C]>, mut gw: Option<&mut [C]>, nb: usize, (xs, ys): (usize, usize), s: &mut Scratch<C>, threads: usize) -> Result<()> {
    let win = cv.window();
    let (il, gl, taps) = (win.image_len(), win.grid_len(), win.taps());
    let (ic, gc) = cv.group_channels();
    let (kk, wg, cn) = (ic * taps, ic * gc * taps, nb * gl);
    let direct = win.is_identity() && nb == 1;
    let Scratch { cols, mat, out } = s;
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
                    product(kk, p1 - p0, gc, (&w[wr.clone()], 1, kk), (&gyg[p0..], gl, 1), 0.0, cols, p1 - p0)?;
                    col2im_scratch(&win, ic, cols, 1, (p0, p1), gxg, xs, true, threads);
                }
            }
            if let Some(gw) = gw.as_deref_mut() {
                // The blocks are the product's inner dimension here: deeper ones (see
                // MIN_DEPTH_COLUMNS) at the cost of a column matrix that fits L2 less well.
                let bc = bc.max(MIN_DEPTH_COLUMNS).min(gl);
                for p0 in (0..gl).step_by(bc) {
                    let p1 = (p0 + bc).min(gl);
                    cols.resize(kk * (p1 - p0), C::ZERO);
                    im2col(&win, ic, &x[g * ic * il..], xs, 1, (p0, p1), cols, threads);
                    product(gc, kk, p1 - p0, (&gyg[p0..], gl, 1), (cols, 1, p1 - p0), 1.0, &mut gw[wr.clone()], kk)?;
                }
            }
        } else if !cv.transposed {
            let gyg = gather(&gy[g * gc * gl..], ys, gc, gl, nb, mat);
            if let Some(gx) = gx.as_deref_mut() {
                // gx[:, g] = col2im(W[g]^T (kk x gc) @ gy[:, g] (gc x nb*L)).
                let gxg = &mut gx[g * ic * il..];
                if direct {
                    product(kk, gl, gc, (&w[wr.clone()], 1, kk), (gyg, gl, 1), 0.0, &mut gxg[..kk * gl], gl)?;
                } else {
                    cols.resize(kk * cn, C::ZERO);
                    product(kk, cn, gc, (&w[wr.clone()], 1, kk), (gyg, cn, 1), 0.0, cols, cn)?;
                    col2im_scratch(&win, ic, cols, nb, (0, gl), gxg, xs, false, threads);
                }
            }
            if let Some(gw) = gw.as_deref_mut() {
                // gW[g] (gc x kk) += gy[:, g] (gc x nb*L) @ im2col(x[:, g])^T (nb*L x kk).
                let src = columns(&win, ic, &x[g * ic * il..], xs, nb, direct, cols, threads);
                product(gc, kk, cn, (gyg, cn, 1), (src, 1, cn), 1.0, &mut gw[wr], kk)?;
            }
        } else {
            // The image side is gy (ic channels), the column side x and gx (gc channels).
            let src = columns(&win, ic, &gy[g * ic * il..], ys, nb, direct, cols, threads);
            if let Some(gx) = gx.as_deref_mut() {
                // gx[:, g] (gc x nb*L) = W[g] (gc x kk) @ im2col(gy[:, g]) (kk x nb*L): a convolution.
                product_to_samples(gc, kk, (&w[wr.clone()], kk, 1), src, gl, nb, &mut gx[g * gc * gl..], xs, out, None)?;
            }
            if let Some(gw) = gw.as_deref_mut() {
                // gW[g] (gc x kk) += x[:, g] (gc x nb*L) @ im2col(gy[:, g])^T (nb*L x kk).
                let xg = gather(&x[g * gc * gl..], xs, gc, gl, nb, mat);
                product(gc, kk, cn, (xg, cn, 1), (src, 1, cn), 1.0, &mut gw[wr], kk)?;
            }
        }
    }
    Ok(())
}

fn forward<C: Acc>(cv: &Conv, x: &[C], w: &[C], bias: Option<&[C]>, y: &mut [C], threads: usize) -> Result<()> {
    if cv.batch == 0 || y.is_empty() {
        return Ok(());
    }
    let (xs, ys) = (x.len() / cv.batch, y.len() / cv.batch);
    let plan = Plan::new(cv, threads, true);
    let run = |first: usize, part: &mut [C]| -> Result<()> {
        let mut scratch = Scratch::default();
        for (k, yc) in part.chunks_mut(plan.chunk * ys).enumerate() {
            let (n, nb) = (first + k * plan.chunk, yc.len() / ys);
            forward_chunk(cv, &x[n * xs..(n + nb) * xs], w, bias, yc, nb, &mut scratch, plan.inner)?;
        }
        Ok(())
    };
    if plan.tasks <= 1 {
        run(0, y)
    } else {
        try_for_each_chunk_mut(y, plan.per_task * ys, plan.tasks, |t, part| run(t * plan.per_task, part))
    }
}

#[allow(clippy::too_many_arguments)]
fn backward<C: Acc>(cv: &Conv, gy: &[C], x: &[C], w: &[C], gx: Option<&mut [C]>, mut gw: Option<&mut [C]>, gb: Option<&mut [C]>, threads: usize) -> Result<()> {
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
    if gx.is_none() && gw.is_none() {
        return Ok(());
    }
    let plan = Plan::new(cv, threads, false);
    let run = |t: usize, mut part: Option<&mut [C]>, mut partial: Option<&mut [C]>| -> Result<()> {
        let mut scratch = Scratch::default();
        let first = t * plan.per_task;
        let count = plan.per_task.min(cv.batch - first);
        let mut j = 0;
        while j < count {
            let (n, nb) = (first + j, plan.chunk.min(count - j));
            let gxc = part.as_deref_mut().map(|p| &mut p[j * xs..(j + nb) * xs]);
            let xc = if x.is_empty() { x } else { &x[n * xs..(n + nb) * xs] };
            backward_chunk(cv, &gy[n * ys..(n + nb) * ys], xc, w, gxc, partial.as_deref_mut(), nb, (xs, ys), &mut scratch, plan.inner)?;
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

unsafe fn run_forward<T: Storage>(cv: &Conv, input: *const u8, weight: *const u8, bias: Option<*const u8>, output: *mut u8, threads: usize) -> Result<()> {
    let (xl, wl, yl) = cv.lens();
    // SAFETY (whole body): `convolution`'s contract.
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
pub unsafe fn convolution(dtype: DType, cv: &Conv, input: *const u8, weight: *const u8, bias: Option<*const u8>, output: *mut u8, threads: usize) -> Result<()> {
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

unsafe fn run_backward<T: Storage>(cv: &Conv, grad_output: *const u8, input: *const u8, weight: *const u8, grads: Grads, threads: usize) -> Result<()> {
    let (xl, wl, yl) = cv.lens();
    // SAFETY (whole body): `convolution_backward`'s contract. The input is read
    // only for the weight gradient and the weight only for the input gradient.
    unsafe {
        let gy = T::read(grad_output, yl);
        let x = if grads.weight.is_some() { T::read(input, xl) } else { Cow::Borrowed(&[][..]) };
        let w = if grads.input.is_some() { T::read(weight, wl) } else { Cow::Borrowed(&[][..]) };
        let mut gx = grads.input.map(|p| Out::<T>::new(p, xl));
        let mut gw = grads.weight.map(|p| Out::<T>::new(p, wl));
        let mut gb = grads.bias.map(|p| Out::<T>::new(p, cv.out_channels));
        backward(cv, &gy, &x, &w, gx.as_mut().map(|o| o.slice()), gw.as_mut().map(|o| o.slice()), gb.as_mut().map(|o| o.slice()), threads)?;
        for o in [gx, gw, gb].into_iter().flatten() {
            o.finish();
        }
    }
    Ok(())
}

/// Gradients of convolution `cv` with respect to its input, weight and bias
/// (each only when its pointer in `grads` is given), from `grad_output` (the
/// output's shape); `input` is read only for the weight gradient and `weight`
/// only for the input gradient. Layouts, dtypes and `threads` as [`convolution`].
///
/// Errors: [`Error::UnsupportedDtype`] as [`convolution`].
///
/// # Safety
/// As [`convolution`] for every pointer that is read (null otherwise is fine);
/// the gradients overlap no operand and each other.
pub unsafe fn convolution_backward(dtype: DType, cv: &Conv, grad_output: *const u8, input: *const u8, weight: *const u8, grads: Grads, threads: usize) -> Result<()> {
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

/// A sliding-window unfold (PyTorch's `im2col`, `F.unfold`) or its adjoint fold
/// (`col2im`, `F.fold`) over 2-d images: `batch` images `(channels, *image)`
/// against columns `(channels * kernel[0] * kernel[1], L)`, `L` the window
/// positions (`grid`), row `(c, tap)` in PyTorch's order (channel-major, taps
/// row-major over the kernel). Unlike a convolution no position has to fit
/// exactly: the grid is whatever the image, padding and window allow, and
/// PyTorch's `im2col_shape_check.h` has rejected empty grids before this runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfold {
    pub batch: usize,
    pub channels: usize,
    /// Image extents (height, width).
    pub image: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
}

impl Unfold {
    fn window(&self, op: &'static str) -> Result<Window> {
        let lift = |a: [usize; 2], fill: usize| [fill, a[0], a[1]];
        let mut w = Window {
            image: lift(self.image, 1),
            grid: [1; MAX_SPATIAL],
            kernel: lift(self.kernel, 1),
            stride: lift(self.stride, 1),
            padding: lift(self.padding, 0),
            dilation: lift(self.dilation, 1),
        };
        for d in 1..MAX_SPATIAL {
            if w.kernel[d] == 0 || w.stride[d] == 0 || w.dilation[d] == 0 {
                return Err(Error::InvalidLayout { op, reason: format!("kernel {:?}, stride {:?} and dilation {:?} must be positive", self.kernel, self.stride, self.dilation) });
            }
            w.grid[d] = w.positions(d).ok_or_else(|| Error::InvalidLayout { op, reason: format!("a {:?} window does not fit the padded {:?} image", self.kernel, self.image) })?;
        }
        Ok(w)
    }

    /// Elements of the images and of the columns.
    fn lens(&self, w: &Window) -> (usize, usize) {
        (self.batch * self.channels * w.image_len(), self.batch * self.channels * w.taps() * w.grid_len())
    }
}

/// Runs `f(n, src_n, dst_n)` for every image `n`: samples over tasks when
/// there are at least as many samples as threads, else one after the other with
/// `f` splitting channels (it receives the threads it may use).
fn per_sample<C: Acc>(batch: usize, src: &[C], dst: &mut [C], threads: usize, f: impl Fn(&[C], &mut [C], usize) + Sync) {
    if batch == 0 || dst.is_empty() {
        return;
    }
    let (ss, ds) = (src.len() / batch, dst.len() / batch);
    if threads > 1 && batch >= threads {
        for_each_chunk_mut(dst, ds, threads, |n, d| f(&src[n * ss..(n + 1) * ss], d, 1));
    } else {
        dst.chunks_mut(ds).enumerate().for_each(|(n, d)| f(&src[n * ss..(n + 1) * ss], d, threads));
    }
}

unsafe fn run_unfold<T: Storage>(u: &Unfold, fold: bool, src: *const u8, dst: *mut u8, threads: usize) -> Result<()> {
    let w = u.window(if fold { "col2im" } else { "im2col" })?;
    let (il, cl) = u.lens(&w);
    let (sl, dl) = if fold { (cl, il) } else { (il, cl) };
    // SAFETY: `unfold` / `fold`'s contract: `src` and `dst` hold `sl` and `dl` elements.
    unsafe {
        let s = T::read(src, sl);
        let mut d = Out::<T>::new(dst, dl);
        if fold {
            per_sample(u.batch, &s, d.slice(), threads, |cols, img, t| col2im(&w, u.channels, cols, 1, (0, w.grid_len()), img, 0, false, t));
        } else {
            per_sample(u.batch, &s, d.slice(), threads, |img, cols, t| im2col(&w, u.channels, img, 0, 1, (0, w.grid_len()), cols, t));
        }
        d.finish();
    }
    Ok(())
}

unsafe fn dispatch_unfold(dtype: DType, u: &Unfold, fold: bool, src: *const u8, dst: *mut u8, threads: usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        match dtype {
            DType::F32 => run_unfold::<f32>(u, fold, src, dst, threads),
            DType::F64 => run_unfold::<f64>(u, fold, src, dst, threads),
            DType::F16 => run_unfold::<half::f16>(u, fold, src, dst, threads),
            DType::BF16 => run_unfold::<half::bf16>(u, fold, src, dst, threads),
            DType::U8 => run_unfold::<u8>(u, fold, src, dst, threads),
            DType::I8 => run_unfold::<i8>(u, fold, src, dst, threads),
            DType::I16 => run_unfold::<i16>(u, fold, src, dst, threads),
            DType::I32 => run_unfold::<i32>(u, fold, src, dst, threads),
            DType::I64 => run_unfold::<i64>(u, fold, src, dst, threads),
            d => Err(Error::UnsupportedDtype { op: if fold { "col2im" } else { "im2col" }, dtype: d }),
        }
    }
}

/// `cols = im2col(image)`: `image` `(batch, channels, *u.image)` contiguous into
/// `cols` `(batch, channels * taps, L)` contiguous (0 where a window covers padding).
/// The loop is the one convolution uses (see the module documentation).
///
/// Errors: [`Error::InvalidLayout`] for a non-positive kernel, stride or
/// dilation or a window larger than the padded image; [`Error::UnsupportedDtype`]
/// for bool, complex and the unsigned 16/32/64-bit dtypes.
///
/// # Safety
/// `image` and `cols` address the contiguous elements of their shapes and do not overlap.
pub unsafe fn unfold(dtype: DType, u: &Unfold, image: *const u8, cols: *mut u8, threads: usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { dispatch_unfold(dtype, u, false, image, cols, threads) }
}

/// `image = col2im(cols)`, the adjoint of [`unfold`]: every column entry is added
/// onto the pixel it was read from (entries over padding are dropped); pixels no
/// window covers are 0. float16/bfloat16 sum in float32 and round once.
/// Layouts, errors and safety as [`unfold`] with the roles of the buffers swapped.
///
/// # Safety
/// As [`unfold`].
pub unsafe fn fold(dtype: DType, u: &Unfold, cols: *const u8, image: *mut u8, threads: usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { dispatch_unfold(dtype, u, true, cols, image, threads) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spatial parameters of one test case (front-padded later by `Conv::new`).
    struct Case {
        batch: i64,
        cin: i64,
        cout: i64,
        groups: i64,
        input: Vec<i64>,
        kernel: Vec<i64>,
        stride: Vec<i64>,
        padding: Vec<i64>,
        dilation: Vec<i64>,
        output_padding: Vec<i64>,
        transposed: bool,
    }

    fn case(batch: i64, cin: i64, cout: i64, groups: i64, input: &[i64], kernel: &[i64], stride: &[i64], padding: &[i64], dilation: &[i64]) -> Case {
        Case {
            batch, cin, cout, groups,
            input: input.to_vec(), kernel: kernel.to_vec(), stride: stride.to_vec(), padding: padding.to_vec(), dilation: dilation.to_vec(),
            output_padding: vec![0; input.len()],
            transposed: false,
        }
    }

    impl Case {
        fn transposed(mut self, output_padding: &[i64]) -> Case {
            self.transposed = true;
            self.output_padding = output_padding.to_vec();
            self
        }
        fn conv(&self) -> Conv {
            let output: Vec<i64> = (0..self.input.len())
                .map(|d| {
                    let span = self.dilation[d] * (self.kernel[d] - 1) + 1;
                    if self.transposed {
                        (self.input[d] - 1) * self.stride[d] - 2 * self.padding[d] + span + self.output_padding[d]
                    } else {
                        (self.input[d] + 2 * self.padding[d] - span) / self.stride[d] + 1
                    }
                })
                .collect();
            let s = Spatial { input: &self.input, output: &output, kernel: &self.kernel, stride: &self.stride, padding: &self.padding, dilation: &self.dilation };
            Conv::new(self.batch, self.cin, self.cout, self.groups, self.transposed, s).unwrap()
        }
    }

    /// Calls `f(image_index, grid_index, weight_index)` for every product of a
    /// direct convolution: conv output (grid) += weight * input (image), or for a
    /// transposed one output (image) += weight * input (grid). The weight is
    /// `(grid channels, image channels / groups, *kernel)` in both cases.
    fn direct(cv: &Conv, mut f: impl FnMut(usize, usize, usize)) {
        let w = cv.window();
        let (ic, gc) = cv.group_channels();
        let (image_ch, grid_ch) = (ic * cv.groups, gc * cv.groups);
        for n in 0..cv.batch {
            for c in 0..grid_ch {
                let g = c / gc;
                for ci in 0..ic {
                    for o in 0..w.grid_len() {
                        let op = [o / (w.grid[1] * w.grid[2]), o / w.grid[2] % w.grid[1], o % w.grid[2]];
                        for t in 0..w.taps() {
                            let tap = w.tap(t);
                            let pos: Vec<isize> = (0..3).map(|d| (op[d] * w.stride[d]) as isize + w.offset(d, tap[d])).collect();
                            if (0..3).any(|d| pos[d] < 0 || pos[d] >= w.image[d] as isize) {
                                continue;
                            }
                            let ip = (pos[0] as usize * w.image[1] + pos[1] as usize) * w.image[2] + pos[2] as usize;
                            let ii = (n * image_ch + g * ic + ci) * w.image_len() + ip;
                            let gi = (n * grid_ch + c) * w.grid_len() + o;
                            f(ii, gi, (c * ic + ci) * w.taps() + t);
                        }
                    }
                }
            }
        }
    }

    fn values(n: usize, seed: u64) -> Vec<f64> {
        // Small integers and halves: exact in every dtype's products and sums here.
        (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) >> 3) % 9) as f64 / 2.0 - 2.0).collect()
    }

    fn as_bytes<T: Element>(v: &[f64]) -> Vec<T> {
        v.iter().map(|&x| T::from_f64(x)).collect()
    }

    /// Forward and all three gradients of `c` in dtype `T` against the direct loops.
    fn check<T: Element>(c: &Case, threads: usize, tol: f64) {
        let cv = c.conv();
        let (xl, wl, yl) = cv.lens();
        // The reference sees the values as `T` holds them (integers truncate the halves).
        let held = |v: Vec<f64>| -> Vec<f64> { v.into_iter().map(|x| T::from_f64(x).to_f64()).collect() };
        let (x, w, b, gy) = (held(values(xl, 1)), held(values(wl, 2)), held(values(cv.out_channels, 3)), held(values(yl, 4)));
        // Reference in f64.
        let mut y = vec![0.0; yl];
        let (mut gx, mut gw) = (vec![0.0; xl], vec![0.0; wl]);
        direct(&cv, |ii, gi, wi| {
            if cv.transposed {
                y[ii] += w[wi] * x[gi];
                gx[gi] += w[wi] * gy[ii];
                gw[wi] += gy[ii] * x[gi];
            } else {
                y[gi] += w[wi] * x[ii];
                gx[ii] += w[wi] * gy[gi];
                gw[wi] += gy[gi] * x[ii];
            }
        });
        let plane = yl / (cv.batch * cv.out_channels).max(1);
        for (k, v) in y.iter_mut().enumerate() {
            *v += b[k / plane % cv.out_channels];
        }
        let gb: Vec<f64> = (0..cv.out_channels).map(|co| (0..cv.batch).flat_map(|n| (0..plane).map(move |p| (n, p))).map(|(n, p)| gy[(n * cv.out_channels + co) * plane + p]).sum()).collect();

        let (xt, wt, bt, gyt) = (as_bytes::<T>(&x), as_bytes::<T>(&w), as_bytes::<T>(&b), as_bytes::<T>(&gy));
        let mut yt = as_bytes::<T>(&vec![f64::NAN; yl]);
        let (mut gxt, mut gwt, mut gbt) = (as_bytes::<T>(&vec![f64::NAN; xl]), as_bytes::<T>(&vec![f64::NAN; wl]), as_bytes::<T>(&vec![f64::NAN; cv.out_channels]));
        let p = |v: &Vec<T>| v.as_ptr() as *const u8;
        unsafe {
            convolution(T::DTYPE, &cv, p(&xt), p(&wt), Some(p(&bt)), yt.as_mut_ptr() as *mut u8, threads).unwrap();
            let grads = Grads { input: Some(gxt.as_mut_ptr() as *mut u8), weight: Some(gwt.as_mut_ptr() as *mut u8), bias: Some(gbt.as_mut_ptr() as *mut u8) };
            convolution_backward(T::DTYPE, &cv, p(&gyt), p(&xt), p(&wt), grads, threads).unwrap();
        }
        for (name, got, want) in [("output", &yt, &y), ("grad_input", &gxt, &gx), ("grad_weight", &gwt, &gw), ("grad_bias", &gbt, &gb)] {
            for (k, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                let g = g.to_f64();
                assert!((g - w).abs() <= tol * w.abs().max(1.0), "{name}[{k}] = {g}, want {w} ({:?} {cv:?})", T::DTYPE);
            }
        }
    }

    fn cases() -> Vec<Case> {
        vec![
            case(2, 3, 4, 1, &[7], &[3], &[1], &[1], &[1]),
            case(2, 4, 6, 2, &[9], &[2], &[2], &[0], &[2]),
            case(3, 2, 3, 1, &[5, 6], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
            case(2, 4, 4, 4, &[6, 5], &[3, 2], &[2, 1], &[1, 0], &[1, 2]),
            case(2, 6, 4, 2, &[4, 5, 6], &[2, 3, 2], &[1, 2, 1], &[1, 0, 1], &[2, 1, 1]),
            case(3, 5, 3, 1, &[4, 4], &[1, 1], &[1, 1], &[0, 0], &[1, 1]),
            case(1, 2, 2, 1, &[3, 3], &[1, 1], &[2, 2], &[1, 1], &[1, 1]),
            case(2, 3, 4, 1, &[2, 3], &[3, 3], &[1, 1], &[2, 2], &[1, 1]),
            case(2, 3, 4, 1, &[5], &[3], &[2], &[1], &[1]).transposed(&[1]),
            case(2, 4, 6, 2, &[4, 3], &[3, 2], &[2, 3], &[1, 0], &[1, 2]).transposed(&[1, 2]),
            case(2, 4, 4, 4, &[3, 3], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).transposed(&[0, 0]),
            case(2, 2, 4, 2, &[2, 3, 2], &[2, 2, 3], &[2, 1, 1], &[0, 1, 1], &[1, 1, 2]).transposed(&[1, 0, 0]),
            case(3, 3, 2, 1, &[4, 4], &[1, 1], &[1, 1], &[0, 0], &[1, 1]).transposed(&[0, 0]),
            case(2, 3, 2, 1, &[3], &[1], &[1], &[0], &[3]).transposed(&[2]),
            // "Same"-size windows (Window::flat): dilated, wider than the image, strided outer dimension.
            case(2, 3, 2, 1, &[6, 7], &[3, 3], &[1, 1], &[2, 2], &[2, 2]),
            case(2, 2, 2, 1, &[3, 3], &[5, 5], &[1, 1], &[2, 2], &[1, 1]),
            case(2, 2, 3, 1, &[5, 4, 5], &[3, 3, 3], &[2, 1, 1], &[1, 1, 1], &[1, 1, 1]),
            case(2, 2, 3, 1, &[3, 4, 5], &[3, 3, 3], &[2, 1, 1], &[1, 1, 1], &[1, 1, 1]).transposed(&[0, 0, 0]),
        ]
    }

    #[test]
    fn every_case_and_dtype_matches_direct_convolution() {
        for c in cases() {
            for threads in [1, 2] {
                check::<f64>(&c, threads, 1e-12);
                check::<f32>(&c, threads, 1e-5);
                check::<half::f16>(&c, threads, 2e-3);
                check::<half::bf16>(&c, threads, 1e-2);
                check::<i64>(&c, threads, 0.0);
                check::<i32>(&c, threads, 0.0);
            }
        }
    }

    #[test]
    fn large_cases_take_the_parallel_paths() {
        // Large enough to split im2col/col2im over channels; and many small samples to split the batch.
        check::<f32>(&case(2, 16, 32, 1, &[24, 24], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2, 1e-5);
        check::<f32>(&case(2, 32, 16, 1, &[12, 12], &[3, 3], &[2, 2], &[1, 1], &[1, 1]).transposed(&[1, 1]), 2, 1e-5);
        check::<f64>(&case(9, 8, 8, 8, &[10, 10], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2, 1e-12);
        check::<f64>(&case(7, 4, 4, 2, &[6], &[3], &[1], &[1], &[1]).transposed(&[0]), 2, 1e-12);
        // Chunks of samples sharing one GEMM (`Plan`): 32x32 outputs give chunks of two,
        // so three samples leave a last chunk of one; 48x48 outputs give one sample per GEMM.
        for threads in [1, 2] {
            check::<f32>(&case(3, 2, 3, 1, &[32, 32], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), threads, 1e-5);
            // 8x8 maps, 144 column rows: the forward's cache-sized chunks of four samples
            // (FORWARD_CACHE_COLUMNS), nine samples leaving a last chunk of one.
            check::<f32>(&case(9, 16, 8, 1, &[8, 8], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), threads, 1e-4);
            check::<f32>(&case(3, 4, 2, 2, &[16, 16], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).transposed(&[1, 1]), threads, 1e-5);
            check::<f32>(&case(2, 1, 2, 1, &[48, 48], &[1, 1], &[1, 1], &[0, 0], &[1, 1]), threads, 1e-5);
            check::<f32>(&case(3, 2, 2, 1, &[48, 48], &[1, 1], &[1, 1], &[0, 0], &[1, 1]).transposed(&[0, 0]), threads, 1e-5);
        }
    }

    #[test]
    fn samples_too_large_for_the_cache_go_in_column_blocks() {
        // Each case has over BLOCK_ELEMENTS column elements per sample, so the forward
        // and input gradient (and, in 2-d, in blocks of MIN_DEPTH_COLUMNS, the weight
        // gradient) take it in blocks whose edges fall inside
        // an output row (2-d: 759 and 779 positions for rows of 37 and 38) or, in 3-d,
        // inside a slab (390 positions for slabs of 156).
        let flat = case(2, 16, 8, 1, &[41, 37], &[3, 3], &[1, 1], &[1, 1], &[1, 1]);
        let strided = case(1, 16, 4, 1, &[41, 75], &[3, 3], &[1, 2], &[1, 1], &[1, 1]);
        let volume = case(1, 8, 4, 1, &[5, 12, 13], &[3, 3, 3], &[1, 1, 1], &[1, 1, 1], &[1, 1, 1]);
        for c in [&flat, &strided, &volume] {
            let w = c.conv().window();
            let bc = block_columns(c.cin as usize * w.taps(), w.grid_len()).expect("blocked");
            assert!(bc < w.grid_len() && bc % (w.grid[1] * w.grid[2]) != 0 && (w.grid[0] > 1 || bc % w.grid[2] != 0), "{bc}");
            for threads in [1, 2] {
                check::<f32>(c, threads, 1e-4);
                check::<f64>(c, threads, 1e-12);
            }
        }
        check::<half::bf16>(&flat, 2, 1e-2);
    }

    #[test]
    fn plans_batch_small_maps_and_cap_the_column_buffer() {
        let plan = |c: Case, threads| Plan::new(&c.conv(), threads, false);
        // 2x2 outputs: every sample of the batch in one GEMM.
        let p = plan(case(8, 512, 512, 1, &[2, 2], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2);
        assert_eq!((p.chunk, p.tasks), (8, 1));
        // Large maps: one sample per GEMM.
        assert_eq!(plan(case(4, 8, 8, 1, &[64, 64], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2).chunk, 1);
        // A 4608 x 2048 column matrix per chunk would pass the budget: fewer samples share it.
        let p = plan(case(64, 512, 512, 1, &[4, 4], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2);
        assert!(p.chunk * 4608 * 16 <= COLUMNS_BUDGET && p.chunk >= 1, "{p:?}");
        // Tiny products: samples split over the threads.
        let p = plan(case(8, 1, 4, 1, &[8, 8], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2);
        assert_eq!((p.tasks, p.per_task, p.inner), (2, 4, 1));
        // The forward of the digits CNN's second conv: 144 x 64 column elements per
        // sample fit FORWARD_CACHE_COLUMNS three times; 256 columns take four samples.
        let digits = case(64, 16, 32, 1, &[8, 8], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).conv();
        assert_eq!(Plan::new(&digits, 2, false).chunk, 32);
        assert_eq!(Plan::new(&digits, 2, true).chunk, 4);
        // A sample whose columns pass BLOCK_ELEMENTS: one sample per chunk both ways,
        // taken in four blocks of 256 grid positions (576 column rows).
        let big = case(8, 64, 64, 1, &[32, 32], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).conv();
        assert_eq!((Plan::new(&big, 2, true).chunk, Plan::new(&big, 2, false).chunk), (1, 1));
        assert_eq!(block_columns(576, 1024), Some(256));
        // Too few grid positions to cut (ResNet's late stages): batched as before.
        assert_eq!(block_columns(4608, 16), None);
        assert_eq!(Plan::new(&case(8, 512, 512, 1, &[4, 4], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).conv(), 2, true).chunk, 8);
    }

    #[test]
    fn only_requested_gradients_are_written() {
        let cv = case(2, 2, 2, 1, &[4], &[3], &[1], &[1], &[1]).conv();
        let (xl, wl, yl) = cv.lens();
        let (gy, w) = (vec![1.0f32; yl], vec![1.0f32; wl]);
        let mut gx = vec![f32::NAN; xl];
        let grads = Grads { input: Some(gx.as_mut_ptr() as *mut u8), weight: None, bias: None };
        // The input is not read for the input gradient: a null pointer is fine.
        unsafe { convolution_backward(DType::F32, &cv, gy.as_ptr() as *const u8, std::ptr::null(), w.as_ptr() as *const u8, grads, 1).unwrap() };
        assert_eq!(&gx[..4], &[4.0, 6.0, 6.0, 4.0]);
    }

    #[test]
    fn bad_descriptions_and_dtypes_are_errors() {
        let s = |input: &'static [i64], output: &'static [i64]| Spatial { input, output, kernel: &[3], stride: &[1], padding: &[0], dilation: &[1] };
        assert!(Conv::new(1, 4, 4, 3, false, s(&[5], &[3])).is_err()); // groups divide neither
        assert!(Conv::new(1, 4, 4, 1, false, s(&[5], &[4])).is_err()); // wrong output extent
        assert!(Conv::new(1, 4, 4, 1, false, s(&[2], &[0])).is_err()); // kernel larger than the input
        assert!(Conv::new(1, 4, 4, 1, true, s(&[4], &[5])).is_err()); // transposed output too small
        assert!(Conv::new(1, 4, 4, 0, false, s(&[5], &[3])).is_err());
        let cv = Conv::new(1, 1, 1, 1, false, s(&[5], &[3])).unwrap();
        let x = [false; 5];
        let mut y = [false; 3];
        let err = unsafe { convolution(DType::Bool, &cv, x.as_ptr() as *const u8, x.as_ptr() as *const u8, None, y.as_mut_ptr() as *mut u8, 1) };
        assert!(matches!(err, Err(Error::UnsupportedDtype { op: "convolution", dtype: DType::Bool })));
    }

    #[test]
    fn empty_batch_and_channels() {
        let c = Case { batch: 0, ..case(1, 2, 2, 1, &[4], &[3], &[1], &[1], &[1]) };
        check::<f32>(&c, 2, 0.0);
        check::<f32>(&case(2, 2, 0, 1, &[4], &[3], &[1], &[1], &[1]), 2, 0.0);
    }

    #[test]
    fn unfold_matches_direct_indexing_and_fold_is_its_adjoint() {
        for (batch, channels, image, kernel, stride, padding, dilation) in [
            (2usize, 3usize, [5usize, 6usize], [2usize, 3usize], [1usize, 2usize], [1usize, 0usize], [1usize, 1usize]),
            (1, 2, [7, 4], [3, 2], [2, 1], [2, 1], [2, 1]),
            (5, 1, [3, 3], [1, 1], [1, 1], [0, 0], [1, 1]),
            (2, 2, [4, 5], [3, 3], [1, 1], [1, 1], [1, 1]),
        ] {
            let u = Unfold { batch, channels, image, kernel, stride, padding, dilation };
            let w = u.window("im2col").unwrap();
            let (il, cl) = u.lens(&w);
            let (gh, gw) = (w.grid[1], w.grid[2]);
            let x = values(il, 1);
            for threads in [1, 4] {
                let mut cols = vec![f64::NAN; cl];
                unsafe { unfold(DType::F64, &u, x.as_ptr() as *const u8, cols.as_mut_ptr() as *mut u8, threads) }.unwrap();
                for n in 0..batch {
                    for c in 0..channels {
                        for (t, (ki, kj)) in (0..kernel[0]).flat_map(|a| (0..kernel[1]).map(move |b| (a, b))).enumerate() {
                            for oh in 0..gh {
                                for ow in 0..gw {
                                    let ih = (oh * stride[0] + ki * dilation[0]) as isize - padding[0] as isize;
                                    let iw = (ow * stride[1] + kj * dilation[1]) as isize - padding[1] as isize;
                                    let inside = ih >= 0 && iw >= 0 && (ih as usize) < image[0] && (iw as usize) < image[1];
                                    let want = if inside { x[((n * channels + c) * image[0] + ih as usize) * image[1] + iw as usize] } else { 0.0 };
                                    let row = c * kernel[0] * kernel[1] + t;
                                    assert_eq!(cols[((n * channels * kernel[0] * kernel[1]) + row) * gh * gw + oh * gw + ow], want);
                                }
                            }
                        }
                    }
                }
                // <fold(y), x> == <y, unfold(x)>.
                let y = values(cl, 2);
                let mut img = vec![f64::NAN; il];
                unsafe { fold(DType::F64, &u, y.as_ptr() as *const u8, img.as_mut_ptr() as *mut u8, threads) }.unwrap();
                let lhs: f64 = img.iter().zip(&x).map(|(a, b)| a * b).sum();
                let rhs: f64 = y.iter().zip(&cols).map(|(a, b)| a * b).sum();
                assert!((lhs - rhs).abs() < 1e-9 * (1.0 + lhs.abs()));
            }
        }
        let u = Unfold { batch: 1, channels: 1, image: [2, 2], kernel: [3, 3], stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
        assert!(matches!(unsafe { unfold(DType::F32, &u, std::ptr::null(), std::ptr::null_mut(), 1) }, Err(Error::InvalidLayout { .. })));
        let u = Unfold { image: [4, 4], ..u };
        assert!(matches!(unsafe { fold(DType::Bool, &u, std::ptr::null(), std::ptr::null_mut(), 1) }, Err(Error::UnsupportedDtype { .. })));
    }
}
