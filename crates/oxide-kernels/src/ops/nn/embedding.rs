//! Embedding bags (PyTorch's `_embedding_bag`, `F.embedding_bag`,
//! `nn.EmbeddingBag`): per bag, the sum, mean or elementwise max of the weight
//! rows its indices select, and the gradients with respect to the weight and to
//! the per-sample weights.
//!
//! Layouts (all contiguous, the glue makes them so): weight `(num_weights, dim)`,
//! indices `(n)` int64, offsets `(num_offsets)` int64 (bag starts; with
//! `include_last_offset` the last entry is the end of the last bag), output and
//! gradient `(num_bags, dim)`, per-sample weights `(n)` of the weight's dtype.
//! Bag `b` holds indices `[offsets[b], end)`, `end` being `offsets[b + 1]` when
//! that entry exists, else `n`.
//!
//! Auxiliary outputs (the glue hands them back to autograd, and the backward
//! kernels here read them): `offset2bag[i]` is the bag of index `i` (`num_bags`
//! for an index past the last bag's end); `bag_size[b]` counts the indices of
//! bag `b` that are not `padding_idx`; for max mode `max_indices[b, d]` is the
//! weight row whose element `d` won (0 for a bag without rows). CPU PyTorch
//! leaves some of these empty or uninitialised where its own backward does not
//! read them; here they are always written.
//!
//! Numerics follow CPU PyTorch: indices equal to `padding_idx` contribute
//! nothing and are not counted; the mean divides the sum by `max(bag_size, 1)`
//! (empty bags give 0); max keeps the first maximum, and a NaN does not replace
//! a value already held (`>` comparisons); empty bags are 0. float16/bfloat16
//! accumulate in float32 and round once. Gradients: sum and mean add
//! `grad[bag] * scale` onto the weight rows (`scale` = the per-sample weight,
//! divided by the row's frequency in `indices` with `scale_grad_by_freq`, and
//! by `bag_size` for mean); max routes each gradient element to its
//! `max_indices` row. Weight gradients are accumulated per weight row in
//! index order (rows spread over threads), so they are deterministic.

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_chunk_mut, GRAIN};
use crate::error::{Error, Result};

/// PyTorch's `mode` argument (0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Sum,
    Mean,
    Max,
}

impl Mode {
    /// The mode of PyTorch's code. Errors: [`Error::InvalidValue`] for another code.
    pub fn from_code(code: i64) -> Result<Mode> {
        match code {
            0 => Ok(Mode::Sum),
            1 => Ok(Mode::Mean),
            2 => Ok(Mode::Max),
            c => Err(Error::InvalidValue {
                op: "embedding_bag",
                reason: format!("embedding_bag: unknown mode {c} (0: sum, 1: mean, 2: max)"),
            }),
        }
    }
}

/// The bags of one call: indices into a `(num_weights, dim)` weight and the offsets that cut them into bags.
#[derive(Debug, Clone, Copy)]
pub struct Bags<'a> {
    pub indices: &'a [i64],
    pub offsets: &'a [i64],
    pub include_last_offset: bool,
    pub num_weights: usize,
    pub dim: usize,
    /// Weight row whose indices are skipped; negative: none.
    pub padding_idx: i64,
}

impl Bags<'_> {
    /// Number of bags.
    pub fn count(&self) -> usize {
        self.offsets.len().saturating_sub(usize::from(self.include_last_offset))
    }

    /// Index range of bag `b`.
    fn range(&self, b: usize) -> std::ops::Range<usize> {
        let end = self.offsets.get(b + 1).map_or(self.indices.len(), |&e| e as usize);
        self.offsets[b] as usize..end
    }

    fn is_padding(&self, idx: i64) -> bool {
        self.padding_idx >= 0 && idx == self.padding_idx
    }

    /// CPU PyTorch's argument checks on the offset and index values, with its messages.
    fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidValue { op: "embedding_bag", reason });
        let n = self.indices.len() as i64;
        if self.include_last_offset && self.offsets.is_empty() {
            return bad("include_last_offset: number of offset should be at least 1".into());
        }
        if let Some(&first) = self.offsets.first() {
            if first != 0 {
                return bad(format!("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. However, got {first}"));
            }
        }
        if let Some(&last) = self.offsets.last() {
            if last > n {
                return bad(format!(
                    "offsets[-1] can not be greater than input's length {n} but got offsets[-1] of {last}"
                ));
            }
        }
        if let Some(w) = self.offsets.windows(2).position(|w| w[1] < w[0]) {
            return bad(format!(
                "embedding_bag: offsets must be non-decreasing, but offsets[{}] = {} > offsets[{}] = {}",
                w,
                self.offsets[w],
                w + 1,
                self.offsets[w + 1]
            ));
        }
        for (i, &v) in self.indices.iter().enumerate() {
            if v < 0 || v >= self.num_weights as i64 {
                return bad(format!(
                    "Index {i} of input takes value {v} which is not in the valid range [0, {})",
                    self.num_weights
                ));
            }
        }
        Ok(())
    }
}

