//! Spatial pooling, forward and backward: max pooling with indices
//! (`max_pool{2,3}d_with_indices`, `adaptive_max_pool{2,3}d`) and average
//! pooling (`avg_pool{2,3}d`, `_adaptive_avg_pool{2,3}d`).
//!
//! Layout: every kernel works on `planes` contiguous planes (PyTorch's N*C,
//! or C for unbatched input) of a depth x height x width volume, row-major
//! (NCDHW / NCHW contiguous). 2-d pooling is 3-d pooling with a depth axis of
//! extent 1 ([`Axis::unit`]). The glue makes inputs contiguous and copies
//! results into channels-last outputs where PyTorch's meta function asks for them.
//!
//! Window placement along one axis, for output position `o` (see [`Window`]):
//! - fixed (`MaxPool`/`AvgPool`): taps `o*stride - padding + j*dilation`,
//!   `j < kernel`, those inside the input;
//! - adaptive: `[floor(o*in/out), ceil((o+1)*in/out))`.
//!
//! Numerics follow PyTorch's CPU kernels: max pooling keeps the first
//! maximum, except that a NaN always replaces the running max (so NaN
//! propagates and its index is the last NaN of the window); indices are flat
//! offsets `d*H*W + h*W + w` within the input plane. Averages sum in window
//! order (depth, height, width) in the opmath type (float for
//! float16/bfloat16, int64 for int64) and divide once by PyTorch's
//! `divide_factor` (fixed windows) or successively by the window extents
//! (adaptive windows). Backward passes scatter-add in output order, one plane
//! per task, so results are deterministic.
//!
//! Speed: max pooling walks a table of every window's taps one round at a
//! time over a block of windows (whole small planes per block), so the
//! compare-and-selects vectorise.

use crate::dtype::{DType, Element};
use crate::engine::iter::{tasks_for, try_for_each_range};
use crate::error::{Error, Result};

/// How the windows of one axis are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// `kernel` taps `dilation` apart, the first at `o * stride - padding`.
    Fixed { kernel: usize, stride: usize, padding: usize, dilation: usize },
    /// PyTorch's adaptive windows: `[floor(o*in/out), ceil((o+1)*in/out))`.
    Adaptive,
}

/// One spatial axis: input and output extents and the window placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Axis {
    pub input: usize,
    pub output: usize,
    pub window: Window,
}

impl Axis {
    /// The trivial axis (extent 1, one tap) that makes 2-d pooling 3-d.
    pub fn unit() -> Axis {
        Axis { input: 1, output: 1, window: Window::Fixed { kernel: 1, stride: 1, padding: 0, dilation: 1 } }
    }

    /// The windows of every output position of this axis.
    fn spans(&self) -> Vec<Span> {
        (0..self.output as i64)
            .map(|o| {
                let n = self.input as i64;
                match self.window {
                    Window::Fixed { kernel, stride, padding, dilation } => {
                        let (k, s, p, d) = (kernel as i64, stride as i64, padding as i64, dilation as i64);
                        let first = o * s - p;
                        // Average pooling (dilation 1) counts padded taps up to `n + padding`.
                        let padded = (first + k).min(n + p) - first;
                        let end = (first + (k - 1) * d + 1).min(n);
                        // The first tap inside the input (PyTorch steps by the dilation).
                        let start = if first < 0 { first + (-first + d - 1) / d * d } else { first };
                        Span { start, end, step: d as usize, padded }
                    }
                    Window::Adaptive => {
                        let (out, o) = (self.output as i64, o);
                        let start = (o / out) * n + ((o % out) * n) / out;
                        let end = 1 + ((o + 1) * n - 1) / out;
                        Span { start, end, step: 1, padded: end - start }
                    }
                }
            })
            .collect()
    }
}

/// The input taps of one window along one axis: `start, start+step, ... < end`
/// (possibly none); `padded` is the window's extent counting padding
/// (PyTorch's `pool_size` factor; the extent for adaptive windows).
#[derive(Debug, Clone, Copy)]
struct Span {
    start: i64,
    end: i64,
    step: usize,
    padded: i64,
}

impl Span {
    fn taps(&self) -> impl Iterator<Item = usize> {
        (self.start.max(0)..self.end.max(0)).step_by(self.step).map(|i| i as usize)
    }
    fn len(&self) -> i64 {
        (self.end - self.start.max(0)).max(0)
    }
}

/// A dtype the pooling loops read and write, and the type they compute in
/// (PyTorch's opmath type: float for float16/bfloat16, int64 for integers).
trait Pooled: Element {
    type Acc: Copy + PartialOrd + Send + Sync;
    /// Start value of a running max (-inf, or the integer type's minimum).
    const ACC_LOWEST: Self::Acc;
    const ACC_ZERO: Self::Acc;
    fn widen(self) -> Self::Acc;
    fn narrow(a: Self::Acc) -> Self;
    fn is_nan(a: Self::Acc) -> bool;
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// `a / n` as C++ divides an opmath value by an int64 (truncating for integers).
    fn div(a: Self::Acc, n: i64) -> Self::Acc;
}

macro_rules! float_pooled {
    ($($t:ty => $a:ty),*) => {$( impl Pooled for $t {
        type Acc = $a;
        const ACC_LOWEST: $a = <$a>::NEG_INFINITY;
        const ACC_ZERO: $a = 0.0;
        #[inline(always)] fn widen(self) -> $a { self.to_f64() as $a }
        #[inline(always)] fn narrow(a: $a) -> Self { <$t as Element>::from_f64(a as f64) }
        #[inline(always)] fn is_nan(a: $a) -> bool { a.is_nan() }
        #[inline(always)] fn add(a: $a, b: $a) -> $a { a + b }
        #[inline(always)] fn div(a: $a, n: i64) -> $a { a / n as $a }
    } )*};
}
float_pooled!(f32 => f32, f64 => f64);

