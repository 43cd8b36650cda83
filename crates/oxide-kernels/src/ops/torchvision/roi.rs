//! Region-of-interest pooling, torchvision's `roi_align`, `roi_pool`,
//! `ps_roi_align` and `ps_roi_pool`, forward and backward.
//!
//! Layouts (contiguous; the glue makes them so): input `(B, C, H, W)`; rois
//! `(K, 5)` rows `(batch index, x1, y1, x2, y2)` in input coordinates before
//! `spatial_scale`; output `(K, C_out, PH, PW)` with `C_out = C` for the plain
//! ops and `C / (PH * PW)` for the position-sensitive ones, whose bin
//! `(c_out, ph, pw)` reads input channel `(c_out * PH + ph) * PW + pw` (recorded
//! in the `channel_mapping` output). `roi_pool` records the argmax plane index
//! per output element (-1 for an empty bin).
//!
//! Rules are torchvision's CPU kernels (`torchvision/csrc/ops/cpu/`), restated:
//! - align: a roi's corners are scaled (minus 0.5 when `aligned`, and always for
//!   `ps_roi_align`); unaligned rois are at least 1 x 1; each bin averages a
//!   `grid_h x grid_w` grid of bilinear samples (`sampling_ratio`, or
//!   `ceil(roi extent / pooled extent)`) at `start + p * bin + (i + 0.5) * bin /
//!   grid`; a sample outside `[-1, size]` counts as 0, one inside is clamped to
//!   the image;
//! - pool: corners are scaled and rounded, the bin `[floor(p * bin),
//!   ceil((p + 1) * bin))` is offset and clipped to the image (for
//!   `ps_roi_pool`'s forward to `size - 1`, as torchvision does); `roi_pool`
//!   takes the maximum (NaN never wins; an empty bin gives 0 and argmax -1),
//!   `ps_roi_pool` the mean.
//!
//! Arithmetic is done in the element type, operation by operation in
//! torchvision's order (float16 rounds after every operation, as `c10::Half`
//! does), so results match its CPU kernels bit for bit.
//!
//! The backwards scatter into the input gradient. Each `(batch, channel)`
//! plane of it is owned by one task, which adds its contributions in
//! torchvision's loop order: deterministic, and the same sums as the CPU.
//!
//! A roi's batch index is checked against the batch (torchvision's CPU kernel
//! reads out of bounds): one outside `[0, B)` is an [`Error::OutOfRange`].

use std::ops::{Add, Div, Mul, Sub};

use rayon::prelude::*;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// The arithmetic of the element type, as C++ does it on torchvision's `T`.
pub(super) trait Real:
    Copy + Send + Sync + PartialOrd + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    /// `static_cast<T>(double)` (c10::Half goes through float).
    fn from_f64(v: f64) -> Self;
    /// `static_cast<T>(float)`.
    fn from_f32(v: f32) -> Self;
    /// `static_cast<T>(int)`.
    fn from_int(v: i64) -> Self;
    /// The value as a double (exact).
    fn to_f64(self) -> f64;
    fn zero() -> Self {
        Self::from_f32(0.0)
    }
}

