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
//! into float32 and accumulate in float32 (PyTorch's opmath). Work is split
//! over (batch, head, query block) in the forward pass; the backward pass
//! runs one task per (batch, kv head, key block) for dK/dV (summing over the
//! query heads of the group) and one per (batch, head, query block) for dQ
//! and d(bias), so every output element has one writer and results do not
//! depend on the thread count.

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::math::Float;
use crate::random::BitSource;

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
        (0..tasks).into_par_iter().for_each(f);
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

/// Per-task scratch tiles of one key block.
struct KeyTile<C> {
    /// Keys transposed: `[E][nk]`, so a score row is a vectorisable axpy over keys.
    kt: Vec<C>,
    /// Keys row-major `[nk][E]` (backward: dQ += dS K).
    k: Vec<C>,
    /// Values row-major `[nk][Ev]` (forward: O += P V).
    v: Vec<C>,
    /// Values transposed `[Ev][nk]` (backward: dP = dO V^T).
    vt: Vec<C>,
}

impl<C: Float> KeyTile<C> {
    fn new() -> Self {
        KeyTile { kt: Vec::new(), k: Vec::new(), v: Vec::new(), vt: Vec::new() }
    }

    /// Loads keys `j0 .. j0 + nk` of (b, hk); `rows`/`transposed` select which layouts to fill.
    ///
    /// # Safety
    /// The key/value operands of `a` are readable for these elements.
    #[allow(clippy::too_many_arguments)]
    unsafe fn load<T: Element>(&mut self, a: &Attention, b: usize, hk: usize, j0: usize, nk: usize, k_rows: bool, v_rows: bool, v_transposed: bool) {
        let (e_n, ev_n) = (a.dims.dim_qk, a.dims.dim_v);
        self.kt.resize(e_n * nk, C::ZERO);
        if k_rows {
            self.k.resize(nk * e_n, C::ZERO);
        }
        if v_rows {
            self.v.resize(nk * ev_n, C::ZERO);
        }
        if v_transposed {
            self.vt.resize(ev_n * nk, C::ZERO);
        }
        for jj in 0..nk {
            for d in 0..e_n {
                // SAFETY: caller contract.
                let x = unsafe { a.key.load::<T, C>(b, hk, j0 + jj, d) };
                self.kt[d * nk + jj] = x;
                if k_rows {
                    self.k[jj * e_n + d] = x;
                }
            }
            if v_rows || v_transposed {
                for e in 0..ev_n {
                    // SAFETY: caller contract.
                    let x = unsafe { a.value.load::<T, C>(b, hk, j0 + jj, e) };
                    if v_rows {
                        self.v[jj * ev_n + e] = x;
                    }
                    if v_transposed {
                        self.vt[e * nk + jj] = x;
                    }
                }
            }
        }
    }
}

