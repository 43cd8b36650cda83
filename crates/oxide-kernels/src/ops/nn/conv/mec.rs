//! The memory-efficient lowering of 2-d convolutions with unit height stride
//! (MEC: M. Cho, D. Brand, "MEC: Memory-efficient Convolution for Deep Neural
//! Network", ICML 2017): the forward and, with unit strides, the input gradient.
//!
//! im2col copies every input pixel once per kernel tap (nine times for 3x3). Here
//! each sample is unfolded along the kernel's width only: row `(c, j)` of the
//! *lowered* matrix holds channel `c` shifted by width tap `j`, over the padded
//! height and the output width (`(C * kW) x (Hp * Wo)`, three copies for 3x3).
//! Output position `p = oh * Wo + ow` under height tap `i` reads entry
//! `(oh + i * dilation) * Wo + ow` of that row, so for a fixed `i` the operand
//! the GEMM needs is the lowered matrix itself, started `i * dilation * Wo`
//! entries in (row stride `Hp * Wo`, unit column stride):
//!
//! - output: `y = sum_i W_i @ L[:, i * d * Wo ..][:, ..Ho * Wo]`, `W_i` the weight's
//!   height tap `i` as a `C_out x (C_in * kW)` matrix (`weight_taps`);
//! - input gradient (unit strides): the forward of the flipped convolution
//!   (`flipped`): `gy` convolved with the weight rotated by 180 degrees and its
//!   two channel axes swapped, padding `d * (k - 1) - p`.
//!
//! The `gemm` crate packs its B operand from any strides, so the lowered matrix is
//! read in place; the kH products accumulate into the output (`beta = 1`). Samples
//! whose lowered matrix would not fit a core's L2 ([`BAND_ELEMENTS`]) are taken in
//! bands of output rows, each band lowered with its `(kH - 1) * d` halo rows.
//!
//! The weight gradient stays with im2col: as `gW_i += gy @ L_i^T` per sample it was
//! 4-18% slower than im2col's one product over a chunk of samples (each product's
//! inner dimension is one sample's positions, and the kH products each read and
//! write the whole weight gradient). Measured: ARCHITECTURE.md, Measurements.

use crate::engine::iter::try_for_each_chunk_mut;
use crate::engine::scratch;
use crate::error::Result;

use super::{product, Acc, Conv, Window, MAX_SPATIAL};

/// Fewest output positions per sample: each product is one sample (or band) wide,
/// and narrower ones lose GEMM speed (ResNet-18's 4x4 maps stay with im2col's
/// batched columns).
const MIN_POSITIONS: usize = 128;

/// Fewest input channels per group: with shallow products (`C_in * kW` deep) the
/// kH passes over the output cost more than the copies they save.
const MIN_CHANNELS: usize = 32;

/// Most lowered-matrix elements per band (512 KiB of float32), so that the matrix
/// stays in L2 between the lowering and the products that pack it.
const BAND_ELEMENTS: usize = 1 << 17;

/// A convolution this lowering runs, with the extents it needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mec {
    batch: usize,
    groups: usize,
    /// Input and output channels per group.
    ic: usize,
    oc: usize,
    /// Input height and width; output height and width.
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    /// Kernel height and width.
    kh: usize,
    kw: usize,
    pad: [usize; 2],
    dil: [usize; 2],
    /// The convolution's window, for where each width tap lands in the image.
    win: Window,
    /// Output rows per band.
    band: usize,
}

impl Mec {
    /// The lowering of `cv` when it applies: a 2-d convolution, not
    /// transposed, unit height stride, a kernel more than one row tall, and enough
    /// channels and output positions (see the constants).
    pub(super) fn new(cv: &Conv) -> Option<Mec> {
        let (ic, oc) = (cv.in_channels / cv.groups, cv.out_channels / cv.groups);
        let two_d = cv.input[0] == 1 && cv.kernel[0] == 1 && cv.output[0] == 1;
        let (ho, wo) = (cv.output[1], cv.output[2]);
        if cv.transposed || !two_d || cv.stride[1] != 1 || cv.kernel[1] < 2 || ic < MIN_CHANNELS {
            return None;
        }
        if ho * wo < MIN_POSITIONS || cv.batch == 0 || oc == 0 {
            return None;
        }
        let (kh, kw) = (cv.kernel[1], cv.kernel[2]);
        let halo = cv.dilation[1] * (kh - 1);
        let rows = BAND_ELEMENTS / (ic * kw * wo).max(1);
        // At least MIN_POSITIONS positions per band however large the row.
        let band = rows.saturating_sub(halo).max(MIN_POSITIONS.div_ceil(wo)).min(ho);
        Some(Mec {
            batch: cv.batch,
            groups: cv.groups,
            ic,
            oc,
            h: cv.input[1],
            w: cv.input[2],
            ho,
            wo,
            kh,
            kw,
            pad: [cv.padding[1], cv.padding[2]],
            dil: [cv.dilation[1], cv.dilation[2]],
            win: cv.window(),
            band,
        })
    }