impl Real for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn from_f32(v: f32) -> Self {
        v
    }
    fn from_int(v: i64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    fn from_int(v: i64) -> Self {
        v as f64
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl Real for half::f16 {
    fn from_f64(v: f64) -> Self {
        half::f16::from_f32(v as f32)
    }
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn from_int(v: i64) -> Self {
        half::f16::from_f32(v as f32)
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

/// Runs `$body` with `$C` bound to the element type of `$dtype` (float32,
/// float64, float16: the dtypes torchvision's CPU kernels have).
macro_rules! with_roi_dtype {
    ($dtype:expr, $op:expr, |$C:ident| $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $C = f32;
                $body
            }
            DType::F64 => {
                type $C = f64;
                $body
            }
            DType::F16 => {
                type $C = half::f16;
                $body
            }
            dtype => return Err(Error::UnsupportedDtype { op: $op, dtype }),
        }
    };
}

/// One roi pooling: extents and parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoiPool {
    /// K, the number of rois.
    pub rois: usize,
    /// B, C, H, W of the input (and of its gradient).
    pub batch: usize,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    /// PH, PW.
    pub pooled: [usize; 2],
    pub spatial_scale: f64,
    /// Samples per bin side for the align ops (<= 0: adaptive).
    pub sampling_ratio: i64,
    /// `roi_align`'s `aligned` (half-pixel offset, no 1 x 1 minimum).
    pub aligned: bool,
}

impl RoiPool {
    fn bins(&self) -> usize {
        self.pooled[0] * self.pooled[1]
    }

    fn plane(&self) -> usize {
        self.height * self.width
    }

    /// Output channels of the position-sensitive ops.
    pub fn channels_out(&self) -> usize {
        self.channels.checked_div(self.bins()).unwrap_or(0)
    }

    /// The batch index of every roi, checked.
    fn batch_indices<C: Real>(&self, op: &'static str, rois: &[C]) -> Result<Vec<usize>> {
        (0..self.rois)
            .map(|n| {
                let v = rois[n * 5].to_f64();
                // C++'s (int) truncates toward zero, so (-1, 0) is batch 0.
                if v > -1.0 && (v.trunc() as usize) < self.batch {
                    Ok(v.trunc() as usize)
                } else {
                    Err(Error::OutOfRange {
                        op,
                        reason: format!("{op}: roi {n} has batch index {v}, outside [0, {})", self.batch),
                    })
                }
            })
            .collect()
    }
}

/// The geometry of one roi for the align ops.
#[derive(Clone, Copy)]
struct AlignBox<C> {
    start: [C; 2],
    bin: [C; 2],
    grid: [i64; 2],
    /// The averaging divisor, `grid_h * grid_w` as `T`.
    count: C,
}

impl<C: Real> AlignBox<C> {
    /// `offset`: subtracted from the scaled corners; `min_one`: unaligned rois are at least 1 x 1.
    fn new(r: &RoiPool, row: &[C], offset: C, min_one: bool) -> Self {
        let scale = C::from_f64(r.spatial_scale);
        let (start_w, start_h) = (row[1] * scale - offset, row[2] * scale - offset);
        let (end_w, end_h) = (row[3] * scale - offset, row[4] * scale - offset);
        let (mut roi_w, mut roi_h) = (end_w - start_w, end_h - start_h);
        if min_one {
            // std::max(x, 1): NaN stays NaN.
            let one = C::from_f32(1.0);
            roi_w = if roi_w < one { one } else { roi_w };
            roi_h = if roi_h < one { one } else { roi_h };
        }
        let (ph, pw) = (C::from_int(r.pooled[0] as i64), C::from_int(r.pooled[1] as i64));
        let grid = |extent: C, pooled: C| {
            if r.sampling_ratio > 0 {
                r.sampling_ratio
            } else {
                // ceil(extent / pooled) converted to int (NaN and overflow give no samples).
                let g = (extent / pooled).to_f64().ceil();
                if g.is_nan() {
                    0
                } else {
                    g as i64
                }
            }
        };
        let grid = [grid(roi_h, ph), grid(roi_w, pw)];
        AlignBox {
            start: [start_h, start_w],
            bin: [roi_h / ph, roi_w / pw],
            grid,
            count: C::from_int(grid[0].saturating_mul(grid[1])),
        }
    }

    /// Sample `i` of bin `p` along axis `a` (0: y, 1: x), in torchvision's operation order.
    #[inline]
    fn sample(&self, a: usize, p: usize, i: i64) -> C {
        self.start[a]
            + C::from_int(p as i64) * self.bin[a]
            + C::from_f32(i as f32 + 0.5) * self.bin[a] / C::from_int(self.grid[a])
    }

    /// As [`Self::sample`] with ps_roi_align's order (`p * bin + start` first).
    #[inline]
    fn sample_ps(&self, a: usize, p: usize, i: i64) -> C {
        C::from_int(p as i64) * self.bin[a]
            + self.start[a]
            + C::from_f32(i as f32 + 0.5) * self.bin[a] / C::from_int(self.grid[a])
    }
}

/// The four bilinear taps (plane offsets) and weights of the point `(y, x)`,
/// or None when it lies outside `[-1, size]` (or is NaN, or the plane is empty).
#[inline]
fn bilinear<C: Real>(height: usize, width: usize, y: C, x: C) -> Option<([usize; 4], [C; 4])> {
    let (yf, xf) = (y.to_f64(), x.to_f64());
    if height == 0 || width == 0 || !(yf >= -1.0 && yf <= height as f64 && xf >= -1.0 && xf <= width as f64) {
        return None;
    }
    let axis = |v: C, vf: f64, size: usize| {
        let v = if vf <= 0.0 { C::zero() } else { v };
        let low = v.to_f64() as usize;
        if low >= size - 1 {
            (size - 1, size - 1, C::from_int(size as i64 - 1))
        } else {
            (low, low + 1, v)
        }
    };
    let (y_low, y_high, y) = axis(y, yf, height);
    let (x_low, x_high, x) = axis(x, xf, width);
    let ly = y - C::from_int(y_low as i64);
    let lx = x - C::from_int(x_low as i64);
    let one = C::from_f32(1.0);
    let (hy, hx) = (one - ly, one - lx);
    Some((
        [y_low * width + x_low, y_low * width + x_high, y_high * width + x_low, y_high * width + x_high],
        [hy * hx, hy * lx, ly * hx, ly * lx],
    ))
}

/// `w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4`, left to right.
#[inline]
fn interpolate<C: Real>(plane: &[C], pos: &[usize; 4], w: &[C; 4]) -> C {
    w[0] * plane[pos[0]] + w[1] * plane[pos[1]] + w[2] * plane[pos[2]] + w[3] * plane[pos[3]]
}

/// Reinterprets the operands of a kernel.
///
/// # Safety
/// `p` addresses `len` initialised elements of `C`, alive and unwritten for `'a`.
unsafe fn slice<'a, C>(p: *const u8, len: usize) -> &'a [C] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const C, len) }
}