/// Compute type of a storage dtype: f32 for f32/f16/bf16, f64 for f64.
trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + Default
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    fn of<T: Element>(v: T) -> Self;
    fn from_usize(v: usize) -> Self;
    fn store<T: Element>(self) -> T;
}
macro_rules! real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            #[inline]
            fn of<T: Element>(v: T) -> Self { v.to_f64() as $t }
            #[inline]
            fn from_usize(v: usize) -> Self { v as $t }
            #[inline]
            fn store<T: Element>(self) -> T { T::from_f64(self as f64) }
        }
    )*};
}
real!(f32, f64);

/// Raw outputs of [`embedding_bag`].
#[derive(Debug, Clone, Copy)]
pub struct BagOutputs {
    /// `(num_bags, dim)` of the weight's dtype.
    pub output: *mut u8,
    /// `(n)`.
    pub offset2bag: *mut i64,
    /// `(num_bags)`.
    pub bag_size: *mut i64,
    /// `(num_bags, dim)`, written for [`Mode::Max`] only (may be null otherwise).
    pub max_indices: *mut i64,
}

unsafe fn forward<T: Element, C: Real>(
    bags: &Bags,
    mode: Mode,
    weight: *const u8,
    psw: Option<*const u8>,
    out: BagOutputs,
    threads: usize,
) {
    let (nb, dim, n) = (bags.count(), bags.dim, bags.indices.len());
    // SAFETY: `embedding_bag`'s contract on the buffer sizes.
    let (w, psw, output, o2b, sizes) = unsafe {
        (
            std::slice::from_raw_parts(weight as *const T, if n > 0 { bags.num_weights * dim } else { 0 }),
            psw.map(|p| std::slice::from_raw_parts(p as *const T, n)),
            std::slice::from_raw_parts_mut(out.output as *mut T, nb * dim),
            std::slice::from_raw_parts_mut(out.offset2bag, n),
            std::slice::from_raw_parts_mut(out.bag_size, nb),
        )
    };
    o2b.fill(nb as i64);
    for (b, size) in sizes.iter_mut().enumerate() {
        let r = bags.range(b);
        o2b[r.clone()].fill(b as i64);
        *size = bags.indices[r].iter().filter(|&&i| !bags.is_padding(i)).count() as i64;
    }
    // SAFETY: the contract gives a `(num_bags, dim)` buffer in max mode.
    let max_indices = (mode == Mode::Max).then(|| unsafe { std::slice::from_raw_parts_mut(out.max_indices, nb * dim) });
    let sizes = &*sizes;
    let row = |b: usize, y: &mut [T], mut arg: Option<&mut [i64]>| {
        let mut acc = vec![C::default(); dim];
        let mut seen = false;
        for i in bags.range(b) {
            let idx = bags.indices[i];
            if bags.is_padding(idx) {
                continue;
            }
            let src = &w[idx as usize * dim..(idx as usize + 1) * dim];
            match mode {
                Mode::Sum | Mode::Mean => {
                    let s = psw.map(|p| C::of(p[i]));
                    for (a, &v) in acc.iter_mut().zip(src) {
                        *a = *a + s.map_or(C::of(v), |s| C::of(v) * s);
                    }
                }
                Mode::Max => {
                    let arg = arg.as_deref_mut().expect("max mode has max_indices");
                    for (d, (a, &v)) in acc.iter_mut().zip(src).enumerate() {
                        let v = C::of(v);
                        if !seen || v > *a {
                            *a = v;
                            arg[d] = idx;
                        }
                    }
                }
            }
            seen = true;
        }
        let div = if mode == Mode::Mean { C::from_usize(sizes[b].max(1) as usize) } else { C::from_usize(1) };
        for (o, &a) in y.iter_mut().zip(&acc) {
            *o = if mode == Mode::Mean { (a / div).store() } else { a.store() };
        }
    };
    match max_indices {
        Some(mi) => {
            mi.fill(0);
            if threads > 1 && nb * dim > GRAIN {
                output
                    .par_chunks_mut(dim.max(1))
                    .zip(mi.par_chunks_mut(dim.max(1)))
                    .enumerate()
                    .for_each(|(b, (y, a))| row(b, y, Some(a)));
            } else {
                output
                    .chunks_mut(dim.max(1))
                    .zip(mi.chunks_mut(dim.max(1)))
                    .enumerate()
                    .for_each(|(b, (y, a))| row(b, y, Some(a)));
            }
        }
        None => for_each_chunk_mut(output, dim, if output.len() > GRAIN { threads } else { 1 }, |b, y| row(b, y, None)),
    }
}

