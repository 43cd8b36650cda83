//! PyTorch's `im2col` / `col2im` operators (`F.unfold` / `F.fold`) on 2-d
//! images: the same loops the convolution lowers to ([`super::columns`]),
//! exposed on their own, per sample or split over channels.

use crate::dtype::DType;
use crate::engine::iter::for_each_chunk_mut;
use crate::error::{Error, Result};

use super::columns::{col2im, im2col, ColumnBlock};
use super::{Acc, Out, Storage, Window, MAX_SPATIAL};

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
    pub(super) fn window(&self, op: &'static str) -> Result<Window> {
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
                return Err(Error::InvalidLayout {
                    op,
                    reason: format!(
                        "kernel {:?}, stride {:?} and dilation {:?} must be positive",
                        self.kernel, self.stride, self.dilation
                    ),
                });
            }
            w.grid[d] = w.positions(d).ok_or_else(|| Error::InvalidLayout {
                op,
                reason: format!("a {:?} window does not fit the padded {:?} image", self.kernel, self.image),
            })?;
        }
        Ok(w)
    }

    /// Elements of the images and of the columns.
    pub(super) fn lens(&self, w: &Window) -> (usize, usize) {
        (self.batch * self.channels * w.image_len(), self.batch * self.channels * w.taps() * w.grid_len())
    }

    /// Elements of the images and of the columns, for a caller checking its
    /// buffers; errors as [`unfold`] (`op` names the call in them).
    pub fn elements(&self, op: &'static str) -> Result<(usize, usize)> {
        Ok(self.lens(&self.window(op)?))
    }
}

/// Runs `f(n, src_n, dst_n)` for every image `n`: samples over tasks when
/// there are at least as many samples as threads, else one after the other with
/// `f` splitting channels (it receives the threads it may use).
fn per_sample<C: Acc>(
    batch: usize,
    src: &[C],
    dst: &mut [C],
    threads: usize,
    f: impl Fn(&[C], &mut [C], usize) + Sync,
) {
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
            per_sample(u.batch, &s, d.slice(), threads, |cols, img, t| {
                col2im(&w, ColumnBlock::whole(&w, u.channels, 1), cols, img, 0, false, t)
            });
        } else {
            per_sample(u.batch, &s, d.slice(), threads, |img, cols, t| {
                im2col(&w, ColumnBlock::whole(&w, u.channels, 1), img, 0, cols, t)
            });
        }
        d.finish();
    }
    Ok(())
}

unsafe fn dispatch_unfold(
    dtype: DType,
    u: &Unfold,
    fold: bool,
    src: *const u8,
    dst: *mut u8,
    threads: usize,
) -> Result<()> {
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