/// # Safety
/// `p` addresses `len` elements of `C` that nothing else reads or writes for `'a`.
unsafe fn slice_mut<'a, C>(p: *mut u8, len: usize) -> &'a mut [C] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p as *mut C, len) }
}

/// Parallel when there is more than a little work.
fn parallel(threads: usize, work: usize) -> bool {
    threads > 1 && work > crate::engine::iter::GRAIN / 4
}

/// For each `(batch, channel)` plane of the input gradient, the output elements
/// that add into it, in the order `order` visits them (torchvision's loop order).
/// `target(index)` is the input channel of output element `index`.
fn buckets(
    r: &RoiPool,
    batch_of: &[usize],
    order: impl Iterator<Item = (usize, usize)>,
    target: impl Fn(usize) -> Result<usize>,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let planes = r.batch * r.channels;
    let keys: Vec<(usize, usize)> =
        order.map(|(n, index)| Ok((batch_of[n] * r.channels + target(index)?, index))).collect::<Result<_>>()?;
    let mut starts = vec![0usize; planes + 1];
    for &(k, _) in &keys {
        starts[k + 1] += 1;
    }
    for p in 0..planes {
        starts[p + 1] += starts[p];
    }
    let mut fill = starts.clone();
    let mut items = vec![0usize; keys.len()];
    for (k, index) in keys {
        items[fill[k]] = index;
        fill[k] += 1;
    }
    Ok((starts, items))
}

/// Runs `f(plane index, plane)` over the `(batch, channel)` planes of `grad_input`, zeroed first.
fn for_planes<C: Real>(r: &RoiPool, grad_input: &mut [C], threads: usize, f: impl Fn(usize, &mut [C]) + Sync) {
    let plane = r.plane();
    grad_input.iter_mut().for_each(|v| *v = C::zero());
    if plane == 0 {
        return;
    }
    if parallel(threads, grad_input.len()) {
        grad_input.par_chunks_mut(plane).enumerate().for_each(|(p, g)| f(p, g));
    } else {
        grad_input.chunks_mut(plane).enumerate().for_each(|(p, g)| f(p, g));
    }
}

/// The channel mapping entry of output element `index`, checked against the input's channels.
fn mapped(op: &'static str, r: &RoiPool, mapping: &[i32], index: usize) -> Result<usize> {
    let c = mapping[index];
    usize::try_from(c).ok().filter(|&c| c < r.channels).ok_or_else(|| Error::OutOfRange {
        op,
        reason: format!("{op}: channel_mapping holds {c}, outside [0, {})", r.channels),
    })
}

// ---- roi_align ----