macro_rules! half_pooled {
    ($($t:ty),*) => {$( impl Pooled for $t {
        type Acc = f32;
        const ACC_LOWEST: f32 = f32::NEG_INFINITY;
        const ACC_ZERO: f32 = 0.0;
        #[inline(always)] fn widen(self) -> f32 { self.to_f32() }
        #[inline(always)] fn narrow(a: f32) -> Self { <$t>::from_f32(a) }
        #[inline(always)] fn is_nan(a: f32) -> bool { a.is_nan() }
        #[inline(always)] fn add(a: f32, b: f32) -> f32 { a + b }
        #[inline(always)] fn div(a: f32, n: i64) -> f32 { a / n as f32 }
    } )*};
}
half_pooled!(half::f16, half::bf16);

macro_rules! int_pooled {
    ($($t:ty),*) => {$( impl Pooled for $t {
        type Acc = i64;
        const ACC_LOWEST: i64 = <$t>::MIN as i64;
        const ACC_ZERO: i64 = 0;
        #[inline(always)] fn widen(self) -> i64 { self as i64 }
        #[inline(always)] fn narrow(a: i64) -> Self { a as $t }
        #[inline(always)] fn is_nan(_: i64) -> bool { false }
        #[inline(always)] fn add(a: i64, b: i64) -> i64 { a.wrapping_add(b) }
        #[inline(always)] fn div(a: i64, n: i64) -> i64 { if n == 0 { 0 } else { a.wrapping_div(n) } }
    } )*};
}
int_pooled!(u8, i8, i16, i32, i64);

/// Runs `$body` with `$T` bound to the element type of `$dtype` for the
/// float dtypes, plus int64 (`long`) or every signed integer and uint8 (`ints`).
macro_rules! with_pooled_dtype {
    (@ints none) => { 0 };
    (@ints long) => { 1 };
    (@ints all) => { 2 };
    ($dtype:expr, $op:expr, $ints:ident, |$T:ident| $body:expr) => {
        match ($dtype, with_pooled_dtype!(@ints $ints)) {
            (DType::F32, _) => { type $T = f32; $body }
            (DType::F64, _) => { type $T = f64; $body }
            (DType::F16, _) => { type $T = half::f16; $body }
            (DType::BF16, _) => { type $T = half::bf16; $body }
            (DType::I64, 1..) => { type $T = i64; $body }
            (DType::I32, 2) => { type $T = i32; $body }
            (DType::I16, 2) => { type $T = i16; $body }
            (DType::I8, 2) => { type $T = i8; $body }
            (DType::U8, 2) => { type $T = u8; $body }
            (d, _) => return Err(Error::UnsupportedDtype { op: $op, dtype: d }),
        }
    };
}

/// `count` contiguous planes of `in_plane` input and `out_plane` output elements
/// (the operands of [`max_pool_backward`], and of one max pooling call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planes {
    pub count: usize,
    pub in_plane: usize,
    pub out_plane: usize,
}

/// Extents and windows of the three axes, checked once per call.
struct Geometry {
    spans: [Vec<Span>; 3],
    /// Input extents (depth, height, width).
    input: [usize; 3],
    /// Output extents (depth, height, width).
    output: [usize; 3],
}

impl Geometry {
    fn new(op: &'static str, axes: &[Axis; 3]) -> Result<Geometry> {
        for a in axes {
            if let Window::Fixed { kernel, stride, dilation, .. } = a.window {
                if kernel == 0 || stride == 0 || dilation == 0 {
                    return Err(Error::InvalidLayout {
                        op,
                        reason: format!("kernel, stride and dilation must be positive, got {:?}", a.window),
                    });
                }
            } else if a.output > 0 && a.input == 0 {
                return Err(Error::InvalidLayout { op, reason: "adaptive pooling of an empty axis".into() });
            }
        }
        Ok(Geometry { spans: axes.map(|a| a.spans()), input: axes.map(|a| a.input), output: axes.map(|a| a.output) })
    }
    fn in_plane(&self) -> usize {
        self.input.iter().product()
    }
    fn out_plane(&self) -> usize {
        self.output.iter().product()
    }
}

/// Max pooling forward: for each of `planes` planes, the maximum of every
/// window of `input` (`planes x D x H x W`, contiguous) goes to `output`
/// (`planes x OD x OH x OW`, contiguous) and its flat offset within the input
/// plane (`d*H*W + h*W + w`) to `indices` (int64, same shape as `output`).
/// `axes` are (depth, height, width); 2-d pooling passes [`Axis::unit`] as depth.
///
/// The first maximum wins ties; a NaN replaces the running maximum, so a
/// window with NaN yields NaN and the index of its last NaN. A window
/// without taps yields -inf (the type's minimum for integers) and the offset of
/// its clipped start, as on CPU.
///
/// Dtypes: float32/64, float16, bfloat16, int64, int32, int16, int8, uint8.
/// `threads` bounds the parallelism (1 = serial).
///
/// Errors: [`Error::UnsupportedDtype`] (op `"max_pool"`) for other dtypes;
/// [`Error::InvalidLayout`] for a zero kernel, stride or dilation.
///
/// # Safety
/// `input` addresses `planes * D*H*W` readable elements of `dtype`; `output`
/// and `indices` each `planes * OD*OH*OW` writable elements, not overlapping.
pub unsafe fn max_pool(
    dtype: DType,
    planes: usize,
    axes: &[Axis; 3],
    input: *const u8,
    output: *mut u8,
    indices: *mut i64,
    threads: usize,
) -> Result<()> {
    let g = Geometry::new("max_pool", axes)?;
    with_pooled_dtype!(dtype, "max_pool", all, |T| {
        // SAFETY: caller contract.
        unsafe { max_pool_typed::<T>(&g, planes, input as usize, output as usize, indices as usize, threads) }
    })
}

