//! Deformable convolution (`torchvision::deform_conv2d`; with a mask, the modulated
//! form of J. Dai et al., "Deformable Convolutional Networks", ICCV 2017, and X. Zhu
//! et al., "Deformable ConvNets v2", CVPR 2019) and its backward
//! (`torchvision::_deform_conv2d_backward`), restated from torchvision's CPU kernel
//! so that oxide gives its results.
//!
//! Layouts (contiguous; the glue makes them so): input `(N, C, H, W)`; weight
//! `(O, C / groups, kh, kw)`; offset `(N, offset_groups * kh * kw * 2, Ho, Wo)`,
//! per offset group and tap (taps row-major over the kernel) a `(dy, dx)` pair of
//! planes; mask `(N, offset_groups * kh * kw, Ho, Wo)`; bias `(O)`; output
//! `(N, O, Ho, Wo)`. Input channel `c` belongs to offset group
//! `c / (C / offset_groups)` and to convolution group `c / (C / groups)`.
//!
//! Rules (torchvision's):
//! - extents: `Ho = (H + 2 * pad_h - (dilation_h * (kh - 1) + 1)) / stride_h + 1`
//!   with the division truncating toward zero (C++ integer division), so an input
//!   smaller than the dilated kernel can still have one output row; `Wo` likewise;
//! - tap `(i, j)` of output position `(oy, ox)` samples the input plane at
//!   `y = (oy * stride_h - pad_h + i * dilation_h) + dy`, `x` likewise, the integer
//!   part exact and the offset added in the compute type;
//! - the sample is bilinear: 0 when `y <= -1`, `y >= H`, `x <= -1` or `x >= W`,
//!   else the four pixels around `(floor(y), floor(x))` weighted by the distances,
//!   those outside the image reading 0; it is then multiplied by the mask value
//!   (no mask: 1);
//! - output `= bias + sum over the group's channels and taps of weight * sample`.
//!
//! Algorithm (torchvision's lowering, the im2col of a convolution with sampled
//! columns): a chunk of `nb` images is sampled into a column matrix
//! `(C * kh * kw, nb * Ho * Wo)`, row `(c, tap)`, column `(image, position)`; per
//! group, `W[g] @ columns[g]` is the output. The backward forms
//! `grad_columns[g] = W[g]^T @ grad_output[g]` and from it:
//! - grad_input: each grad-column entry times the mask, added onto the pixels its
//!   sample read, with the sampling weights (pixels within distance 1 of the sample
//!   in both directions, found around the sample truncated toward zero, as torchvision);
//! - grad_offset: per (image, offset group, tap, position), over the group's channels
//!   in order, the sum of mask * d(sample)/dy (resp. dx) * grad-column entry, where the
//!   derivative comes from the four pixels around the floor of the sample point with
//!   no range test (torchvision's `get_coordinate_weight`);
//! - grad_mask: likewise, the sum of grad-column entry * sample;
//! - grad_weight: the sum over chunks of `grad_output[g] @ columns[g]^T`;
//! - grad_bias: grad_output summed over images and positions (in float64).
//!
//! dtypes: torchvision's CPU kernel takes float32, float64 and float16 (it refuses
//! bfloat16; the glue refuses it as CPU does). float32 and float64 compute in
//! their own type; float16 and bfloat16 are widened to float32 and rounded once on
//! exit (CPU rounds float16 after every operation, so float16 results differ from
//! CPU's by its rounding).
//!
//! Parallelism and determinism: sampling splits column rows over tasks; grad_input
//! splits image planes, grad_offset/grad_mask split (image, offset group, tap) blocks,
//! so every output element is written by one task, its sum taken in an order fixed by
//! the shapes, with no racing accumulation (CPU's scatter order, taps then positions,
//! is kept per plane): the same call gives the same bits whatever the schedule (the
//! GEMMs, `crate::ops::linalg::gemm`, split output blocks, never a sum). The sampling
//! points of a chunk are computed once and shared by the channels of their offset group.

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_chunk_mut, tasks_for};
use crate::engine::scratch::{self, Plain};
use crate::engine::SendPtr;
use crate::error::{Error, Result};
use crate::ops::linalg::gemm::{gemm, GemmShape, Matrix};

const OP: &str = "deform_conv2d";
const OP_BACKWARD: &str = "_deform_conv2d_backward";

/// Columns (image positions) a chunk's GEMM should have at least: the weight is
/// packed once per product, so images with few positions share one (as in
/// `crate::ops::nn::conv`).
const TARGET_COLUMNS: usize = 2048;

/// Most elements of one chunk's column matrix (32 MiB of float32): batching images
/// never costs much more memory than one image's columns.
const COLUMNS_BUDGET: usize = 1 << 23;

/// Work of one sampled element relative to one element of a plain loop (four reads,
/// the weights, the bounds tests), for the task count.
const SAMPLE_COST: usize = 8;

/// One deformable convolution: extents and parameters (torchvision's schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeformConv2d {
    pub batch: usize,
    pub in_channels: usize,
    /// Input height and width.
    pub height: usize,
    pub width: usize,
    pub out_channels: usize,
    /// Kernel (height, width): the weight's last two extents.
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    /// Convolution groups (torchvision's `n_weight_grps`).
    pub groups: usize,
    pub offset_groups: usize,
    /// Output (height, width): the offset's (and mask's) last two extents.
    pub out: [usize; 2],
    /// Whether the mask is read (torchvision's `use_mask`); without it every mask value is 1.
    pub use_mask: bool,
}

/// Element counts of the operands of a [`DeformConv2d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lens {
    pub input: usize,
    pub weight: usize,
    pub offset: usize,
    /// The mask's (0 without `use_mask`).
    pub mask: usize,
    pub bias: usize,
    pub output: usize,
}

impl DeformConv2d {
    /// The output extents torchvision computes from the input, kernel, stride,
    /// padding and dilation (see the module documentation).
    ///
    /// Errors: [`Error::InvalidLayout`] for a kernel extent, stride or dilation of 0,
    /// or extents below 1 ("Calculated output size too small", torchvision's check).
    pub fn output_size(&self) -> Result<[usize; 2]> {
        let bad = |reason: String| Error::InvalidLayout { op: OP, reason };
        let [kh, kw] = self.kernel;
        if kh == 0 || kw == 0 {
            return Err(bad(format!("weight_h: {kh} weight_w: {kw}")));
        }
        if self.stride.contains(&0) {
            return Err(bad(format!("stride_h: {} stride_w: {}", self.stride[0], self.stride[1])));
        }
        if self.dilation.contains(&0) {
            return Err(bad(format!("dilation_h: {} dilation_w: {}", self.dilation[0], self.dilation[1])));
        }
        let extent = |d: usize, input: usize| -> i64 {
            let span = (self.dilation[d] * (self.kernel[d] - 1) + 1) as i64;
            // Rust's i64 division truncates toward zero, as C++'s does.
            (input as i64 + 2 * self.padding[d] as i64 - span) / self.stride[d] as i64 + 1
        };
        let (h, w) = (extent(0, self.height), extent(1, self.width));
        if h <= 0 || w <= 0 {
            return Err(bad(format!("Calculated output size too small - out_h: {h} out_w: {w}")));
        }
        Ok([h as usize, w as usize])
    }