/// The bags of `weight` (dtype `dtype`) reduced by `mode`, with the auxiliary
/// outputs described in the module documentation. `per_sample_weights` (sum
/// mode only) scales each selected row. `threads`: the most threads to use.
///
/// Errors (nothing written): [`Error::InvalidValue`] with CPU PyTorch's messages
/// for an index outside `[0, num_weights)`, a first offset other than 0, a last
/// offset past `n`, decreasing offsets, `include_last_offset` without offsets,
/// or per-sample weights with a mode other than sum; [`Error::UnsupportedDtype`]
/// unless float32/64, float16, bfloat16.
///
/// # Safety
/// `weight` holds `num_weights * dim` elements (may dangle when no index is
/// given), `per_sample_weights` `n`, the outputs their stated sizes, none overlapping.
pub unsafe fn embedding_bag(
    dtype: DType,
    bags: &Bags,
    mode: Mode,
    weight: *const u8,
    per_sample_weights: Option<*const u8>,
    out: BagOutputs,
    threads: usize,
) -> Result<()> {
    bags.validate()?;
    if per_sample_weights.is_some() && mode != Mode::Sum {
        return Err(Error::InvalidValue {
            op: "embedding_bag",
            reason: "embedding_bag: per_sample_weights is only supported for mode='sum'".into(),
        });
    }
    // SAFETY: forwarded contract.
    crate::with_float_dtype!(dtype, "embedding_bag", |T, C| unsafe {
        forward::<T, C>(bags, mode, weight, per_sample_weights, out, threads)
    });
    Ok(())
}

/// Inputs of [`embedding_bag_backward`] besides the gradient.
#[derive(Debug, Clone, Copy)]
pub struct BagGrad<'a> {
    pub indices: &'a [i64],
    /// The forward's `offset2bag` (`n`).
    pub offset2bag: &'a [i64],
    /// The forward's `bag_size` (`num_bags`).
    pub bag_size: &'a [i64],
    /// The forward's `max_indices` (`num_bags * dim`), max mode only.
    pub max_indices: Option<&'a [i64]>,
    pub num_weights: usize,
    pub dim: usize,
    pub scale_grad_by_freq: bool,
    pub padding_idx: i64,
}

