//! Fused scaled dot-product attention, forward and backward, memory-efficient:
//! the [L, S] score matrix of a head is never materialised.
//!
//! Algorithm: FlashAttention-2 (T. Dao, "FlashAttention-2: Faster Attention
//! with Better Parallelism and Work Partitioning", 2023), written for CPU
//! cores. The forward pass walks over key blocks for one block of query
//! rows and keeps, per row, the running maximum `m`, the running sum `l` of
//! `exp(s - m)` and an unnormalised output accumulator, rescaling both when
//! the maximum grows (the online softmax); it normalises once at the end and
//! stores `logsumexp = m + ln(l)`. The backward pass recomputes the
//! probabilities `P = exp(s - logsumexp)` block by block from that statistic.
//!
//! Shapes (element strides given per operand, any layout): query
//! `[B, Hq, L, E]`, key `[B, Hkv, S, E]`, value `[B, Hkv, S, Ev]`, output
//! `[B, Hq, L, Ev]`, logsumexp `[B, Hq, L]` (contiguous, in the compute type:
//! float32 for float16/bfloat16/float32, float64 for float64), optional
//! additive bias broadcastable to `[B, Hq, L, S]` (stride 0 on broadcast dims).
//! Query head `h` reads key/value head `h / (Hq / Hkv)` (grouped-query
//! attention; `Hq == Hkv` is ordinary multi-head attention).
//!
//! Masking follows PyTorch: `causal` keeps key `j` for query `i` iff `j <= i`
//! (top-left aligned, `tril(ones(L, S))`). A row whose keys are all masked
//! (bias -inf everywhere) has output 0, logsumexp -inf and zero gradients,
//! which is what PyTorch's math path gives since it uses a "safe" softmax.
//!
//! Dropout is applied to the normalised probabilities as PyTorch does
//! (`dropout(softmax(s)) @ v`, survivors scaled by `1 / (1 - p)`). Element
//! `(b, h, i, j)` keeps its probability iff 32 bits of Philox block
//! `n / 4` (word `n % 4`) of the caller's [`BitSource`] are below
//! `(1 - p) * 2^32`, where `n = ((b * Hq + h) * L + i) * S + j`: the mask
//! is a pure function of (seed, offset, position), so the backward pass
//! regenerates it instead of storing it. A call consumes
//! [`dropout_blocks`] blocks.
//!
//! float32/float64 compute in their own type; float16/bfloat16 are loaded
//! into float32 and accumulate in float32 (PyTorch's opmath). Tile products
//! run on a register-blocked GEMM micro-kernel (see [`tile::gemm`]). Work is split
//! over (batch, head, query block) in the forward pass (after packing the
//! key/value tiles once per call); the backward pass runs one task per
//! (batch, kv head) computing dQ, dK, dV and d(bias) in one sweep when those
//! tasks spread evenly over the threads, else one task per (batch, kv head,
//! key block) for dK/dV (summing over the query heads of the group) and one
//! per (batch, head, query block) for dQ and d(bias). Every output element
//! has one writer and a fixed summation order, so results do not depend on
//! the thread count.

use crate::dtype::{DType, Element};
use crate::engine::math::Float;
use crate::error::{Error, Result};
use crate::ops::random::random::BitSource;

mod backward;
mod forward;
#[cfg(test)]
mod tests;
mod tile;

pub use backward::backward;
pub use forward::forward;

/// Query rows per task and per tile.
pub const BLOCK_Q: usize = 64;
/// Keys per tile.
pub const BLOCK_K: usize = 64;

/// A 4-d strided operand: element (0, 0, 0, 0) and element strides
/// (batch, head, row, column).
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub ptr: *mut u8,
    pub strides: [i64; 4],
}

// SAFETY: an Operand is an address plus strides; the functions taking it
// state which elements they read and write, and writers are disjoint per task.
unsafe impl Send for Operand {}
// SAFETY: as for `Send` above: shared references only read the descriptor, and tasks that write through it write disjoint elements.
unsafe impl Sync for Operand {}

impl Operand {
    #[inline(always)]
    fn offset(&self, b: usize, h: usize, i: usize, j: usize) -> isize {
        (b as i64 * self.strides[0]
            + h as i64 * self.strides[1]
            + i as i64 * self.strides[2]
            + j as i64 * self.strides[3]) as isize
    }

