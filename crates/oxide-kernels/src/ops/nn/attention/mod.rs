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
//! run on a register-blocked GEMM micro-kernel (see [`gemm`]). Work is split
//! over (batch, head, query block) in the forward pass (after packing the
//! key/value tiles once per call); the backward pass runs one task per
//! (batch, kv head) computing dQ, dK, dV and d(bias) in one sweep when those
//! tasks spread evenly over the threads, else one task per (batch, kv head,
//! key block) for dK/dV (summing over the query heads of the group) and one
//! per (batch, head, query block) for dQ and d(bias). Every output element
//! has one writer and a fixed summation order, so results do not depend on
//! the thread count.


use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::engine::math::Float;
use crate::ops::random::random::BitSource;
use crate::engine::scratch::{self, Plain};

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
unsafe impl Sync for Operand {}

impl Operand {
    #[inline(always)]
    fn offset(&self, b: usize, h: usize, i: usize, j: usize) -> isize {
        (b as i64 * self.strides[0] + h as i64 * self.strides[1] + i as i64 * self.strides[2] + j as i64 * self.strides[3]) as isize
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
    if d.heads_kv == 0 || d.heads_q % d.heads_kv != 0 {
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
    match a.dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        dtype => Err(Error::UnsupportedDtype { op: "scaled_dot_product_attention", dtype }),
    }
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

/// Columns of the GEMM micro-kernel's output block, and the unit to which
/// the column count of every tile buffer is padded (with zeros), so that the
/// kernel has no column tail: 32 float32 lanes are two AVX-512 (four AVX2)
/// registers.
const NR: usize = 32;
/// Rows of the micro-kernel's output block: 4 x 32 float32 accumulators are
/// 8 AVX-512 or 16 AVX2 registers, leaving room for the loaded B row (4 was
/// measured faster than 8 on 64 x 64 x 64 tiles with AVX-512).
const MR: usize = 4;

/// `n` rounded up to a multiple of [`NR`]: the row stride of the tile buffers.
fn padded(n: usize) -> usize {
    n.div_ceil(NR) * NR
}

/// A row-major tile operand: element (r, c) at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
struct Mat<'x, C> {
    data: &'x [C],
    rs: usize,
    cs: usize,
}

/// `c = (accumulate ? c : 0) + a b` for an `m x n` block with inner size `k`,
/// in a fixed order (the result does not depend on anything but the inputs).
///
/// `a` is read element by element (any strides: the transposed operands of
/// the backward pass read it column-wise). `b` (row stride `ldb`) and `c`
/// (row stride `ldc`) are contiguous rows of `padded(n)` columns; the
/// columns of `b` past `n` must be zero or at least finite, and `c`'s are
/// overwritten with garbage. Register blocking after K. Goto and R. van de
/// Geijn, "Anatomy of High-Performance Matrix Multiplication" (2008), without
/// packing: attention tiles (64 x 64 x E) fit in L1/L2 as they are.
///
/// Panics (a bug in the caller, caught at the FFI boundary) when a buffer is
/// shorter than these extents.
#[allow(clippy::too_many_arguments)]
fn gemm<C: Float>(m: usize, n: usize, k: usize, a: Mat<C>, b: &[C], ldb: usize, c: &mut [C], ldc: usize, accumulate: bool) {
    if m == 0 || n == 0 {
        return;
    }
    let np = padded(n);
    assert!(ldb >= np && ldc >= np && (m - 1) * ldc + np <= c.len(), "attention gemm: output tile too small");
    if k == 0 {
        if !accumulate {
            (0..m).for_each(|r| c[r * ldc..r * ldc + np].fill(C::ZERO));
        }
        return;
    }
    assert!((k - 1) * ldb + np <= b.len(), "attention gemm: B tile too small");
    assert!((m - 1) * a.rs + (k - 1) * a.cs < a.data.len(), "attention gemm: A tile too small");
    let (ap, bp, cp) = (a.data.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    for j in (0..np).step_by(NR) {
        let mut i = 0;
        while i < m {
            let rows = MR.min(m - i);
            // SAFETY: the asserts above bound every element the block touches:
            // A rows i..i+rows, columns 0..k; B rows 0..k, columns j..j+NR <= np;
            // C rows i..i+rows, columns j..j+NR.
            unsafe {
                let (ab, bb, cb) = (ap.add(i * a.rs), bp.add(j), cp.add(i * ldc + j));
                #[cfg(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma"))]
                if std::any::TypeId::of::<C>() == std::any::TypeId::of::<f32>() {
                    // C is f32 (a compile-time fact after monomorphisation).
                    let (ab, bb, cb) = (ab as *const f32, bb as *const f32, cb as *mut f32);
                    match rows {
                        1 => simd::micro_f32::<1>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                        2 => simd::micro_f32::<2>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                        3 => simd::micro_f32::<3>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                        _ => simd::micro_f32::<MR>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    }
                    i += rows;
                    continue;
                }
                match rows {
                    1 => micro::<C, 1>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    2 => micro::<C, 2>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    3 => micro::<C, 3>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    _ => micro::<C, MR>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                }
            }
            i += rows;
        }
    }
}

/// One `R x NR` block of [`gemm`], accumulated in registers (the fixed-size
/// arrays are fully unrolled and vectorised by LLVM).
///
/// # Safety
/// `a` is readable at `r * ars + kk * acs`, `b` at `kk * ldb + 0..NR` and
/// `c` writable (and readable when accumulating) at `r * ldc + 0..NR`, for
/// `r < R`, `kk < k`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn micro<C: Float, const R: usize>(k: usize, a: *const C, ars: usize, acs: usize, b: *const C, ldb: usize, c: *mut C, ldc: usize, accumulate: bool) {
    let mut acc = [[C::ZERO; NR]; R];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: caller contract.
            *row = unsafe { (c.add(r * ldc) as *const [C; NR]).read_unaligned() };
        }
    }
    for kk in 0..k {
        // SAFETY: caller contract.
        let bv = unsafe { (b.add(kk * ldb) as *const [C; NR]).read_unaligned() };
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: caller contract.
            let x = unsafe { a.add(r * ars + kk * acs).read() };
            for (y, &z) in row.iter_mut().zip(&bv) {
                *y = x.mul_add_fast(z, *y);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        // SAFETY: caller contract.
        unsafe { (c.add(r * ldc) as *mut [C; NR]).write_unaligned(*row) };
    }
}

/// The float32 micro-kernel written with x86-64 intrinsics (AVX-512F where
/// the build targets it, else AVX2/FMA; the project builds for the host
/// CPU). It computes the same sums in the same order as the portable
/// [`micro`] (one fused multiply-add per term, ascending `kk`), but LLVM's
/// vectoriser was seen to shuffle that one's accumulators through memory
/// once inlined into the attention loops, at well under half the speed, and
/// it keeps to 256-bit vectors on CPUs that have 512-bit ones; intrinsics pin
/// the register blocking.
#[cfg(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma"))]
mod simd {
    #[cfg(target_feature = "avx512f")]
    mod v {
        use std::arch::x86_64::*;
        pub type F = __m512;
        pub const W: usize = 16;
        // SAFETY (all): the target feature is enabled at compile time; callers
        // pass addresses of W readable/writable floats.
        #[inline(always)]
        pub fn zero() -> F {
            unsafe { _mm512_setzero_ps() }
        }
        #[inline(always)]
        pub unsafe fn load(p: *const f32) -> F {
            unsafe { _mm512_loadu_ps(p) }
        }
        #[inline(always)]
        pub unsafe fn store(p: *mut f32, x: F) {
            unsafe { _mm512_storeu_ps(p, x) }
        }
        #[inline(always)]
        pub fn splat(x: f32) -> F {
            unsafe { _mm512_set1_ps(x) }
        }
        #[inline(always)]
        pub fn fmadd(a: F, b: F, c: F) -> F {
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
    }

