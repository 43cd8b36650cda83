//! 2-d grid sampling (PyTorch's `grid_sampler_2d`, `F.grid_sample` on 4-d
//! inputs), forward and backward.
//!
//! Layouts (contiguous; the glue makes them so): input `(N, C, H, W)`, grid
//! `(N, H_out, W_out, 2)` holding normalised `(x, y)` in `[-1, 1]`, output
//! `(N, C, H_out, W_out)`; the gradients have the shapes of input and grid.
//!
//! Coordinate rules are PyTorch's (`ATen/native/GridSampler.h`), restated:
//! - unnormalise: `((c + 1) / 2) * (size - 1)` with `align_corners`, else
//!   `((c + 1) * size - 1) / 2`;
//! - padding `border` clamps to `[0, size - 1]`; `reflection` reflects about
//!   the edge pixel centres (`align_corners`) or the edges (`-0.5`,
//!   `size - 0.5`) and then clamps; `zeros` leaves the coordinate and reads 0
//!   outside the image;
//! - bilinear: the four neighbours `floor(x) + {0, 1}` weighted by the distances;
//! - nearest: the pixel at `x` rounded half to even (C's `nearbyint`);
//! - bicubic: the 4 x 4 neighbours `floor(x) - 1 .. floor(x) + 2` of the
//!   unnormalised (unpadded) coordinate with Keys' cubic convolution weights,
//!   A = -0.75 (R. Keys, "Cubic convolution interpolation for digital image
//!   processing", IEEE TASSP 1981), padding applied to each neighbour.
//!
//! Gradients: the input gradient scatters each output gradient back with the
//! forward's weights; the grid gradient is the derivative of the interpolation
//! with respect to the sample position times the derivative of the coordinate
//! rule (0 for nearest). Float16/bfloat16 compute in float32.
//!
//! Parallelism: the forward splits output rows over rayon; the backward splits
//! samples (each owns its slice of both gradients), so it is deterministic.

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::engine::iter::GRAIN;
use crate::error::{Error, Result};

/// PyTorch's `interpolation_mode` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    Bilinear,
    Nearest,
    Bicubic,
}

/// PyTorch's `padding_mode` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// One grid sampling: extents, modes and `align_corners`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridSample {
    pub batch: usize,
    pub channels: usize,
    /// Input (height, width).
    pub input: [usize; 2],
    /// Output (height, width), the grid's middle extents.
    pub output: [usize; 2],
    pub interpolation: Interpolation,
    pub padding: Padding,
    pub align_corners: bool,
}

impl GridSample {
    /// From PyTorch's integer mode codes. Errors: [`Error::InvalidValue`] for an unknown code.
    pub fn modes(interpolation: i64, padding: i64) -> Result<(Interpolation, Padding)> {
        let bad = |what: &str, v: i64| Error::InvalidValue {
            op: "grid_sampler_2d",
            reason: format!("grid_sampler_2d: unknown {what} {v}"),
        };
        let i = match interpolation {
            0 => Interpolation::Bilinear,
            1 => Interpolation::Nearest,
            2 => Interpolation::Bicubic,
            v => return Err(bad("interpolation mode", v)),
        };
        let p = match padding {
            0 => Padding::Zeros,
            1 => Padding::Border,
            2 => Padding::Reflection,
            v => return Err(bad("padding mode", v)),
        };
        Ok((i, p))
    }

    fn lens(&self) -> (usize, usize, usize) {
        let (n, c) = (self.batch, self.channels);
        let (i, o) = (self.input[0] * self.input[1], self.output[0] * self.output[1]);
        (n * c * i, n * o * 2, n * c * o)
    }
}