unsafe fn roi_align_impl<C: Real>(
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    const OP: &str = "roi_align";
    let (plane, bins) = (r.plane(), r.bins());
    // SAFETY: `roi_align`'s contract on the buffers.
    let (x, rois, y) = unsafe {
        (
            slice::<C>(input, r.batch * r.channels * plane),
            slice::<C>(rois, r.rois * 5),
            slice_mut::<C>(output, r.rois * r.channels * bins),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    let per_roi = r.channels * bins;
    if per_roi == 0 {
        return Ok(());
    }
    let offset = C::from_f32(if r.aligned { 0.5 } else { 0.0 });
    let one_roi = |n: usize, out: &mut [C]| {
        let b = AlignBox::new(r, &rois[n * 5..n * 5 + 5], offset, !r.aligned);
        let divisor = if b.grid[0].saturating_mul(b.grid[1]) >= 1 { b.count } else { C::from_f32(1.0) };
        // Taps per sample, shared by every channel; an empty sample reads element 0 with weight 0, as
        // torchvision's precalculation does (so an inf or NaN there still propagates).
        let mut taps = Vec::new();
        for ph in 0..r.pooled[0] {
            for pw in 0..r.pooled[1] {
                for iy in 0..b.grid[0].max(0) {
                    let yy = b.sample(0, ph, iy);
                    for ix in 0..b.grid[1].max(0) {
                        let xx = b.sample(1, pw, ix);
                        taps.push(bilinear(r.height, r.width, yy, xx).unwrap_or(([0; 4], [C::zero(); 4])));
                    }
                }
            }
        }
        let per_bin = (b.grid[0].max(0) * b.grid[1].max(0)) as usize;
        for c in 0..r.channels {
            let src = &x[(batch_of[n] * r.channels + c) * plane..][..plane];
            for (bin, o) in out[c * bins..(c + 1) * bins].iter_mut().enumerate() {
                let mut acc = C::zero();
                for (pos, w) in &taps[bin * per_bin..(bin + 1) * per_bin] {
                    if plane > 0 {
                        acc = acc + interpolate(src, pos, w);
                    }
                }
                *o = acc / divisor;
            }
        }
    };
    if parallel(threads, y.len()) {
        y.par_chunks_mut(per_roi).enumerate().for_each(|(n, out)| one_roi(n, out));
    } else {
        y.chunks_mut(per_roi).enumerate().for_each(|(n, out)| one_roi(n, out));
    }
    Ok(())
}

/// `roi_align` of `input` at `rois` into `output` (layouts and rules in the
/// module documentation), all of `dtype`. `threads`: the most threads to use.
///
/// Errors: [`Error::UnsupportedDtype`] unless float32/64 or float16;
/// [`Error::OutOfRange`] for a roi's batch index.
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; the output overlaps no input.
pub unsafe fn roi_align(
    dtype: DType,
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "roi_align", |C| unsafe { roi_align_impl::<C>(r, input, rois, output, threads) })
}

unsafe fn roi_align_backward_impl<C: Real>(
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    const OP: &str = "roi_align_backward";
    let (plane, bins) = (r.plane(), r.bins());
    // SAFETY: `roi_align_backward`'s contract on the buffers.
    let (g, rois, gi) = unsafe {
        (
            slice::<C>(grad, r.rois * r.channels * bins),
            slice::<C>(rois, r.rois * 5),
            slice_mut::<C>(grad_input, r.batch * r.channels * plane),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    let offset = C::from_f32(if r.aligned { 0.5 } else { 0.0 });
    let boxes: Vec<AlignBox<C>> =
        (0..r.rois).map(|n| AlignBox::new(r, &rois[n * 5..n * 5 + 5], offset, !r.aligned)).collect();
    for_planes(r, gi, threads, |p, out| {
        let (bi, c) = (p / r.channels, p % r.channels);
        for (n, b) in boxes.iter().enumerate().filter(|(n, _)| batch_of[*n] == bi) {
            for ph in 0..r.pooled[0] {
                for pw in 0..r.pooled[1] {
                    let go = g[((n * r.channels + c) * r.pooled[0] + ph) * r.pooled[1] + pw];
                    for iy in 0..b.grid[0].max(0) {
                        let y = b.sample(0, ph, iy);
                        for ix in 0..b.grid[1].max(0) {
                            let x = b.sample(1, pw, ix);
                            if let Some((pos, w)) = bilinear(r.height, r.width, y, x) {
                                for k in 0..4 {
                                    out[pos[k]] = out[pos[k]] + go * w[k] / b.count;
                                }
                            }
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// The input gradient of [`roi_align`] (`(B, C, H, W)`, overwritten) from the
/// output gradient `grad` (`(K, C, PH, PW)`), all of `dtype`.
///
/// Errors: as [`roi_align`].
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; `grad_input` overlaps no input.
pub unsafe fn roi_align_backward(
    dtype: DType,
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "roi_align_backward", |C| unsafe {
        roi_align_backward_impl::<C>(r, grad, rois, grad_input, threads)
    })
}

// ---- roi_pool ----

/// A pool bin's extent along one axis, offset by the roi's start and clipped to `[0, limit]`.
#[inline]
fn pool_bin<C: Real>(p: usize, bin: C, start: i64, limit: i64) -> (i64, i64) {
    let lo = (C::from_int(p as i64) * bin).to_f64().floor() as i64;
    let hi = (C::from_int(p as i64 + 1) * bin).to_f64().ceil() as i64;
    ((lo + start).clamp(0, limit.max(0)), (hi + start).clamp(0, limit.max(0)))
}

/// A pool roi's rounded start and its bin sizes; `extra` is 1 for roi_pool (inclusive corners), 0 for ps_roi_pool.
fn pool_box<C: Real>(r: &RoiPool, row: &[C], extra: i64) -> ([i64; 2], [C; 2]) {
    let scale = C::from_f64(r.spatial_scale);
    // round() half away from zero, then to int.
    let corner = |v: C| (v * scale).to_f64().round() as i64;
    let (sw, sh, ew, eh) = (corner(row[1]), corner(row[2]), corner(row[3]), corner(row[4]));
    let (w, h) = ((ew - sw + extra).max(1), (eh - sh + extra).max(1));
    let bin_h = C::from_int(h) / C::from_int(r.pooled[0] as i64);
    let bin_w = C::from_int(w) / C::from_int(r.pooled[1] as i64);
    ([sh, sw], [bin_h, bin_w])
}

unsafe fn roi_pool_impl<C: Real>(
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    argmax: *mut i32,
    threads: usize,
) -> Result<()> {
    const OP: &str = "roi_pool";
    let (plane, bins) = (r.plane(), r.bins());
    // SAFETY: `roi_pool`'s contract on the buffers.
    let (x, rois, y, am) = unsafe {
        (
            slice::<C>(input, r.batch * r.channels * plane),
            slice::<C>(rois, r.rois * 5),
            slice_mut::<C>(output, r.rois * r.channels * bins),
            slice_mut::<i32>(argmax as *mut u8, r.rois * r.channels * bins),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    let per_roi = r.channels * bins;
    if per_roi == 0 {
        return Ok(());
    }
    // torchvision starts from -FLT_MAX in every dtype (-inf in float16).
    let lowest = C::from_f64(-(f32::MAX as f64));
    let one_roi = |n: usize, (out, arg): (&mut [C], &mut [i32])| {
        let (start, bin) = pool_box(r, &rois[n * 5..n * 5 + 5], 1);
        for ph in 0..r.pooled[0] {
            let (h0, h1) = pool_bin(ph, bin[0], start[0], r.height as i64);
            for pw in 0..r.pooled[1] {
                let (w0, w1) = pool_bin(pw, bin[1], start[1], r.width as i64);
                let empty = h1 <= h0 || w1 <= w0;
                for c in 0..r.channels {
                    let src = &x[(batch_of[n] * r.channels + c) * plane..][..plane];
                    let (mut best, mut at) = (if empty { C::zero() } else { lowest }, -1i32);
                    for h in h0..h1 {
                        for w in w0..w1 {
                            let i = (h * r.width as i64 + w) as usize;
                            if src[i] > best {
                                best = src[i];
                                at = i as i32;
                            }
                        }
                    }
                    let o = (c * r.pooled[0] + ph) * r.pooled[1] + pw;
                    out[o] = best;
                    arg[o] = at;
                }
            }
        }
    };
    if parallel(threads, y.len()) {
        y.par_chunks_mut(per_roi).zip(am.par_chunks_mut(per_roi)).enumerate().for_each(|(n, o)| one_roi(n, o));
    } else {
        y.chunks_mut(per_roi).zip(am.chunks_mut(per_roi)).enumerate().for_each(|(n, o)| one_roi(n, o));
    }
    Ok(())
}

/// `roi_pool` of `input` at `rois` into `output` and `argmax` (int32), layouts
/// and rules in the module documentation.
///
/// Errors: as [`roi_align`].
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; the outputs overlap no input or each other.
pub unsafe fn roi_pool(
    dtype: DType,
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    argmax: *mut i32,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "roi_pool", |C| unsafe { roi_pool_impl::<C>(r, input, rois, output, argmax, threads) })
}

unsafe fn roi_pool_backward_impl<C: Real>(
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    argmax: *const i32,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    const OP: &str = "roi_pool_backward";
    let (plane, bins) = (r.plane(), r.bins());
    let len = r.rois * r.channels * bins;
    // SAFETY: `roi_pool_backward`'s contract on the buffers.
    let (g, rois, am, gi) = unsafe {
        (
            slice::<C>(grad, len),
            slice::<C>(rois, r.rois * 5),
            slice::<i32>(argmax as *const u8, len),
            slice_mut::<C>(grad_input, r.batch * r.channels * plane),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    if let Some(bad) = am.iter().find(|&&a| a < -1 || a as i64 >= plane as i64) {
        return Err(Error::OutOfRange { op: OP, reason: format!("{OP}: argmax holds {bad}, outside [-1, {plane})") });
    }
    for_planes(r, gi, threads, |p, out| {
        let (bi, c) = (p / r.channels, p % r.channels);
        for n in (0..r.rois).filter(|&n| batch_of[n] == bi) {
            let at = (n * r.channels + c) * bins;
            for (go, &a) in g[at..at + bins].iter().zip(&am[at..at + bins]) {
                if a >= 0 {
                    out[a as usize] = out[a as usize] + *go;
                }
            }
        }
    });
    Ok(())
}

/// The input gradient of [`roi_pool`] (`(B, C, H, W)`, overwritten) from `grad`
/// and the forward's `argmax`.
///
/// Errors: as [`roi_align`]; [`Error::OutOfRange`] for an argmax outside the plane.
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; `grad_input` overlaps no input.
pub unsafe fn roi_pool_backward(
    dtype: DType,
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    argmax: *const i32,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "roi_pool_backward", |C| unsafe {
        roi_pool_backward_impl::<C>(r, grad, rois, argmax, grad_input, threads)
    })
}

// ---- ps_roi_align ----

unsafe fn ps_roi_align_impl<C: Real>(
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    mapping: *mut i32,
    threads: usize,
) -> Result<()> {
    const OP: &str = "ps_roi_align";
    let (plane, bins, c_out) = (r.plane(), r.bins(), r.channels_out());
    let len = r.rois * c_out * bins;
    // SAFETY: `ps_roi_align`'s contract on the buffers.
    let (x, rois, y, map) = unsafe {
        (
            slice::<C>(input, r.batch * r.channels * plane),
            slice::<C>(rois, r.rois * 5),
            slice_mut::<C>(output, len),
            slice_mut::<i32>(mapping as *mut u8, len),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    let per_roi = c_out * bins;
    if per_roi == 0 {
        return Ok(());
    }
    let one_roi = |n: usize, (out, map): (&mut [C], &mut [i32])| {
        let b = AlignBox::new(r, &rois[n * 5..n * 5 + 5], C::from_f32(0.5), false);
        for (k, (o, m)) in out.iter_mut().zip(map.iter_mut()).enumerate() {
            // k = (c_out * PH + ph) * PW + pw is also the input channel.
            let (ph, pw) = ((k / r.pooled[1]) % r.pooled[0], k % r.pooled[1]);
            let src = &x[(batch_of[n] * r.channels + k) * plane..][..plane];
            let mut acc = C::zero();
            for iy in 0..b.grid[0].max(0) {
                let yy = b.sample_ps(0, ph, iy);
                for ix in 0..b.grid[1].max(0) {
                    let xx = b.sample_ps(1, pw, ix);
                    acc =
                        acc + bilinear(r.height, r.width, yy, xx).map_or(C::zero(), |(p, w)| interpolate(src, &p, &w));
                }
            }
            *o = acc / b.count;
            *m = k as i32;
        }
    };
    if parallel(threads, y.len()) {
        y.par_chunks_mut(per_roi).zip(map.par_chunks_mut(per_roi)).enumerate().for_each(|(n, o)| one_roi(n, o));
    } else {
        y.chunks_mut(per_roi).zip(map.chunks_mut(per_roi)).enumerate().for_each(|(n, o)| one_roi(n, o));
    }
    Ok(())
}

/// `ps_roi_align` of `input` at `rois` into `output` and `mapping` (int32),
/// layouts and rules in the module documentation.
///
/// Errors: as [`roi_align`].
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; the outputs overlap no input or each other.
pub unsafe fn ps_roi_align(
    dtype: DType,
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    mapping: *mut i32,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "ps_roi_align", |C| unsafe {
        ps_roi_align_impl::<C>(r, input, rois, output, mapping, threads)
    })
}

unsafe fn ps_roi_align_backward_impl<C: Real>(
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    mapping: *const i32,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    const OP: &str = "ps_roi_align_backward";
    let (plane, bins, c_out) = (r.plane(), r.bins(), r.channels_out());
    let len = r.rois * c_out * bins;
    // SAFETY: `ps_roi_align_backward`'s contract on the buffers.
    let (g, rois, map, gi) = unsafe {
        (
            slice::<C>(grad, len),
            slice::<C>(rois, r.rois * 5),
            slice::<i32>(mapping as *const u8, len),
            slice_mut::<C>(grad_input, r.batch * r.channels * plane),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    let per_roi = c_out * bins;
    let order = (0..len).map(|index| (index / per_roi.max(1), index));
    let (starts, items) = buckets(r, &batch_of, order, |index| mapped(OP, r, map, index))?;
    let boxes: Vec<AlignBox<C>> =
        (0..r.rois).map(|n| AlignBox::new(r, &rois[n * 5..n * 5 + 5], C::from_f32(0.5), false)).collect();
    for_planes(r, gi, threads, |p, out| {
        for &index in &items[starts[p]..starts[p + 1]] {
            let (n, k) = (index / per_roi, index % per_roi);
            let (ph, pw) = ((k / r.pooled[1]) % r.pooled[0], k % r.pooled[1]);
            let (b, go) = (&boxes[n], g[index]);
            for iy in 0..b.grid[0].max(0) {
                let y = b.sample_ps(0, ph, iy);
                for ix in 0..b.grid[1].max(0) {
                    let x = b.sample_ps(1, pw, ix);
                    if let Some((pos, w)) = bilinear(r.height, r.width, y, x) {
                        for k in 0..4 {
                            out[pos[k]] = out[pos[k]] + go * w[k] / b.count;
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// The input gradient of [`ps_roi_align`] (`(B, C, H, W)`, overwritten) from
/// `grad` and the forward's channel `mapping`.
///
/// Errors: as [`roi_align`]; [`Error::OutOfRange`] for a mapping outside the channels.
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; `grad_input` overlaps no input.
pub unsafe fn ps_roi_align_backward(
    dtype: DType,
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    mapping: *const i32,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "ps_roi_align_backward", |C| unsafe {
        ps_roi_align_backward_impl::<C>(r, grad, rois, mapping, grad_input, threads)
    })
}

// ---- ps_roi_pool ----

unsafe fn ps_roi_pool_impl<C: Real>(
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    mapping: *mut i32,
    threads: usize,
) -> Result<()> {
    const OP: &str = "ps_roi_pool";
    let (plane, bins, c_out) = (r.plane(), r.bins(), r.channels_out());
    let len = r.rois * c_out * bins;
    // SAFETY: `ps_roi_pool`'s contract on the buffers.
    let (x, rois, y, map) = unsafe {
        (
            slice::<C>(input, r.batch * r.channels * plane),
            slice::<C>(rois, r.rois * 5),
            slice_mut::<C>(output, len),
            slice_mut::<i32>(mapping as *mut u8, len),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    let per_roi = c_out * bins;
    if per_roi == 0 {
        return Ok(());
    }
    let one_roi = |n: usize, (out, map): (&mut [C], &mut [i32])| {
        let (start, bin) = pool_box(r, &rois[n * 5..n * 5 + 5], 0);
        for (k, (o, m)) in out.iter_mut().zip(map.iter_mut()).enumerate() {
            let (ph, pw) = ((k / r.pooled[1]) % r.pooled[0], k % r.pooled[1]);
            // torchvision's forward clips to size - 1 (its backward to size).
            let (h0, h1) = pool_bin(ph, bin[0], start[0], r.height as i64 - 1);
            let (w0, w1) = pool_bin(pw, bin[1], start[1], r.width as i64 - 1);
            let src = &x[(batch_of[n] * r.channels + k) * plane..][..plane];
            let mut acc = C::zero();
            for h in h0..h1 {
                for w in w0..w1 {
                    acc = acc + src[(h * r.width as i64 + w) as usize];
                }
            }
            let empty = h1 <= h0 || w1 <= w0;
            *o = if empty { C::zero() } else { acc / C::from_int((h1 - h0) * (w1 - w0)) };
            *m = k as i32;
        }
    };
    if parallel(threads, y.len()) {
        y.par_chunks_mut(per_roi).zip(map.par_chunks_mut(per_roi)).enumerate().for_each(|(n, o)| one_roi(n, o));
    } else {
        y.chunks_mut(per_roi).zip(map.chunks_mut(per_roi)).enumerate().for_each(|(n, o)| one_roi(n, o));
    }
    Ok(())
}

/// `ps_roi_pool` of `input` at `rois` into `output` and `mapping` (int32),
/// layouts and rules in the module documentation.
///
/// Errors: as [`roi_align`].
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; the outputs overlap no input or each other.
pub unsafe fn ps_roi_pool(
    dtype: DType,
    r: &RoiPool,
    input: *const u8,
    rois: *const u8,
    output: *mut u8,
    mapping: *mut i32,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "ps_roi_pool", |C| unsafe {
        ps_roi_pool_impl::<C>(r, input, rois, output, mapping, threads)
    })
}

unsafe fn ps_roi_pool_backward_impl<C: Real>(
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    mapping: *const i32,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    const OP: &str = "ps_roi_pool_backward";
    let (plane, bins, c_out) = (r.plane(), r.bins(), r.channels_out());
    let len = r.rois * c_out * bins;
    // SAFETY: `ps_roi_pool_backward`'s contract on the buffers.
    let (g, rois, map, gi) = unsafe {
        (
            slice::<C>(grad, len),
            slice::<C>(rois, r.rois * 5),
            slice::<i32>(mapping as *const u8, len),
            slice_mut::<C>(grad_input, r.batch * r.channels * plane),
        )
    };
    let batch_of = r.batch_indices(OP, rois)?;
    // torchvision's order: roi, bin row, bin column, output channel.
    let (ph_n, pw_n) = (r.pooled[0], r.pooled[1]);
    let order = (0..r.rois).flat_map(move |n| {
        (0..ph_n).flat_map(move |ph| {
            (0..pw_n).flat_map(move |pw| (0..c_out).map(move |c| (n, ((n * c_out + c) * ph_n + ph) * pw_n + pw)))
        })
    });
    let (starts, items) = buckets(r, &batch_of, order, |index| mapped(OP, r, map, index))?;
    let boxes: Vec<([i64; 2], [C; 2])> = (0..r.rois).map(|n| pool_box(r, &rois[n * 5..n * 5 + 5], 0)).collect();
    let per_roi = (c_out * bins).max(1);
    for_planes(r, gi, threads, |p, out| {
        for &index in &items[starts[p]..starts[p + 1]] {
            let (n, k) = (index / per_roi, index % per_roi);
            let (ph, pw) = ((k / pw_n) % ph_n, k % pw_n);
            let (start, bin) = boxes[n];
            let (h0, h1) = pool_bin(ph, bin[0], start[0], r.height as i64);
            let (w0, w1) = pool_bin(pw, bin[1], start[1], r.width as i64);
            if h1 <= h0 || w1 <= w0 {
                continue;
            }
            let diff = g[index] / C::from_int((h1 - h0) * (w1 - w0));
            for h in h0..h1 {
                for w in w0..w1 {
                    let i = (h * r.width as i64 + w) as usize;
                    out[i] = out[i] + diff;
                }
            }
        }
    });
    Ok(())
}

/// The input gradient of [`ps_roi_pool`] (`(B, C, H, W)`, overwritten) from
/// `grad` and the forward's channel `mapping`.
///
/// Errors: as [`ps_roi_align_backward`].
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; `grad_input` overlaps no input.
pub unsafe fn ps_roi_pool_backward(
    dtype: DType,
    r: &RoiPool,
    grad: *const u8,
    rois: *const u8,
    mapping: *const i32,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    with_roi_dtype!(dtype, "ps_roi_pool_backward", |C| unsafe {
        ps_roi_pool_backward_impl::<C>(r, grad, rois, mapping, grad_input, threads)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(rois: usize, c: usize, h: usize, w: usize, pooled: [usize; 2], sr: i64, aligned: bool) -> RoiPool {
        RoiPool {
            rois,
            batch: 1,
            channels: c,
            height: h,
            width: w,
            pooled,
            spatial_scale: 1.0,
            sampling_ratio: sr,
            aligned,
        }
    }

    #[test]
    fn roi_align_of_a_constant_image_is_the_constant() {
        let r = pool(1, 1, 4, 4, [2, 2], 2, false);
        let x = [3.0f32; 16];
        let rois = [0.0f32, 0.5, 0.5, 2.5, 2.5];
        let mut y = [0.0f32; 4];
        // SAFETY: the buffers have the sizes `r` describes.
        unsafe { roi_align(DType::F32, &r, x.as_ptr().cast(), rois.as_ptr().cast(), y.as_mut_ptr().cast(), 1) }
            .unwrap();
        assert_eq!(y, [3.0; 4]);
    }

    #[test]
    fn roi_align_interpolates_a_ramp() {
        // x[h][w] = w: a sample at column position p reads p (inside the image).
        let r = pool(1, 1, 4, 4, [1, 1], 1, true);
        let x: Vec<f64> = (0..16).map(|i| (i % 4) as f64).collect();
        // aligned: corners minus 0.5; box [1, 3] x [1, 3] scaled by 1 gives a centre at 1.5.
        let rois = [0.0f64, 1.0, 1.0, 3.0, 3.0];
        let mut y = [0.0f64; 1];
        // SAFETY: the buffers have the sizes `r` describes.
        unsafe { roi_align(DType::F64, &r, x.as_ptr().cast(), rois.as_ptr().cast(), y.as_mut_ptr().cast(), 1) }
            .unwrap();
        assert_eq!(y, [1.5]);
    }

    #[test]
    fn roi_align_backward_sums_to_the_gradient_mass() {
        let r = pool(2, 2, 5, 5, [2, 2], 2, false);
        let g = [1.0f64; 2 * 2 * 4];
        let rois = [0.0f64, 0.0, 0.0, 3.0, 3.0, 0.0, 1.0, 1.0, 4.0, 2.0];
        let mut gi = vec![7.0f64; 2 * 25];
        // SAFETY: the buffers have the sizes `r` describes.
        unsafe {
            roi_align_backward(DType::F64, &r, g.as_ptr().cast(), rois.as_ptr().cast(), gi.as_mut_ptr().cast(), 4)
        }
        .unwrap();
        // Every sample lies inside the image, so each output gradient lands whole.
        let total: f64 = gi.iter().sum();
        assert!((total - 16.0).abs() < 1e-12, "{total}");
    }

    #[test]
    fn roi_pool_takes_the_maximum_and_its_index() {
        let r = pool(1, 1, 3, 3, [1, 1], 0, false);
        let x = [1.0f32, 9.0, 2.0, 3.0, f32::NAN, 4.0, 5.0, 6.0, 7.0];
        let rois = [0.0f32, 0.0, 0.0, 2.0, 2.0];
        let (mut y, mut am) = ([0.0f32], [0i32]);
        // SAFETY: the buffers have the sizes `r` describes.
        unsafe {
            roi_pool(DType::F32, &r, x.as_ptr().cast(), rois.as_ptr().cast(), y.as_mut_ptr().cast(), am.as_mut_ptr(), 1)
        }
        .unwrap();
        assert_eq!((y[0], am[0]), (9.0, 1));
    }

    #[test]
    fn a_batch_index_outside_the_batch_is_refused() {
        let r = pool(1, 1, 2, 2, [1, 1], 1, false);
        let x = [0.0f32; 4];
        let rois = [1.0f32, 0.0, 0.0, 1.0, 1.0];
        let mut y = [0.0f32];
        // SAFETY: the buffers have the sizes `r` describes.
        let e = unsafe { roi_align(DType::F32, &r, x.as_ptr().cast(), rois.as_ptr().cast(), y.as_mut_ptr().cast(), 1) }
            .unwrap_err();
        assert!(e.to_string().contains("batch index 1"), "{e}");
    }

    #[test]
    fn ps_roi_pool_maps_bins_to_channels() {
        let r = pool(1, 4, 4, 4, [2, 2], 0, false);
        // Channel k holds the constant k.
        let x: Vec<f32> = (0..64).map(|i| (i / 16) as f32).collect();
        let rois = [0.0f32, 0.0, 0.0, 4.0, 4.0];
        let (mut y, mut map) = ([0.0f32; 4], [0i32; 4]);
        // SAFETY: the buffers have the sizes `r` describes.
        unsafe {
            ps_roi_pool(
                DType::F32,
                &r,
                x.as_ptr().cast(),
                rois.as_ptr().cast(),
                y.as_mut_ptr().cast(),
                map.as_mut_ptr(),
                1,
            )
        }
        .unwrap();
        assert_eq!(map, [0, 1, 2, 3]);
        assert_eq!(y, [0.0, 1.0, 2.0, 3.0]);
    }
}