    /// Checks the description: [`output_size`](Self::output_size) equals `out`,
    /// `groups` and `offset_groups` are at least 1 and divide the channels.
    ///
    /// Errors: [`Error::InvalidLayout`].
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Error::InvalidLayout { op: OP, reason };
        if self.groups == 0 || self.offset_groups == 0 {
            return Err(bad(format!("{} groups and {} offset groups", self.groups, self.offset_groups)));
        }
        if !self.in_channels.is_multiple_of(self.groups) || !self.out_channels.is_multiple_of(self.groups) {
            return Err(bad(format!(
                "{} groups for {} input and {} output channels",
                self.groups, self.in_channels, self.out_channels
            )));
        }
        if !self.in_channels.is_multiple_of(self.offset_groups) {
            return Err(bad(format!("{} offset groups for {} input channels", self.offset_groups, self.in_channels)));
        }
        let out = self.output_size()?;
        if out != self.out {
            return Err(bad(format!(
                "offset output dims: ({}, {}) - computed output dims: ({}, {})",
                self.out[0], self.out[1], out[0], out[1]
            )));
        }
        Ok(())
    }

    /// Element counts of the operands.
    pub fn lens(&self) -> Lens {
        let (k, l) = (self.taps(), self.positions());
        let blocks = self.batch * self.offset_groups * k * l;
        Lens {
            input: self.batch * self.in_channels * self.height * self.width,
            weight: self.out_channels * (self.in_channels / self.groups.max(1)) * k,
            offset: 2 * blocks,
            mask: if self.use_mask { blocks } else { 0 },
            bias: self.out_channels,
            output: self.batch * self.out_channels * l,
        }
    }

    fn taps(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    fn positions(&self) -> usize {
        self.out[0] * self.out[1]
    }

    /// Images per chunk: about [`TARGET_COLUMNS`] columns, within [`COLUMNS_BUDGET`], at least one.
    fn chunk(&self) -> usize {
        let (rows, l) = (self.in_channels * self.taps(), self.positions().max(1));
        TARGET_COLUMNS.div_ceil(l).min(COLUMNS_BUDGET / (rows * l).max(1)).clamp(1, self.batch.max(1))
    }
}

/// The compute types (float32, float64).
trait Real:
    Element
    + Plain
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    #[inline(always)]
    fn of<T: Element>(v: T) -> Self {
        Self::from_f64(v.to_f64())
    }
    #[inline(always)]
    fn store<T: Element>(self) -> T {
        T::from_f64(self.to_f64())
    }
    fn int(v: i64) -> Self;
    /// `floor` as an integer: saturating at the ends of i64, NaN giving 0 (an
    /// index the bounds tests accept or refuse like any other; the weights stay NaN).
    fn floor_i64(self) -> i64;
    /// Truncation toward zero (C's cast), saturating, NaN giving 0.
    fn trunc_i64(self) -> i64;
    fn abs(self) -> Self;
}
macro_rules! real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)] fn int(v: i64) -> Self { v as $t }
            #[inline(always)] fn floor_i64(self) -> i64 { <$t>::floor(self) as i64 }
            #[inline(always)] fn trunc_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn abs(self) -> Self { <$t>::abs(self) }
        }
    )*};
}
real!(f32, f64);

/// `len` elements of `T` at `p`; an empty slice for `len == 0` (the ABI may pass null
/// data for an operand without elements).
///
/// # Safety
/// For `len > 0`, `p` addresses `len` initialised elements of `T` that nothing writes
/// while the slice lives.
unsafe fn view<'a, T>(p: *const u8, len: usize) -> &'a [T] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const T, len) }
}

/// [`view`] for an operand the kernel writes.
///
/// # Safety
/// For `len > 0`, `p` addresses `len` elements of `T` that nothing else accesses while the slice lives.
unsafe fn view_mut<'a, T>(p: *mut u8, len: usize) -> &'a mut [T] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p as *mut T, len) }
}

/// Pixel `(r, c)` of an `h x w` plane, 0 outside it.
#[inline(always)]
fn pixel<T: Element, C: Real>(plane: &[T], h: usize, w: usize, r: i64, c: i64) -> C {
    if r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w {
        C::of(plane[r as usize * w + c as usize])
    } else {
        C::ZERO
    }
}

/// The bilinear sample of an `h x w` plane at `(y, x)` (rules in the module documentation).
#[inline]
fn bilinear<T: Element, C: Real>(plane: &[T], h: usize, w: usize, y: C, x: C) -> C {
    let one = C::ONE;
    let minus_one = C::ZERO - one;
    if y <= minus_one || C::int(h as i64) <= y || x <= minus_one || C::int(w as i64) <= x {
        return C::ZERO;
    }
    // Past the range test floor(y) is in [-1, h - 1] (0 for NaN): adding 1 cannot overflow.
    let (y0, x0) = (y.floor_i64(), x.floor_i64());
    let (ly, lx) = (y - C::int(y0), x - C::int(x0));
    let (hy, hx) = (one - ly, one - lx);
    let v = |r: i64, c: i64| pixel::<T, C>(plane, h, w, r, c);
    // torchvision's order of operations: the four weights first, then the sum left to right.
    let (w1, w2, w3, w4) = (hy * hx, hy * lx, ly * hx, ly * lx);
    w1 * v(y0, x0) + w2 * v(y0, x0 + 1) + w3 * v(y0 + 1, x0) + w4 * v(y0 + 1, x0 + 1)
}

/// Derivatives of the bilinear interpolation at `(y, x)` with respect to y and x,
/// from the four pixels around `(floor(y), floor(x))` (0 outside the plane), without
/// [`bilinear`]'s range test, as torchvision's offset gradient takes them.
#[inline]
fn bilinear_grad<T: Element, C: Real>(plane: &[T], h: usize, w: usize, y: C, x: C) -> (C, C) {
    let (y0, x0) = (y.floor_i64(), x.floor_i64());
    let (y1, x1) = (y0.saturating_add(1), x0.saturating_add(1));
    let v = |r: i64, c: i64| pixel::<T, C>(plane, h, w, r, c);
    let (a, b, c, e) = (v(y0, x0), v(y0, x1), v(y1, x0), v(y1, x1));
    let (fy, fx) = (y - C::int(y0), x - C::int(x0));
    let one = C::ONE;
    (fx * (e - b) + (one - fx) * (c - a), fy * (e - c) + (one - fy) * (b - a))
}