/// # Safety
/// As [`max_pool`], with `T` the element type of its dtype.
unsafe fn max_pool_typed<T: Pooled>(
    g: &Geometry,
    planes: usize,
    input: usize,
    output: usize,
    indices: usize,
    threads: usize,
) -> Result<()> {
    let [od_n, oh_n, ow_n] = g.output;
    let [_, h_n, w_n] = g.input;
    let (in_plane, out_plane) = (g.in_plane(), g.out_plane());
    if planes * out_plane == 0 {
        return Ok(());
    }
    if let Some((table, rounds)) = tap_table(g) {
        // SAFETY: forwarded contract.
        return unsafe {
            max_pool_tabled::<T>(
                &table,
                rounds,
                Planes { count: planes, in_plane, out_plane },
                input,
                output,
                indices,
                threads,
            )
        };
    }
    // A row is one (plane, od, oh): OW outputs.
    let rows = planes * od_n * oh_n;
    let taps: usize = g.spans.iter().map(|s| s.first().map_or(1, |s| s.len().max(1) as usize)).product();
    try_for_each_range(rows, tasks_for(rows, (ow_n * taps).max(1), threads), |start, end| {
        for r in start..end {
            let (plane, oh) = (r / (od_n * oh_n), r % oh_n);
            let od = (r / oh_n) % od_n;
            // SAFETY: caller contract; row r's outputs are written by this task only.
            let (src, dst, idx) = unsafe {
                (
                    (input as *const T).add(plane * in_plane),
                    (output as *mut T).add(plane * out_plane + (od * oh_n + oh) * ow_n),
                    (indices as *mut i64).add(plane * out_plane + (od * oh_n + oh) * ow_n),
                )
            };
            let (sd, sh) = (g.spans[0][od], g.spans[1][oh]);
            for (ow, sw) in g.spans[2].iter().enumerate() {
                let mut best = T::ACC_LOWEST;
                let mut at = (sd.start.max(0) * h_n as i64 + sh.start.max(0)) * w_n as i64 + sw.start.max(0);
                for d in sd.taps() {
                    for h in sh.taps() {
                        let line = (d * h_n + h) * w_n;
                        for w in sw.taps() {
                            // SAFETY: taps lie inside the plane.
                            let v = unsafe { *src.add(line + w) }.widen();
                            if v > best || T::is_nan(v) {
                                best = v;
                                at = (line + w) as i64;
                            }
                        }
                    }
                }
                // SAFETY: ow < OW within this row.
                unsafe {
                    *dst.add(ow) = T::narrow(best);
                    *idx.add(ow) = at;
                }
            }
        }
        Ok(())
    })
}

/// Most entries of a [`tap_table`] (4 MiB).
const TABLE_MAX: usize = 1 << 20;

/// Block of outputs a plane's [`max_pool_tabled`] rounds run over, so that the running
/// maxima and offsets stay in the L1 cache between rounds.
const TABLE_BLOCK: usize = 512;

/// The taps of every window of a plane as a table `[round][output]` of in-plane
/// offsets, `rounds` the most taps of a window: output `o`'s taps in (depth, height,
/// width) order fill its last rounds and its first tap repeats in the rounds before
/// them. A repeated first tap changes no result: it is not greater than itself, and
/// a NaN repeated before the later taps still leaves the last NaN's offset. None when
/// some window has no tap (its result is the clipped start, not a tap), an offset
/// does not fit in u32, or the table would exceed [`TABLE_MAX`] entries.
fn tap_table(g: &Geometry) -> Option<(Vec<u32>, usize)> {
    let (out_plane, [_, h_n, w_n]) = (g.out_plane(), g.input);
    let rounds: usize = g.spans.iter().map(|a| a.iter().map(|s| s.taps().count()).max().unwrap_or(0)).product();
    if rounds == 0 || g.in_plane() > u32::MAX as usize || out_plane.checked_mul(rounds)? > TABLE_MAX {
        return None;
    }
    let mut table = vec![0u32; rounds * out_plane];
    let mut taps = Vec::with_capacity(rounds);
    let mut o = 0;
    for sd in &g.spans[0] {
        for sh in &g.spans[1] {
            for sw in &g.spans[2] {
                taps.clear();
                for d in sd.taps() {
                    for h in sh.taps() {
                        taps.extend(sw.taps().map(|w| ((d * h_n + h) * w_n + w) as u32));
                    }
                }
                let first = *taps.first()?;
                let pad = rounds - taps.len();
                for t in 0..rounds {
                    table[t * out_plane + o] = if t < pad { first } else { taps[t - pad] };
                }
                o += 1;
            }
        }
    }
    Some((table, rounds))
}