    /// The convolution whose forward is `cv`'s input gradient, when `cv` has unit
    /// strides: input and output extents swapped, channels swapped, padding
    /// `d * (k - 1) - p` (None where that is negative).
    pub(super) fn flipped(cv: &Conv) -> Option<Conv> {
        if cv.transposed || cv.stride != [1; MAX_SPATIAL] {
            return None;
        }
        let mut padding = [0; MAX_SPATIAL];
        for (d, p) in padding.iter_mut().enumerate() {
            *p = (cv.dilation[d] * (cv.kernel[d] - 1)).checked_sub(cv.padding[d])?;
        }
        Some(Conv {
            in_channels: cv.out_channels,
            out_channels: cv.in_channels,
            input: cv.output,
            output: cv.input,
            padding,
            ..*cv
        })
    }

    /// `cv`'s weight `(C_out, C_in / groups, kH, kW)` as the flipped convolution's
    /// (see [`Mec::flipped`]): `wf[g, c, o, i, j] = w[g, o, c, kH-1-i, kW-1-j]`.
    pub(super) fn flip_weight<C: Acc>(cv: &Conv, w: &[C]) -> Vec<C> {
        let (ic, oc) = (cv.in_channels / cv.groups, cv.out_channels / cv.groups);
        let (kh, kw) = (cv.kernel[1], cv.kernel[2]);
        let taps = kh * kw;
        let mut out = vec![C::ZERO; w.len()];
        for g in 0..cv.groups {
            for o in 0..oc {
                for c in 0..ic {
                    let src = &w[((g * oc + o) * ic + c) * taps..][..taps];
                    let dst = &mut out[((g * ic + c) * oc + o) * taps..][..taps];
                    for (t, v) in dst.iter_mut().enumerate() {
                        *v = src[taps - 1 - t];
                    }
                }
            }
        }
        out
    }

    /// Output rows per band.
    #[cfg(test)]
    pub(super) fn band(&self) -> usize {
        self.band
    }

    fn depth(&self) -> usize {
        self.ic * self.kw
    }

    fn sample_lens(&self) -> (usize, usize) {
        (self.groups * self.ic * self.h * self.w, self.groups * self.oc * self.ho * self.wo)
    }

    /// Elements of the lowered matrix of one band: `depth` rows over the band's
    /// output rows and their halo.
    fn lowered_len(&self) -> usize {
        self.depth() * (self.band + self.dil[0] * (self.kh - 1)) * self.wo
    }

    /// Writes into `out` the weight `w` `(C_out, C_in / groups, kH, kW)` regrouped by
    /// height tap: `[g][i][o][c * kW + j]`, one `oc x depth` matrix per group and tap.
    fn weight_taps<C: Acc>(&self, w: &[C], out: &mut [C]) {
        let (k, taps) = (self.depth(), self.kh * self.kw);
        for g in 0..self.groups {
            for i in 0..self.kh {
                for o in 0..self.oc {
                    let dst = &mut out[((g * self.kh + i) * self.oc + o) * k..][..k];
                    for c in 0..self.ic {
                        let src = &w[((g * self.oc + o) * self.ic + c) * taps + i * self.kw..][..self.kw];
                        dst[c * self.kw..(c + 1) * self.kw].copy_from_slice(src);
                    }
                }
            }
        }
    }