/// Adds `g` (a grad-column entry, times the mask `m`) onto the pixels of an `h x w`
/// plane the sample at `(y, x)` read, with the sampling weights: the pixels within
/// distance 1 in both directions among the 3 x 3 around the point truncated toward
/// zero (torchvision's search; for a point inside `(-1, h) x (-1, w)` these are the
/// bilinear neighbours, and a NaN point adds nothing).
#[inline]
fn scatter<C: Real>(acc: &mut [C], h: usize, w: usize, y: C, x: C, m: C, g: C) {
    let one = C::ONE;
    let (yt, xt) = (y.trunc_i64(), x.trunc_i64());
    for dy in -1..=1i64 {
        let yp = yt.saturating_add(dy);
        let ey = (y - C::int(yp)).abs();
        // Needs `ey < 1`, which a NaN distance fails.
        if yp < 0 || yp >= h as i64 || !matches!(ey.partial_cmp(&one), Some(std::cmp::Ordering::Less)) {
            continue;
        }
        for dx in -1..=1i64 {
            let xp = xt.saturating_add(dx);
            let ex = (x - C::int(xp)).abs();
            if xp >= 0 && xp < w as i64 && ex < one {
                let at = yp as usize * w + xp as usize;
                acc[at] = acc[at] + m * ((one - ey) * (one - ex)) * g;
            }
        }
    }
}

/// The operands sampling reads, with the description's derived extents.
struct Sampler<'a, T> {
    d: &'a DeformConv2d,
    input: &'a [T],
    offset: &'a [T],
    mask: Option<&'a [T]>,
    /// Taps, output positions, input plane size, channels per offset group.
    taps: usize,
    l: usize,
    hw: usize,
    per_offset_group: usize,
}

impl<'a, T: Element> Sampler<'a, T> {
    fn new(d: &'a DeformConv2d, input: &'a [T], offset: &'a [T], mask: Option<&'a [T]>) -> Self {
        Sampler {
            d,
            input,
            offset,
            mask,
            taps: d.taps(),
            l: d.positions(),
            hw: d.height * d.width,
            per_offset_group: d.in_channels / d.offset_groups,
        }
    }

    /// Input plane `(n, c)`.
    fn plane(&self, n: usize, c: usize) -> &'a [T] {
        let at = (n * self.d.in_channels + c) * self.hw;
        &self.input[at..at + self.hw]
    }

    /// The sampling points of images `n0 .. n0 + nb`: per (image, offset group, tap,
    /// position), in that order, the point `[y, x]` and the mask value.
    fn points<C: Real>(&self, n0: usize, nb: usize, threads: usize) -> Vec<[C; 3]> {
        let (d, k, l) = (self.d, self.taps, self.l);
        let mut pts = vec![[C::ZERO; 3]; nb * d.offset_groups * k * l];
        let rows = nb * d.offset_groups * k;
        for_each_chunk_mut(&mut pts, l, tasks_for(rows, l * 4, threads), |r, row| {
            // Row r is (image n0 + r / (offset_groups * k), offset group and tap r % (offset_groups * k)):
            // blocks of the offset and mask are laid out the same way from image n0 on.
            let tap = r % k;
            let (i, j) = ((tap / d.kernel[1]) as i64, (tap % d.kernel[1]) as i64);
            let block = n0 * d.offset_groups * k + r;
            let dys = &self.offset[2 * block * l..][..l];
            let dxs = &self.offset[(2 * block + 1) * l..][..l];
            let ms = self.mask.map(|m| &m[block * l..][..l]);
            for oy in 0..d.out[0] {
                // The integer part as torchvision forms it: exact, then the offset added in the compute type.
                let by = (oy * d.stride[0]) as i64 - d.padding[0] as i64 + i * d.dilation[0] as i64;
                for ox in 0..d.out[1] {
                    let bx = (ox * d.stride[1]) as i64 - d.padding[1] as i64 + j * d.dilation[1] as i64;
                    let p = oy * d.out[1] + ox;
                    let m = ms.map_or(C::ONE, |ms| C::of(ms[p]));
                    row[p] = [C::int(by) + C::of(dys[p]), C::int(bx) + C::of(dxs[p]), m];
                }
            }
        });
        pts
    }

    /// The points of (chunk image `nl`, offset group of channel `c`, `tap`): one row of `points`.
    fn row<'p, C>(&self, pts: &'p [[C; 3]], nl: usize, c: usize, tap: usize) -> &'p [[C; 3]] {
        let og = c / self.per_offset_group;
        &pts[((nl * self.d.offset_groups + og) * self.taps + tap) * self.l..][..self.l]
    }

    /// The column matrix of images `n0 .. n0 + nb` into `cols` `(C * taps, nb * l)`.
    fn im2col<C: Real>(&self, n0: usize, nb: usize, pts: &[[C; 3]], cols: &mut [C], threads: usize) {
        let (k, l, width) = (self.taps, self.l, nb * self.l);
        let (h, w) = (self.d.height, self.d.width);
        let rows = self.d.in_channels * k;
        for_each_chunk_mut(cols, width, tasks_for(rows, width * SAMPLE_COST, threads), |r, row| {
            let (c, tap) = (r / k, r % k);
            for nl in 0..nb {
                let plane = self.plane(n0 + nl, c);
                let out = &mut row[nl * l..(nl + 1) * l];
                for (o, &[y, x, m]) in out.iter_mut().zip(self.row(pts, nl, c, tap)) {
                    *o = m * bilinear::<T, C>(plane, h, w, y, x);
                }
            }
        });
    }
}