/// [`max_pool_typed`] through a [`tap_table`], one block of outputs at a time: a block
/// is either [`TABLE_BLOCK`] outputs of one plane or, for planes with fewer outputs, as
/// many whole planes as fit. Per block and round, the round's taps are gathered into a
/// contiguous array and then compared with the block's running maxima, so that
/// consecutive compare-and-selects belong to different windows and vectorise, instead
/// of forming one window's chain of dependent compare-and-selects (measured: about 6
/// cycles a tap, against about 2 here); whole-plane blocks keep small planes (a 2x2
/// pool of 8x8 maps: 16 outputs) from paying a block's overhead per plane.
///
/// # Safety
/// As [`max_pool`]; `table` is [`tap_table`]'s for the call's geometry.
unsafe fn max_pool_tabled<T: Pooled>(
    table: &[u32],
    rounds: usize,
    shape: Planes,
    input: usize,
    output: usize,
    indices: usize,
    threads: usize,
) -> Result<()> {
    let Planes { count: planes, in_plane, out_plane } = shape;
    // Planes per block (their gather offsets must fit in u32) and outputs per plane per block.
    let bp = (TABLE_BLOCK / out_plane).clamp(1, (u32::MAX as usize / in_plane.max(1)).max(1)).min(planes);
    let bo = if bp > 1 { out_plane } else { TABLE_BLOCK.min(out_plane) };
    let k = bp * bo;
    // For whole-plane blocks, the table repeated per plane of the block, with gather
    // offsets from the block's first plane.
    let (gather, within): (Vec<u32>, Vec<u32>) = if bp > 1 {
        (0..rounds)
            .flat_map(|t| {
                (0..bp)
                    .flat_map(move |pb| (0..out_plane).map(move |o| (pb * in_plane) as u32 + table[t * out_plane + o]))
            })
            .zip(
                (0..rounds)
                    .flat_map(|t| (0..bp).flat_map(move |_| table[t * out_plane..(t + 1) * out_plane].iter().copied())),
            )
            .unzip()
    } else {
        (Vec::new(), Vec::new())
    };
    let blocks_per_plane = out_plane.div_ceil(bo);
    let units = if bp > 1 { planes.div_ceil(bp) } else { planes * blocks_per_plane };
    try_for_each_range(units, tasks_for(units, (k * rounds).max(1), threads), |start, end| {
        let (mut best, mut at, mut vals) = (vec![T::ACC_LOWEST; k], vec![0u32; k], vec![T::ACC_LOWEST; k]);
        for u in start..end {
            // The block's first plane, first output within it, and length.
            let (p, o0, n) = if bp > 1 {
                (u * bp, 0, (planes - u * bp).min(bp) * out_plane)
            } else {
                let o0 = u % blocks_per_plane * bo;
                (u / blocks_per_plane, o0, bo.min(out_plane - o0))
            };
            // Round t's gather offsets (from plane p's start) and in-plane offsets.
            let round = |t: usize| -> (&[u32], &[u32]) {
                if bp > 1 {
                    (&gather[t * k..t * k + n], &within[t * k..t * k + n])
                } else {
                    let r = &table[t * out_plane + o0..t * out_plane + o0 + n];
                    (r, r)
                }
            };
            // SAFETY: caller contract; the block's outputs are written by this task only.
            let (src, dst, idx) = unsafe {
                (
                    (input as *const T).add(p * in_plane),
                    (output as *mut T).add(p * out_plane + o0),
                    (indices as *mut i64).add(p * out_plane + o0),
                )
            };
            let (best, at, vals) = (&mut best[..n], &mut at[..n], &mut vals[..n]);
            best.fill(T::ACC_LOWEST);
            at.copy_from_slice(round(0).1);
            for t in 0..rounds {
                let (offs, inner) = round(t);
                // Gathered first, then compared with unconditional selects: in one
                // loop LLVM vectorises neither.
                for (v, &off) in vals.iter_mut().zip(offs) {
                    // SAFETY: table offsets lie inside the block's planes.
                    *v = unsafe { *src.add(off as usize) }.widen();
                }
                for (((b, a), &v), &off) in best.iter_mut().zip(at.iter_mut()).zip(vals.iter()).zip(inner) {
                    let take = (v > *b) | T::is_nan(v);
                    *b = if take { v } else { *b };
                    *a = if take { off } else { *a };
                }
            }
            for j in 0..n {
                // SAFETY: the block's n outputs follow dst and idx.
                unsafe {
                    *dst.add(j) = T::narrow(best[j]);
                    *idx.add(j) = at[j] as i64;
                }
            }
        }
        Ok(())
    })
}

