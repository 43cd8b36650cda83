//! Reductions over a [`TensorIter`] set up for reduction by PyTorch
//! (`make_reduction`): outputs first (stride 0 along reduced dimensions),
//! then one input. A dimension is reduced when every output's stride along
//! it is 0.
//!
//! Two schedules, chosen by where the fastest dimension (0) falls:
//! - inner: dimension 0 is reduced (or every dimension is): each output
//!   element reduces contiguous-ish rows; a full reduction splits its rows
//!   over tasks and combines the partial states;
//! - outer: dimension 0 is kept: a block of adjacent outputs is reduced
//!   together, one input row per reduced position, so loads stay contiguous.
//!
//! Accumulation types follow PyTorch: float16/bfloat16 accumulate in float,
//! integers in int64, `var`/`std` (Welford) in double. Integer and bool inputs
//! are read in their own dtype and widened as they are loaded.
//!
//! Accuracy: a reducer whose state is a running sum (sum, mean, nansum, norms,
//! variance) sets [`Reducer::CASCADE`], and both schedules then fold at most
//! [`LEAF`] elements (inner) or [`LEAF_ROWS`] rows (outer) into a fresh state
//! before handing it to a [`Cascade`], which combines the leaves pairwise. The
//! rounding error then grows with the logarithm of the reduction length rather
//! than with the length, as in CPU PyTorch's cascade sum.
//!
//! This file holds the ops, the schedules and the cascade; the folds
//! themselves (one [`Reducer`] per op) are in [`super::reducers`].

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_range, load, store, tasks_for, Operand, Shape, Strides, TensorIter, BLOCK, GRAIN};
use crate::error::{Error, Result};
use smallvec::smallvec;

use super::reducers::{ArgExtremum, CountNonzero, Extremum, Logical, Norm, Prod, Sum, Welford};

/// What to compute, one variant per PyTorch reduction (its op name, see
/// [`ReduceOp::name`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReduceOp {
    Sum,
    NanSum,
    Prod,
    Mean,
    /// `amax` (PyTorch's `max_values_stub`), also `max()` of a whole tensor.
    Amax,
    /// `amin` (`min_values_stub`).
    Amin,
    /// `all` (`and_stub`).
    All,
    /// `any` (`or_stub`).
    Any,
    ArgMax,
    ArgMin,
    /// `max.dim`: values (output 0) and first indices (output 1).
    Max,
    /// `min.dim`: values (output 0) and first indices (output 1).
    Min,
    /// Welford variance with `correction`; `take_sqrt` gives the standard
    /// deviation. A second output, when present, receives the mean.
    StdVar {
        correction: f64,
        take_sqrt: bool,
    },
    /// Vector p-norm (`inf`, `-inf`, 0, 1, 2 or any other p).
    Norm {
        p: f64,
    },
    /// Elements that are not zero (NaN counts), into int64, from any real dtype.
    CountNonzero,
}

impl ReduceOp {
    /// PyTorch's name for the op (error messages).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::NanSum => "nansum",
            ReduceOp::Prod => "prod",
            ReduceOp::Mean => "mean",
            ReduceOp::Amax => "amax",
            ReduceOp::Amin => "amin",
            ReduceOp::All => "all",
            ReduceOp::Any => "any",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::StdVar { .. } => "std_var",
            ReduceOp::Norm { .. } => "norm",
            ReduceOp::CountNonzero => "count_nonzero",
        }
    }
}

/// A reduction as a fold: state, step, combine of partial states, and the
/// outputs a final state produces (up to two).
pub(crate) trait Reducer: Sync {
    type In: Element;
    type State: Copy + Send;
    type Out: Element;
    fn init(&self) -> Self::State;
    fn step(&self, s: &mut Self::State, x: Self::In, index: i64);
    /// Folds a contiguous run whose first element has reduction index `first`.
    #[inline(always)]
    fn step_slice(&self, s: &mut Self::State, xs: &[Self::In], first: i64) {
        for (i, &x) in xs.iter().enumerate() {
            self.step(s, x, first + i as i64);
        }
    }
    /// Folds one input row into `states` element for element (the outer schedule).
    #[inline(always)]
    fn step_lanes(&self, states: &mut [Self::State], xs: &[Self::In], index: i64) {
        for (s, &x) in states.iter_mut().zip(xs) {
            self.step(s, x, index);
        }
    }
    /// Folds four consecutive input rows (reduction indices `index..index + 4`) into
    /// `states`; a reducer whose order of combination allows it fuses them.
    #[inline(always)]
    fn step_rows(&self, states: &mut [Self::State], rows: [&[Self::In]; 4], index: i64) {
        for (k, r) in rows.iter().enumerate() {
            self.step_lanes(states, r, index + k as i64);
        }
    }
    fn combine(&self, a: Self::State, b: Self::State) -> Self::State;
    fn finish(&self, s: Self::State, count: usize) -> [Self::Out; 2];
    /// Whether long reductions combine leaf states through a [`Cascade`] (the state
    /// accumulates rounding error with every step, as a running sum does).
    const CASCADE: bool = false;
}