unsafe fn backward<T: Element, C: Real>(
    g: &BagGrad,
    mode: Mode,
    grad: *const u8,
    psw: Option<*const u8>,
    grad_weight: *mut u8,
    threads: usize,
) -> Result<()> {
    let (nb, dim, n, nw) = (g.bag_size.len(), g.dim, g.indices.len(), g.num_weights);
    // SAFETY: `embedding_bag_backward`'s contract on the buffer sizes.
    let (gy, psw, gw) = unsafe {
        (
            std::slice::from_raw_parts(grad as *const T, nb * dim),
            psw.map(|p| std::slice::from_raw_parts(p as *const T, n)),
            std::slice::from_raw_parts_mut(grad_weight as *mut T, nw * dim),
        )
    };
    let bad = |reason: String| Error::InvalidValue { op: "embedding_bag_backward", reason };
    for &i in g.indices {
        if i < 0 || i as usize >= nw {
            return Err(bad(format!("embedding_bag_backward: index {i} is not in the valid range [0, {nw})")));
        }
    }
    if mode == Mode::Max {
        let mi = g.max_indices.ok_or_else(|| bad("embedding_bag_backward: max mode needs max_indices".into()))?;
        if mi.iter().any(|&i| i < 0 || i as usize >= nw) {
            return Err(bad("embedding_bag_backward: max_indices out of range".into()));
        }
        // Gradient rows in bag order: element d of bag b goes to row max_indices[b, d].
        let mut acc = vec![C::default(); nw * dim];
        for b in (0..nb).filter(|&b| g.bag_size[b] > 0) {
            for d in 0..dim {
                let r = mi[b * dim + d] as usize;
                acc[r * dim + d] = acc[r * dim + d] + C::of(gy[b * dim + d]);
            }
        }
        for_each_chunk_mut(gw, dim, if gw.len() > GRAIN { threads } else { 1 }, |r, row| {
            row.iter_mut().zip(&acc[r * dim..(r + 1) * dim]).for_each(|(o, &a)| *o = a.store())
        });
        return Ok(());
    }
    // Counting sort of the index positions by weight row: each row then sums its
    // contributions in index order, independently of the others.
    let mut start = vec![0usize; nw + 1];
    for &i in g.indices {
        start[i as usize + 1] += 1;
    }
    for r in 0..nw {
        start[r + 1] += start[r];
    }
    let mut fill = start.clone();
    let mut order = vec![0usize; n];
    for (k, &i) in g.indices.iter().enumerate() {
        order[fill[i as usize]] = k;
        fill[i as usize] += 1;
    }
    let (order, start) = (&order, &start);
    for_each_chunk_mut(gw, dim, if gw.len() > GRAIN { threads } else { 1 }, |r, row| {
        let mut acc = vec![C::default(); dim];
        let positions = &order[start[r]..start[r + 1]];
        if !(g.padding_idx >= 0 && r as i64 == g.padding_idx) {
            for &k in positions {
                let b = g.offset2bag[k];
                if b < 0 || b as usize >= nb {
                    continue;
                }
                let b = b as usize;
                let mut scale = psw.map_or(C::from_usize(1), |p| C::of(p[k]));
                if g.scale_grad_by_freq {
                    scale = scale / C::from_usize(positions.len());
                }
                if mode == Mode::Mean {
                    scale = scale / C::from_usize(g.bag_size[b].max(1) as usize);
                }
                for (a, &v) in acc.iter_mut().zip(&gy[b * dim..(b + 1) * dim]) {
                    *a = *a + C::of(v) * scale;
                }
            }
        }
        row.iter_mut().zip(&acc).for_each(|(o, &a)| *o = a.store());
    });
    Ok(())
}

/// The gradient of [`embedding_bag`] with respect to the weight (PyTorch's
/// `_embedding_bag_dense_backward`): `grad` `(num_bags, dim)` into `grad_weight`
/// `(num_weights, dim)`, overwritten. `per_sample_weights` (sum mode) as in the
/// forward. Rules in the module documentation.
///
/// Errors: [`Error::InvalidValue`] for an index or max index outside
/// `[0, num_weights)` or max mode without `max_indices`; dtypes as [`embedding_bag`].
///
/// # Safety
/// `grad` holds `num_bags * dim` elements, `per_sample_weights` `n`, `grad_weight`
/// `num_weights * dim` that nothing else references.
pub unsafe fn embedding_bag_backward(
    dtype: DType,
    g: &BagGrad,
    mode: Mode,
    grad: *const u8,
    per_sample_weights: Option<*const u8>,
    grad_weight: *mut u8,
    threads: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    crate::with_float_dtype!(dtype, "embedding_bag_backward", |T, C| unsafe {
        backward::<T, C>(g, mode, grad, per_sample_weights, grad_weight, threads)
    })
}