    /// # Safety
    /// The element lies in readable memory of type `T`.
    #[inline(always)]
    unsafe fn load<T: Element, C: Float>(&self, b: usize, h: usize, i: usize, j: usize) -> C {
        // SAFETY: caller contract.
        C::from_f64c(unsafe { (self.ptr as *const T).offset(self.offset(b, h, i, j)).read_unaligned() }.to_f64())
    }

    /// # Safety
    /// The element lies in writable memory of type `T` owned by the caller's task.
    #[inline(always)]
    unsafe fn store<T: Element, C: Float>(&self, b: usize, h: usize, i: usize, j: usize, v: C) {
        // SAFETY: caller contract.
        unsafe { (self.ptr as *mut T).offset(self.offset(b, h, i, j)).write_unaligned(T::from_f64(v.to_f64())) }
    }
}

/// Extents of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    /// L: query rows.
    pub len_q: usize,
    /// S: keys / values.
    pub len_kv: usize,
    /// E: query/key feature size.
    pub dim_qk: usize,
    /// Ev: value feature size.
    pub dim_v: usize,
}

impl Dims {
    fn group(&self) -> usize {
        self.heads_q / self.heads_kv
    }
}

/// Dropout with probability `p` in `(0, 1]`, bits from `bits`.
#[derive(Clone, Copy)]
pub struct Dropout<'a> {
    pub p: f64,
    pub bits: &'a dyn BitSource,
}

/// One attention problem. `dtype` is the type of every tensor operand
/// (query, key, value, bias, output, gradients).
#[derive(Clone, Copy)]
pub struct Attention<'a> {
    pub dims: Dims,
    pub dtype: DType,
    pub query: Operand,
    pub key: Operand,
    pub value: Operand,
    /// Additive bias, broadcast to `[B, Hq, L, S]` through its strides.
    pub bias: Option<Operand>,
    pub causal: bool,
    /// Multiplies `q . k` (PyTorch's default is `1 / sqrt(E)`; the caller resolves it).
    pub scale: f64,
    pub dropout: Option<Dropout<'a>>,
    /// Upper bound on parallel tasks (1 = serial).
    pub threads: usize,
}

/// The gradients the backward pass writes (each `None` when not requested).
/// `bias` is the full `[B, Hq, L, S]` gradient of the broadcast bias (the
/// caller reduces it to the bias's own shape); `key` and `value` are
/// `[B, Hkv, S, *]`, summed over each group's query heads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Grads {
    pub query: Option<Operand>,
    pub key: Option<Operand>,
    pub value: Option<Operand>,
    pub bias: Option<Operand>,
}

/// Philox blocks one dropout mask of `dims` consumes (4 elements per block).
pub fn dropout_blocks(dims: &Dims) -> u64 {
    ((dims.batch * dims.heads_q * dims.len_q) as u64 * dims.len_kv as u64).div_ceil(4)
}

fn check(a: &Attention) -> Result<()> {
    let d = &a.dims;
    let invalid = |reason: String| Err(Error::InvalidValue { op: "scaled_dot_product_attention", reason });
    if d.heads_kv == 0 || !d.heads_q.is_multiple_of(d.heads_kv) {
        return invalid(format!(
            "scaled_dot_product_attention: the number of query heads ({}) must be a multiple of the key/value heads ({})",
            d.heads_q, d.heads_kv
        ));
    }
    if let Some(p) = a.dropout.map(|d| d.p) {
        if !(0.0..=1.0).contains(&p) {
            return invalid(format!("dropout probability has to be between 0 and 1, but got {p}"));
        }
    }
    a.dtype.require_float("scaled_dot_product_attention")
}

/// Runs `f(task)` for `0..tasks`, in parallel when `threads > 1`.
fn for_tasks(tasks: usize, threads: usize, f: impl Fn(usize) + Sync + Send) {
    if threads <= 1 || tasks <= 1 {
        (0..tasks).for_each(f);
    } else {
        crate::engine::iter::for_each_task(tasks, f);
    }
}

/// Dropout state resolved for one call: survivors are scaled by `scale`.
struct Keep<'a> {
    bits: &'a dyn BitSource,
    threshold: u64,
    scale: f64,
}