/// Elements one leaf state of the inner schedule folds before it joins the cascade:
/// long enough that the reducer's vector lanes run at full speed, short enough
/// that each lane adds only a few dozen elements in sequence.
pub(crate) const LEAF: usize = BLOCK;
/// Slices (rows of a strided reduction) one leaf folds at most: short rows are
/// added to the leaf state one after another, so their number is bounded too.
const LEAF_SLICES: usize = 16;
/// Input rows the outer schedule folds into its state vector before the vector
/// joins the cascade.
pub(crate) const LEAF_ROWS: usize = 32;
/// Levels of a cascade: 2^48 leaves is more than any tensor holds.
const LEVELS: usize = 48;

/// Partial states combined as a binary counter: level `k` holds, when bit `k` of
/// `leaves` is set, the combination of 2^k consecutive leaves, so every leaf takes
/// part in about log2(leaves) combinations and the result is a pairwise reduction
/// of the leaves. Each level holds `width` states side by side (1 for the inner
/// schedule, a block of outputs for the outer one); order is kept, earlier
/// leaves on the left of each combination.
pub(crate) struct Cascade<S> {
    levels: Vec<S>,
    width: usize,
    leaves: u64,
}

impl<S: Copy> Cascade<S> {
    pub(crate) fn new(width: usize) -> Self {
        Cascade { levels: Vec::new(), width, leaves: 0 }
    }

    /// Adds one leaf (`width` states); `leaf` is reset to the reducer's initial state.
    pub(crate) fn push<R: Reducer<State = S>>(&mut self, r: &R, leaf: &mut [S]) {
        let w = self.width;
        debug_assert!(leaf.len() <= w);
        let mut k = 0;
        while self.leaves & (1 << k) != 0 {
            // Level k is full: it merges into the carry, which moves up a level.
            for (c, &l) in leaf.iter_mut().zip(&self.levels[k * w..]) {
                *c = r.combine(l, *c);
            }
            k += 1;
        }
        if self.levels.len() < (k + 1) * w {
            self.levels.resize((k + 1) * w, r.init());
        }
        for (l, c) in self.levels[k * w..].iter_mut().zip(leaf.iter_mut()) {
            *l = *c;
            *c = r.init();
        }
        self.leaves += 1;
    }

    /// Combines every level (oldest first) into `out`, and empties the cascade.
    pub(crate) fn finish<R: Reducer<State = S>>(&mut self, r: &R, out: &mut [S]) {
        let w = self.width;
        out.iter_mut().for_each(|o| *o = r.init());
        for k in (0..LEVELS).rev() {
            if self.leaves & (1 << k) != 0 {
                for (o, &l) in out.iter_mut().zip(&self.levels[k * w..]) {
                    *o = r.combine(*o, l);
                }
            }
        }
        self.leaves = 0;
    }
}

/// The kept and reduced sub-spaces of a reduction iterator.
struct Split {
    /// Kept dimensions: operands are the outputs, then the input.
    kept: TensorIter,
    /// Reduced dimensions over the input only.
    reduced: TensorIter,
    /// Whether dimension 0 of the full space is kept (outer schedule).
    outer: bool,
}