/// The bags of one [`per_sample_weights_backward`] call: `n` indices into a
/// `(num_weights, dim)` weight, the bag of each (`offset2bag`), `num_bags` bags.
#[derive(Debug, Clone, Copy)]
pub struct SampleBags<'a> {
    pub indices: &'a [i64],
    pub offset2bag: &'a [i64],
    pub num_bags: usize,
    pub num_weights: usize,
    pub dim: usize,
    /// Weight row whose indices get 0; negative: none.
    pub padding_idx: i64,
}

/// The gradient with respect to the per-sample weights (sum mode; PyTorch's
/// `_embedding_bag_per_sample_weights_backward`): `out[i]` is the dot product of
/// `grad[offset2bag[i]]` and `weight[indices[i]]` (0 for `padding_idx` and for
/// indices outside every bag), accumulated in the compute type.
///
/// Errors: [`Error::InvalidValue`] for an index outside `[0, num_weights)`;
/// dtypes as [`embedding_bag`].
///
/// # Safety
/// `grad` holds `num_bags * dim` elements, `weight` `num_weights * dim`, `out` `n`.
pub unsafe fn per_sample_weights_backward(
    dtype: DType,
    bags: &SampleBags,
    grad: *const u8,
    weight: *const u8,
    out: *mut u8,
    threads: usize,
) -> Result<()> {
    let SampleBags { indices, offset2bag, num_bags, num_weights, dim, padding_idx } = *bags;
    if let Some(&i) = indices.iter().find(|&&i| i < 0 || i as usize >= num_weights) {
        return Err(Error::InvalidValue {
            op: "embedding_bag",
            reason: format!("embedding_bag: index {i} is not in the valid range [0, {num_weights})"),
        });
    }
    crate::with_float_dtype!(dtype, "_embedding_bag_per_sample_weights_backward", |T, C| {
        let n = indices.len();
        // SAFETY: the contract on the buffer sizes.
        let (gy, w, o) = unsafe {
            (
                std::slice::from_raw_parts(grad as *const T, num_bags * dim),
                std::slice::from_raw_parts(weight as *const T, if n > 0 { num_weights * dim } else { 0 }),
                std::slice::from_raw_parts_mut(out as *mut T, n),
            )
        };
        for_each_chunk_mut(o, 1, if n > GRAIN && n * dim > GRAIN { threads } else { 1 }, |k, v| {
            let (idx, b) = (indices[k], offset2bag[k]);
            let mut acc = C::default();
            if !(padding_idx >= 0 && idx == padding_idx) && b >= 0 && (b as usize) < num_bags {
                let (b, idx) = (b as usize, idx as usize);
                for (&x, &y) in gy[b * dim..(b + 1) * dim].iter().zip(&w[idx * dim..(idx + 1) * dim]) {
                    acc += C::of(x) * C::of(y);
                }
            }
            v[0] = acc.store();
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: u64) -> Vec<f64> {
        (0..n).map(|k| (((k as u64 + 1) * 2654435761 + seed * 97) % 1000) as f64 / 250.0 - 2.0).collect()
    }

    struct Run {
        out: Vec<f64>,
        o2b: Vec<i64>,
        sizes: Vec<i64>,
        arg: Vec<i64>,
    }

    fn run(bags: &Bags, mode: Mode, w: &[f64], psw: Option<&[f64]>) -> Result<Run> {
        let nb = bags.count();
        let mut out = vec![0f64; nb * bags.dim];
        let (mut o2b, mut sizes, mut arg) = (vec![0i64; bags.indices.len()], vec![0i64; nb], vec![0i64; nb * bags.dim]);
        let o = BagOutputs {
            output: out.as_mut_ptr() as *mut u8,
            offset2bag: o2b.as_mut_ptr(),
            bag_size: sizes.as_mut_ptr(),
            max_indices: arg.as_mut_ptr(),
        };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            embedding_bag(DType::F64, bags, mode, w.as_ptr() as *const u8, psw.map(|p| p.as_ptr() as *const u8), o, 4)?
        };
        Ok(Run { out, o2b, sizes, arg })
    }

    #[test]
    fn forward_matches_a_direct_reduction() {
        let (nw, dim) = (6, 3);
        let w = vals(nw * dim, 1);
        let indices = [0i64, 5, 2, 2, 3, 4, 1];
        let offsets = [0i64, 3, 3, 6];
        let psw = vals(indices.len(), 2);
        for (mode, with_psw) in [(Mode::Sum, false), (Mode::Sum, true), (Mode::Mean, false), (Mode::Max, false)] {
            for padding_idx in [-1i64, 2] {
                let bags = Bags {
                    indices: &indices,
                    offsets: &offsets,
                    include_last_offset: false,
                    num_weights: nw,
                    dim,
                    padding_idx,
                };
                let r = run(&bags, mode, &w, with_psw.then_some(&psw[..])).unwrap();
                assert_eq!(r.o2b, [0, 0, 0, 2, 2, 2, 3]);
                for b in 0..4 {
                    let rows: Vec<usize> = bags.range(b).filter(|&i| indices[i] != padding_idx).collect();
                    assert_eq!(r.sizes[b], rows.len() as i64);
                    for d in 0..dim {
                        let v = |i: usize| w[indices[i] as usize * dim + d] * if with_psw { psw[i] } else { 1.0 };
                        let want = match mode {
                            Mode::Sum => rows.iter().map(|&i| v(i)).sum::<f64>(),
                            Mode::Mean => rows.iter().map(|&i| v(i)).sum::<f64>() / rows.len().max(1) as f64,
                            Mode::Max => rows
                                .iter()
                                .map(|&i| v(i))
                                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| if x > m { x } else { m })))
                                .unwrap_or(0.0),
                        };
                        assert!((r.out[b * dim + d] - want).abs() < 1e-12, "{mode:?} bag {b} dim {d}");
                        if mode == Mode::Max {
                            let first = rows.iter().copied().find(|&i| v(i) == want).map_or(0, |i| indices[i]);
                            assert_eq!(r.arg[b * dim + d], first);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn backward_is_the_adjoint_of_the_forward() {
        // <grad, forward(w)> is linear in w for sum/mean: its derivative is the weight gradient.
        let (nw, dim) = (5, 4);
        let indices = [4i64, 1, 1, 3, 0, 1];
        let offsets = [0i64, 2, 5, 6];
        for mode in [Mode::Sum, Mode::Mean, Mode::Max] {
            for (padding_idx, freq) in [(-1i64, false), (1, false), (-1, true)] {
                let bags = Bags {
                    indices: &indices,
                    offsets: &offsets,
                    include_last_offset: true,
                    num_weights: nw,
                    dim,
                    padding_idx,
                };
                let w = vals(nw * dim, 3);
                let r = run(&bags, mode, &w, None).unwrap();
                let gy = vals(3 * dim, 4);
                let mut gw = vec![0f64; nw * dim];
                let g = BagGrad {
                    indices: &indices,
                    offset2bag: &r.o2b,
                    bag_size: &r.sizes,
                    max_indices: Some(&r.arg),
                    num_weights: nw,
                    dim,
                    scale_grad_by_freq: freq,
                    padding_idx,
                };
                // SAFETY: the pointers address live local buffers sized for the call.
                unsafe {
                    embedding_bag_backward(
                        DType::F64,
                        &g,
                        mode,
                        gy.as_ptr() as *const u8,
                        None,
                        gw.as_mut_ptr() as *mut u8,
                        3,
                    )
                }
                .unwrap();
                for row in 0..nw {
                    for d in 0..dim {
                        let freq_div = if freq && mode != Mode::Max {
                            indices.iter().filter(|&&i| i == row as i64).count().max(1) as f64
                        } else {
                            1.0
                        };
                        let mut w2 = w.clone();
                        w2[row * dim + d] += 1e-3;
                        let r2 = run(&bags, mode, &w2, None).unwrap();
                        let fd: f64 = r2.out.iter().zip(&r.out).zip(&gy).map(|((a, b), g)| (a - b) * g).sum::<f64>()
                            / 1e-3
                            / freq_div;
                        assert!(
                            (gw[row * dim + d] - fd).abs() < 1e-6,
                            "{mode:?} pad {padding_idx} row {row} d {d}: {} vs {fd}",
                            gw[row * dim + d]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn per_sample_weight_gradient_is_a_dot_product() {
        let (nw, dim) = (4, 3);
        let indices = [3i64, 0, 2, 2];
        let offsets = [0i64, 1];
        let w = vals(nw * dim, 5);
        let psw = vals(4, 6);
        let bags = Bags {
            indices: &indices,
            offsets: &offsets,
            include_last_offset: false,
            num_weights: nw,
            dim,
            padding_idx: 0,
        };
        let r = run(&bags, Mode::Sum, &w, Some(&psw)).unwrap();
        let gy = vals(2 * dim, 7);
        let mut out = vec![0f64; 4];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            per_sample_weights_backward(
                DType::F64,
                &SampleBags {
                    indices: &indices,
                    offset2bag: &r.o2b,
                    num_bags: 2,
                    num_weights: nw,
                    dim,
                    padding_idx: 0,
                },
                gy.as_ptr() as *const u8,
                w.as_ptr() as *const u8,
                out.as_mut_ptr() as *mut u8,
                2,
            )
        }
        .unwrap();
        for k in 0..4 {
            let b = r.o2b[k] as usize;
            let want = if indices[k] == 0 {
                0.0
            } else {
                (0..dim).map(|d| gy[b * dim + d] * w[indices[k] as usize * dim + d]).sum()
            };
            assert!((out[k] - want).abs() < 1e-12);
        }
    }

    #[test]
    fn half_types_accumulate_in_float_and_bad_arguments_are_errors() {
        let w: Vec<half::bf16> = [1.0f32, 256.0, 1.0, 1.0].iter().map(|&v| half::bf16::from_f32(v)).collect();
        let indices = [0i64, 1, 2, 3];
        let bags = Bags {
            indices: &indices,
            offsets: &[0],
            include_last_offset: false,
            num_weights: 4,
            dim: 1,
            padding_idx: -1,
        };
        let mut out = [half::bf16::ZERO];
        let (mut o2b, mut sizes) = ([0i64; 4], [0i64; 1]);
        let o = BagOutputs {
            output: out.as_mut_ptr() as *mut u8,
            offset2bag: o2b.as_mut_ptr(),
            bag_size: sizes.as_mut_ptr(),
            max_indices: std::ptr::null_mut(),
        };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { embedding_bag(DType::BF16, &bags, Mode::Sum, w.as_ptr() as *const u8, None, o, 1) }.unwrap();
        // 1 + 256 + 1 + 1 = 259 in float, rounded once to bfloat16 (260); summing in bf16 would give 256.
        assert_eq!(out[0].to_f32(), 260.0);
        let wf = vals(4, 1);
        let cases: Vec<(Vec<i64>, Vec<i64>, bool)> = vec![
            (vec![0, 4], vec![0], false),
            (vec![0, 1], vec![1], false),
            (vec![0, 1], vec![0, 3], false),
            (vec![0, 1], vec![], true),
            (vec![0, 1, 2], vec![0, 2, 1], false),
        ];
        for (idx, offs, ilo) in &cases {
            let bags = Bags {
                indices: idx,
                offsets: offs,
                include_last_offset: *ilo,
                num_weights: 4,
                dim: 1,
                padding_idx: -1,
            };
            assert!(matches!(run(&bags, Mode::Sum, &wf, None), Err(Error::InvalidValue { .. })));
        }
        let bags =
            Bags { indices: &[0], offsets: &[0], include_last_offset: false, num_weights: 4, dim: 1, padding_idx: -1 };
        assert!(matches!(run(&bags, Mode::Max, &wf, Some(&[1.0])), Err(Error::InvalidValue { .. })));
        let mut o = [0i32];
        let oo = BagOutputs {
            output: o.as_mut_ptr() as *mut u8,
            offset2bag: o2b.as_mut_ptr(),
            bag_size: sizes.as_mut_ptr(),
            max_indices: std::ptr::null_mut(),
        };
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { embedding_bag(DType::I32, &bags, Mode::Sum, o.as_ptr() as *const u8, None, oo, 1) };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "embedding_bag", dtype: DType::I32 }));
    }
}