    /// Writes the lowered matrix of output rows `[r0, r1)` of one group's image `x`
    /// (`ic x h x w`) into the front of `buf` (every entry of it, zeros included:
    /// `buf` may hold anything) and returns that part: `depth` rows of
    /// `(r1 - r0 + halo) * wo` entries.
    fn lower<'b, C: Acc>(&self, x: &[C], (r0, r1): (usize, usize), buf: &'b mut [C]) -> &'b [C] {
        let (wo, halo) = (self.wo, self.dil[0] * (self.kh - 1));
        let rows = r1 - r0 + halo;
        let plane = rows * wo;
        let low = &mut buf[..self.depth() * plane];
        for c in 0..self.ic {
            let img = &x[c * self.h * self.w..(c + 1) * self.h * self.w];
            for j in 0..self.kw {
                let dst = &mut low[(c * self.kw + j) * plane..][..plane];
                // Output column `ow` reads input column `ow * s + off`: inside for [lo, hi).
                let (off, s) = (self.win.offset(2, j), self.win.stride[2]);
                let (lo, hi) = self.win.inside(2, j);
                for (r, line) in dst.chunks_exact_mut(wo).enumerate() {
                    // Padded row r0 + r is input row r0 + r - pad.
                    let ih = (r0 + r).checked_sub(self.pad[0]).filter(|&ih| ih < self.h);
                    let Some(ih) = ih else {
                        line.fill(C::ZERO);
                        continue;
                    };
                    let src = &img[ih * self.w..(ih + 1) * self.w];
                    line[..lo].fill(C::ZERO);
                    line[hi..].fill(C::ZERO);
                    let first = (lo as isize * s as isize + off) as usize;
                    if s == 1 {
                        line[lo..hi].copy_from_slice(&src[first..first + (hi - lo)]);
                    } else {
                        for (k, v) in line[lo..hi].iter_mut().enumerate() {
                            *v = src[first + k * s];
                        }
                    }
                }
            }
        }
        low
    }

    /// The bands of output rows of one sample.
    fn bands(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.ho).step_by(self.band).map(|r0| (r0, (r0 + self.band).min(self.ho)))
    }

    /// One sample: `y` (`groups * oc x ho * wo`) from `x`, `wt` from [`Mec::weight_taps`].
    fn forward_sample<C: Acc>(&self, x: &[C], wt: &[C], bias: Option<&[C]>, y: &mut [C], buf: &mut [C]) -> Result<()> {
        let (k, gl, il) = (self.depth(), self.ho * self.wo, self.h * self.w);
        let step = self.dil[0] * self.wo;
        for g in 0..self.groups {
            let yg = &mut y[g * self.oc * gl..(g + 1) * self.oc * gl];
            for (r0, r1) in self.bands() {
                let low = self.lower(&x[g * self.ic * il..(g + 1) * self.ic * il], (r0, r1), buf);
                let (n, plane) = ((r1 - r0) * self.wo, low.len() / k);
                for i in 0..self.kh {
                    let a = &wt[(g * self.kh + i) * self.oc * k..][..self.oc * k];
                    let beta = if i == 0 { 0.0 } else { 1.0 };
                    product(
                        self.oc,
                        n,
                        k,
                        (a, k, 1),
                        (&low[i * step..], plane, 1),
                        beta,
                        (&mut yg[r0 * self.wo..], gl),
                    )?;
                }
            }
            if let Some(b) = bias {
                for (o, row) in yg.chunks_exact_mut(gl).enumerate() {
                    let bv = b[g * self.oc + o];
                    row.iter_mut().for_each(|v| *v = v.add(bv));
                }
            }
        }
        Ok(())
    }

    /// The output `y` of the whole batch, samples split over up to `threads` tasks.
    pub(super) fn forward<C: Acc>(
        &self,
        x: &[C],
        w: &[C],
        bias: Option<&[C]>,
        y: &mut [C],
        threads: usize,
    ) -> Result<()> {
        scratch::with(w.len(), |wt: &mut [C]| {
            self.weight_taps(w, wt);
            let (xs, ys) = self.sample_lens();
            let per_task = self.batch.div_ceil(threads.clamp(1, self.batch));
            try_for_each_chunk_mut(y, ys, self.batch.div_ceil(per_task), |n, yn| {
                scratch::with(self.lowered_len(), |buf| {
                    self.forward_sample(&x[n * xs..(n + 1) * xs], wt, bias, yn, buf)
                })
            })
        })
    }
}