fn split(it: &TensorIter) -> Split {
    let nout = it.noutputs;
    let input = it.ntensors() - 1;
    let is_reduced = |d: usize| it.shape[d] != 1 && (0..nout).all(|k| it.strides[k][d] == 0);
    let mut kept = TensorIter {
        shape: Shape::new(),
        operands: it.operands.clone(),
        strides: smallvec![Strides::new(); it.ntensors()],
        noutputs: nout,
        threads: it.threads,
        round_through: None,
    };
    let mut reduced = TensorIter {
        shape: Shape::new(),
        operands: smallvec![it.operands[input]],
        strides: smallvec![Strides::new()],
        noutputs: 0,
        threads: it.threads,
        round_through: None,
    };
    for d in 0..it.shape.len() {
        if is_reduced(d) {
            reduced.shape.push(it.shape[d]);
            reduced.strides[0].push(it.strides[input][d]);
        } else if it.shape[d] != 1 {
            kept.shape.push(it.shape[d]);
            for k in 0..it.ntensors() {
                kept.strides[k].push(it.strides[k][d]);
            }
        }
    }
    // TensorIterator moves reduced dimensions innermost; what matters for speed is
    // memory order. The dimension with the smallest input stride leads: if it is
    // kept, adjacent outputs are reduced together (outer schedule), otherwise each
    // output reduces rows along it (inner schedule).
    let smallest = |t: &TensorIter, k: usize| (0..t.shape.len()).min_by_key(|&d| t.strides[k][d].unsigned_abs());
    let kd = smallest(&kept, input);
    let rd = smallest(&reduced, 0);
    let outer = match (kd, rd) {
        (Some(kd), Some(rd)) => kept.strides[input][kd].unsigned_abs() < reduced.strides[0][rd].unsigned_abs(),
        (Some(_), None) => true,
        _ => false,
    };
    let lead = |t: &mut TensorIter, d: usize| {
        t.shape[..=d].rotate_right(1);
        for s in t.strides.iter_mut() {
            s[..=d].rotate_right(1);
        }
    };
    if outer {
        lead(&mut kept, kd.unwrap_or(0));
    } else if let Some(rd) = rd {
        lead(&mut reduced, rd);
    }
    Split { kept, reduced, outer }
}

/// Folds the reduced space's linear range `[start, end)` at input byte offset `base` into `s`.
/// A cascading reducer folds a range longer than one leaf leaf by leaf, the leaves
/// combined through a [`Cascade`].
///
/// # Safety
/// The addressed input elements are readable.
unsafe fn fold_range<R: Reducer>(
    r: &R,
    red: &TensorIter,
    base: isize,
    start: usize,
    end: usize,
    s: &mut R::State,
) -> Result<()> {
    let input: Operand = red.operands[0];
    let stride = red.inner_stride(0);
    let direct = input.dtype == R::In::DTYPE && stride == std::mem::size_of::<R::In>() as isize;
    let cascade = R::CASCADE && end - start > LEAF;
    let mut buf = vec![R::In::from_i64(0); if direct { 0 } else { BLOCK.min(end - start) }];
    let mut index = start as i64;
    let mut result = Ok(());
    let mut cas = Cascade::new(1);
    let mut leaf = [r.init()];
    let (mut in_leaf, mut slices) = (0usize, 0usize);
    red.for_each_row_in(start, end, |offs, len| {
        let mut b = 0;
        while b < len && result.is_ok() {
            // Without a cascade a row already in the accumulation type folds in one call,
            // so the reducer's lanes are set up and combined once per row.
            let room = if cascade { LEAF - in_leaf } else { usize::MAX };
            let n = if direct { room.min(len - b) } else { BLOCK.min(len - b).min(room) };
            // SAFETY: in-bounds by the iterator's construction.
            let p = unsafe { input.ptr.offset(base + offs[0] + b as isize * stride) };
            let acc = if cascade { &mut leaf[0] } else { &mut *s };
            if direct {
                // SAFETY: n contiguous elements of the accumulation type.
                r.step_slice(acc, unsafe { std::slice::from_raw_parts(p as *const R::In, n) }, index);
            } else {
                // SAFETY: n elements at `stride` from p are readable.
                result = unsafe { load::<R::In>(input.dtype, p, stride, n, &mut buf) };
                r.step_slice(acc, &buf[..n], index);
            }
            index += n as i64;
            b += n;
            if cascade {
                in_leaf += n;
                slices += 1;
                if in_leaf == LEAF || slices == LEAF_SLICES {
                    cas.push(r, &mut leaf);
                    (in_leaf, slices) = (0, 0);
                }
            }
        }
    });
    if cascade {
        if in_leaf > 0 {
            cas.push(r, &mut leaf);
        }
        let mut total = [r.init()];
        cas.finish(r, &mut total);
        *s = r.combine(*s, total[0]);
    }
    result
}

/// Writes a final state to the outputs at byte offsets `offs[k]`.
unsafe fn write_outputs<R: Reducer>(r: &R, it: &TensorIter, offs: &[isize], s: R::State, count: usize) -> Result<()> {
    let v = r.finish(s, count);
    for (k, val) in v.iter().enumerate().take(it.noutputs) {
        let o = it.operands[k];
        // SAFETY: the output element at offs[k] is writable.
        unsafe { store::<R::Out>(o.dtype, o.ptr.offset(offs[k]), 0, std::slice::from_ref(val))? };
    }
    Ok(())
}