    #[cfg(not(target_feature = "avx512f"))]
    mod v {
        use std::arch::x86_64::*;
        pub type F = __m256;
        pub const W: usize = 8;
        // SAFETY (all): as above.
        #[inline(always)]
        pub fn zero() -> F {
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        pub unsafe fn load(p: *const f32) -> F {
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        pub unsafe fn store(p: *mut f32, x: F) {
            unsafe { _mm256_storeu_ps(p, x) }
        }
        #[inline(always)]
        pub fn splat(x: f32) -> F {
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        pub fn fmadd(a: F, b: F, c: F) -> F {
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
    }

    /// Vectors per `NR`-wide row.
    const V: usize = super::NR / v::W;

    /// [`super::micro`] for float32.
    ///
    /// # Safety
    /// As [`super::micro`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn micro_f32<const R: usize>(k: usize, a: *const f32, ars: usize, acs: usize, b: *const f32, ldb: usize, c: *mut f32, ldc: usize, accumulate: bool) {
        // SAFETY (whole body): the caller's contract bounds every address.
        unsafe {
            let mut acc = [[v::zero(); V]; R];
            if accumulate {
                for (r, row) in acc.iter_mut().enumerate() {
                    for (j, x) in row.iter_mut().enumerate() {
                        *x = v::load(c.add(r * ldc + v::W * j));
                    }
                }
            }
            for kk in 0..k {
                let bk = b.add(kk * ldb);
                let mut bv = [v::zero(); V];
                for (j, x) in bv.iter_mut().enumerate() {
                    *x = v::load(bk.add(v::W * j));
                }
                let ak = a.add(kk * acs);
                for (r, row) in acc.iter_mut().enumerate() {
                    let x = v::splat(ak.add(r * ars).read());
                    for (y, &z) in row.iter_mut().zip(&bv) {
                        *y = v::fmadd(x, z, *y);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                for (j, x) in row.iter().enumerate() {
                    v::store(c.add(r * ldc + v::W * j), *x);
                }
            }
        }
    }
}

/// Lanes of the row reductions: independent partial results that LLVM keeps
/// in vector registers (a single running float sum or max would be a serial
/// dependency chain, which it may not reorder).
const LANES: usize = 16;

/// The largest element of `x` (`-inf` for an empty row); NaN-free input.
fn row_max<C: Float>(x: &[C]) -> C {
    let mut acc = [-C::infinity(); LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for ch in chunks {
        for (a, &y) in acc.iter_mut().zip(ch) {
            *a = if y > *a { y } else { *a };
        }
    }
    tail.iter().chain(acc.iter()).fold(-C::infinity(), |m, &y| if y > m { y } else { m })
}

/// The sum of `x`, in a fixed order (lane-wise partial sums, then the lanes and the tail).
fn row_sum<C: Float>(x: &[C]) -> C {
    let mut acc = [C::ZERO; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for ch in chunks {
        for (a, &y) in acc.iter_mut().zip(ch) {
            *a = *a + y;
        }
    }
    acc.iter().chain(tail).fold(C::ZERO, |s, &y| s + y)
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

/// Writes rows `0..nk` of `dk` and `dv`, each given as (buffer, row stride, row
/// length), as keys `j0 .. j0 + nk` of (b, kv head `hk`) of the key and value
/// gradients that `g` asks for.
///
/// # Safety
/// As [`store_row`] for every row written.
unsafe fn store_kv_rows<T: Element, C: Float>(g: &Grads, b: usize, hk: usize, j0: usize, nk: usize, dk: (&[C], usize, usize), dv: (&[C], usize, usize)) {
    for jj in 0..nk {
        for (grad, (buf, ld, len)) in [(&g.key, dk), (&g.value, dv)] {
            if let Some(op) = grad {
                // SAFETY: caller contract.
                unsafe { store_row::<T, C>(op, b, hk, j0 + jj, &buf[jj * ld..jj * ld + len]) };
            }
        }
    }
}

/// Per-task copies of one key block `j0 .. j0 + nk` of (b, kv head), in the
/// layouts the tile products read as their B operand. Buffers are allocated
/// zeroed and only the `nk` keys / `E` features are rewritten, so padding
/// columns stay zero (a transposed buffer re-zeroes its columns past `nk`).
struct KeyTile<C> {
    /// Keys transposed `[E][padded(BLOCK_K)]` (S = Q K^T).
    kt: Vec<C>,
    /// Keys `[BLOCK_K][padded(E)]` (backward: dQ += dS K).
    k: Vec<C>,
    /// Values `[BLOCK_K][padded(Ev)]` (forward: O += P V).
    v: Vec<C>,
    /// Values transposed `[Ev][padded(BLOCK_K)]` (backward: dP = dO V^T).
    vt: Vec<C>,
    /// One key or value row (scratch).
    row: Vec<C>,
}

/// Which layouts [`KeyTile::load`] fills besides `kt`.
#[derive(Clone, Copy)]
struct Layouts {
    k: bool,
    v: bool,
    vt: bool,
}

impl<C: Float> KeyTile<C> {
    fn new(d: &Dims) -> Self {
        let kp = padded(BLOCK_K);
        KeyTile {
            kt: vec![C::ZERO; d.dim_qk * kp],
            k: vec![C::ZERO; BLOCK_K * padded(d.dim_qk)],
            v: vec![C::ZERO; BLOCK_K * padded(d.dim_v)],
            vt: vec![C::ZERO; d.dim_v * kp],
            row: vec![C::ZERO; d.dim_qk.max(d.dim_v)],
        }
    }

    /// Loads keys (and values) `j0 .. j0 + nk` of (b, hk).
    ///
    /// # Safety
    /// The key/value operands of `a` are readable for these elements.
    unsafe fn load<T: Element>(&mut self, a: &Attention, b: usize, hk: usize, j0: usize, nk: usize, want: Layouts) {
        let (e_n, ev_n, kp) = (a.dims.dim_qk, a.dims.dim_v, padded(BLOCK_K));
        let (ep, evp) = (padded(e_n), padded(ev_n));
        for jj in 0..nk {
            let row = &mut self.row[..e_n];
            // SAFETY: caller contract.
            unsafe { load_row::<T, C>(&a.key, b, hk, j0 + jj, row) };
            for (d, &x) in row.iter().enumerate() {
                self.kt[d * kp + jj] = x;
            }
            if want.k {
                self.k[jj * ep..jj * ep + e_n].copy_from_slice(row);
            }
            if want.v || want.vt {
                let row = &mut self.row[..ev_n];
                // SAFETY: caller contract.
                unsafe { load_row::<T, C>(&a.value, b, hk, j0 + jj, row) };
                if want.v {
                    self.v[jj * evp..jj * evp + ev_n].copy_from_slice(row);
                }
                if want.vt {
                    for (e, &x) in row.iter().enumerate() {
                        self.vt[e * kp + jj] = x;
                    }
                }
            }
        }
        if nk < kp {
            // A short last block: the transposed layouts' columns past nk must be zero again.
            self.kt.chunks_exact_mut(kp).for_each(|r| r[nk..].fill(C::ZERO));
            if want.vt {
                self.vt.chunks_exact_mut(kp).for_each(|r| r[nk..].fill(C::ZERO));
            }
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
/// Forward pass: writes `out` (`[B, Hq, L, Ev]`, strided, type `a.dtype`)
/// and `lse` (`[B, Hq, L]` contiguous, float64 for float64 inputs, else
/// float32).
///
/// Errors: [`Error::UnsupportedDtype`] for dtypes other than
/// float16/bfloat16/float32/float64; [`Error::InvalidValue`] when `Hq` is
/// not a multiple of `Hkv` or the dropout probability is outside [0, 1].
///
/// # Safety
/// Every element the shapes and strides of `a` and `out` address is valid
/// memory of `a.dtype`; `lse` holds `B * Hq * L` elements; `out` and `lse`
/// overlap no input and `out`'s elements do not alias each other.
pub unsafe fn forward(a: &Attention, out: Operand, lse: *mut u8) -> Result<()> {
    check(a)?;
    crate::with_float_dtype!(a.dtype, "scaled_dot_product_attention", |T, C| {
        // SAFETY: forwarded contract.
        unsafe { forward_typed::<T, C>(a, out, lse as usize) };
    });
    Ok(())
}

unsafe fn forward_typed<T: Element, C: Float + Plain>(a: &Attention, out: Operand, lse: usize) {
    let d = a.dims;
    let q_blocks = d.len_q.div_ceil(BLOCK_Q);
    let tasks = d.batch * d.heads_q * q_blocks;
    if tasks == 0 {
        return;
    }
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
    let (kp, k_blocks) = (padded(BLOCK_K), d.len_kv.div_ceil(BLOCK_K));
    let (kt_len, v_len) = (e_n * kp, BLOCK_K * padded(ev_n));
    let blocks = d.batch * d.heads_kv * k_blocks;
    // Every query block of a head reads every key block, so the key and value
    // tiles are converted and laid out (K transposed) once per call, not once
    // per query block: at L = 1024 that repacking cost more than the products.
    // Every element of both buffers is written below, so reused scratch will do.
    scratch::with::<C, _>(blocks * kt_len, |kt_all| {
        scratch::with::<C, _>(blocks * v_len, |v_all| {
            let (kt_addr, v_addr) = (kt_all.as_mut_ptr() as usize, v_all.as_mut_ptr() as usize);
            for_tasks(blocks, a.threads, |n| {
                let (bh, kb) = (n / k_blocks, n % k_blocks);
                let (b, hk) = (bh / d.heads_kv, bh % d.heads_kv);
                let j0 = kb * BLOCK_K;
                let mut tile = KeyTile::<C>::new(&d);
                // SAFETY: forward's contract; block n of each buffer belongs to this task.
                unsafe {
                    tile.load::<T>(a, b, hk, j0, BLOCK_K.min(d.len_kv - j0), Layouts { k: false, v: true, vt: false });
                    std::ptr::copy_nonoverlapping(tile.kt.as_ptr(), (kt_addr as *mut C).add(n * kt_len), kt_len);
                    std::ptr::copy_nonoverlapping(tile.v.as_ptr(), (v_addr as *mut C).add(n * v_len), v_len);
                }
            });
            let (kt_all, v_all) = (&*kt_all, &*v_all);
            // SAFETY: forward's contract.
            for_tasks(tasks, a.threads, |t| unsafe { forward_block::<T, C>(a, out, lse, kt_all, v_all, t) });
        })
    });
}

/// Task `t` of [`forward_typed`]: one block of query rows of one (batch, head)
/// against the packed key/value tiles.
///
/// # Safety
/// As [`forward`]; rows of this block of `out` and `lse` belong to this task only.
unsafe fn forward_block<T: Element, C: Float>(a: &Attention, out: Operand, lse: usize, kt_all: &[C], v_all: &[C], t: usize) {
    let d = a.dims;
    let q_blocks = d.len_q.div_ceil(BLOCK_Q);
    let keep = Keep::new(a.dropout);
    let scale = C::from_f64c(a.scale);
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
    let (ep, evp, kp, k_blocks) = (padded(e_n), padded(ev_n), padded(BLOCK_K), d.len_kv.div_ceil(BLOCK_K));
    let (kt_len, v_len) = (e_n * kp, BLOCK_K * evp);
    let (bh, qb) = (t / q_blocks, t % q_blocks);
    let (b, h) = (bh / d.heads_q, bh % d.heads_q);
    let hk = h / d.group();
    let i0 = qb * BLOCK_Q;
    let nq = BLOCK_Q.min(d.len_q - i0);
    // Scaled query rows [nq][ep] (the A operand of S = Q K^T).
    let mut q = vec![C::ZERO; nq * ep];
    for r in 0..nq {
        let row = &mut q[r * ep..r * ep + e_n];
        // SAFETY: forward's contract.
        unsafe { load_row::<T, C>(&a.query, b, h, i0 + r, row) };
        row.iter_mut().for_each(|x| *x = *x * scale);
    }
    // Unnormalised output [nq][evp], running max and sum per row, and each row's
    // maximum including the current tile.
    let mut o = vec![C::ZERO; nq * evp];
    let (mut m, mut l) = (vec![-C::infinity(); nq], vec![C::ZERO; nq]);
    let mut m_new = vec![C::ZERO; nq];
    // Scores, then probabilities, of the current tile: [nq][kp].
    let mut s = vec![C::ZERO; nq * kp];
    let mut drop = vec![C::ZERO; BLOCK_K];
    let kend = key_end(a, i0, nq);
    let mut j0 = 0;
    while j0 < kend {
        let nk = BLOCK_K.min(kend - j0);
        let blk = (b * d.heads_kv + hk) * k_blocks + j0 / BLOCK_K;
        let (kt, v) = (&kt_all[blk * kt_len..(blk + 1) * kt_len], &v_all[blk * v_len..(blk + 1) * v_len]);
        gemm(nq, nk, e_n, Mat { data: &q, rs: ep, cs: 1 }, kt, kp, &mut s, kp, false);
        // The online softmax in passes over the tile's rows (maxima, then
        // exponentials, then sums), so that no row's exponentials wait for a
        // reduction: one row at a time ran at a fraction of the exp loop's throughput.
        for r in 0..nq {
            let srow = &mut s[r * kp..r * kp + nk];
            // SAFETY: forward's contract.
            unsafe { mask_scores::<T, C>(a, b, h, i0 + r, j0, srow) };
            let block_max = row_max(srow);
            m_new[r] = if block_max > m[r] { block_max } else { m[r] };
        }
        for r in 0..nq {
            let (srow, mr) = (&mut s[r * kp..r * kp + nk], m_new[r]);
            if mr == -C::infinity() {
                // Every key so far is masked: this tile adds nothing to the row.
                srow.fill(C::ZERO);
            } else {
                srow.iter_mut().for_each(|x| *x = (*x - mr).exp());
            }
        }
        for r in 0..nq {
            if m_new[r] == -C::infinity() {
                continue;
            }
            let srow = &mut s[r * kp..r * kp + nk];
            // The factor rescaling the row's old sum and output to the new maximum.
            let alpha = (m[r] - m_new[r]).exp();
            l[r] = l[r] * alpha + row_sum(srow);
            m[r] = m_new[r];
            if alpha != C::ONE {
                o[r * evp..(r + 1) * evp].iter_mut().for_each(|x| *x = *x * alpha);
            }
            if let Some(k) = &keep {
                let drop = &mut drop[..nk];
                k.row(((b * d.heads_q + h) * d.len_q + i0 + r) as u64 * d.len_kv as u64 + j0 as u64, drop);
                srow.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
            }
        }
        gemm(nq, ev_n, nk, Mat { data: &s, rs: kp, cs: 1 }, v, evp, &mut o, evp, true);
        j0 += nk;
    }
    for r in 0..nq {
        let row = (b * d.heads_q + h) * d.len_q + i0 + r;
        let (value, inv) = if l[r] > C::ZERO { (m[r] + l[r].ln(), C::ONE / l[r]) } else { (-C::infinity(), C::ZERO) };
        let orow = &mut o[r * evp..r * evp + ev_n];
        orow.iter_mut().for_each(|x| *x = *x * inv);
        // SAFETY: row `row` of lse and of out belongs to this task only.
        unsafe {
            (lse as *mut C).add(row).write(value);
            store_row::<T, C>(&out, b, h, i0 + r, orow);
        }
    }
}

/// Backward pass: from `grad_out` (`[B, Hq, L, Ev]`), the forward's `out`
/// and `lse`, writes the requested [`Grads`] (strided, type `a.dtype`;
/// dK/dV/dQ/dbias are overwritten, not accumulated). The dropout source
/// must be the one the forward pass used.
///
/// Errors: as [`forward`].
///
/// # Safety
/// As [`forward`] for `a`, `out`, `grad_out` and `lse` (read only here);
/// each gradient addresses valid, mutually disjoint memory of its shape.
pub unsafe fn backward(a: &Attention, out: Operand, grad_out: Operand, lse: *const u8, grads: Grads) -> Result<()> {
    check(a)?;
    crate::with_float_dtype!(a.dtype, "scaled_dot_product_attention", |T, C| {
        // SAFETY: forwarded contract.
        unsafe { backward_typed::<T, C>(a, out, grad_out, lse as usize, grads) };
    });
    Ok(())
}

/// Turns one row of a tile (query row `i` of (b, h) against keys
/// `j0 .. j0 + s.len()`) from scores into what the gradient products read:
/// `s` (scaled `q . k`) becomes the probabilities after dropout (what
/// multiplied V in the forward pass) and `dp` (`dO . v`) becomes dS, the
/// gradient of the pre-softmax scores (also the bias gradient), recomputing
/// `P = exp(s - lse)` (FlashAttention-2, Algorithm 2).
///
/// # Safety
/// The bias operand of `a`, if any, is readable at these elements.
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn grad_row<T: Element, C: Float>(a: &Attention, keep: &Option<Keep>, b: usize, h: usize, i: usize, j0: usize, lse: C, delta: C, s: &mut [C], dp: &mut [C], drop: &mut [C]) {
    if lse == -C::infinity() {
        // A fully masked row contributes nothing (its forward output was 0).
        s.fill(C::ZERO);
        dp.fill(C::ZERO);
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { mask_scores::<T, C>(a, b, h, i, j0, s) };
    s.iter_mut().for_each(|x| *x = (*x - lse).exp());
    if let Some(k) = keep {
        let d = &a.dims;
        let drop = &mut drop[..s.len()];
        k.row(((b * d.heads_q + h) * d.len_q + i) as u64 * d.len_kv as u64 + j0 as u64, drop);
        // Through dropout: dP_softmax = dP_dropped * mask / (1 - p); then
        // dS = P * (dP - delta) with P the probabilities before dropout.
        dp.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
        dp.iter_mut().zip(s.iter()).for_each(|(x, &y)| *x = y * (*x - delta));
        s.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
    } else {
        dp.iter_mut().zip(s.iter()).for_each(|(x, &y)| *x = y * (*x - delta));
    }
}

/// Query-side rows of one block `i0 .. i0 + nq` of (b, h) for the backward
/// products: scaled queries `[BLOCK_Q][padded(E)]`, dO `[BLOCK_Q][padded(Ev)]`
/// (zero padding: both are B operands of dK / dV), and per row (lse, delta).
struct QueryRows<C> {
    q: Vec<C>,
    dout: Vec<C>,
    stats: Vec<(C, C)>,
}

unsafe fn backward_typed<T: Element, C: Float>(a: &Attention, out: Operand, grad_out: Operand, lse: usize, g: Grads) {
    let d = a.dims;
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
    let (ep, evp, kp) = (padded(e_n), padded(ev_n), padded(BLOCK_K));
    let rows = d.batch * d.heads_q * d.len_q;
    if rows == 0 {
        // No query rows: dQ/dbias are empty; dK/dV receive nothing.
        for_kv(&d, |b, hk, j| unsafe {
            if let Some(gk) = &g.key {
                (0..e_n).for_each(|e| gk.store::<T, C>(b, hk, j, e, C::ZERO));
            }
            if let Some(gv) = &g.value {
                (0..ev_n).for_each(|e| gv.store::<T, C>(b, hk, j, e, C::ZERO));
            }
        });
        return;
    }
    let keep = Keep::new(a.dropout);
    let scale = C::from_f64c(a.scale);
    // delta_i = sum_e dO_ie O_ie = sum_j P_ij dP_ij (FlashAttention-2, Algorithm 2, line 4).
    let mut delta = vec![C::ZERO; rows];
    {
        let delta_addr = delta.as_mut_ptr() as usize;
        for_tasks(rows.div_ceil(BLOCK_Q), a.threads, |t| {
            let (mut go, mut o) = (vec![C::ZERO; ev_n], vec![C::ZERO; ev_n]);
            for r in t * BLOCK_Q..((t + 1) * BLOCK_Q).min(rows) {
                let (bh, i) = (r / d.len_q, r % d.len_q);
                let (b, h) = (bh / d.heads_q, bh % d.heads_q);
                // SAFETY: backward's contract.
                unsafe {
                    load_row::<T, C>(&grad_out, b, h, i, &mut go);
                    load_row::<T, C>(&out, b, h, i, &mut o);
                }
                let acc = go.iter().zip(&o).fold(C::ZERO, |s, (&x, &y)| s + x * y);
                // SAFETY: element r belongs to this task.
                unsafe { (delta_addr as *mut C).add(r).write(acc) };
            }
        });
    }
    let lse_at = |r: usize| unsafe { (lse as *const C).add(r).read() };
    let new_rows = || QueryRows { q: vec![C::ZERO; BLOCK_Q * ep], dout: vec![C::ZERO; BLOCK_Q * evp], stats: Vec::new() };
    // Loads the query-side rows i0 .. i0 + nq of (b, h).
    let load_rows = |b: usize, h: usize, i0: usize, nq: usize, qr: &mut QueryRows<C>| {
        qr.stats.clear();
        for r in 0..nq {
            let q = &mut qr.q[r * ep..r * ep + e_n];
            // SAFETY: backward's contract.
            unsafe {
                load_row::<T, C>(&a.query, b, h, i0 + r, q);
                load_row::<T, C>(&grad_out, b, h, i0 + r, &mut qr.dout[r * evp..r * evp + ev_n]);
            }
            q.iter_mut().for_each(|x| *x = *x * scale);
            let row = (b * d.heads_q + h) * d.len_q + i0 + r;
            qr.stats.push((lse_at(row), delta[row]));
        }
    };
    // P (after dropout) and dS of one [nq][nk] tile, row stride kp:
    // S = Q K^T and dP = dO V^T as tile products, then the row-wise softmax gradient.
    let tile_grads = |b: usize, h: usize, i0: usize, nq: usize, j0: usize, nk: usize, qr: &QueryRows<C>, tile: &KeyTile<C>, p: &mut [C], ds: &mut [C], drop: &mut [C]| {
        gemm(nq, nk, e_n, Mat { data: &qr.q, rs: ep, cs: 1 }, &tile.kt, kp, p, kp, false);
        gemm(nq, nk, ev_n, Mat { data: &qr.dout, rs: evp, cs: 1 }, &tile.vt, kp, ds, kp, false);
        for r in 0..nq {
            let (lse_r, delta_r) = qr.stats[r];
            let (pr, dsr) = (&mut p[r * kp..r * kp + nk], &mut ds[r * kp..r * kp + nk]);
            // SAFETY: backward's contract.
            unsafe { grad_row::<T, C>(a, &keep, b, h, i0 + r, j0, lse_r, delta_r, pr, dsr, drop) };
        }
    };

    let want_kv = g.key.is_some() || g.value.is_some();
    let want_q = g.query.is_some() || g.bias.is_some();
    // One pass per (b, kv head) computes each tile's P and dS once for all
    // four gradients, where the two passes below recompute them (7 tile
    // products instead of 5, and the exponentials twice) in exchange for
    // finer tasks. Take it when both sides are wanted and the (b, kv head)
    // tasks, all of equal work, still spread evenly over the threads. Both
    // schedules sum in the same order, so the results are the same.
    let kv_tasks = d.batch * d.heads_kv;
    let threads = a.threads.max(1);
    if want_kv && want_q && (kv_tasks % threads == 0 || kv_tasks >= 4 * threads) {
        let group = d.group();
        let (q_blocks, k_blocks) = (d.len_q.div_ceil(BLOCK_Q), d.len_kv.div_ceil(BLOCK_K));
        for_tasks(kv_tasks, a.threads, |t| {
            let (b, hk) = (t / d.heads_kv, t % d.heads_kv);
            let heads = hk * group..(hk + 1) * group;
            // Block qb of the group's head h at (h - heads.start) * q_blocks + qb.
            let mut rows = Vec::with_capacity(group * q_blocks);
            for h in heads.clone() {
                for qb in 0..q_blocks {
                    let i0 = qb * BLOCK_Q;
                    let mut qr = new_rows();
                    load_rows(b, h, i0, BLOCK_Q.min(d.len_q - i0), &mut qr);
                    rows.push(qr);
                }
            }
            // dQ of the group's heads, block-major like `rows`.
            let mut dq = vec![C::ZERO; if g.query.is_some() { group * q_blocks * BLOCK_Q * ep } else { 0 }];
            let mut tile = KeyTile::<C>::new(&d);
            let (mut p, mut ds, mut drop) = (vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_K]);
            let (mut dk, mut dv) = (vec![C::ZERO; BLOCK_K * ep], vec![C::ZERO; BLOCK_K * evp]);
            for kb in 0..k_blocks {
                let j0 = kb * BLOCK_K;
                let nk = BLOCK_K.min(d.len_kv - j0);
                // SAFETY: backward's contract.
                unsafe { tile.load::<T>(a, b, hk, j0, nk, Layouts { k: g.query.is_some(), v: false, vt: true }) };
                dk.fill(C::ZERO);
                dv.fill(C::ZERO);
                // Causal: query blocks before this one see none of these keys.
                let first_block = if a.causal { j0 / BLOCK_Q } else { 0 };
                for (hl, h) in heads.clone().enumerate() {
                    for qb in 0..q_blocks {
                        let i0 = qb * BLOCK_Q;
                        let nq = BLOCK_Q.min(d.len_q - i0);
                        if qb < first_block {
                            if let Some(gb) = &g.bias {
                                for r in 0..nq {
                                    // SAFETY: tile (qb, kb) of (b, h) of the bias gradient belongs to this task.
                                    (j0..j0 + nk).for_each(|j| unsafe { gb.store::<T, C>(b, h, i0 + r, j, C::ZERO) });
                                }
                            }
                            continue;
                        }
                        let qr = &rows[hl * q_blocks + qb];
                        tile_grads(b, h, i0, nq, j0, nk, qr, &tile, &mut p, &mut ds, &mut drop);
                        if let Some(gb) = &g.bias {
                            for r in 0..nq {
                                // SAFETY: as above.
                                (0..nk).for_each(|jj| unsafe { gb.store::<T, C>(b, h, i0 + r, j0 + jj, ds[r * kp + jj]) });
                            }
                        }
                        // dV += P^T dO and dK += dS^T (scale Q): the tiles read transposed.
                        gemm(nk, ev_n, nq, Mat { data: &p, rs: 1, cs: kp }, &qr.dout, evp, &mut dv, evp, true);
                        gemm(nk, e_n, nq, Mat { data: &ds, rs: 1, cs: kp }, &qr.q, ep, &mut dk, ep, true);
                        if g.query.is_some() {
                            let at = (hl * q_blocks + qb) * BLOCK_Q * ep;
                            gemm(nq, e_n, nk, Mat { data: &ds, rs: kp, cs: 1 }, &tile.k, ep, &mut dq[at..], ep, true);
                        }
                    }
                }
                // SAFETY: keys j0 .. j0 + nk of (b, hk) belong to this task.
                unsafe { store_kv_rows::<T, C>(&g, b, hk, j0, nk, (&dk, ep, e_n), (&dv, evp, ev_n)) };
            }
            if let Some(gq) = &g.query {
                for (hl, h) in heads.enumerate() {
                    for i in 0..d.len_q {
                        let at = (hl * q_blocks + i / BLOCK_Q) * BLOCK_Q * ep + (i % BLOCK_Q) * ep;
                        let row = &mut dq[at..at + e_n];
                        row.iter_mut().for_each(|x| *x = *x * scale);
                        // SAFETY: the rows of the group's heads of (b) belong to this task.
                        unsafe { store_row::<T, C>(gq, b, h, i, row) };
                    }
                }
            }
        });
        return;
    }

    // dK and dV: one task per (b, kv head, key block), summing over the group's heads.
    if want_kv {
        let k_blocks = d.len_kv.div_ceil(BLOCK_K);
        for_tasks(d.batch * d.heads_kv * k_blocks, a.threads, |t| {
            let (bh, kb) = (t / k_blocks, t % k_blocks);
            let (b, hk) = (bh / d.heads_kv, bh % d.heads_kv);
            let j0 = kb * BLOCK_K;
            let nk = BLOCK_K.min(d.len_kv - j0);
            let mut tile = KeyTile::<C>::new(&d);
            // SAFETY: backward's contract.
            unsafe { tile.load::<T>(a, b, hk, j0, nk, Layouts { k: false, v: false, vt: true }) };
            let mut dk = vec![C::ZERO; nk * ep];
            let mut dv = vec![C::ZERO; nk * evp];
            let mut qr = new_rows();
            let (mut p, mut ds, mut drop) = (vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_K]);
            // Causal: query rows before j0 see none of these keys.
            let first_block = if a.causal { j0 / BLOCK_Q } else { 0 };
            for h in hk * d.group()..(hk + 1) * d.group() {
                for qb in first_block..d.len_q.div_ceil(BLOCK_Q) {
                    let i0 = qb * BLOCK_Q;
                    let nq = BLOCK_Q.min(d.len_q - i0);
                    load_rows(b, h, i0, nq, &mut qr);
                    tile_grads(b, h, i0, nq, j0, nk, &qr, &tile, &mut p, &mut ds, &mut drop);
                    // dV += P^T dO and dK += dS^T (scale Q): the tiles read transposed.
                    gemm(nk, ev_n, nq, Mat { data: &p, rs: 1, cs: kp }, &qr.dout, evp, &mut dv, evp, true);
                    gemm(nk, e_n, nq, Mat { data: &ds, rs: 1, cs: kp }, &qr.q, ep, &mut dk, ep, true);
                }
            }
            // SAFETY: keys j0 .. j0 + nk of (b, hk) belong to this task.
            unsafe { store_kv_rows::<T, C>(&g, b, hk, j0, nk, (&dk, ep, e_n), (&dv, evp, ev_n)) };
        });
    }

    // dQ and d(bias): one task per (b, head, query block).
    if want_q {
        let q_blocks = d.len_q.div_ceil(BLOCK_Q);
        for_tasks(d.batch * d.heads_q * q_blocks, a.threads, |t| {
            let (bh, qb) = (t / q_blocks, t % q_blocks);
            let (b, h) = (bh / d.heads_q, bh % d.heads_q);
            let hk = h / d.group();
            let i0 = qb * BLOCK_Q;
            let nq = BLOCK_Q.min(d.len_q - i0);
            let mut qr = new_rows();
            load_rows(b, h, i0, nq, &mut qr);
            let mut dq = vec![C::ZERO; nq * ep];
            let (mut p, mut ds, mut drop) = (vec![C::ZERO; nq * kp], vec![C::ZERO; nq * kp], vec![C::ZERO; BLOCK_K]);
            let mut tile = KeyTile::<C>::new(&d);
            let kend = key_end(a, i0, nq);
            let mut j0 = 0;
            while j0 < kend {
                let nk = BLOCK_K.min(kend - j0);
                // SAFETY: backward's contract.
                unsafe { tile.load::<T>(a, b, hk, j0, nk, Layouts { k: true, v: false, vt: true }) };
                tile_grads(b, h, i0, nq, j0, nk, &qr, &tile, &mut p, &mut ds, &mut drop);
                if let Some(gb) = &g.bias {
                    for r in 0..nq {
                        // SAFETY: row i0 + r of (b, h) of the bias gradient belongs to this task.
                        (0..nk).for_each(|jj| unsafe { gb.store::<T, C>(b, h, i0 + r, j0 + jj, ds[r * kp + jj]) });
                    }
                }
                gemm(nq, e_n, nk, Mat { data: &ds, rs: kp, cs: 1 }, &tile.k, ep, &mut dq, ep, true);
                j0 += nk;
            }
            // SAFETY: rows i0 .. i0 + nq of (b, h) belong to this task.
            unsafe {
                if let Some(gb) = &g.bias {
                    // Keys past the causal limit are masked: zero gradient.
                    for r in 0..nq {
                        (kend..d.len_kv).for_each(|j| gb.store::<T, C>(b, h, i0 + r, j, C::ZERO));
                    }
                }
                if let Some(gq) = &g.query {
                    for r in 0..nq {
                        let row = &mut dq[r * ep..r * ep + e_n];
                        row.iter_mut().for_each(|x| *x = *x * scale);
                        store_row::<T, C>(gq, b, h, i0 + r, row);
                    }
                }
            }
        });
    }
}
/// Calls `f(b, hk, j)` for every key row (serially; only used for empty query sets).
fn for_kv(d: &Dims, mut f: impl FnMut(usize, usize, usize)) {
    for b in 0..d.batch {
        for hk in 0..d.heads_kv {
            for j in 0..d.len_kv {
                f(b, hk, j);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator for test data.
    fn data(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    fn contiguous(shape: [usize; 4]) -> [i64; 4] {
        [(shape[1] * shape[2] * shape[3]) as i64, (shape[2] * shape[3]) as i64, shape[3] as i64, 1]
    }

    /// Mask element (b, h, i, j) multiplier, from the same bit rule as the kernel.
    fn mask(bits: &dyn BitSource, p: f64, n: u64) -> f64 {
        let threshold = (((1.0 - p) * 4_294_967_296.0) as u64).min(1 << 32);
        if (bits.block(n / 4)[(n % 4) as usize] as u64) < threshold {
            1.0 / (1.0 - p)
        } else {
            0.0
        }
    }

    struct Naive {
        out: Vec<f64>,
        lse: Vec<f64>,
        dq: Vec<f64>,
        dk: Vec<f64>,
        dv: Vec<f64>,
        dbias: Vec<f64>,
    }

    /// Materialised attention and its gradients, straight from the definition.
    #[allow(clippy::too_many_arguments)]
    fn naive(d: Dims, q: &[f64], k: &[f64], v: &[f64], bias: Option<&[f64]>, causal: bool, scale: f64, drop: Option<(f64, &dyn BitSource)>, dout: &[f64]) -> Naive {
        let (l_n, s_n, e_n, ev_n) = (d.len_q, d.len_kv, d.dim_qk, d.dim_v);
        let g = d.heads_q / d.heads_kv;
        let mut r = Naive {
            out: vec![0.0; d.batch * d.heads_q * l_n * ev_n],
            lse: vec![0.0; d.batch * d.heads_q * l_n],
            dq: vec![0.0; q.len()],
            dk: vec![0.0; k.len()],
            dv: vec![0.0; v.len()],
            dbias: vec![0.0; d.batch * d.heads_q * l_n * s_n],
        };
        for b in 0..d.batch {
            for h in 0..d.heads_q {
                let hk = h / g;
                let qo = |i: usize, e: usize| ((b * d.heads_q + h) * l_n + i) * e_n + e;
                let ko = |j: usize, e: usize| ((b * d.heads_kv + hk) * s_n + j) * e_n + e;
                let vo = |j: usize, e: usize| ((b * d.heads_kv + hk) * s_n + j) * ev_n + e;
                let oo = |i: usize, e: usize| ((b * d.heads_q + h) * l_n + i) * ev_n + e;
                let so = |i: usize, j: usize| ((b * d.heads_q + h) * l_n + i) * s_n + j;
                for i in 0..l_n {
                    let mut s: Vec<f64> = (0..s_n)
                        .map(|j| {
                            let mut x = scale * (0..e_n).map(|e| q[qo(i, e)] * k[ko(j, e)]).sum::<f64>();
                            if let Some(bias) = bias {
                                x += bias[so(i, j)];
                            }
                            if causal && j > i {
                                x = f64::NEG_INFINITY;
                            }
                            x
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    if m == f64::NEG_INFINITY {
                        r.lse[(b * d.heads_q + h) * l_n + i] = f64::NEG_INFINITY;
                        continue;
                    }
                    let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                    r.lse[(b * d.heads_q + h) * l_n + i] = m + z.ln();
                    s.iter_mut().for_each(|x| *x = (*x - m).exp() / z);
                    let mk: Vec<f64> = (0..s_n).map(|j| drop.map_or(1.0, |(p, bits)| mask(bits, p, so(i, j) as u64))).collect();
                    for e in 0..ev_n {
                        r.out[oo(i, e)] = (0..s_n).map(|j| s[j] * mk[j] * v[vo(j, e)]).sum();
                    }
                    // Gradients.
                    let dpd: Vec<f64> = (0..s_n).map(|j| (0..ev_n).map(|e| dout[oo(i, e)] * v[vo(j, e)]).sum::<f64>()).collect();
                    for j in 0..s_n {
                        for e in 0..ev_n {
                            r.dv[vo(j, e)] += s[j] * mk[j] * dout[oo(i, e)];
                        }
                    }
                    let dp: Vec<f64> = (0..s_n).map(|j| dpd[j] * mk[j]).collect();
                    let dot: f64 = (0..s_n).map(|j| s[j] * dp[j]).sum();
                    for j in 0..s_n {
                        let ds = s[j] * (dp[j] - dot);
                        r.dbias[so(i, j)] = ds;
                        for e in 0..e_n {
                            r.dq[qo(i, e)] += scale * ds * k[ko(j, e)];
                            r.dk[ko(j, e)] += scale * ds * q[qo(i, e)];
                        }
                    }
                }
            }
        }
        r
    }

    fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (n, (g, w)) in got.iter().zip(want).enumerate() {
            let ok = (g == w) || (g - w).abs() <= tol * (1.0 + w.abs());
            assert!(ok, "{what}[{n}]: got {g}, want {w}");
        }
    }

    /// A test operand stored as float64 or float32.
    enum Buf {
        F64(Vec<f64>),
        F32(Vec<f32>),
    }

    impl Buf {
        fn new(v: &[f64], dtype: DType) -> Buf {
            match dtype {
                DType::F32 => Buf::F32(v.iter().map(|&x| x as f32).collect()),
                _ => Buf::F64(v.to_vec()),
            }
        }
        fn op(&mut self, strides: [i64; 4]) -> Operand {
            let ptr = match self {
                Buf::F64(v) => v.as_mut_ptr() as *mut u8,
                Buf::F32(v) => v.as_mut_ptr() as *mut u8,
            };
            Operand { ptr, strides }
        }
        fn get(&self) -> Vec<f64> {
            match self {
                Buf::F64(v) => v.clone(),
                Buf::F32(v) => v.iter().map(|&x| x as f64).collect(),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run(d: Dims, causal: bool, with_bias: bool, drop_p: f64, transposed_q: bool, threads: usize) {
        run_typed(d, causal, with_bias, drop_p, transposed_q, threads, DType::F64);
    }

    /// Forward and backward of `dtype` (float64 or float32) against [`naive`] in float64.
    #[allow(clippy::too_many_arguments)]
    fn run_typed(d: Dims, causal: bool, with_bias: bool, drop_p: f64, transposed_q: bool, threads: usize, dtype: DType) {
        let (l_n, s_n, e_n, ev_n) = (d.len_q, d.len_kv, d.dim_qk, d.dim_v);
        // float32 rounds inputs and accumulates over up to a few hundred keys.
        let (tol_out, tol_grad) = if dtype == DType::F32 { (2e-5, 1e-4) } else { (1e-10, 1e-9) };
        let round = |v: Vec<f64>| Buf::new(&v, dtype).get();
        let q = round(data(d.batch * d.heads_q * l_n * e_n, 1));
        let k = round(data(d.batch * d.heads_kv * s_n * e_n, 2));
        let v = round(data(d.batch * d.heads_kv * s_n * ev_n, 3));
        let dout = round(data(d.batch * d.heads_q * l_n * ev_n, 4));
        let mut bias = round(data(d.batch * d.heads_q * l_n * s_n, 5));
        if with_bias {
            // A few fully masked rows and scattered -inf.
            for (n, x) in bias.iter_mut().enumerate() {
                if n % 7 == 3 || (n / s_n) % 5 == 2 {
                    *x = f64::NEG_INFINITY;
                }
            }
        }
        let engine = |i: u64| -> [u32; 4] {
            let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
            let mut w = [0u32; 4];
            for y in &mut w {
                x ^= x >> 31;
                x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                x ^= x >> 29;
                *y = x as u32;
            }
            w
        };
        let drop = (drop_p > 0.0).then_some((drop_p, &engine as &dyn BitSource));
        let scale = 0.7;
        let want = naive(d, &q, &k, &v, with_bias.then_some(&bias[..]), causal, scale, drop, &dout);

        // The query as a transposed [B, L, Hq, E] buffer when asked.
        let (qbuf, q_strides) = if transposed_q {
            let mut t = vec![0.0; q.len()];
            for b in 0..d.batch {
                for h in 0..d.heads_q {
                    for i in 0..l_n {
                        for e in 0..e_n {
                            t[((b * l_n + i) * d.heads_q + h) * e_n + e] = q[((b * d.heads_q + h) * l_n + i) * e_n + e];
                        }
                    }
                }
            }
            (t, [(l_n * d.heads_q * e_n) as i64, e_n as i64, (d.heads_q * e_n) as i64, 1])
        } else {
            (q.clone(), contiguous([d.batch, d.heads_q, l_n, e_n]))
        };
        let mut qbuf = Buf::new(&qbuf, dtype);
        let (mut kb, mut vb, mut biasb, mut doutb) = (Buf::new(&k, dtype), Buf::new(&v, dtype), Buf::new(&bias, dtype), Buf::new(&dout, dtype));
        let a = Attention {
            dims: d,
            dtype,
            query: qbuf.op(q_strides),
            key: kb.op(contiguous([d.batch, d.heads_kv, s_n, e_n])),
            value: vb.op(contiguous([d.batch, d.heads_kv, s_n, ev_n])),
            bias: with_bias.then(|| biasb.op(contiguous([d.batch, d.heads_q, l_n, s_n]))),
            causal,
            scale,
            dropout: drop.map(|(p, bits)| Dropout { p, bits }),
            threads,
        };
        let nan = |n: usize| Buf::new(&vec![f64::NAN; n], dtype);
        let mut out = nan(want.out.len());
        let mut lse = nan(want.lse.len());
        let out_op = out.op(contiguous([d.batch, d.heads_q, l_n, ev_n]));
        unsafe { forward(&a, out_op, lse.op([0; 4]).ptr) }.unwrap();
        close("out", &out.get(), &want.out, tol_out);
        close("lse", &lse.get(), &want.lse, tol_out);

        let (mut dq, mut dk, mut dv, mut db) = (nan(q.len()), nan(k.len()), nan(v.len()), nan(want.dbias.len()));
        let grads = Grads {
            query: Some(dq.op(contiguous([d.batch, d.heads_q, l_n, e_n]))),
            key: Some(dk.op(contiguous([d.batch, d.heads_kv, s_n, e_n]))),
            value: Some(dv.op(contiguous([d.batch, d.heads_kv, s_n, ev_n]))),
            bias: with_bias.then(|| db.op(contiguous([d.batch, d.heads_q, l_n, s_n]))),
        };
        let dout_op = doutb.op(contiguous([d.batch, d.heads_q, l_n, ev_n]));
        unsafe { backward(&a, out_op, dout_op, lse.op([0; 4]).ptr, grads) }.unwrap();
        close("dq", &dq.get(), &want.dq, tol_grad);
        close("dk", &dk.get(), &want.dk, tol_grad);
        close("dv", &dv.get(), &want.dv, tol_grad);
        if with_bias {
            close("dbias", &db.get(), &want.dbias, tol_grad);
        }
    }

    fn dims(batch: usize, heads_q: usize, heads_kv: usize, len_q: usize, len_kv: usize, dim_qk: usize, dim_v: usize) -> Dims {
        Dims { batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v }
    }

    #[test]
    fn matches_naive_plain_and_odd_sizes() {
        run(dims(2, 2, 2, 5, 7, 3, 4), false, false, 0.0, false, 1);
        run(dims(1, 2, 2, 70, 130, 5, 6), false, false, 0.0, false, 4);
    }

    #[test]
    fn matches_naive_causal_both_aspect_ratios() {
        run(dims(1, 2, 2, 131, 67, 4, 3), true, false, 0.0, false, 4);
        run(dims(1, 1, 1, 67, 131, 4, 3), true, false, 0.0, false, 1);
    }

    #[test]
    fn matches_naive_bias_with_masked_rows() {
        run(dims(2, 2, 1, 33, 65, 8, 5), false, true, 0.0, false, 4);
        run(dims(1, 2, 2, 70, 70, 8, 8), true, true, 0.0, true, 4);
        // One (b, kv head) pass with causally skipped tiles, keys outnumbering queries.
        run(dims(1, 2, 2, 67, 131, 8, 8), true, true, 0.0, false, 1);
    }

    #[test]
    fn matches_naive_gqa_transposed_query() {
        run(dims(2, 6, 2, 9, 11, 4, 4), false, false, 0.0, true, 4);
    }

    #[test]
    fn matches_naive_dropout() {
        run(dims(2, 4, 2, 70, 66, 4, 5), false, false, 0.3, false, 4);
        run(dims(1, 2, 2, 20, 20, 4, 5), true, true, 0.5, false, 1);
    }

    #[test]
    fn float32_tiles_match_naive() {
        // Feature sizes that are and are not multiples of the micro-kernel's width,
        // several key blocks with a short last one, both causal aspect ratios.
        run_typed(dims(1, 2, 2, 130, 200, 64, 64), true, false, 0.0, false, 4, DType::F32);
        run_typed(dims(2, 4, 2, 200, 70, 40, 33), true, true, 0.0, true, 4, DType::F32);
        run_typed(dims(1, 2, 1, 97, 129, 64, 16), false, false, 0.2, false, 1, DType::F32);
    }

    #[test]
    fn gemm_matches_naive_with_tails_and_transposed_a() {
        for &(m, n, k) in &[(1, 1, 1), (5, 7, 3), (64, 64, 64), (67, 33, 65), (4, 32, 0), (9, 70, 2)] {
            let np = padded(n);
            let a = data(m * k, 7);
            // The same matrix stored transposed ([k][m]), read with swapped strides.
            let at: Vec<f64> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
            let mut b = vec![0.0; k * np + 1];
            let bd = data(k * n, 8);
            for kk in 0..k {
                b[kk * np..kk * np + n].copy_from_slice(&bd[kk * n..(kk + 1) * n]);
            }
            let c0 = data(m * np, 9);
            for accumulate in [false, true] {
                for transposed in [false, true] {
                    let am = if transposed { Mat { data: &at[..], rs: 1, cs: m } } else { Mat { data: &a[..], rs: k, cs: 1 } };
                    let mut c = c0.clone();
                    gemm(m, n, k, am, &b, np, &mut c, np, accumulate);
                    for r in 0..m {
                        for j in 0..n {
                            let want = if accumulate { c0[r * np + j] } else { 0.0 } + (0..k).map(|kk| a[r * k + kk] * bd[kk * n + j]).sum::<f64>();
                            let got = c[r * np + j];
                            assert!((got - want).abs() <= 1e-12 * (1.0 + want.abs()), "m={m} n={n} k={k} ({r},{j}): {got} vs {want}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn row_reductions_cover_the_tail() {
        let x: Vec<f64> = (0..37).map(|n| ((n * 7) % 37) as f64 - 3.0).collect();
        assert_eq!(row_max(&x), 33.0);
        assert_eq!(row_sum(&x), x.iter().sum::<f64>());
        assert_eq!(row_max::<f64>(&[]), f64::NEG_INFINITY);
    }

    #[test]
    fn half_types_accumulate_in_float() {
        let d = dims(1, 1, 1, 3, 200, 4, 2);
        // Identical keys: uniform attention, the output is the mean of the values.
        let mut q = vec![half::f16::from_f32(0.5); 12];
        let mut k = vec![half::f16::from_f32(0.25); 800];
        let mut v: Vec<half::f16> = (0..400).map(|n| half::f16::from_f32(if n % 2 == 0 { 1.0 } else { 1.0 / 3.0 })).collect();
        let mut out = vec![half::f16::ZERO; 6];
        let mut lse = vec![0f32; 3];
        let o = |p: *mut half::f16, s: [i64; 4]| Operand { ptr: p as *mut u8, strides: s };
        let a = Attention {
            dims: d,
            dtype: DType::F16,
            query: o(q.as_mut_ptr(), [12, 12, 4, 1]),
            key: o(k.as_mut_ptr(), [800, 800, 4, 1]),
            value: o(v.as_mut_ptr(), [400, 400, 2, 1]),
            bias: None,
            causal: false,
            scale: 1.0,
            dropout: None,
            threads: 1,
        };
        unsafe { forward(&a, o(out.as_mut_ptr(), [6, 6, 2, 1]), lse.as_mut_ptr() as *mut u8) }.unwrap();
        for r in 0..3 {
            assert_eq!(out[2 * r].to_f32(), 1.0);
            assert!((out[2 * r + 1].to_f32() - 1.0 / 3.0).abs() < 1e-3);
            assert!((lse[r] - (0.5 + 200f32.ln())).abs() < 1e-5);
        }
    }

    #[test]
    fn rejects_bad_heads_and_dtypes() {
        let a = |heads_kv, dtype| Attention {
            dims: dims(1, 3, heads_kv, 1, 1, 1, 1),
            dtype,
            query: Operand { ptr: std::ptr::null_mut(), strides: [0; 4] },
            key: Operand { ptr: std::ptr::null_mut(), strides: [0; 4] },
            value: Operand { ptr: std::ptr::null_mut(), strides: [0; 4] },
            bias: None,
            causal: false,
            scale: 1.0,
            dropout: None,
            threads: 1,
        };
        let out = Operand { ptr: std::ptr::null_mut(), strides: [0; 4] };
        assert!(matches!(unsafe { forward(&a(2, DType::F32), out, std::ptr::null_mut()) }, Err(Error::InvalidValue { .. })));
        assert!(matches!(unsafe { forward(&a(3, DType::I32), out, std::ptr::null_mut()) }, Err(Error::UnsupportedDtype { .. })));
    }
}