/// The compute types.
trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + Default
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    fn of<T: Element>(v: T) -> Self;
    fn c(v: f64) -> Self;
    fn store<T: Element>(self) -> T;
    fn floor(self) -> Self;
    fn fmod(self, o: Self) -> Self;
    fn round_even(self) -> Self;
    /// Truncation to an integer (C's cast); NaN and out-of-range values give values no image contains.
    fn trunc_i64(self) -> i64;
}
macro_rules! real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            #[inline] fn of<T: Element>(v: T) -> Self { v.to_f64() as $t }
            #[inline] fn c(v: f64) -> Self { v as $t }
            #[inline] fn store<T: Element>(self) -> T { T::from_f64(self as f64) }
            #[inline] fn floor(self) -> Self { <$t>::floor(self) }
            #[inline] fn fmod(self, o: Self) -> Self { self % o }
            #[inline] fn round_even(self) -> Self { <$t>::round_ties_even(self) }
            #[inline] fn trunc_i64(self) -> i64 { if self.is_nan() { i64::MIN } else { self as i64 } }
        }
    )*};
}
real!(f32, f64);

/// Unnormalised coordinate and its derivative with respect to the normalised one.
#[inline]
fn unnormalize<C: Real>(coord: C, size: usize, align_corners: bool) -> (C, C) {
    let s = C::c(size as f64);
    if align_corners {
        ((coord + C::c(1.0)) / C::c(2.0) * (s - C::c(1.0)), (s - C::c(1.0)) / C::c(2.0))
    } else {
        (((coord + C::c(1.0)) * s - C::c(1.0)) / C::c(2.0), s / C::c(2.0))
    }
}

/// Clamp to `[0, size - 1]` and its derivative (0 at and beyond the ends).
#[inline]
fn clip<C: Real>(x: C, size: usize) -> (C, C) {
    let hi = C::c(size as f64 - 1.0);
    if x >= hi {
        (hi, C::c(0.0))
    } else if x > C::c(0.0) {
        (x, C::c(1.0))
    } else {
        // At or below 0, and NaN: CPU's vectorised clamp, max(x, 0) then min(.., size - 1),
        // takes the 0 of max(NaN, 0) (the second operand of a vector max with a NaN).
        (C::c(0.0), C::c(0.0))
    }
}

/// Reflection of `x` into `[low2 / 2, high2 / 2]` (bounds given doubled so they stay integers) and its derivative (+-1).
#[inline]
fn reflect<C: Real>(x: C, low2: i64, high2: i64) -> (C, C) {
    if low2 == high2 {
        return (C::c(0.0), C::c(0.0));
    }
    let min = C::c(low2 as f64 / 2.0);
    let span = C::c((high2 - low2) as f64 / 2.0);
    let d = x - min;
    let (d, sign) = if d < C::c(0.0) { (-d, C::c(-1.0)) } else { (d, C::c(1.0)) };
    let extra = d.fmod(span);
    let flips = (d / span).floor().trunc_i64();
    if flips % 2 == 0 {
        (extra + min, sign)
    } else {
        (span - extra + min, -sign)
    }
}

/// The padding rule applied to an unnormalised coordinate, with its derivative.
#[inline]
fn pad_coord<C: Real>(x: C, size: usize, padding: Padding, align_corners: bool) -> (C, C) {
    match padding {
        Padding::Zeros => (x, C::c(1.0)),
        Padding::Border => clip(x, size),
        Padding::Reflection => {
            let s = size as i64;
            let (r, gr) = if align_corners { reflect(x, 0, 2 * (s - 1)) } else { reflect(x, -1, 2 * s - 1) };
            let (c, gc) = clip(r, size);
            (c, gr * gc)
        }
    }
}

/// The source coordinate of normalised `coord` (unnormalise, then pad) and its derivative.
#[inline]
fn source<C: Real>(coord: C, size: usize, padding: Padding, align_corners: bool) -> (C, C) {
    let (x, g) = unnormalize(coord, size, align_corners);
    let (x, gp) = pad_coord(x, size, padding, align_corners);
    (x, g * gp)
}

/// Keys' cubic convolution weights of the four taps at distance `t` (in [0, 1)) past the second.
#[inline]
fn cubic<C: Real>(t: C) -> [C; 4] {
    let a = C::c(-0.75);
    let near = |x: C| ((a + C::c(2.0)) * x - (a + C::c(3.0))) * x * x + C::c(1.0);
    let far = |x: C| ((a * x - C::c(5.0) * a) * x + C::c(8.0) * a) * x - C::c(4.0) * a;
    let one = C::c(1.0);
    [far(t + one), near(t), near(one - t), far(C::c(2.0) - t)]
}