pub(crate) unsafe fn run_reducer<R: Reducer>(r: &R, it: &TensorIter) -> Result<()> {
    let sp = split(it);
    let nk = sp.kept.numel();
    let nr = sp.reduced.numel();
    if nr == 0 {
        // An empty reduction: every output gets the reduction's identity (e.g. sum 0, norm 0).
        let mut result = Ok(());
        sp.kept.for_each_row_in(0, nk, |koffs, klen| {
            for j in 0..klen {
                let offs = sp.kept.offsets_at(koffs, j);
                // SAFETY: `offs` are the output offsets of a kept element (forwarded contract).
                if let Err(e) = unsafe { write_outputs(r, it, &offs, r.init(), 0) } {
                    result = Err(e);
                }
            }
        });
        return result;
    }
    let input = it.ntensors() - 1;
    let errors = std::sync::Mutex::new(Ok(()));
    let record = |res: Result<()>| {
        if let Err(e) = res {
            *errors.lock().unwrap() = Err(e);
        }
    };
    if !sp.outer {
        if nk < it.threads && nr >= 2 * GRAIN {
            // Few outputs, long reductions: split each reduction over tasks.
            sp.kept.for_each_row_in(0, nk, |koffs, klen| {
                for j in 0..klen {
                    let offs = sp.kept.offsets_at(koffs, j);
                    let tasks = it.tasks_for(nr);
                    let chunk = nr.div_ceil(tasks);
                    let parts: Vec<Result<R::State>> = crate::engine::iter::map_tasks(tasks, |t| {
                        let mut s = r.init();
                        // SAFETY: forwarded contract.
                        unsafe { fold_range(r, &sp.reduced, offs[input], t * chunk, ((t + 1) * chunk).min(nr), &mut s) }
                            .map(|_| s)
                    });
                    let mut s = r.init();
                    for p in parts {
                        match p {
                            Ok(p) => s = r.combine(s, p),
                            Err(e) => return record(Err(e)),
                        }
                    }
                    // SAFETY: forwarded contract.
                    record(unsafe { write_outputs(r, it, &offs, s, nr) });
                }
            });
        } else {
            // One task per range of outputs, each reduction folded whole.
            for_each_range(nk, tasks_for(nk, nr, sp.kept.threads), |start, end| {
                sp.kept.for_each_row_in(start, end, |koffs, klen| {
                    for j in 0..klen {
                        let offs = sp.kept.offsets_at(koffs, j);
                        let mut s = r.init();
                        // SAFETY: forwarded contract.
                        let res = unsafe { fold_range(r, &sp.reduced, offs[input], 0, nr, &mut s) };
                        // SAFETY: forwarded contract.
                        record(res.and_then(|_| unsafe { write_outputs(r, it, &offs, s, nr) }));
                    }
                });
            });
        }
    } else {
        // Outer: blocks of adjacent outputs along dimension 0 reduced together. A
        // cascading reducer hands its state vector to a cascade every LEAF_ROWS rows.
        let in_op = it.operands[input];
        let s_in = sp.kept.inner_stride(input);
        let cascade = R::CASCADE && nr > LEAF_ROWS;
        for_each_range(nk, tasks_for(nk, nr, sp.kept.threads), |start, end| {
            // Use the whole operand (edition 2021 would capture only its raw pointer field, which is not Sync).
            let in_op: Operand = in_op;
            let mut states = [r.init(); BLOCK];
            let mut buf = vec![R::In::from_i64(0); BLOCK];
            let mut cas = Cascade::new(BLOCK);
            sp.kept.for_each_row_in(start, end, |koffs, klen| {
                let mut b = 0;
                while b < klen {
                    let n = BLOCK.min(klen - b);
                    states[..n].iter_mut().for_each(|s| *s = r.init());
                    let base = koffs[input] + b as isize * s_in;
                    let mut index = 0i64;
                    let mut in_leaf = 0;
                    sp.reduced.for_each_row_in(0, nr, |roffs, rlen| {
                        let rs = sp.reduced.inner_stride(0);
                        let mut first = 0;
                        let contiguous = in_op.dtype == R::In::DTYPE && s_in == std::mem::size_of::<R::In>() as isize;
                        while first < rlen {
                            if cascade && in_leaf >= LEAF_ROWS {
                                cas.push(r, &mut states[..n]);
                                in_leaf = 0;
                            }
                            if contiguous && first + 4 <= rlen {
                                // SAFETY: rows `first..first + 4` hold n contiguous elements of the accumulation type.
                                let row = |k: usize| unsafe {
                                    std::slice::from_raw_parts(
                                        in_op.ptr.offset(base + roffs[0] + (first + k) as isize * rs) as *const R::In,
                                        n,
                                    )
                                };
                                r.step_rows(&mut states[..n], [row(0), row(1), row(2), row(3)], index);
                                index += 4;
                                first += 4;
                                in_leaf += 4;
                                continue;
                            }
                            let off = base + roffs[0] + first as isize * rs;
                            // SAFETY: in-bounds by construction.
                            let p = unsafe { in_op.ptr.offset(off) };
                            if contiguous {
                                // SAFETY: n contiguous elements of the accumulation type.
                                r.step_lanes(
                                    &mut states[..n],
                                    unsafe { std::slice::from_raw_parts(p as *const R::In, n) },
                                    index,
                                );
                            } else {
                                // SAFETY: n contiguous elements of the accumulation type.
                                if let Err(e) = unsafe { load::<R::In>(in_op.dtype, p, s_in, n, &mut buf) } {
                                    return record(Err(e));
                                }
                                r.step_lanes(&mut states[..n], &buf[..n], index);
                            }
                            index += 1;
                            first += 1;
                            in_leaf += 1;
                        }
                    });
                    if cascade {
                        cas.push(r, &mut states[..n]);
                        cas.finish(r, &mut states[..n]);
                    }
                    for (j, &state) in states[..n].iter().enumerate() {
                        let offs = sp.kept.offsets_at(koffs, b + j);
                        // SAFETY: `offs` are the output offsets of a kept element (forwarded contract).
                        record(unsafe { write_outputs(r, it, &offs, state, nr) });
                    }
                    b += n;
                }
            });
        });
    }
    errors.into_inner().unwrap()
}