/// Max pooling backward, on the [`Planes`] `shape` (`planes` = `shape.count`):
/// `grad_input` (`planes x in_plane`, contiguous) is zeroed, then every `grad_output` element (`planes x out_plane`) is added at
/// the offset its `indices` entry (same shape, int64) names within its plane.
/// Accumulation runs in output order in the opmath type (float for
/// float16/bfloat16), one plane per task, so it is deterministic.
///
/// Dtypes: float32/64, float16, bfloat16, int64, int32, int16, int8, uint8.
///
/// Errors: [`Error::UnsupportedDtype`] (op `"max_pool_backward"`);
/// [`Error::InvalidValue`] for an index outside `[0, in_plane)` (the
/// gradient of that plane is then incomplete).
///
/// # Safety
/// `grad_output` and `indices` address `planes * out_plane` readable elements
/// (of `dtype` / int64); `grad_input` `planes * in_plane` writable elements of
/// `dtype`, overlapping neither.
pub unsafe fn max_pool_backward(
    dtype: DType,
    shape: Planes,
    grad_output: *const u8,
    indices: *const i64,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    let Planes { count: planes, in_plane, out_plane } = shape;
    with_pooled_dtype!(dtype, "max_pool_backward", all, |T| {
        let (go, ix, gi) = (grad_output as usize, indices as usize, grad_input as usize);
        try_for_each_range(planes, tasks_for(planes, (in_plane + out_plane).max(1), threads), |start, end| {
            let mut acc = vec![T::ACC_ZERO; in_plane];
            for p in start..end {
                acc.iter_mut().for_each(|a| *a = T::ACC_ZERO);
                // SAFETY: caller contract; plane p belongs to this task.
                // wrapping_add: an empty grad_output may have a null pointer.
                let (go, ix) =
                    ((go as *const T).wrapping_add(p * out_plane), (ix as *const i64).wrapping_add(p * out_plane));
                for o in 0..out_plane {
                    // SAFETY: o < out_plane.
                    let (i, v) = unsafe { (*ix.add(o), *go.add(o)) };
                    let slot = usize::try_from(i).ok().and_then(|i| acc.get_mut(i));
                    let Some(slot) = slot else {
                        return Err(Error::InvalidValue { op: "max_pool_backward", reason: format!("max pooling backward: index {i} is out of bounds for an input plane of {in_plane} elements") });
                    };
                    *slot = T::add(*slot, v.widen());
                }
                // SAFETY: plane p of grad_input.
                let gi = unsafe { (gi as *mut T).add(p * in_plane) };
                for (k, a) in acc.iter().enumerate() {
                    // SAFETY: plane p of grad_input.
                    unsafe { *gi.add(k) = T::narrow(*a) };
                }
            }
            Ok(())
        })
    })
}

/// How an average is divided, PyTorch's `divide_factor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Divisor {
    /// Fixed windows: the window volume counting padding (`count_include_pad`)
    /// or only taps inside the input.
    Window { count_include_pad: bool },
    /// Fixed windows: this number (`divisor_override`).
    Override(i64),
    /// Adaptive windows: successively by the window's depth, height and width.
    Adaptive,
}

impl Divisor {
    /// Divides the sum of the window (sd, sh, sw) as PyTorch's CPU kernel does.
    #[inline(always)]
    fn apply<T: Pooled>(self, sum: T::Acc, sd: &Span, sh: &Span, sw: &Span) -> T::Acc {
        match self {
            Divisor::Window { count_include_pad: true } => T::div(sum, sd.padded * sh.padded * sw.padded),
            Divisor::Window { count_include_pad: false } => T::div(sum, sd.len() * sh.len() * sw.len()),
            Divisor::Override(n) => T::div(sum, n),
            Divisor::Adaptive => T::div(T::div(T::div(sum, sd.padded), sh.padded), sw.padded),
        }
    }
}

fn check_divisor(op: &'static str, axes: &[Axis; 3], divisor: Divisor) -> Result<()> {
    let adaptive = axes.iter().filter(|a| a.window == Window::Adaptive).count();
    let dilated = axes.iter().any(|a| matches!(a.window, Window::Fixed { dilation, .. } if dilation != 1));
    let ok = match divisor {
        Divisor::Adaptive => adaptive == 3,
        Divisor::Override(n) => adaptive == 0 && n != 0,
        Divisor::Window { .. } => adaptive == 0,
    };
    if !ok || dilated {
        return Err(Error::InvalidLayout { op, reason: format!("average pooling takes undilated fixed windows or adaptive windows on every axis, with a nonzero divisor; got {divisor:?}") });
    }
    Ok(())
}

/// Average pooling forward: every window of `input` (`planes x D x H x W`,
/// contiguous) is summed in the opmath type and divided per `divisor`; the
/// result goes to `output` (`planes x OD x OH x OW`, contiguous). A window
/// with no tap inside the input yields 0. `axes` are (depth, height, width),
/// either all fixed with dilation 1 or all adaptive (matching `divisor`).
///
/// Dtypes: float32/64, float16, bfloat16, int64 (integer division truncates).
///
/// Errors: [`Error::UnsupportedDtype`] (op `"avg_pool"`); [`Error::InvalidLayout`]
/// for mixed or dilated windows, a zero divisor, or a zero kernel/stride.
///
/// # Safety
/// `input` addresses `planes * D*H*W` readable elements of `dtype`, `output`
/// `planes * OD*OH*OW` writable ones, not overlapping.
pub unsafe fn avg_pool(
    dtype: DType,
    planes: usize,
    axes: &[Axis; 3],
    divisor: Divisor,
    input: *const u8,
    output: *mut u8,
    threads: usize,
) -> Result<()> {
    check_divisor("avg_pool", axes, divisor)?;
    let g = Geometry::new("avg_pool", axes)?;
    with_pooled_dtype!(dtype, "avg_pool", long, |T| {
        let (input, output) = (input as usize, output as usize);
        let [od_n, oh_n, ow_n] = g.output;
        let [_, h_n, w_n] = g.input;
        let (in_plane, out_plane) = (g.in_plane(), g.out_plane());
        if planes * out_plane == 0 {
            return Ok(());
        }
        let rows = planes * od_n * oh_n;
        let taps: usize = g.spans.iter().map(|s| s.first().map_or(1, |s| s.padded.max(1) as usize)).product();
        try_for_each_range(rows, tasks_for(rows, (ow_n * taps).max(1), threads), |start, end| {
            for r in start..end {
                let (plane, oh) = (r / (od_n * oh_n), r % oh_n);
                let od = (r / oh_n) % od_n;
                // SAFETY: caller contract; row r's outputs belong to this task.
                let (src, dst) = unsafe {
                    (
                        (input as *const T).add(plane * in_plane),
                        (output as *mut T).add(plane * out_plane + (od * oh_n + oh) * ow_n),
                    )
                };
                let (sd, sh) = (&g.spans[0][od], &g.spans[1][oh]);
                for (ow, sw) in g.spans[2].iter().enumerate() {
                    let v = if sd.len() == 0 || sh.len() == 0 || sw.len() == 0 {
                        T::ACC_ZERO
                    } else {
                        let mut sum = T::ACC_ZERO;
                        for d in sd.taps() {
                            for h in sh.taps() {
                                let line = (d * h_n + h) * w_n;
                                for w in sw.taps() {
                                    // SAFETY: taps lie inside the plane.
                                    sum = T::add(sum, unsafe { *src.add(line + w) }.widen());
                                }
                            }
                        }
                        divisor.apply::<T>(sum, sd, sh, sw)
                    };
                    // SAFETY: ow < OW within this row.
                    unsafe { *dst.add(ow) = T::narrow(v) };
                }
            }
            Ok(())
        })
    })
}