/// Derivatives of [`cubic`] with respect to `t`.
#[inline]
fn cubic_grad<C: Real>(t: C) -> [C; 4] {
    let a = C::c(-0.75);
    let near = |x: C| (C::c(3.0) * (a + C::c(2.0)) * x - C::c(2.0) * (a + C::c(3.0))) * x;
    let far = |x: C| (C::c(3.0) * a * x - C::c(10.0) * a) * x + C::c(8.0) * a;
    let one = C::c(1.0);
    [far(t + one), near(t), -near(one - t), -far(C::c(2.0) - t)]
}

/// One image plane of the input (or of its gradient) with bounds-checked access.
struct Plane {
    h: usize,
    w: usize,
}
impl Plane {
    #[inline]
    fn at(&self, y: i64, x: i64) -> Option<usize> {
        (y >= 0 && x >= 0 && (y as usize) < self.h && (x as usize) < self.w).then(|| y as usize * self.w + x as usize)
    }
}

/// The taps one output point reads: up to 16 (offset in the plane, weight), and
/// per tap the weight's derivatives with respect to the unnormalised x and y.
struct Taps<C> {
    n: usize,
    at: [Option<usize>; 16],
    w: [C; 16],
    dx: [C; 16],
    dy: [C; 16],
    /// Derivatives of the unnormalised x and y with respect to the grid values.
    mult: [C; 2],
}

impl<C: Real> Taps<C> {
    /// The weighted sum of the taps over one plane. A tap outside the plane reads a
    /// zero but keeps its weight, so a NaN coordinate (NaN weights) gives NaN as on CPU.
    #[inline]
    fn sample<T: Element>(&self, xs: &[T]) -> C {
        let mut acc = C::c(0.0);
        for k in 0..self.n {
            let v = match self.at[k] {
                Some(o) => C::of(xs[o]),
                None => C::c(0.0),
            };
            acc = acc + self.w[k] * v;
        }
        acc
    }
}

fn taps<C: Real>(gs: &GridSample, gx: C, gy: C) -> Taps<C> {
    let plane = Plane { h: gs.input[0], w: gs.input[1] };
    let z = C::c(0.0);
    let mut t = Taps { n: 0, at: [None; 16], w: [z; 16], dx: [z; 16], dy: [z; 16], mult: [z; 2] };
    let (w, h, ac) = (gs.input[1], gs.input[0], gs.align_corners);
    match gs.interpolation {
        Interpolation::Bilinear => {
            let (ix, mx) = source(gx, w, gs.padding, ac);
            let (iy, my) = source(gy, h, gs.padding, ac);
            let (x0, y0) = (ix.floor(), iy.floor());
            let (fx, fy) = (ix - x0, iy - y0);
            let (ex, ey) = (C::c(1.0) - fx, C::c(1.0) - fy);
            let (x0, y0) = (x0.trunc_i64(), y0.trunc_i64());
            let corners = [
                (0, 0, ex * ey, -ey, -ex),
                (0, 1, fx * ey, ey, -fx),
                (1, 0, ex * fy, -fy, ex),
                (1, 1, fx * fy, fy, fx),
            ];
            for (k, &(dy, dx, wt, dwx, dwy)) in corners.iter().enumerate() {
                t.at[k] = plane.at(y0.wrapping_add(dy), x0.wrapping_add(dx));
                t.w[k] = wt;
                t.dx[k] = dwx;
                t.dy[k] = dwy;
            }
            t.n = 4;
            t.mult = [mx, my];
        }
        Interpolation::Nearest => {
            let (ix, _) = source(gx, w, gs.padding, ac);
            let (iy, _) = source(gy, h, gs.padding, ac);
            t.at[0] = plane.at(iy.round_even().trunc_i64(), ix.round_even().trunc_i64());
            t.w[0] = C::c(1.0);
            t.n = 1;
        }
        Interpolation::Bicubic => {
            let (ix, mx) = unnormalize(gx, w, ac);
            let (iy, my) = unnormalize(gy, h, ac);
            let (x0, y0) = (ix.floor(), iy.floor());
            let (tx, ty) = (ix - x0, iy - y0);
            let (cx, cy, gxc, gyc) = (cubic(tx), cubic(ty), cubic_grad(tx), cubic_grad(ty));
            for j in 0..4 {
                for i in 0..4 {
                    let k = j * 4 + i;
                    // Each neighbour is an integer coordinate, padded on its own (so padding may move it).
                    let px = pad_coord(x0 + C::c(i as f64 - 1.0), w, gs.padding, ac).0.trunc_i64();
                    let py = pad_coord(y0 + C::c(j as f64 - 1.0), h, gs.padding, ac).0.trunc_i64();
                    t.at[k] = plane.at(py, px);
                    t.w[k] = cx[i] * cy[j];
                    t.dx[k] = gxc[i] * cy[j];
                    t.dy[k] = cx[i] * gyc[j];
                }
            }
            t.n = 16;
            t.mult = [mx, my];
        }
    }
    t
}