/// Scores of query row `i` (its scaled features `q`) against the `nk` keys
/// from `j0` in `tile`, plus bias and causal mask, into `s`.
///
/// # Safety
/// The bias operand of `a`, if any, is readable at these elements.
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn scores<T: Element, C: Float>(a: &Attention, b: usize, h: usize, i: usize, q: &[C], tile: &KeyTile<C>, j0: usize, nk: usize, s: &mut [C]) {
    let s = &mut s[..nk];
    s.fill(C::ZERO);
    for (d, &qd) in q.iter().enumerate() {
        let kt = &tile.kt[d * nk..(d + 1) * nk];
        for (x, &k) in s.iter_mut().zip(kt) {
            *x = *x + qd * k;
        }
    }
    if let Some(bias) = &a.bias {
        for (jj, x) in s.iter_mut().enumerate() {
            // SAFETY: caller contract.
            *x = *x + unsafe { bias.load::<T, C>(b, h, i, j0 + jj) };
        }
    }
    if a.causal && j0 + nk > i + 1 {
        let first_masked = (i + 1).saturating_sub(j0);
        for x in &mut s[first_masked..] {
            *x = -C::infinity();
        }
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

unsafe fn forward_typed<T: Element, C: Float>(a: &Attention, out: Operand, lse: usize) {
    let d = a.dims;
    let q_blocks = d.len_q.div_ceil(BLOCK_Q);
    let tasks = d.batch * d.heads_q * q_blocks;
    if tasks == 0 {
        return;
    }
    let keep = Keep::new(a.dropout);
    let scale = C::from_f64c(a.scale);
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
    for_tasks(tasks, a.threads, |t| {
        let (bh, qb) = (t / q_blocks, t % q_blocks);
        let (b, h) = (bh / d.heads_q, bh % d.heads_q);
        let hk = h / d.group();
        let i0 = qb * BLOCK_Q;
        let nq = BLOCK_Q.min(d.len_q - i0);
        let mut q = vec![C::ZERO; nq * e_n];
        for r in 0..nq {
            for e in 0..e_n {
                // SAFETY: forward's contract.
                q[r * e_n + e] = unsafe { a.query.load::<T, C>(b, h, i0 + r, e) } * scale;
            }
        }
        let mut o = vec![C::ZERO; nq * ev_n];
        let mut m = vec![-C::infinity(); nq];
        let mut l = vec![C::ZERO; nq];
        let mut s = vec![C::ZERO; BLOCK_K];
        let mut drop = vec![C::ZERO; BLOCK_K];
        let mut tile = KeyTile::<C>::new();
        let kend = key_end(a, i0, nq);
        let mut j0 = 0;
        while j0 < kend {
            let nk = BLOCK_K.min(kend - j0);
            // SAFETY: forward's contract.
            unsafe { tile.load::<T>(a, b, hk, j0, nk, false, true, false) };
            for r in 0..nq {
                let i = i0 + r;
                // SAFETY: forward's contract.
                unsafe { scores::<T, C>(a, b, h, i, &q[r * e_n..(r + 1) * e_n], &tile, j0, nk, &mut s) };
                let s = &mut s[..nk];
                let block_max = s.iter().fold(-C::infinity(), |acc, &x| if x > acc { x } else { acc });
                let m_new = if block_max > m[r] { block_max } else { m[r] };
                if m_new == -C::infinity() {
                    // Every key so far is masked: nothing to accumulate yet.
                    continue;
                }
                let alpha = (m[r] - m_new).exp();
                let mut sum = C::ZERO;
                for x in s.iter_mut() {
                    *x = (*x - m_new).exp();
                    sum = sum + *x;
                }
                l[r] = l[r] * alpha + sum;
                m[r] = m_new;
                let orow = &mut o[r * ev_n..(r + 1) * ev_n];
                if alpha != C::ONE {
                    orow.iter_mut().for_each(|x| *x = *x * alpha);
                }
                if let Some(k) = &keep {
                    let drop = &mut drop[..nk];
                    k.row(((b * d.heads_q + h) * d.len_q + i) as u64 * d.len_kv as u64 + j0 as u64, drop);
                    s.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
                }
                for (jj, &p) in s.iter().enumerate() {
                    if p != C::ZERO {
                        let v = &tile.v[jj * ev_n..(jj + 1) * ev_n];
                        orow.iter_mut().zip(v).for_each(|(x, &y)| *x = *x + p * y);
                    }
                }
            }
            j0 += nk;
        }
        for r in 0..nq {
            let row = (b * d.heads_q + h) * d.len_q + i0 + r;
            let (value, inv) = if l[r] > C::ZERO { (m[r] + l[r].ln(), C::ONE / l[r]) } else { (-C::infinity(), C::ZERO) };
            // SAFETY: row `row` of lse and of out belongs to this task only.
            unsafe {
                (lse as *mut C).add(row).write(value);
                for e in 0..ev_n {
                    out.store::<T, C>(b, h, i0 + r, e, o[r * ev_n + e] * inv);
                }
            }
        }
    });
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

/// The per-row quantities of the backward pass: row `i` of head (b, h)
/// against keys `j0 .. j0 + nk`. Leaves `p` (probabilities after dropout,
/// what multiplied V) and `ds` (gradient of the pre-softmax scores, which is
/// also the bias gradient).
struct RowGrad<'x, C> {
    q: &'x [C],
    dout: &'x [C],
    lse: C,
    delta: C,
}

#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn row_grad<T: Element, C: Float>(
    a: &Attention,
    keep: &Option<Keep>,
    b: usize,
    h: usize,
    i: usize,
    row: &RowGrad<C>,
    tile: &KeyTile<C>,
    j0: usize,
    nk: usize,
    p: &mut [C],
    ds: &mut [C],
    drop: &mut [C],
) {
    let d = &a.dims;
    // SAFETY: forwarded contract.
    unsafe { scores::<T, C>(a, b, h, i, row.q, tile, j0, nk, p) };
    let (p, ds) = (&mut p[..nk], &mut ds[..nk]);
    if row.lse == -C::infinity() {
        // A fully masked row contributes nothing (forward output was 0).
        p.fill(C::ZERO);
        ds.fill(C::ZERO);
        return;
    }
    for x in p.iter_mut() {
        *x = (*x - row.lse).exp();
    }
    // dP = dO . V^T, a vectorisable axpy over keys per value feature.
    ds.fill(C::ZERO);
    for (e, &g) in row.dout.iter().enumerate() {
        let vt = &tile.vt[e * nk..(e + 1) * nk];
        ds.iter_mut().zip(vt).for_each(|(x, &y)| *x = *x + g * y);
    }
    if let Some(k) = keep {
        let drop = &mut drop[..nk];
        k.row(((b * d.heads_q + h) * d.len_q + i) as u64 * d.len_kv as u64 + j0 as u64, drop);
        // Gradient through dropout: dP_softmax = dP_dropped * mask / (1 - p).
        ds.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
        // ds = P * (dP - delta), with P the probabilities before dropout.
        ds.iter_mut().zip(p.iter()).for_each(|(x, &y)| *x = y * (*x - row.delta));
        p.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
    } else {
        ds.iter_mut().zip(p.iter()).for_each(|(x, &y)| *x = y * (*x - row.delta));
    }
}

unsafe fn backward_typed<T: Element, C: Float>(a: &Attention, out: Operand, grad_out: Operand, lse: usize, g: Grads) {
    let d = a.dims;
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
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
            for r in t * BLOCK_Q..((t + 1) * BLOCK_Q).min(rows) {
                let (bh, i) = (r / d.len_q, r % d.len_q);
                let (b, h) = (bh / d.heads_q, bh % d.heads_q);
                let mut acc = C::ZERO;
                for e in 0..ev_n {
                    // SAFETY: backward's contract.
                    acc = acc + unsafe { grad_out.load::<T, C>(b, h, i, e) * out.load::<T, C>(b, h, i, e) };
                }
                // SAFETY: element r belongs to this task.
                unsafe { (delta_addr as *mut C).add(r).write(acc) };
            }
        });
    }
    let lse_at = |r: usize| unsafe { (lse as *const C).add(r).read() };
    // Loads the scaled query rows, dO rows, lse and delta of rows i0 .. i0 + nq of (b, h).
    let load_rows = |b: usize, h: usize, i0: usize, nq: usize, q: &mut Vec<C>, dout: &mut Vec<C>, stats: &mut Vec<(C, C)>| {
        q.resize(nq * e_n, C::ZERO);
        dout.resize(nq * ev_n, C::ZERO);
        stats.clear();
        for r in 0..nq {
            for e in 0..e_n {
                // SAFETY: backward's contract.
                q[r * e_n + e] = unsafe { a.query.load::<T, C>(b, h, i0 + r, e) } * scale;
            }
            for e in 0..ev_n {
                // SAFETY: backward's contract.
                dout[r * ev_n + e] = unsafe { grad_out.load::<T, C>(b, h, i0 + r, e) };
            }
            let row = (b * d.heads_q + h) * d.len_q + i0 + r;
            stats.push((lse_at(row), delta[row]));
        }
    };

    // dK and dV: one task per (b, kv head, key block), summing over the group's heads.
    if g.key.is_some() || g.value.is_some() {
        let k_blocks = d.len_kv.div_ceil(BLOCK_K);
        for_tasks(d.batch * d.heads_kv * k_blocks, a.threads, |t| {
            let (bh, kb) = (t / k_blocks, t % k_blocks);
            let (b, hk) = (bh / d.heads_kv, bh % d.heads_kv);
            let j0 = kb * BLOCK_K;
            let nk = BLOCK_K.min(d.len_kv - j0);
            let mut tile = KeyTile::<C>::new();
            // SAFETY: backward's contract.
            unsafe { tile.load::<T>(a, b, hk, j0, nk, false, false, true) };
            let mut dk = vec![C::ZERO; nk * e_n];
            let mut dv = vec![C::ZERO; nk * ev_n];
            let (mut q, mut dout, mut stats) = (Vec::new(), Vec::new(), Vec::new());
            let (mut p, mut ds, mut drop) = (vec![C::ZERO; nk], vec![C::ZERO; nk], vec![C::ZERO; nk]);
            // Causal: query rows before j0 see none of these keys.
            let first_block = if a.causal { j0 / BLOCK_Q } else { 0 };
            for h in hk * d.group()..(hk + 1) * d.group() {
                for qb in first_block..d.len_q.div_ceil(BLOCK_Q) {
                    let i0 = qb * BLOCK_Q;
                    let nq = BLOCK_Q.min(d.len_q - i0);
                    load_rows(b, h, i0, nq, &mut q, &mut dout, &mut stats);
                    for r in 0..nq {
                        let i = i0 + r;
                        if a.causal && i < j0 {
                            continue;
                        }
                        let row = RowGrad { q: &q[r * e_n..(r + 1) * e_n], dout: &dout[r * ev_n..(r + 1) * ev_n], lse: stats[r].0, delta: stats[r].1 };
                        // SAFETY: backward's contract.
                        unsafe { row_grad::<T, C>(a, &keep, b, h, i, &row, &tile, j0, nk, &mut p, &mut ds, &mut drop) };
                        for jj in 0..nk {
                            if p[jj] != C::ZERO {
                                let pj = p[jj];
                                dv[jj * ev_n..(jj + 1) * ev_n].iter_mut().zip(row.dout).for_each(|(x, &y)| *x = *x + pj * y);
                            }
                            if ds[jj] != C::ZERO {
                                // dK = dS^T (scale * Q): `q` holds the scaled rows.
                                let sj = ds[jj];
                                dk[jj * e_n..(jj + 1) * e_n].iter_mut().zip(row.q).for_each(|(x, &y)| *x = *x + sj * y);
                            }
                        }
                    }
                }
            }
            // SAFETY: keys j0 .. j0 + nk of (b, hk) belong to this task.
            unsafe {
                for jj in 0..nk {
                    if let Some(gk) = &g.key {
                        (0..e_n).for_each(|e| gk.store::<T, C>(b, hk, j0 + jj, e, dk[jj * e_n + e]));
                    }
                    if let Some(gv) = &g.value {
                        (0..ev_n).for_each(|e| gv.store::<T, C>(b, hk, j0 + jj, e, dv[jj * ev_n + e]));
                    }
                }
            }
        });
    }

    // dQ and d(bias): one task per (b, head, query block).
    if g.query.is_some() || g.bias.is_some() {
        let q_blocks = d.len_q.div_ceil(BLOCK_Q);
        for_tasks(d.batch * d.heads_q * q_blocks, a.threads, |t| {
            let (bh, qb) = (t / q_blocks, t % q_blocks);
            let (b, h) = (bh / d.heads_q, bh % d.heads_q);
            let hk = h / d.group();
            let i0 = qb * BLOCK_Q;
            let nq = BLOCK_Q.min(d.len_q - i0);
            let (mut q, mut dout, mut stats) = (Vec::new(), Vec::new(), Vec::new());
            load_rows(b, h, i0, nq, &mut q, &mut dout, &mut stats);
            let mut dq = vec![C::ZERO; nq * e_n];
            let (mut p, mut ds, mut drop) = (vec![C::ZERO; BLOCK_K], vec![C::ZERO; BLOCK_K], vec![C::ZERO; BLOCK_K]);
            let mut tile = KeyTile::<C>::new();
            let kend = key_end(a, i0, nq);
            let mut j0 = 0;
            while j0 < kend {
                let nk = BLOCK_K.min(kend - j0);
                // SAFETY: backward's contract.
                unsafe { tile.load::<T>(a, b, hk, j0, nk, true, false, true) };
                for r in 0..nq {
                    let i = i0 + r;
                    let row = RowGrad { q: &q[r * e_n..(r + 1) * e_n], dout: &dout[r * ev_n..(r + 1) * ev_n], lse: stats[r].0, delta: stats[r].1 };
                    // SAFETY: backward's contract.
                    unsafe { row_grad::<T, C>(a, &keep, b, h, i, &row, &tile, j0, nk, &mut p, &mut ds, &mut drop) };
                    if let Some(gb) = &g.bias {
                        // SAFETY: row i of (b, h) of the bias gradient belongs to this task.
                        (0..nk).for_each(|jj| unsafe { gb.store::<T, C>(b, h, i, j0 + jj, ds[jj]) });
                    }
                    let dqr = &mut dq[r * e_n..(r + 1) * e_n];
                    for (jj, &sj) in ds[..nk].iter().enumerate() {
                        if sj != C::ZERO {
                            dqr.iter_mut().zip(&tile.k[jj * e_n..(jj + 1) * e_n]).for_each(|(x, &y)| *x = *x + sj * y);
                        }
                    }
                }
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
                        (0..e_n).for_each(|e| gq.store::<T, C>(b, h, i0 + r, e, dq[r * e_n + e] * scale));
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

    fn op(v: &mut [f64], strides: [i64; 4]) -> Operand {
        Operand { ptr: v.as_mut_ptr() as *mut u8, strides }
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

    #[allow(clippy::too_many_arguments)]
    fn run(d: Dims, causal: bool, with_bias: bool, drop_p: f64, transposed_q: bool, threads: usize) {
        let (l_n, s_n, e_n, ev_n) = (d.len_q, d.len_kv, d.dim_qk, d.dim_v);
        let q = data(d.batch * d.heads_q * l_n * e_n, 1);
        let k = data(d.batch * d.heads_kv * s_n * e_n, 2);
        let v = data(d.batch * d.heads_kv * s_n * ev_n, 3);
        let dout = data(d.batch * d.heads_q * l_n * ev_n, 4);
        let mut bias = data(d.batch * d.heads_q * l_n * s_n, 5);
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
        let (mut qbuf, q_strides) = if transposed_q {
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
        let (mut k, mut v, mut bias, mut dout) = (k, v, bias, dout);
        let a = Attention {
            dims: d,
            dtype: DType::F64,
            query: op(&mut qbuf, q_strides),
            key: op(&mut k, contiguous([d.batch, d.heads_kv, s_n, e_n])),
            value: op(&mut v, contiguous([d.batch, d.heads_kv, s_n, ev_n])),
            bias: with_bias.then(|| op(&mut bias, contiguous([d.batch, d.heads_q, l_n, s_n]))),
            causal,
            scale,
            dropout: drop.map(|(p, bits)| Dropout { p, bits }),
            threads,
        };
        let mut out = vec![f64::NAN; want.out.len()];
        let mut lse = vec![f64::NAN; want.lse.len()];
        let out_op = op(&mut out, contiguous([d.batch, d.heads_q, l_n, ev_n]));
        unsafe { forward(&a, out_op, lse.as_mut_ptr() as *mut u8) }.unwrap();
        close("out", &out, &want.out, 1e-10);
        close("lse", &lse, &want.lse, 1e-10);

        let (mut dq, mut dk, mut dv, mut db) = (vec![f64::NAN; q.len()], vec![f64::NAN; k.len()], vec![f64::NAN; v.len()], vec![f64::NAN; want.dbias.len()]);
        let grads = Grads {
            query: Some(op(&mut dq, contiguous([d.batch, d.heads_q, l_n, e_n]))),
            key: Some(op(&mut dk, contiguous([d.batch, d.heads_kv, s_n, e_n]))),
            value: Some(op(&mut dv, contiguous([d.batch, d.heads_kv, s_n, ev_n]))),
            bias: with_bias.then(|| op(&mut db, contiguous([d.batch, d.heads_q, l_n, s_n]))),
        };
        let dout_op = op(&mut dout, contiguous([d.batch, d.heads_q, l_n, ev_n]));
        unsafe { backward(&a, out_op, dout_op, lse.as_ptr() as *const u8, grads) }.unwrap();
        close("dq", &dq, &want.dq, 1e-9);
        close("dk", &dk, &want.dk, 1e-9);
        close("dv", &dv, &want.dv, 1e-9);
        if with_bias {
            close("dbias", &db, &want.dbias, 1e-9);
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