/// Runs reduction `op` over `it` (outputs first, then one input).
///
/// Complex operands go to [`crate::ops::elementwise::complex::reduce`] (sum, mean, prod).
///
/// Errors: [`Error::UnsupportedDtype`] for other complex reductions or a floating-only
/// reduction (norm) on integers.
///
/// # Safety
/// Every element the iterator addresses is valid memory of its operand's dtype.
pub unsafe fn reduce(op: ReduceOp, it: &TensorIter) -> Result<()> {
    let input = it.ntensors() - 1;
    let out_dt = it.dtype(0);
    let in_dt = it.dtype(input);
    let unsupported = |dtype| Error::UnsupportedDtype { op: op.name(), dtype };
    if it.operands.iter().any(|o| matches!(o.dtype, DType::C32 | DType::C64 | DType::C128)) {
        // SAFETY: forwarded contract.
        return unsafe { crate::ops::elementwise::complex::reduce(op, it) };
    }
    use std::marker::PhantomData as P;
    // Accumulate in the opmath type of `dt`: float for half types, int64 for integers and bool.
    macro_rules! by_acc {
        ($dt:expr, |$A:ident| $e:expr) => {
            match $dt {
                DType::F32 | DType::F16 | DType::BF16 => {
                    type $A = f32;
                    $e
                }
                DType::F64 => {
                    type $A = f64;
                    $e
                }
                _ => {
                    type $A = i64;
                    $e
                }
            }
        };
    }
    // SAFETY: forwarded contract.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::NanSum => {
                by_acc!(out_dt, |A| run_reducer(
                    &Sum::<A> { mean: op == ReduceOp::Mean, skip_nan: op == ReduceOp::NanSum, _a: P },
                    it
                ))
            }
            ReduceOp::Prod => by_acc!(out_dt, |A| run_reducer(&Prod::<A>(P), it)),
            ReduceOp::Amax | ReduceOp::Amin => {
                let max = op == ReduceOp::Amax;
                if in_dt == DType::U64 {
                    run_reducer(&Extremum::<u64> { max, _a: P }, it)
                } else {
                    by_acc!(in_dt, |A| run_reducer(&Extremum::<A> { max, _a: P }, it))
                }
            }
            ReduceOp::All | ReduceOp::Any => run_reducer(&Logical { all: op == ReduceOp::All }, it),
            ReduceOp::ArgMax | ReduceOp::ArgMin | ReduceOp::Max | ReduceOp::Min => {
                let max = matches!(op, ReduceOp::ArgMax | ReduceOp::Max);
                let with_values = matches!(op, ReduceOp::Max | ReduceOp::Min);
                if in_dt == DType::Bool {
                    run_reducer(&ArgExtremum::<bool> { max, with_values, _a: P }, it)
                } else {
                    by_acc!(in_dt, |A| run_reducer(&ArgExtremum::<A> { max, with_values, _a: P }, it))
                }
            }
            ReduceOp::StdVar { correction, take_sqrt } => run_reducer(&Welford { correction, take_sqrt }, it),
            ReduceOp::Norm { p } => match out_dt {
                DType::F32 | DType::F16 | DType::BF16 => run_reducer(&Norm::<f32> { p, _f: P }, it),
                DType::F64 => run_reducer(&Norm::<f64> { p, _f: P }, it),
                d => Err(unsupported(d)),
            },
            ReduceOp::CountNonzero => match out_dt {
                DType::I64 => run_reducer(&CountNonzero, it),
                d => Err(unsupported(d)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operand<T: Element>(v: &mut [T]) -> Operand {
        Operand { ptr: v.as_mut_ptr() as *mut u8, dtype: T::DTYPE }
    }

    /// Reduces a (rows, cols) row-major f32 matrix along `dim` (PyTorch order)
    /// through a TensorIter laid out as make_reduction would, and returns the result.
    fn reduce_2d<O: Element>(
        op: ReduceOp,
        x: &mut [f32],
        rows: usize,
        cols: usize,
        dim: usize,
        threads: usize,
    ) -> Vec<O> {
        let nout = if dim == 0 { cols } else { rows };
        let mut out = vec![O::from_i64(0); nout];
        let os = std::mem::size_of::<O>() as i64;
        // TI order: dimension 0 = columns (fastest), 1 = rows.
        let out_strides: [i64; 2] = if dim == 0 { [os, 0] } else { [0, os] };
        let it = TensorIter::new(
            "t",
            &[cols as i64, rows as i64],
            vec![(operand(&mut out), &out_strides[..]), (operand(x), &[4, 4 * cols as i64][..])],
            1,
            threads,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { reduce(op, &it) }.unwrap();
        out
    }

    #[test]
    fn sums_and_means_along_each_dim_match_naive() {
        let (rows, cols) = (37, 3000);
        let mut x: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
        for threads in [1, 4] {
            let s0: Vec<f32> = reduce_2d(ReduceOp::Sum, &mut x, rows, cols, 0, threads);
            let s1: Vec<f32> = reduce_2d(ReduceOp::Mean, &mut x, rows, cols, 1, threads);
            for c in 0..cols {
                let want: f64 = (0..rows).map(|r| x[r * cols + c] as f64).sum();
                assert!((s0[c] as f64 - want).abs() < 1e-3, "sum col {c}");
            }
            for r in 0..rows {
                let want: f64 = (0..cols).map(|c| x[r * cols + c] as f64).sum::<f64>() / cols as f64;
                assert!((s1[r] as f64 - want).abs() < 1e-4, "mean row {r}");
            }
        }
    }

    #[test]
    fn full_reduction_split_over_tasks() {
        let n = 5 * GRAIN + 3;
        let mut x: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        x[n - 2] = 100.0;
        let mut out = [0f32];
        let mut idx = [0i64];
        for (op, want) in [(ReduceOp::Sum, x.iter().map(|&v| v as f64).sum::<f64>()), (ReduceOp::Amax, 100.0)] {
            let it = TensorIter::new(
                "t",
                &[n as i64],
                vec![(operand(&mut out), &[0][..]), (operand(&mut x), &[4][..])],
                1,
                4,
            )
            .unwrap();
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { reduce(op, &it) }.unwrap();
            assert_eq!(out[0] as f64, want, "{op:?}");
        }
        let it =
            TensorIter::new("t", &[n as i64], vec![(operand(&mut idx), &[0][..]), (operand(&mut x), &[4][..])], 1, 4)
                .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { reduce(ReduceOp::ArgMax, &it) }.unwrap();
        assert_eq!(idx[0], (n - 2) as i64);
    }

    #[test]
    fn argmin_first_index_var_and_norm() {
        let mut x = vec![3.0f32, 1.0, 2.0, 1.0, 5.0, 0.0];
        let a: Vec<i64> = reduce_2d(ReduceOp::ArgMin, &mut x, 2, 3, 1, 1);
        assert_eq!(a, vec![1, 2]);
        let v: Vec<f64> = reduce_2d(ReduceOp::StdVar { correction: 1.0, take_sqrt: false }, &mut x, 2, 3, 1, 1);
        assert!((v[0] - 1.0).abs() < 1e-12 && (v[1] - 7.0).abs() < 1e-12);
        let n: Vec<f32> = reduce_2d(ReduceOp::Norm { p: 2.0 }, &mut x, 2, 3, 0, 1);
        assert!((n[0] - 10f32.sqrt()).abs() < 1e-6);
        let mut long: Vec<f32> = (0..1000).map(|i| (i % 37) as f32).collect();
        let m: Vec<f32> = reduce_2d(ReduceOp::Amax, &mut long, 1, 1000, 1, 1);
        assert_eq!(m[0], 36.0);
        long[517] = f32::NAN;
        let m: Vec<f32> = reduce_2d(ReduceOp::Amin, &mut long, 1, 1000, 1, 1);
        assert!(m[0].is_nan());
        // The extremum in the tail after the 32-lane blocks, and in a lane.
        long[517] = 5.0;
        long[999] = -1.0;
        let m: Vec<f32> = reduce_2d(ReduceOp::Amin, &mut long, 1, 1000, 1, 1);
        assert_eq!(m[0], -1.0);
        long[40] = 99.0;
        let m: Vec<f32> = reduce_2d(ReduceOp::Amax, &mut long, 1, 1000, 1, 1);
        assert_eq!(m[0], 99.0);
        // nansum along dimension 0 (the four-row outer fold) skips NaN in any row.
        let mut grid: Vec<f32> = (0..9 * 5).map(|i| if i % 7 == 0 { f32::NAN } else { i as f32 }).collect();
        let s: Vec<f32> = reduce_2d(ReduceOp::NanSum, &mut grid, 9, 5, 0, 1);
        for c in 0..5 {
            let want: f32 = (0..9).map(|r| grid[r * 5 + c]).filter(|v| !v.is_nan()).sum();
            assert_eq!(s[c], want, "nansum col {c}");
        }
        let mut nan = vec![1.0f32, f32::NAN, 3.0];
        let m: Vec<f32> = reduce_2d(ReduceOp::Amax, &mut nan, 1, 3, 1, 1);
        assert!(m[0].is_nan());
    }

    /// Relative error of a float32 result against a float64 reference.
    fn rel(got: f32, want: f64) -> f64 {
        (got as f64 - want).abs() / want.abs()
    }

    #[test]
    fn long_float32_sums_are_cascaded() {
        // A running float32 sum of 2^22 tenths is off by about 1e-2 relative; the
        // cascade keeps it to a few ulps.
        let n = 1 << 22;
        let mut x = vec![0.1f32; n];
        let want = n as f64 * 0.1f32 as f64;
        for threads in [1, 4] {
            for op in [ReduceOp::Sum, ReduceOp::NanSum, ReduceOp::Mean] {
                let got: Vec<f32> = reduce_2d(op, &mut x, 1, n, 1, threads);
                let want = if op == ReduceOp::Mean { want / n as f64 } else { want };
                assert!(rel(got[0], want) < 1e-6, "{op:?} threads={threads}: {}", got[0]);
            }
            // The p-norms fold each leaf in lanes too.
            let got: Vec<f32> = reduce_2d(ReduceOp::Norm { p: 1.0 }, &mut x, 1, n, 1, threads);
            assert!(rel(got[0], want) < 1e-6, "norm1 threads={threads}: {}", got[0]);
            let got: Vec<f32> = reduce_2d(ReduceOp::Norm { p: 2.0 }, &mut x, 1, n, 1, threads);
            let want2 = (n as f64 * (0.1f32 as f64).powi(2)).sqrt();
            assert!(rel(got[0], want2) < 1e-6, "norm2 threads={threads}: {}", got[0]);
        }
        // nansum skips NaN at any position of a leaf and of its lanes.
        let mut holes = x.clone();
        let mut skipped = 0;
        for i in (0..n).step_by(997) {
            holes[i] = f32::NAN;
            skipped += 1;
        }
        let got: Vec<f32> = reduce_2d(ReduceOp::NanSum, &mut holes, 1, n, 1, 2);
        assert!(rel(got[0], (n - skipped) as f64 * 0.1f32 as f64) < 1e-6, "{}", got[0]);
    }

    #[test]
    fn long_columns_and_rows_are_cascaded() {
        // (2^18, 3) reduced along dim 0 (outer schedule) and its rows (inner, per output).
        let (rows, cols) = (1 << 18, 3);
        let mut x: Vec<f32> = (0..rows * cols).map(|i| 0.1 + (i % 11) as f32 * 0.01).collect();
        for threads in [1, 3] {
            let s: Vec<f32> = reduce_2d(ReduceOp::Sum, &mut x, rows, cols, 0, threads);
            let n: Vec<f32> = reduce_2d(ReduceOp::Norm { p: 2.0 }, &mut x, rows, cols, 0, threads);
            for c in 0..cols {
                let want: f64 = (0..rows).map(|r| x[r * cols + c] as f64).sum();
                assert!(rel(s[c], want) < 1e-6, "sum col {c}: {} vs {want}", s[c]);
                let want: f64 = (0..rows).map(|r| (x[r * cols + c] as f64).powi(2)).sum::<f64>().sqrt();
                assert!(rel(n[c], want) < 1e-6, "norm col {c}: {} vs {want}", n[c]);
            }
        }
        let mut t: Vec<f32> = x.clone();
        let m: Vec<f32> = reduce_2d(ReduceOp::Mean, &mut t, cols, rows, 1, 1);
        for r in 0..cols {
            let want: f64 = (0..rows).map(|c| t[r * rows + c] as f64).sum::<f64>() / rows as f64;
            assert!(rel(m[r], want) < 1e-6, "mean row {r}");
        }
    }

    #[test]
    fn cascade_combines_every_leaf_once_in_order() {
        // Integer leaves: the total is exact, whatever the number of leaves and width.
        let r = Sum::<i64> { mean: false, skip_nan: false, _a: std::marker::PhantomData };
        for width in [1, 3] {
            for leaves in [1u64, 2, 3, 7, 8, 1000] {
                let mut c = Cascade::new(width);
                for k in 1..=leaves {
                    let mut leaf: Vec<i64> = (0..width as i64).map(|j| k as i64 * (j + 1)).collect();
                    c.push(&r, &mut leaf);
                    assert!(leaf.iter().all(|&v| v == 0), "leaf reset");
                }
                let mut out = vec![7i64; width];
                c.finish(&r, &mut out);
                for (j, &v) in out.iter().enumerate() {
                    assert_eq!(v, (leaves * (leaves + 1) / 2) as i64 * (j as i64 + 1));
                }
            }
        }
        // Argmax keeps the first index of the largest value across leaves.
        let a = ArgExtremum::<f32> { max: true, with_values: true, _a: std::marker::PhantomData };
        let mut c = Cascade::new(1);
        for (k, v) in [1.0f32, 5.0, 2.0, 5.0, 0.0].iter().enumerate() {
            c.push(&a, &mut [Some((*v, k as i64))]);
        }
        let mut out = [None];
        c.finish(&a, &mut out);
        assert_eq!(out[0], Some((5.0, 1)));
    }

    #[test]
    fn narrow_integer_inputs_widen_as_they_load() {
        // bool and uint8 read in place into int64 sums, products and nonzero counts.
        let n = 3 * BLOCK + 5;
        let mut bytes: Vec<u8> = (0..n).map(|i| (i % 5) as u8).collect();
        let mut flags: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
        let mut out = [0i64];
        let mut run = |op: ReduceOp, input: Operand, esz: i64| {
            let it = TensorIter::new("t", &[n as i64], vec![(operand(&mut out), &[0][..]), (input, &[esz][..])], 1, 2)
                .unwrap();
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { reduce(op, &it) }.unwrap();
            out[0]
        };
        let want: i64 = bytes.iter().map(|&b| b as i64).sum();
        assert_eq!(run(ReduceOp::Sum, operand(&mut bytes), 1), want);
        assert_eq!(run(ReduceOp::CountNonzero, operand(&mut bytes), 1), (n - n.div_ceil(5)) as i64);
        assert_eq!(run(ReduceOp::Sum, operand(&mut flags), 1), n.div_ceil(3) as i64);
        assert_eq!(run(ReduceOp::CountNonzero, operand(&mut flags), 1), n.div_ceil(3) as i64);
        let mut small: Vec<u8> = vec![1; n];
        small[7] = 3;
        small[n - 1] = 2;
        assert_eq!(run(ReduceOp::Prod, operand(&mut small), 1), 6);
        let mut floats = vec![0.0f32, -0.0, f32::NAN, 1e-40, 2.0];
        let mut out = [0i64];
        let it =
            TensorIter::new("t", &[5], vec![(operand(&mut out), &[0][..]), (operand(&mut floats), &[4][..])], 1, 1)
                .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { reduce(ReduceOp::CountNonzero, &it) }.unwrap();
        assert_eq!(out[0], 3);
    }
}
