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
//! 2-d convolutions with unit height stride and enough channels and output
//! positions take another lowering for the forward and (unit strides) the input
//! gradient: `mec`'s, which unfolds along the kernel's width only and turns the
//! height taps into shifted views of that matrix (three copies of the input for 3x3
//! instead of nine).
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

use crate::dtype::Element;
use crate::engine::math::Num;
use crate::error::{Error, Result};
use crate::ops::linalg::gemm::{gemm, GemmShape, Matrix, SPLIT_MACS};

mod backward;
mod columns;
mod forward;
mod mec;
#[cfg(test)]
mod tests;
mod unfold;

pub use backward::{convolution_backward, Grads};
pub use forward::convolution;
pub use unfold::{fold, unfold, Unfold};

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
    pub fn new(
        batch: i64,
        in_channels: i64,
        out_channels: i64,
        groups: i64,
        transposed: bool,
        s: Spatial,
    ) -> Result<Conv> {
        let bad = |reason: String| Error::InvalidLayout { op: "convolution", reason };
        let nd = s.input.len();
        if !(1..=MAX_SPATIAL).contains(&nd)
            || [s.output, s.kernel, s.stride, s.padding, s.dilation].iter().any(|l| l.len() != nd)
        {
            return Err(bad(format!(
                "spatial lists of lengths {:?}",
                [s.input, s.output, s.kernel, s.stride, s.padding, s.dilation].map(|l| l.len())
            )));
        }
        let count = |v: i64, what: &str, min: i64| {
            usize::try_from(v).ok().filter(|&u| u as i64 >= min).ok_or_else(|| bad(format!("{what} {v}")))
        };
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
            return Err(bad(format!(
                "{} groups for {} input and {} output channels",
                cv.groups, cv.in_channels, cv.out_channels
            )));
        }
        let w = cv.window();
        for d in 0..MAX_SPATIAL {
            let fits = w.positions(d).is_some_and(|p| if transposed { w.grid[d] <= p } else { w.grid[d] == p });
            if !fits {
                return Err(bad(format!(
                    "input extents {:?} and output extents {:?} do not match the kernel {:?}",
                    cv.input, cv.output, cv.kernel
                )));
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
        if self.transposed {
            (o, i)
        } else {
            (i, o)
        }
    }

    /// Elements of the input, weight and output.
    pub fn lens(&self) -> (usize, usize, usize) {
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
        self.taps() == 1
            && self.stride == [1; MAX_SPATIAL]
            && self.padding == [0; MAX_SPATIAL]
            && self.image == self.grid
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

/// The compute types: float32, float64 and the integers (wrapping, as C++).
trait Acc: Num + Send + Sync + crate::engine::scratch::Plain {
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

/// `c (m x n, row stride ldc) = a @ b + beta * c`, operands as (slice, row stride, column
/// stride) and the output as (slice, row stride).
fn product<C: Acc>(
    m: usize,
    n: usize,
    k: usize,
    a: (&[C], usize, usize),
    b: (&[C], usize, usize),
    beta: f64,
    (c, ldc): (&mut [C], usize),
) -> Result<()> {
    let mat = |p: *const C, rs: usize, cs: usize| Matrix {
        ptr: p as *mut u8,
        batch_stride: 0,
        row_stride: rs as isize,
        col_stride: cs as isize,
    };
    // SAFETY: every slice covers the rows and columns its strides address (the callers size them so).
    unsafe {
        gemm(
            C::DTYPE,
            GemmShape { batch: 1, m, n, k },
            1.0,
            mat(a.0.as_ptr(), a.1, a.2),
            mat(b.0.as_ptr(), b.1, b.2),
            beta,
            mat(c.as_mut_ptr(), ldc, 1),
        )
    }
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
        let chunk = if blocked {
            1
        } else if forward {
            cached
        } else {
            chunk
        }
        .clamp(1, batch);
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
/// waiting to be scattered; and the threads the task's products and im2col/col2im
/// may use (the [`Plan`]'s `inner`).
struct Scratch<C> {
    cols: Vec<C>,
    mat: Vec<C>,
    out: Vec<C>,
    threads: usize,
}

impl<C> Scratch<C> {
    fn new(threads: usize) -> Self {
        Scratch { cols: Vec::new(), mat: Vec::new(), out: Vec::new(), threads }
    }
}