unsafe fn forward<T: Element, C: Real>(
    gs: &GridSample,
    input: *const u8,
    grid: *const u8,
    output: *mut u8,
    threads: usize,
) {
    let (il, gl, ol) = gs.lens();
    // SAFETY: `grid_sample_2d`'s contract on the buffer sizes.
    let (x, g, y) = unsafe {
        (
            std::slice::from_raw_parts(input as *const T, il),
            std::slice::from_raw_parts(grid as *const T, gl),
            std::slice::from_raw_parts_mut(output as *mut T, ol),
        )
    };
    let (c, ipl) = (gs.channels, gs.input[0] * gs.input[1]);
    let opl = gs.output[0] * gs.output[1];
    // A sample's output is (C, H_out, W_out): the taps of a position serve every channel, so work is split by
    // samples (many samples) or by blocks of positions computed into buffers (few samples).
    let sample = |n: usize, yn: &mut [T]| {
        for p in 0..opl {
            let q = (n * opl + p) * 2;
            let t = taps::<C>(gs, C::of(g[q]), C::of(g[q + 1]));
            for ch in 0..c {
                let xs = &x[(n * c + ch) * ipl..(n * c + ch + 1) * ipl];
                yn[ch * opl + p] = t.sample(xs).store();
            }
        }
    };
    let per = c * opl;
    if per == 0 {
        return;
    }
    if threads > 1 && ol > GRAIN / 4 {
        if gs.batch >= threads {
            y.par_chunks_mut(per).enumerate().for_each(|(n, yn)| sample(n, yn));
        } else {
            // Few samples: split each sample's output positions (every channel of a position is written by one task).
            let chunk = opl.div_ceil(threads).max(1);
            for n in 0..gs.batch {
                let yn = &mut y[n * per..(n + 1) * per];
                let cells: Vec<(usize, Vec<C>)> = (0..opl.div_ceil(chunk))
                    .into_par_iter()
                    .map(|b| {
                        let (lo, hi) = (b * chunk, ((b + 1) * chunk).min(opl));
                        let mut vals = vec![C::c(0.0); (hi - lo) * c];
                        for p in lo..hi {
                            let q = (n * opl + p) * 2;
                            let t = taps::<C>(gs, C::of(g[q]), C::of(g[q + 1]));
                            for ch in 0..c {
                                let xs = &x[(n * c + ch) * ipl..(n * c + ch + 1) * ipl];
                                vals[(p - lo) * c + ch] = t.sample(xs);
                            }
                        }
                        (lo, vals)
                    })
                    .collect();
                for (lo, vals) in cells {
                    for (k, v) in vals.iter().enumerate() {
                        let (p, ch) = (lo + k / c, k % c);
                        yn[ch * opl + p] = v.store();
                    }
                }
            }
        }
    } else {
        y.chunks_mut(per).enumerate().for_each(|(n, yn)| sample(n, yn));
    }
}