/// `c[g] = a[g] @ b[g]` (`accumulate`: `c[g] += a[g] @ b[g]`) for every group `g`, each
/// operand a buffer with (group, row, column) element strides; `[m, n, k]` the extents.
///
/// Panics if a stride addresses past its buffer (a bug of this file's callers).
fn product<C: Real>(
    groups: usize,
    [m, n, k]: [usize; 3],
    (a, sa): (&[C], [usize; 3]),
    (b, sb): (&[C], [usize; 3]),
    accumulate: bool,
    (c, sc): (&mut [C], [usize; 3]),
) -> Result<()> {
    if groups == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // No inner dimension: the product is 0 (left to GEMM, an empty product is not written).
        if !accumulate {
            c.fill(C::ZERO);
        }
        return Ok(());
    }
    let last = |s: [usize; 3], rows: usize, cols: usize| (groups - 1) * s[0] + (rows - 1) * s[1] + (cols - 1) * s[2];
    assert!(last(sa, m, k) < a.len() && last(sb, k, n) < b.len() && last(sc, m, n) < c.len());
    let mat = |p: *const C, s: [usize; 3]| Matrix {
        ptr: p as *mut u8,
        batch_stride: s[0] as isize,
        row_stride: s[1] as isize,
        col_stride: s[2] as isize,
    };
    // SAFETY: the assertion keeps every addressed element inside its buffer; `c` is
    // borrowed mutably, so it overlaps neither `a` nor `b`, and distinct (group, row,
    // column) triples of `c` are distinct elements for the strides the callers pass.
    unsafe {
        gemm(
            C::DTYPE,
            GemmShape { batch: groups, m, n, k },
            1.0,
            mat(a.as_ptr(), sa),
            mat(b.as_ptr(), sb),
            if accumulate { 1.0 } else { 0.0 },
            mat(c.as_mut_ptr(), sc),
        )
    }
}

/// The kernel's shapes of one group's products: `og` output channels, `ck` column
/// rows (input channels times taps) per group.
fn group_shape(d: &DeformConv2d) -> (usize, usize) {
    (d.out_channels / d.groups, d.in_channels / d.groups * d.taps())
}

// Raw operands of one call, as the public entry points take them.
#[allow(clippy::too_many_arguments)]
unsafe fn forward<T: Element, C: Real>(
    d: &DeformConv2d,
    input: *const u8,
    weight: *const u8,
    offset: *const u8,
    mask: Option<*const u8>,
    bias: Option<*const u8>,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    let lens = d.lens();
    // SAFETY: `deform_conv2d`'s contract on the buffers and their sizes.
    let (x, w, off, mk, b, y) = unsafe {
        (
            view::<T>(input, lens.input),
            view::<T>(weight, lens.weight),
            view::<T>(offset, lens.offset),
            mask.map(|p| view::<T>(p, lens.mask)),
            bias.map(|p| view::<T>(p, lens.bias)),
            view_mut::<T>(output, lens.output),
        )
    };
    if d.batch == 0 || y.is_empty() {
        return Ok(());
    }
    let wc: Vec<C> = w.iter().map(|&v| C::of(v)).collect();
    let bc: Option<Vec<C>> = b.map(|b| b.iter().map(|&v| C::of(v)).collect());
    let s = Sampler::new(d, x, off, mk);
    let (o, l, rows) = (d.out_channels, s.l, d.in_channels * s.taps);
    let (og, ck) = group_shape(d);
    let chunk = d.chunk();
    scratch::with::<C, _>(rows * chunk * l, |cols_all| {
        scratch::with::<C, _>(o * chunk * l, |prod_all| {
            for n0 in (0..d.batch).step_by(chunk) {
                let nb = chunk.min(d.batch - n0);
                let width = nb * l;
                let (cols, prod) = (&mut cols_all[..rows * width], &mut prod_all[..o * width]);
                let pts = s.points::<C>(n0, nb, threads);
                s.im2col(n0, nb, &pts, cols, threads);
                // prod[g] (og x nb*l) = W[g] (og x ck) @ cols[g] (ck x nb*l).
                product(
                    d.groups,
                    [og, width, ck],
                    (&wc, [og * ck, ck, 1]),
                    (cols, [ck * width, width, 1]),
                    false,
                    (prod, [og * width, width, 1]),
                )?;
                // The product's column (image, position) back to the output's (image, channel, position), plus bias.
                let part = &mut y[n0 * o * l..(n0 + nb) * o * l];
                let prod = &*prod;
                for_each_chunk_mut(part, l, tasks_for(nb * o, l, threads), |r, row| {
                    let (nl, ch) = (r / o, r % o);
                    let src = &prod[ch * width + nl * l..][..l];
                    match &bc {
                        Some(bc) => row.iter_mut().zip(src).for_each(|(v, &p)| *v = (p + bc[ch]).store()),
                        None => row.iter_mut().zip(src).for_each(|(v, &p)| *v = p.store()),
                    }
                });
            }
            Ok(())
        })
    })
}

/// The output of deformable convolution `d` (layouts and rules in the module
/// documentation): `output = bias + deform_conv(input, offset, mask; weight)`, every
/// operand contiguous and of `dtype`. `mask` is read only with `d.use_mask` (then
/// required, else it must be None); `bias` None: no bias. `threads`: the most threads
/// to use. Every output element is written.
///
/// Errors: [`Error::UnsupportedDtype`] unless float32/64, float16, bfloat16;
/// [`Error::InvalidLayout`] for a description [`DeformConv2d::validate`] refuses or
/// a mask given against `use_mask` (nothing is written).
///
/// # Safety
/// Each pointer addresses the contiguous elements of its operand ([`DeformConv2d::lens`];
/// null allowed for none); the output overlaps no operand.
// One raw pointer per torchvision operand.
#[allow(clippy::too_many_arguments)]
pub unsafe fn deform_conv2d(
    dtype: DType,
    d: &DeformConv2d,
    input: *const u8,
    weight: *const u8,
    offset: *const u8,
    mask: Option<*const u8>,
    bias: Option<*const u8>,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    check(OP, d, mask.is_some())?;
    // SAFETY: forwarded contract.
    crate::with_float_dtype!(dtype, OP, |T, C| unsafe {
        forward::<T, C>(d, input, weight, offset, mask, bias, output, threads)
    })
}

/// Validates `d` and that a mask is given exactly when `d.use_mask`.
fn check(op: &'static str, d: &DeformConv2d, has_mask: bool) -> Result<()> {
    d.validate()?;
    if has_mask != d.use_mask {
        return Err(Error::InvalidLayout {
            op,
            reason: format!(
                "{op}: use_mask is {} but a mask is {}",
                d.use_mask,
                if has_mask { "given" } else { "absent" }
            ),
        });
    }
    Ok(())
}