/// Average pooling backward: `grad_input` (`planes x D x H x W`, contiguous)
/// is zeroed, then each `grad_output` element (`planes x OD x OH x OW`),
/// divided per `divisor` as in [`avg_pool`], is added to every input tap of
/// its window. Accumulation runs in output order in the opmath type, one
/// plane per task (deterministic). Windows without taps contribute nothing.
///
/// Dtypes, errors: as [`avg_pool`] (op `"avg_pool_backward"`).
///
/// # Safety
/// `grad_output` addresses `planes * OD*OH*OW` readable elements of `dtype`,
/// `grad_input` `planes * D*H*W` writable ones, not overlapping.
pub unsafe fn avg_pool_backward(
    dtype: DType,
    planes: usize,
    axes: &[Axis; 3],
    divisor: Divisor,
    grad_output: *const u8,
    grad_input: *mut u8,
    threads: usize,
) -> Result<()> {
    check_divisor("avg_pool_backward", axes, divisor)?;
    let g = Geometry::new("avg_pool_backward", axes)?;
    with_pooled_dtype!(dtype, "avg_pool_backward", long, |T| {
        let (go, gi) = (grad_output as usize, grad_input as usize);
        let [_, h_n, w_n] = g.input;
        let (in_plane, out_plane) = (g.in_plane(), g.out_plane());
        try_for_each_range(planes, tasks_for(planes, (in_plane + out_plane).max(1), threads), |start, end| {
            let mut acc = vec![T::ACC_ZERO; in_plane];
            for p in start..end {
                acc.iter_mut().for_each(|a| *a = T::ACC_ZERO);
                // SAFETY: caller contract; plane p belongs to this task.
                // wrapping_add: an empty grad_output may have a null pointer.
                let go = (go as *const T).wrapping_add(p * out_plane);
                let mut o = 0;
                for sd in &g.spans[0] {
                    for sh in &g.spans[1] {
                        for sw in &g.spans[2] {
                            // SAFETY: o < out_plane.
                            let delta = divisor.apply::<T>(unsafe { *go.add(o) }.widen(), sd, sh, sw);
                            o += 1;
                            for d in sd.taps() {
                                for h in sh.taps() {
                                    let line = (d * h_n + h) * w_n;
                                    for w in sw.taps() {
                                        acc[line + w] = T::add(acc[line + w], delta);
                                    }
                                }
                            }
                        }
                    }
                }
                // SAFETY: plane p of grad_input.
                let gi = unsafe { (gi as *mut T).add(p * in_plane) };
                for (k, a) in acc.iter().enumerate() {
                    // SAFETY: plane p of grad_input.
                    unsafe { *gi.add(k) = T::narrow(*a) };
                }
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 33) % 2000) as f64 / 100.0 - 10.0
    }

    fn fixed(input: usize, kernel: usize, stride: usize, padding: usize, dilation: usize, ceil: bool) -> Axis {
        // PyTorch's output-size formula, ceil_mode included.
        let span = (input + 2 * padding) as i64 - (dilation * (kernel - 1) + 1) as i64;
        let mut output = if ceil {
            (span + stride as i64 - 1).div_euclid(stride as i64) + 1
        } else {
            span.div_euclid(stride as i64) + 1
        };
        if ceil && (output - 1) * stride as i64 >= (input + padding) as i64 {
            output -= 1;
        }
        Axis { input, output: output as usize, window: Window::Fixed { kernel, stride, padding, dilation } }
    }

    /// Input positions of window `o` along `a`, and the padded extent, by enumeration.
    fn naive_taps(a: &Axis, o: usize) -> (Vec<usize>, i64) {
        match a.window {
            Window::Fixed { kernel, stride, padding, dilation } => {
                let pos: Vec<i64> = (0..kernel).map(|j| (o * stride + j * dilation) as i64 - padding as i64).collect();
                let padded = pos.iter().filter(|&&p| p < (a.input + padding) as i64).count() as i64;
                (pos.into_iter().filter(|&p| p >= 0 && p < a.input as i64).map(|p| p as usize).collect(), padded)
            }
            Window::Adaptive => {
                let s = (o * a.input) / a.output;
                let e = ((o + 1) * a.input).div_ceil(a.output);
                ((s..e).collect(), (e - s) as i64)
            }
        }
    }

    fn shapes() -> Vec<[Axis; 3]> {
        vec![
            [Axis::unit(), fixed(7, 3, 2, 1, 1, false), fixed(6, 2, 2, 0, 1, true)],
            [Axis::unit(), fixed(9, 3, 2, 1, 2, true), fixed(5, 2, 1, 1, 3, false)],
            [fixed(5, 2, 2, 1, 1, true), fixed(4, 3, 1, 1, 1, false), fixed(6, 3, 3, 0, 1, true)],
            [
                Axis { input: 7, output: 3, window: Window::Adaptive },
                Axis { input: 5, output: 5, window: Window::Adaptive },
                Axis { input: 4, output: 6, window: Window::Adaptive },
            ],
        ]
    }

    fn data(n: usize, nan_every: usize) -> Vec<f64> {
        let mut seed = n as u64;
        (0..n).map(|i| if nan_every > 0 && i % nan_every == 3 { f64::NAN } else { lcg(&mut seed) }).collect()
    }

    #[test]
    fn max_pool_matches_naive() {
        for axes in shapes() {
            let planes = 3;
            let ip: usize = axes.iter().map(|a| a.input).product();
            let op: usize = axes.iter().map(|a| a.output).product();
            for nan_every in [0, 7] {
                let x: Vec<f32> = data(planes * ip, nan_every).iter().map(|&v| (v as f32).round()).collect();
                for threads in [1, 4] {
                    let (mut y, mut idx) = (vec![0f32; planes * op], vec![-1i64; planes * op]);
                    // SAFETY: the pointers address live local buffers sized for the call.
                    unsafe {
                        max_pool(
                            DType::F32,
                            planes,
                            &axes,
                            x.as_ptr() as *const u8,
                            y.as_mut_ptr() as *mut u8,
                            idx.as_mut_ptr(),
                            threads,
                        )
                    }
                    .unwrap();
                    let mut k = 0;
                    for p in 0..planes {
                        for od in 0..axes[0].output {
                            for oh in 0..axes[1].output {
                                for ow in 0..axes[2].output {
                                    let (td, th, tw) = (
                                        naive_taps(&axes[0], od).0,
                                        naive_taps(&axes[1], oh).0,
                                        naive_taps(&axes[2], ow).0,
                                    );
                                    let (mut best, mut at) = (f32::NEG_INFINITY, -1i64);
                                    for &d in &td {
                                        for &h in &th {
                                            for &w in &tw {
                                                let off = (d * axes[1].input + h) * axes[2].input + w;
                                                let v = x[p * ip + off];
                                                if at < 0 || v > best || v.is_nan() {
                                                    (best, at) = (v, off as i64);
                                                }
                                            }
                                        }
                                    }
                                    assert_eq!(
                                        (y[k].to_bits(), idx[k]),
                                        (best.to_bits(), at),
                                        "axes {axes:?} plane {p} out {od},{oh},{ow}"
                                    );
                                    k += 1;
                                }
                            }
                        }
                    }
                    // Backward: each plane's gradient sums grad_output at the indices.
                    let go: Vec<f32> = (0..planes * op).map(|i| (i % 5) as f32 + 0.5).collect();
                    let mut gi = vec![f32::NAN; planes * ip];
                    // SAFETY: the pointers address live local buffers sized for the call.
                    unsafe {
                        max_pool_backward(
                            DType::F32,
                            Planes { count: planes, in_plane: ip, out_plane: op },
                            go.as_ptr() as *const u8,
                            idx.as_ptr(),
                            gi.as_mut_ptr() as *mut u8,
                            threads,
                        )
                    }
                    .unwrap();
                    let mut want = vec![0f32; planes * ip];
                    for (o, &i) in idx.iter().enumerate() {
                        want[(o / op) * ip + i as usize] += go[o];
                    }
                    assert_eq!(gi, want);
                }
            }
        }
    }

    #[test]
    fn avg_pool_matches_naive() {
        for (s, axes) in shapes().into_iter().enumerate() {
            let adaptive = s == 3;
            let planes = 2;
            let ip: usize = axes.iter().map(|a| a.input).product();
            let op: usize = axes.iter().map(|a| a.output).product();
            let x = data(planes * ip, 0);
            let divisors: Vec<Divisor> = if adaptive {
                vec![Divisor::Adaptive]
            } else {
                vec![
                    Divisor::Window { count_include_pad: true },
                    Divisor::Window { count_include_pad: false },
                    Divisor::Override(3),
                ]
            };
            let dilated = axes.iter().any(|a| matches!(a.window, Window::Fixed { dilation, .. } if dilation > 1));
            for divisor in divisors {
                let mut y = vec![0f64; planes * op];
                // SAFETY: the pointers address live local buffers sized for the call.
                let r = unsafe {
                    avg_pool(DType::F64, planes, &axes, divisor, x.as_ptr() as *const u8, y.as_mut_ptr() as *mut u8, 4)
                };
                if dilated {
                    assert!(matches!(r, Err(Error::InvalidLayout { .. })));
                    continue;
                }
                r.unwrap();
                let go: Vec<f64> = (0..planes * op).map(|i| (i % 7) as f64 - 2.0).collect();
                let mut gi = vec![f64::NAN; planes * ip];
                // SAFETY: the pointers address live local buffers sized for the call.
                unsafe {
                    avg_pool_backward(
                        DType::F64,
                        planes,
                        &axes,
                        divisor,
                        go.as_ptr() as *const u8,
                        gi.as_mut_ptr() as *mut u8,
                        3,
                    )
                }
                .unwrap();
                let mut want_gi = vec![0f64; planes * ip];
                let mut k = 0;
                for p in 0..planes {
                    for od in 0..axes[0].output {
                        for oh in 0..axes[1].output {
                            for ow in 0..axes[2].output {
                                let ((td, pd), (th, ph), (tw, pw)) =
                                    (naive_taps(&axes[0], od), naive_taps(&axes[1], oh), naive_taps(&axes[2], ow));
                                let n = (td.len() * th.len() * tw.len()) as f64;
                                let div = |v: f64| match divisor {
                                    Divisor::Window { count_include_pad: true } => v / (pd * ph * pw) as f64,
                                    Divisor::Window { count_include_pad: false } => v / n,
                                    Divisor::Override(d) => v / d as f64,
                                    Divisor::Adaptive => v / pd as f64 / ph as f64 / pw as f64,
                                };
                                let mut sum = 0.0;
                                for &d in &td {
                                    for &h in &th {
                                        for &w in &tw {
                                            let off = p * ip + (d * axes[1].input + h) * axes[2].input + w;
                                            sum += x[off];
                                            want_gi[off] += div(go[k]);
                                        }
                                    }
                                }
                                let want = if n == 0.0 { 0.0 } else { div(sum) };
                                assert_eq!(y[k], want, "axes {axes:?} {divisor:?} plane {p} out {od},{oh},{ow}");
                                k += 1;
                            }
                        }
                    }
                }
                assert_eq!(gi, want_gi, "{divisor:?}");
            }
        }
    }

    #[test]
    fn half_and_integer_dtypes() {
        let axes = [Axis::unit(), fixed(4, 2, 2, 0, 1, false), fixed(4, 2, 2, 0, 1, false)];
        let x: Vec<bf16> = (0..16).map(|i| bf16::from_f32(i as f32 * 0.25)).collect();
        let (mut y, mut idx) = (vec![bf16::ZERO; 4], vec![0i64; 4]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            max_pool(DType::BF16, 1, &axes, x.as_ptr() as *const u8, y.as_mut_ptr() as *mut u8, idx.as_mut_ptr(), 1)
        }
        .unwrap();
        assert_eq!(
            (y.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), idx),
            (vec![1.25, 1.75, 3.25, 3.75], vec![5, 7, 13, 15])
        );
        let mut a = vec![bf16::ZERO; 4];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            avg_pool(
                DType::BF16,
                1,
                &axes,
                Divisor::Window { count_include_pad: true },
                x.as_ptr() as *const u8,
                a.as_mut_ptr() as *mut u8,
                1,
            )
        }
        .unwrap();
        assert_eq!(a.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), vec![0.625, 1.125, 2.625, 3.125]);
        // int64 averages truncate; int8 max starts below every value.
        let xi: Vec<i64> = (0..16).map(|i| -i).collect();
        let mut ai = vec![0i64; 4];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            avg_pool(
                DType::I64,
                1,
                &axes,
                Divisor::Window { count_include_pad: true },
                xi.as_ptr() as *const u8,
                ai.as_mut_ptr() as *mut u8,
                1,
            )
        }
        .unwrap();
        assert_eq!(ai, vec![-2, -4, -10, -12]);
        let x8: Vec<i8> = vec![-128; 16];
        let (mut y8, mut i8x) = (vec![0i8; 4], vec![0i64; 4]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            max_pool(DType::I8, 1, &axes, x8.as_ptr() as *const u8, y8.as_mut_ptr() as *mut u8, i8x.as_mut_ptr(), 1)
        }
        .unwrap();
        assert_eq!((y8, i8x), (vec![-128; 4], vec![0, 2, 8, 10]));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            avg_pool(DType::I8, 1, &axes, Divisor::Adaptive, x8.as_ptr() as *const u8, y.as_mut_ptr() as *mut u8, 1)
        };
        assert!(matches!(e, Err(Error::InvalidLayout { .. })));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            avg_pool(DType::I8, 1, &axes, Divisor::Override(2), x8.as_ptr() as *const u8, y.as_mut_ptr() as *mut u8, 1)
        };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "avg_pool", dtype: DType::I8 }));
    }

    #[test]
    fn backward_rejects_bad_indices() {
        let go = [1.0f32; 2];
        let mut gi = [0f32; 4];
        for bad in [[0i64, 4], [-1, 0]] {
            // SAFETY: the pointers address live local buffers sized for the call.
            let e = unsafe {
                max_pool_backward(
                    DType::F32,
                    Planes { count: 1, in_plane: 4, out_plane: 2 },
                    go.as_ptr() as *const u8,
                    bad.as_ptr(),
                    gi.as_mut_ptr() as *mut u8,
                    1,
                )
            };
            assert!(matches!(e, Err(Error::InvalidValue { .. })));
        }
    }

    #[test]
    fn empty_inputs_touch_nothing() {
        let axes = [Axis::unit(), fixed(4, 2, 2, 0, 1, false), Axis { input: 3, output: 0, window: Window::Adaptive }];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { max_pool(DType::F32, 2, &axes, std::ptr::null(), std::ptr::null_mut(), std::ptr::null_mut(), 4) }
            .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            max_pool(DType::F32, 0, &[Axis::unit(); 3], std::ptr::null(), std::ptr::null_mut(), std::ptr::null_mut(), 4)
        }
        .unwrap();
    }
}