/// Samples `input` at the positions of `grid` into `output` (layouts and rules
/// in the module documentation), all of `dtype`. `threads`: the most threads to use.
///
/// Errors: [`Error::UnsupportedDtype`] unless float32/64, float16, bfloat16.
///
/// # Safety
/// Each pointer addresses the contiguous elements of its shape; the output overlaps no input.
pub unsafe fn grid_sample_2d(
    dtype: DType,
    gs: &GridSample,
    input: *const u8,
    grid: *const u8,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    crate::with_float_dtype!(dtype, "grid_sampler_2d", |T, C| unsafe {
        forward::<T, C>(gs, input, grid, output, threads)
    });
    Ok(())
}

unsafe fn backward<T: Element, C: Real>(
    gs: &GridSample,
    grad_output: *const u8,
    input: *const u8,
    grid: *const u8,
    grad_input: Option<*mut u8>,
    grad_grid: *mut u8,
    threads: usize,
) {
    let (il, gl, ol) = gs.lens();
    // SAFETY: `grid_sample_2d_backward`'s contract on the buffer sizes.
    let (gy, x, g, gg) = unsafe {
        (
            std::slice::from_raw_parts(grad_output as *const T, ol),
            std::slice::from_raw_parts(input as *const T, il),
            std::slice::from_raw_parts(grid as *const T, gl),
            std::slice::from_raw_parts_mut(grad_grid as *mut T, gl),
        )
    };
    // SAFETY: as above; the input gradient overlaps nothing else.
    let gi = grad_input.map(|p| unsafe { std::slice::from_raw_parts_mut(p as *mut T, il) });
    let (c, ipl, opl) = (gs.channels, gs.input[0] * gs.input[1], gs.output[0] * gs.output[1]);
    let sample = |n: usize, ggn: &mut [T], gin: Option<&mut [T]>| {
        let mut acc = gin.as_ref().map(|_| vec![C::c(0.0); c * ipl]);
        for p in 0..opl {
            let q = (n * opl + p) * 2;
            let t = taps::<C>(gs, C::of(g[q]), C::of(g[q + 1]));
            let (mut dgx, mut dgy) = (C::c(0.0), C::c(0.0));
            for ch in 0..c {
                let go = C::of(gy[(n * c + ch) * opl + p]);
                let xs = &x[(n * c + ch) * ipl..(n * c + ch + 1) * ipl];
                for k in 0..t.n {
                    let Some(o) = t.at[k] else { continue };
                    if let Some(a) = acc.as_mut() {
                        a[ch * ipl + o] = a[ch * ipl + o] + t.w[k] * go;
                    }
                    if gs.interpolation != Interpolation::Nearest {
                        let v = C::of(xs[o]) * go;
                        dgx = dgx + t.dx[k] * v;
                        dgy = dgy + t.dy[k] * v;
                    }
                }
            }
            ggn[p * 2] = (t.mult[0] * dgx).store();
            ggn[p * 2 + 1] = (t.mult[1] * dgy).store();
        }
        if let (Some(a), Some(gin)) = (acc, gin) {
            gin.iter_mut().zip(&a).for_each(|(o, &v)| *o = v.store());
        }
    };
    let (gper, iper) = (opl * 2, c * ipl);
    if gs.batch == 0 {
        return;
    }
    let parallel = threads > 1 && gs.batch > 1 && ol > GRAIN / 4;
    match gi {
        Some(gi) if iper > 0 => {
            if parallel {
                gg.par_chunks_mut(gper.max(1))
                    .zip(gi.par_chunks_mut(iper))
                    .enumerate()
                    .for_each(|(n, (a, b))| sample(n, a, Some(b)));
            } else {
                gg.chunks_mut(gper.max(1))
                    .zip(gi.chunks_mut(iper))
                    .enumerate()
                    .for_each(|(n, (a, b))| sample(n, a, Some(b)));
            }
        }
        _ => {
            if gper == 0 {
                return;
            }
            if parallel {
                gg.par_chunks_mut(gper).enumerate().for_each(|(n, a)| sample(n, a, None));
            } else {
                gg.chunks_mut(gper).enumerate().for_each(|(n, a)| sample(n, a, None));
            }
        }
    }
}