impl<'a> Keep<'a> {
    fn new(d: Option<Dropout<'a>>) -> Option<Keep<'a>> {
        let d = d.filter(|d| d.p > 0.0)?;
        let keep = 1.0 - d.p;
        // p == 1 drops everything; PyTorch's dropout then yields zeros, not NaN.
        let scale = if keep > 0.0 { 1.0 / keep } else { 0.0 };
        let threshold = ((keep * 4_294_967_296.0) as u64).min(1 << 32);
        Some(Keep { bits: d.bits, threshold, scale })
    }

    /// Multipliers (0 or `scale`) of the elements `first .. first + out.len()`
    /// of the flattened mask, drawing each Philox block once.
    fn row<C: Float>(&self, first: u64, out: &mut [C]) {
        let scale = C::from_f64c(self.scale);
        let mut n = first;
        let mut k = 0;
        while k < out.len() {
            let block = self.bits.block(n / 4);
            let mut w = (n % 4) as usize;
            while w < 4 && k < out.len() {
                out[k] = if (block[w] as u64) < self.threshold { scale } else { C::ZERO };
                w += 1;
                k += 1;
                n += 1;
            }
        }
    }
}

/// Columns `0..dst.len()` of row `i` of head (b, h) of `op`, converted to `C`.
///
/// # Safety
/// Those elements lie in readable memory of type `T`.
#[inline]
unsafe fn load_row<T: Element, C: Float>(op: &Operand, b: usize, h: usize, i: usize, dst: &mut [C]) {
    // SAFETY: caller contract.
    let base = unsafe { (op.ptr as *const T).offset(op.offset(b, h, i, 0)) };
    let cs = op.strides[3] as isize;
    if cs == 1 {
        // The common contiguous row: a plain (vectorisable) conversion loop.
        for (j, x) in dst.iter_mut().enumerate() {
            // SAFETY: caller contract.
            *x = C::from_f64c(unsafe { base.add(j).read_unaligned() }.to_f64());
        }
    } else {
        for (j, x) in dst.iter_mut().enumerate() {
            // SAFETY: caller contract.
            *x = C::from_f64c(unsafe { base.offset(j as isize * cs).read_unaligned() }.to_f64());
        }
    }
}

/// Writes `src` as columns `0..src.len()` of row `i` of head (b, h) of `op`, converted to `T`.
///
/// # Safety
/// Those elements lie in writable memory of type `T` nothing else accesses meanwhile.
#[inline]
unsafe fn store_row<T: Element, C: Float>(op: &Operand, b: usize, h: usize, i: usize, src: &[C]) {
    // SAFETY: caller contract.
    let base = unsafe { (op.ptr as *mut T).offset(op.offset(b, h, i, 0)) };
    let cs = op.strides[3] as isize;
    if cs == 1 {
        // The common contiguous row: a plain (vectorisable) conversion loop.
        for (j, &x) in src.iter().enumerate() {
            // SAFETY: caller contract.
            unsafe { base.add(j).write_unaligned(T::from_f64(x.to_f64())) };
        }
    } else {
        for (j, &x) in src.iter().enumerate() {
            // SAFETY: caller contract.
            unsafe { base.offset(j as isize * cs).write_unaligned(T::from_f64(x.to_f64())) };
        }
    }
}

/// Adds the bias to the scores `s` of query row `i` of (b, h) against keys
/// `j0 .. j0 + s.len()`, and sets the causally masked ones to `-inf`.
///
/// # Safety
/// The bias operand of `a`, if any, is readable at these elements.
#[inline]
unsafe fn mask_scores<T: Element, C: Float>(a: &Attention, b: usize, h: usize, i: usize, j0: usize, s: &mut [C]) {
    if let Some(bias) = &a.bias {
        for (jj, x) in s.iter_mut().enumerate() {
            // SAFETY: caller contract.
            *x = *x + unsafe { bias.load::<T, C>(b, h, i, j0 + jj) };
        }
    }
    if a.causal && j0 + s.len() > i + 1 {
        let first_masked = (i + 1).saturating_sub(j0);
        s[first_masked..].fill(-C::infinity());
    }
}

/// The last key (exclusive) any of the query rows `i0 .. i0 + nq` may attend to.
fn key_end(a: &Attention, i0: usize, nq: usize) -> usize {
    if a.causal {
        (i0 + nq).min(a.dims.len_kv)
    } else {
        a.dims.len_kv
    }
}