/// The gradients [`deform_conv2d_backward`] writes, each overwritten whole:
/// `input`, `weight`, `offset` (the shapes of those operands), `mask` (the mask's
/// shape; present exactly with `use_mask`) and `bias` (`(O)`; None: not computed).
#[derive(Debug, Clone, Copy)]
pub struct DeformGrads {
    pub input: *mut u8,
    pub weight: *mut u8,
    pub offset: *mut u8,
    pub mask: Option<*mut u8>,
    pub bias: Option<*mut u8>,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for DeformGrads {}

/// Sums of a chunk's grad-columns against the input for grad_offset and grad_mask:
/// one task per (chunk image, offset group, tap) block, which owns that block's
/// `2 * l` offset-gradient and `l` mask-gradient elements.
// The chunk, its points and grad-columns, and the two outputs.
#[allow(clippy::too_many_arguments)]
fn offset_mask_grads<T: Element, C: Real>(
    s: &Sampler<T>,
    n0: usize,
    nb: usize,
    pts: &[[C; 3]],
    gcols: &[C],
    goff: &mut [T],
    gmask: Option<SendPtr<T>>,
    threads: usize,
) {
    let (d, k, l, width) = (s.d, s.taps, s.l, nb * s.l);
    let (h, w, per) = (d.height, d.width, s.per_offset_group);
    let units = nb * d.offset_groups * k;
    let work = per * l * SAMPLE_COST * if d.use_mask { 2 } else { 1 };
    for_each_chunk_mut(goff, 2 * l, tasks_for(units, work, threads), |u, go| {
        let (nl, og, tap) = (u / (d.offset_groups * k), u / k % d.offset_groups, u % k);
        let row = &pts[u * l..(u + 1) * l];
        scratch::with::<C, _>(3 * l, |acc| {
            acc.fill(C::ZERO);
            let (ay, rest) = acc.split_at_mut(l);
            let (ax, am) = rest.split_at_mut(l);
            // Channel by channel (the group's channels in order, as torchvision sums them),
            // each channel's grad-columns read along their row.
            for c in og * per..(og + 1) * per {
                let plane = s.plane(n0 + nl, c);
                let g = &gcols[(c * k + tap) * width + nl * l..][..l];
                for p in 0..l {
                    let [y, x, m] = row[p];
                    let (wy, wx) = bilinear_grad::<T, C>(plane, h, w, y, x);
                    ay[p] = ay[p] + m * wy * g[p];
                    ax[p] = ax[p] + m * wx * g[p];
                    if d.use_mask {
                        am[p] = am[p] + g[p] * bilinear::<T, C>(plane, h, w, y, x);
                    }
                }
            }
            for p in 0..l {
                go[p] = ay[p].store();
                go[l + p] = ax[p].store();
            }
            if let Some(gm) = gmask {
                for (p, v) in am.iter().enumerate() {
                    // SAFETY: `gm` addresses the chunk's mask gradient (`units * l` elements); unit u
                    // owns elements u * l .. (u + 1) * l, written by this task alone.
                    unsafe { *gm.get().add(u * l + p) = v.store() };
                }
            }
        });
    });
}

/// A chunk's grad_input: one task per input plane, adding every grad-column entry
/// sampled from it, taps then positions in order.
fn input_grads<T: Element, C: Real>(
    s: &Sampler<T>,
    nb: usize,
    pts: &[[C; 3]],
    gcols: &[C],
    gin: &mut [T],
    threads: usize,
) {
    let (d, k, l, width) = (s.d, s.taps, s.l, nb * s.l);
    let (h, w, cin) = (d.height, d.width, d.in_channels);
    for_each_chunk_mut(gin, s.hw, tasks_for(nb * cin, k * l * SAMPLE_COST, threads), |q, out| {
        let (nl, c) = (q / cin, q % cin);
        scratch::with::<C, _>(s.hw, |acc| {
            acc.fill(C::ZERO);
            for tap in 0..k {
                let g = &gcols[(c * k + tap) * width + nl * l..][..l];
                for (&[y, x, m], &gv) in s.row(pts, nl, c, tap).iter().zip(g) {
                    scatter(acc, h, w, y, x, m, gv);
                }
            }
            out.iter_mut().zip(acc.iter()).for_each(|(o, &v)| *o = v.store());
        });
    });
}

// Raw operands of one call, as the public entry point takes them.
#[allow(clippy::too_many_arguments)]
unsafe fn backward<T: Element, C: Real>(
    d: &DeformConv2d,
    grad_output: *const u8,
    input: *const u8,
    weight: *const u8,
    offset: *const u8,
    mask: Option<*const u8>,
    grads: DeformGrads,
    threads: usize,
) -> Result<()> {
    let lens = d.lens();
    // SAFETY: `deform_conv2d_backward`'s contract on the buffers and their sizes.
    let (gy, x, w, off, mk) = unsafe {
        (
            view::<T>(grad_output, lens.output),
            view::<T>(input, lens.input),
            view::<T>(weight, lens.weight),
            view::<T>(offset, lens.offset),
            mask.map(|p| view::<T>(p, lens.mask)),
        )
    };
    // SAFETY: as above; the gradients overlap no operand and each other.
    let (gin, gw, goff) = unsafe {
        (
            view_mut::<T>(grads.input, lens.input),
            view_mut::<T>(grads.weight, lens.weight),
            view_mut::<T>(grads.offset, lens.offset),
        )
    };
    let (o, l) = (d.out_channels, d.positions());
    if let Some(gb) = grads.bias {
        // SAFETY: as above.
        let gb = unsafe { view_mut::<T>(gb, lens.bias) };
        // Each channel summed over images, then positions, in float64.
        for_each_chunk_mut(gb, 1, tasks_for(o, d.batch * l, threads), |ch, v| {
            let mut sum = 0.0f64;
            for n in 0..d.batch {
                sum += gy[(n * o + ch) * l..][..l].iter().map(|v| v.to_f64()).sum::<f64>();
            }
            v[0] = T::from_f64(sum);
        });
    }
    let s = Sampler::new(d, x, off, mk);
    let wc: Vec<C> = w.iter().map(|&v| C::of(v)).collect();
    let mut gwc = vec![C::ZERO; lens.weight];
    let (og, ck) = group_shape(d);
    let (k, rows, chunk) = (s.taps, d.in_channels * s.taps, d.chunk());
    let blocks = d.offset_groups * k * l;
    let gmask = grads.mask.map(|p| SendPtr::new(p as *mut T));
    scratch::with::<C, _>(rows * chunk * l, |cols_all| {
        scratch::with::<C, _>(o * chunk * l, |gyc_all| {
            for n0 in (0..d.batch).step_by(chunk) {
                let nb = chunk.min(d.batch - n0);
                let width = nb * l;
                let (cols, gyc) = (&mut cols_all[..rows * width], &mut gyc_all[..o * width]);
                // grad_output of the chunk as (O, nb * l), the columns' layout.
                let src = &gy[n0 * o * l..(n0 + nb) * o * l];
                for_each_chunk_mut(gyc, width, tasks_for(o, width, threads), |ch, row| {
                    for nl in 0..nb {
                        let from = &src[(nl * o + ch) * l..][..l];
                        row[nl * l..(nl + 1) * l].iter_mut().zip(from).for_each(|(r, &v)| *r = C::of(v));
                    }
                });
                let pts = s.points::<C>(n0, nb, threads);
                s.im2col(n0, nb, &pts, cols, threads);
                // grad_weight[g] (og x ck) += grad_out[g] (og x nb*l) @ cols[g]^T (nb*l x ck).
                product(
                    d.groups,
                    [og, ck, width],
                    (gyc, [og * width, width, 1]),
                    (cols, [ck * width, 1, width]),
                    n0 > 0,
                    (&mut gwc, [og * ck, ck, 1]),
                )?;
                // The columns' buffer now takes grad_cols[g] (ck x nb*l) = W[g]^T (ck x og) @ grad_out[g].
                product(
                    d.groups,
                    [ck, width, og],
                    (&wc, [og * ck, 1, ck]),
                    (gyc, [og * width, width, 1]),
                    false,
                    (cols, [ck * width, width, 1]),
                )?;
                let gm = gmask.map(|p| SendPtr::new(p.get().wrapping_add(n0 * blocks)));
                let goff_chunk = &mut goff[2 * n0 * blocks..2 * (n0 + nb) * blocks];
                offset_mask_grads(&s, n0, nb, &pts, cols, goff_chunk, gm, threads);
                let hw = s.hw * d.in_channels;
                input_grads(&s, nb, &pts, cols, &mut gin[n0 * hw..(n0 + nb) * hw], threads);
            }
            Ok::<(), Error>(())
        })
    })?;
    gw.iter_mut().zip(&gwc).for_each(|(g, &v)| *g = v.store());
    Ok(())
}

/// Gradients of [`deform_conv2d`] from `grad_output` (the output's shape) into
/// `grads` (see [`DeformGrads`]), every operand contiguous and of `dtype`; `mask`
/// as for [`deform_conv2d`]. Deterministic (see the module documentation).
///
/// Errors: as [`deform_conv2d`], and [`Error::InvalidLayout`] when the mask
/// gradient's presence differs from `use_mask` (nothing is written).
///
/// # Safety
/// As [`deform_conv2d`]; the gradients overlap no operand and each other.
// One raw pointer per torchvision operand.
#[allow(clippy::too_many_arguments)]
pub unsafe fn deform_conv2d_backward(
    dtype: DType,
    d: &DeformConv2d,
    grad_output: *const u8,
    input: *const u8,
    weight: *const u8,
    offset: *const u8,
    mask: Option<*const u8>,
    grads: DeformGrads,
    threads: usize,
) -> Result<()> {
    check(OP_BACKWARD, d, mask.is_some())?;
    check(OP_BACKWARD, d, grads.mask.is_some())?;
    // SAFETY: forwarded contract.
    crate::with_float_dtype!(dtype, OP_BACKWARD, |T, C| unsafe {
        backward::<T, C>(d, grad_output, input, weight, offset, mask, grads, threads)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: u64) -> Vec<f64> {
        (0..n).map(|k| (((k as u64 + 1) * 2654435761 + seed * 7919) % 2001) as f64 / 1000.0 - 1.0).collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn desc(
        batch: usize,
        cin: usize,
        hw: [usize; 2],
        cout: usize,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
        offset_groups: usize,
        use_mask: bool,
    ) -> DeformConv2d {
        let mut d = DeformConv2d {
            batch,
            in_channels: cin,
            height: hw[0],
            width: hw[1],
            out_channels: cout,
            kernel,
            stride,
            padding,
            dilation,
            groups,
            offset_groups,
            out: [0, 0],
            use_mask,
        };
        d.out = d.output_size().unwrap();
        d
    }

    /// Operands of one call, float64.
    #[derive(Clone)]
    struct Case {
        d: DeformConv2d,
        x: Vec<f64>,
        w: Vec<f64>,
        off: Vec<f64>,
        mask: Vec<f64>,
        bias: Vec<f64>,
    }

    impl Case {
        /// Random operands; offsets of `scale` (their fractional parts kept away from
        /// integers, where the interpolation is not differentiable).
        fn new(d: DeformConv2d, scale: f64) -> Case {
            let lens = d.lens();
            let off = vals(lens.offset, 3)
                .iter()
                .map(|v| {
                    let t = v * scale;
                    let f = t - t.floor();
                    t.floor() + 0.1 + 0.8 * f
                })
                .collect();
            let mask = vals(lens.mask, 4).iter().map(|v| 0.5 + 0.5 * v).collect();
            Case { d, x: vals(lens.input, 1), w: vals(lens.weight, 2), off, mask, bias: vals(lens.bias, 5) }
        }

        fn mask_ptr(&self) -> Option<*const u8> {
            self.d.use_mask.then_some(self.mask.as_ptr() as *const u8)
        }

        fn forward(&self, threads: usize) -> Vec<f64> {
            let mut y = vec![0.0; self.d.lens().output];
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                deform_conv2d(
                    DType::F64,
                    &self.d,
                    self.x.as_ptr() as *const u8,
                    self.w.as_ptr() as *const u8,
                    self.off.as_ptr() as *const u8,
                    self.mask_ptr(),
                    Some(self.bias.as_ptr() as *const u8),
                    y.as_mut_ptr() as *mut u8,
                    threads,
                )
            }
            .unwrap();
            y
        }

        /// (grad_input, grad_weight, grad_offset, grad_mask, grad_bias).
        fn backward(&self, go: &[f64], threads: usize) -> [Vec<f64>; 5] {
            let lens = self.d.lens();
            let mut g = [
                vec![f64::NAN; lens.input],
                vec![f64::NAN; lens.weight],
                vec![f64::NAN; lens.offset],
                vec![f64::NAN; lens.mask],
                vec![f64::NAN; lens.bias],
            ];
            let [gi, gw, goff, gm, gb] = &mut g;
            let grads = DeformGrads {
                input: gi.as_mut_ptr() as *mut u8,
                weight: gw.as_mut_ptr() as *mut u8,
                offset: goff.as_mut_ptr() as *mut u8,
                mask: self.d.use_mask.then_some(gm.as_mut_ptr() as *mut u8),
                bias: Some(gb.as_mut_ptr() as *mut u8),
            };
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                deform_conv2d_backward(
                    DType::F64,
                    &self.d,
                    go.as_ptr() as *const u8,
                    self.x.as_ptr() as *const u8,
                    self.w.as_ptr() as *const u8,
                    self.off.as_ptr() as *const u8,
                    self.mask_ptr(),
                    grads,
                    threads,
                )
            }
            .unwrap();
            g
        }

        /// Direct definition: every output element summed from its samples.
        fn reference(&self) -> Vec<f64> {
            let d = &self.d;
            let (k, l) = (d.taps(), d.positions());
            let (cg, og) = (d.in_channels / d.groups, d.out_channels / d.groups);
            let per = d.in_channels / d.offset_groups;
            let sample = |n: usize, c: usize, y: f64, x: f64| -> f64 {
                if y <= -1.0 || y >= d.height as f64 || x <= -1.0 || x >= d.width as f64 {
                    return 0.0;
                }
                let (y0, x0) = (y.floor(), x.floor());
                let mut v = 0.0;
                for (py, wy) in [(y0, 1.0 - (y - y0)), (y0 + 1.0, y - y0)] {
                    for (px, wx) in [(x0, 1.0 - (x - x0)), (x0 + 1.0, x - x0)] {
                        if py >= 0.0 && px >= 0.0 && py < d.height as f64 && px < d.width as f64 {
                            let at = ((n * d.in_channels + c) * d.height + py as usize) * d.width + px as usize;
                            v += wy * wx * self.x[at];
                        }
                    }
                }
                v
            };
            let mut y = vec![0.0; d.lens().output];
            for n in 0..d.batch {
                for oc in 0..d.out_channels {
                    let g = oc / og;
                    for oy in 0..d.out[0] {
                        for ox in 0..d.out[1] {
                            let p = oy * d.out[1] + ox;
                            let mut acc = self.bias[oc];
                            for ci in 0..cg {
                                let c = g * cg + ci;
                                let ogrp = c / per;
                                for i in 0..d.kernel[0] {
                                    for j in 0..d.kernel[1] {
                                        let tap = i * d.kernel[1] + j;
                                        let blk = (n * d.offset_groups + ogrp) * k + tap;
                                        let dy = self.off[2 * blk * l + p];
                                        let dx = self.off[(2 * blk + 1) * l + p];
                                        let m = if d.use_mask { self.mask[blk * l + p] } else { 1.0 };
                                        let sy =
                                            (oy * d.stride[0] + i * d.dilation[0]) as f64 - d.padding[0] as f64 + dy;
                                        let sx =
                                            (ox * d.stride[1] + j * d.dilation[1]) as f64 - d.padding[1] as f64 + dx;
                                        let wv = self.w[((oc * cg + ci) * d.kernel[0] + i) * d.kernel[1] + j];
                                        acc += wv * m * sample(n, c, sy, sx);
                                    }
                                }
                            }
                            y[(n * d.out_channels + oc) * l + p] = acc;
                        }
                    }
                }
            }
            y
        }
    }

    /// A plain grouped convolution (zero padding), naive loops.
    fn plain_conv(c: &Case) -> Vec<f64> {
        let d = &c.d;
        let (cg, og) = (d.in_channels / d.groups, d.out_channels / d.groups);
        let mut y = vec![0.0; d.lens().output];
        for n in 0..d.batch {
            for oc in 0..d.out_channels {
                for oy in 0..d.out[0] {
                    for ox in 0..d.out[1] {
                        let mut acc = c.bias[oc];
                        for ci in 0..cg {
                            let ch = oc / og * cg + ci;
                            for i in 0..d.kernel[0] {
                                for j in 0..d.kernel[1] {
                                    let iy = (oy * d.stride[0] + i * d.dilation[0]) as i64 - d.padding[0] as i64;
                                    let ix = (ox * d.stride[1] + j * d.dilation[1]) as i64 - d.padding[1] as i64;
                                    if iy < 0 || ix < 0 || iy >= d.height as i64 || ix >= d.width as i64 {
                                        continue;
                                    }
                                    let xv = c.x
                                        [((n * d.in_channels + ch) * d.height + iy as usize) * d.width + ix as usize];
                                    acc += c.w[((oc * cg + ci) * d.kernel[0] + i) * d.kernel[1] + j] * xv;
                                }
                            }
                        }
                        y[((n * d.out_channels + oc) * d.out[0] + oy) * d.out[1] + ox] = acc;
                    }
                }
            }
        }
        y
    }

    fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
        assert_eq!(a.len(), b.len(), "{what}");
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{what}[{k}]: {x} vs {y}");
        }
    }

    #[test]
    fn output_size_rules() {
        let d = desc(1, 2, [4, 5], 3, [3, 3], [1, 1], [0, 0], [1, 1], 1, 1, false);
        assert_eq!(d.out, [2, 3]);
        // Input smaller than the kernel: (1 - 3) / 3 truncates to 0, so one output row (torchvision).
        let d = desc(1, 2, [1, 1], 3, [3, 3], [3, 3], [0, 0], [1, 1], 1, 1, false);
        assert_eq!(d.out, [1, 1]);
        let mut bad = d;
        bad.stride = [1, 1];
        assert!(bad.output_size().is_err(), "(1 - 3) / 1 + 1 = -1");
        bad = d;
        bad.out = [2, 1];
        assert!(bad.validate().is_err());
        bad = d;
        bad.groups = 2;
        bad.in_channels = 3;
        assert!(bad.validate().is_err());
        bad = d;
        bad.offset_groups = 0;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn zero_offsets_and_unit_mask_give_a_plain_convolution() {
        for (use_mask, groups, og) in [(true, 1, 1), (false, 2, 1), (true, 2, 2), (false, 1, 4)] {
            let d = desc(3, 4, [6, 7], 6, [3, 2], [2, 1], [1, 2], [1, 2], groups, og, use_mask);
            let mut c = Case::new(d, 0.0);
            c.off.iter_mut().for_each(|v| *v = 0.0);
            c.mask.iter_mut().for_each(|v| *v = 1.0);
            close(&c.forward(3), &plain_conv(&c), 1e-12, "plain");
        }
    }

    #[test]
    fn forward_matches_the_definition() {
        for (use_mask, groups, og) in [(true, 1, 1), (true, 2, 2), (false, 2, 1), (true, 1, 2)] {
            let d = desc(2, 4, [5, 6], 4, [3, 3], [1, 2], [1, 1], [1, 1], groups, og, use_mask);
            // Offsets up to +-3 pixels: many samples leave the image.
            let c = Case::new(d, 3.0);
            close(&c.forward(2), &c.reference(), 1e-12, "reference");
        }
        // Several chunks (1024 positions: two images per chunk) and an input smaller than the kernel.
        let c = Case::new(desc(3, 2, [34, 34], 3, [3, 3], [1, 1], [0, 0], [1, 1], 1, 2, true), 2.0);
        assert_eq!(c.d.chunk(), 2);
        close(&c.forward(4), &c.reference(), 1e-12, "chunks");
        let c = Case::new(desc(2, 2, [1, 2], 2, [3, 3], [3, 3], [0, 0], [1, 1], 1, 1, true), 1.5);
        close(&c.forward(1), &c.reference(), 1e-12, "small input");
    }

    #[test]
    fn gradients_match_finite_differences() {
        for (use_mask, groups, og, batch) in [(true, 2, 2, 2), (false, 1, 1, 1), (true, 1, 2, 3)] {
            let d = desc(batch, 4, [5, 4], 4, [2, 3], [1, 1], [1, 1], [2, 1], groups, og, use_mask);
            let c = Case::new(d, 2.0);
            let lens = d.lens();
            let go = vals(lens.output, 6);
            let [gi, gw, goff, gm, gb] = c.backward(&go, 3);
            let dot = |c: &Case| c.forward(1).iter().zip(&go).map(|(a, b)| a * b).sum::<f64>();
            let base = dot(&c);
            // Linear in input, weight, mask and bias: a unit step gives the gradient exactly.
            let exact = |field: fn(&mut Case) -> &mut Vec<f64>, grad: &[f64], what: &str| {
                for (k, &g) in grad.iter().enumerate() {
                    let mut c2 = c.clone();
                    field(&mut c2)[k] += 1.0;
                    let fd = dot(&c2) - base;
                    assert!((fd - g).abs() < 1e-9 * (1.0 + fd.abs()), "{what}[{k}]: {g} vs {fd}");
                }
            };
            exact(|c| &mut c.x, &gi, "input");
            exact(|c| &mut c.w, &gw, "weight");
            exact(|c| &mut c.bias, &gb, "bias");
            if use_mask {
                exact(|c| &mut c.mask, &gm, "mask");
            }
            let h = 1e-6;
            for (k, &g) in goff.iter().enumerate() {
                let mut c2 = c.clone();
                c2.off[k] += h;
                let fd = (dot(&c2) - base) / h;
                assert!((fd - g).abs() < 1e-5 * (1.0 + fd.abs()), "offset[{k}]: {g} vs {fd}");
            }
        }
    }

    #[test]
    fn backward_is_deterministic_and_overwrites() {
        let d = desc(3, 4, [34, 34], 4, [3, 3], [1, 1], [1, 1], [1, 1], 2, 2, true);
        let c = Case::new(d, 3.0);
        let go = vals(d.lens().output, 7);
        let a = c.backward(&go, 4);
        let b = c.backward(&go, 4);
        for (x, y) in a.iter().zip(&b) {
            assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
            assert!(x.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn empty_extents() {
        // No batch: nothing to write, grad_weight zero; no input channels: output = bias.
        let c = Case::new(desc(0, 2, [4, 4], 2, [3, 3], [1, 1], [1, 1], [1, 1], 1, 1, true), 1.0);
        assert!(c.forward(2).is_empty());
        let [_, gw, _, _, gb] = c.backward(&[], 2);
        assert!(gw.iter().chain(&gb).all(|&v| v == 0.0));
        let c = Case::new(desc(2, 0, [3, 3], 2, [1, 1], [1, 1], [0, 0], [1, 1], 1, 1, false), 1.0);
        let y = c.forward(2);
        let want: Vec<f64> = (0..2).flat_map(|_| (0..2).flat_map(|o| [c.bias[o]; 9])).collect();
        assert_eq!(y, want);
        let [_, _, goff, _, _] = c.backward(&vals(c.d.lens().output, 1), 2);
        assert!(goff.iter().all(|&v| v == 0.0));
        // No output channels: every gradient but the (empty) weight's is zero.
        let c = Case::new(desc(2, 2, [3, 3], 0, [2, 2], [1, 1], [0, 0], [1, 1], 1, 1, true), 1.0);
        let [gi, _, goff, gm, _] = c.backward(&[], 2);
        assert!(gi.iter().chain(&goff).chain(&gm).all(|&v| v == 0.0));
    }

    #[test]
    fn non_finite_and_huge_offsets_stay_in_bounds() {
        // NaN, infinities and points far outside: no fault, no overflow; NaN points give NaN
        // outputs (as CPU's NaN weights do), points outside the image give 0.
        let d = desc(1, 2, [4, 4], 1, [1, 1], [1, 1], [0, 0], [1, 1], 1, 1, false);
        let mut c = Case::new(d, 0.0);
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30, -1e30, 0.25];
        c.off.iter_mut().enumerate().for_each(|(k, v)| *v = special[k % special.len()]);
        let y = c.forward(2);
        let go = vals(d.lens().output, 8);
        let _ = c.backward(&go, 2);
        c.off.iter_mut().for_each(|v| *v = 1e30);
        let y2 = c.forward(2);
        assert!(y2.iter().all(|&v| v == c.bias[0]));
        c.off.iter_mut().for_each(|v| *v = f64::NAN);
        assert!(c.forward(2).iter().all(|v| v.is_nan()));
        let [gi, _, _, _, _] = c.backward(&go, 2);
        assert!(gi.iter().all(|&v| v == 0.0), "a NaN point scatters nothing");
        assert_eq!(y.len(), 16);
    }

    #[test]
    fn half_types_and_refusals() {
        let d = desc(2, 2, [5, 5], 3, [3, 3], [1, 1], [1, 1], [1, 1], 1, 1, true);
        let c = Case::new(d, 2.0);
        let want = c.forward(1);
        fn conv<H: Element>(v: &[f64]) -> Vec<H> {
            v.iter().map(|&x| H::from_f64(x)).collect()
        }
        fn run<H: Element>(c: &Case) -> Vec<f64> {
            let (x, w, off, m, b) =
                (conv::<H>(&c.x), conv::<H>(&c.w), conv::<H>(&c.off), conv::<H>(&c.mask), conv::<H>(&c.bias));
            let mut y = conv::<H>(&vec![0.0; c.d.lens().output]);
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                deform_conv2d(
                    H::DTYPE,
                    &c.d,
                    x.as_ptr() as *const u8,
                    w.as_ptr() as *const u8,
                    off.as_ptr() as *const u8,
                    Some(m.as_ptr() as *const u8),
                    Some(b.as_ptr() as *const u8),
                    y.as_mut_ptr() as *mut u8,
                    2,
                )
            }
            .unwrap();
            y.iter().map(|v| v.to_f64()).collect()
        }
        close(&run::<f32>(&c), &want, 1e-5, "f32");
        close(&run::<half::f16>(&c), &want, 2e-2, "f16");
        close(&run::<half::bf16>(&c), &want, 1e-1, "bf16");
        let null = std::ptr::null();
        // SAFETY: refused before any pointer is read.
        let e = unsafe { deform_conv2d(DType::I32, &d, null, null, null, Some(null), None, std::ptr::null_mut(), 1) };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: OP, dtype: DType::I32 }));
        // SAFETY: as above.
        let e = unsafe { deform_conv2d(DType::F32, &d, null, null, null, None, None, std::ptr::null_mut(), 1) };
        assert!(matches!(e, Err(Error::InvalidLayout { .. })), "a mask is required with use_mask");
    }
}