/// The gradients [`grid_sample_2d_backward`] writes: `input` (None: not requested) and `grid`.
#[derive(Debug, Clone, Copy)]
pub struct GridGrads {
    pub input: Option<*mut u8>,
    pub grid: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for GridGrads {}

/// Gradients of [`grid_sample_2d`] from `grad_output` (the output's shape):
/// `grad_input` (input's shape; None: not requested, PyTorch's `output_mask[0]`)
/// and `grad_grid` (grid's shape), both overwritten.
///
/// Errors: as [`grid_sample_2d`].
///
/// # Safety
/// As [`grid_sample_2d`]; the gradients overlap no operand and each other.
pub unsafe fn grid_sample_2d_backward(
    dtype: DType,
    gs: &GridSample,
    grad_output: *const u8,
    input: *const u8,
    grid: *const u8,
    grads: GridGrads,
    threads: usize,
) -> Result<()> {
    let GridGrads { input: grad_input, grid: grad_grid } = grads;
    // SAFETY: forwarded contract.
    crate::with_float_dtype!(dtype, "grid_sampler_2d_backward", |T, C| unsafe {
        backward::<T, C>(gs, grad_output, input, grid, grad_input, grad_grid, threads)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: u64) -> Vec<f64> {
        (0..n).map(|k| (((k as u64 + 1) * 2654435761 + seed * 7919) % 2001) as f64 / 1000.0 - 1.0).collect()
    }

    fn gs(interpolation: Interpolation, padding: Padding, align_corners: bool) -> GridSample {
        GridSample { batch: 2, channels: 3, input: [4, 5], output: [3, 2], interpolation, padding, align_corners }
    }

    fn fwd(g: &GridSample, x: &[f64], grid: &[f64]) -> Vec<f64> {
        let mut y = vec![0.0; g.lens().2];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            grid_sample_2d(
                DType::F64,
                g,
                x.as_ptr() as *const u8,
                grid.as_ptr() as *const u8,
                y.as_mut_ptr() as *mut u8,
                4,
            )
        }
        .unwrap();
        y
    }

    #[test]
    fn identity_grid_reproduces_the_input() {
        // With align_corners, x_k = -1 + 2k/(W-1) lands exactly on pixel k.
        for interp in [Interpolation::Bilinear, Interpolation::Nearest, Interpolation::Bicubic] {
            let g = GridSample {
                batch: 1,
                channels: 2,
                input: [3, 4],
                output: [3, 4],
                interpolation: interp,
                padding: Padding::Zeros,
                align_corners: true,
            };
            let x = vals(24, 1);
            let mut grid = Vec::new();
            for h in 0..3 {
                for w in 0..4 {
                    grid.push(-1.0 + 2.0 * w as f64 / 3.0);
                    grid.push(-1.0 + 2.0 * h as f64 / 2.0);
                }
            }
            let y = fwd(&g, &x, &grid);
            for (a, b) in y.iter().zip(&x) {
                assert!((a - b).abs() < 1e-12, "{interp:?}");
            }
        }
    }

    #[test]
    fn padding_rules_at_known_points() {
        // One row 0..4, sample at x far outside: border gives the edge, zeros 0, reflection a mirrored pixel.
        let x = [0.0, 1.0, 2.0, 3.0];
        let at = |padding, ac, gx: f64| {
            let g = GridSample {
                batch: 1,
                channels: 1,
                input: [1, 4],
                output: [1, 1],
                interpolation: Interpolation::Bilinear,
                padding,
                align_corners: ac,
            };
            fwd(&g, &x, &[gx, 0.0])[0]
        };
        assert_eq!(at(Padding::Border, true, 3.0), 3.0);
        assert_eq!(at(Padding::Zeros, true, 3.0), 0.0);
        // align_corners: x = 1.5 -> unnormalised 3.75 -> reflected about 3 -> 2.25.
        assert!((at(Padding::Reflection, true, 1.5) - 2.25).abs() < 1e-12);
        // not align_corners: x = 1.25 -> (2.25 * 4 - 1) / 2 = 4 -> reflected about 3.5 -> 3.
        assert!((at(Padding::Reflection, false, 1.25) - 3.0).abs() < 1e-12);
        // zeros, not align_corners, x = -1: unnormalised -0.5, half of pixel 0.
        assert!((at(Padding::Zeros, false, -1.0) - 0.0).abs() < 1e-12);
        let x2 = [4.0, 1.0, 2.0, 3.0];
        let g = GridSample {
            batch: 1,
            channels: 1,
            input: [1, 4],
            output: [1, 1],
            interpolation: Interpolation::Bilinear,
            padding: Padding::Zeros,
            align_corners: false,
        };
        assert!((fwd(&g, &x2, &[-1.0, 0.0])[0] - 2.0).abs() < 1e-12);
    }

    #[test]
    fn gradients_match_finite_differences() {
        for interp in [Interpolation::Bilinear, Interpolation::Nearest, Interpolation::Bicubic] {
            for padding in [Padding::Zeros, Padding::Border, Padding::Reflection] {
                for ac in [false, true] {
                    let g = gs(interp, padding, ac);
                    let (il, gl, ol) = g.lens();
                    let x = vals(il, 2);
                    // Grid values in [-1.2, 1.2], away from pixel boundaries for the finite differences.
                    let grid: Vec<f64> = vals(gl, 3).iter().map(|v| v * 1.2 + 0.0123).collect();
                    let go = vals(ol, 4);
                    let (mut gi, mut gg) = (vec![0.0; il], vec![0.0; gl]);
                    // SAFETY: the pointers address live local buffers sized for the call.
                    unsafe {
                        grid_sample_2d_backward(
                            DType::F64,
                            &g,
                            go.as_ptr() as *const u8,
                            x.as_ptr() as *const u8,
                            grid.as_ptr() as *const u8,
                            GridGrads { input: Some(gi.as_mut_ptr() as *mut u8), grid: gg.as_mut_ptr() as *mut u8 },
                            3,
                        )
                    }
                    .unwrap();
                    let dot = |y: &[f64]| y.iter().zip(&go).map(|(a, b)| a * b).sum::<f64>();
                    let base = dot(&fwd(&g, &x, &grid));
                    // The input gradient is exact (the forward is linear in the input).
                    for k in 0..il {
                        let mut x2 = x.clone();
                        x2[k] += 1.0;
                        assert!(
                            (dot(&fwd(&g, &x2, &grid)) - base - gi[k]).abs() < 1e-9,
                            "{interp:?} {padding:?} {ac} input {k}"
                        );
                    }
                    let h = 1e-6;
                    for k in 0..gl {
                        let mut g2 = grid.clone();
                        g2[k] += h;
                        let fd = (dot(&fwd(&g, &x, &g2)) - base) / h;
                        let want = if interp == Interpolation::Nearest { 0.0 } else { fd };
                        assert!(
                            (gg[k] - want).abs() < 1e-4 * (1.0 + want.abs()),
                            "{interp:?} {padding:?} {ac} grid {k}: {} vs {fd}",
                            gg[k]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn half_types_and_unsupported_dtypes() {
        let g = gs(Interpolation::Bicubic, Padding::Border, false);
        let (il, gl, ol) = g.lens();
        let (x, grid) = (vals(il, 5), vals(gl, 6));
        let want = fwd(&g, &x, &grid);
        let xb: Vec<half::bf16> = x.iter().map(|&v| half::bf16::from_f64(v)).collect();
        let gb: Vec<half::bf16> = grid.iter().map(|&v| half::bf16::from_f64(v)).collect();
        let mut y = vec![half::bf16::ZERO; ol];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            grid_sample_2d(
                DType::BF16,
                &g,
                xb.as_ptr() as *const u8,
                gb.as_ptr() as *const u8,
                y.as_mut_ptr() as *mut u8,
                2,
            )
        }
        .unwrap();
        for (a, b) in y.iter().zip(&want) {
            assert!((a.to_f64() - b).abs() < 0.05, "{} vs {b}", a.to_f64());
        }
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { grid_sample_2d(DType::I32, &g, std::ptr::null(), std::ptr::null(), std::ptr::null_mut(), 1) };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "grid_sampler_2d", dtype: DType::I32 }));
        assert!(GridSample::modes(3, 0).is_err() && GridSample::modes(0, 3).is_err());
    }
}
