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


use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::engine::iter::{load, store, Operand, TensorIter, BLOCK, GRAIN};
use crate::engine::math::{Float, Num};

/// What to compute; names are PyTorch's reduction stubs without `_stub`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReduceOp {
    Sum,
    NanSum,
    Prod,
    Mean,
    MaxValues,
    MinValues,
    And,
    Or,
    ArgMax,
    ArgMin,
    /// `max.dim`: values (output 0) and first indices (output 1).
    MaxWithIndices,
    /// `min.dim`: values (output 0) and first indices (output 1).
    MinWithIndices,
    /// Welford variance with `correction`; `take_sqrt` gives the standard
    /// deviation. A second output, when present, receives the mean.
    StdVar { correction: f64, take_sqrt: bool },
    /// Vector p-norm (`inf`, `-inf`, 0, 1, 2 or any other p).
    Norm { p: f64 },
    /// Elements that are not zero (NaN counts), into int64, from any real dtype.
    CountNonzero,
}

impl ReduceOp {
    /// The op for a stub name and its scalar argument(s) (`std_var` takes
    /// (correction, take_sqrt != 0), `norm` takes p).
    pub fn lookup(name: &str, a: f64, b: f64) -> Option<ReduceOp> {
        Some(match name {
            "sum" => ReduceOp::Sum,
            "nansum" => ReduceOp::NanSum,
            "prod" => ReduceOp::Prod,
            "mean" => ReduceOp::Mean,
            "max_values" => ReduceOp::MaxValues,
            "min_values" => ReduceOp::MinValues,
            "and" => ReduceOp::And,
            "or" => ReduceOp::Or,
            "argmax" => ReduceOp::ArgMax,
            "argmin" => ReduceOp::ArgMin,
            "max" => ReduceOp::MaxWithIndices,
            "min" => ReduceOp::MinWithIndices,
            "std_var" => ReduceOp::StdVar { correction: a, take_sqrt: b != 0.0 },
            "norm" => ReduceOp::Norm { p: a },
            "count_nonzero" => ReduceOp::CountNonzero,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::NanSum => "nansum",
            ReduceOp::Prod => "prod",
            ReduceOp::Mean => "mean",
            ReduceOp::MaxValues => "amax",
            ReduceOp::MinValues => "amin",
            ReduceOp::And => "all",
            ReduceOp::Or => "any",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::MaxWithIndices => "max",
            ReduceOp::MinWithIndices => "min",
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

/// `xs` summed in 32 independent lanes: vectorisable, enough dependency chains to
/// hide the add latency (two 512-bit or four 256-bit registers of float32), and
/// pairwise-ish for accuracy. The lanes are combined by a separate sequential loop:
/// an in-place halving tree over the same array made LLVM vectorise the main loop
/// two floats wide (perf: `vmovsd` + `vaddps xmm`). Not inlined, so that the
/// caller's context cannot change that codegen (see [`extremum_lanes`]).
#[inline(never)]
fn sum_lanes<A: Num>(xs: &[A]) -> A {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    {
        // SAFETY (both casts): A is the slice's element type, checked by its dtype.
        if A::DTYPE == DType::F32 {
            let t = crate::engine::lanes::avx2::sum_f32(unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const f32, xs.len()) });
            return A::from_f64(t as f64);
        }
        if A::DTYPE == DType::F64 {
            let t = crate::engine::lanes::avx2::sum_f64(unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const f64, xs.len()) });
            return A::from_f64(t);
        }
    }
    let mut lanes = [A::ZERO; 32];
    let chunks = xs.chunks_exact(32);
    let rest = chunks.remainder();
    for c in chunks {
        let c: &[A; 32] = c.try_into().expect("chunks_exact(32)");
        for j in 0..32 {
            lanes[j] = lanes[j].add(c[j]);
        }
    }
    let mut t = A::ZERO;
    for &l in &lanes {
        t = t.add(l);
    }
    for &x in rest {
        t = t.add(x);
    }
    t
}

/// [`sum_lanes`] over the elements of `xs` that are not NaN (`nansum`).
#[inline(never)]
fn nansum_lanes<A: Num>(xs: &[A]) -> A {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    {
        // SAFETY (both casts): A is the slice's element type, checked by its dtype.
        if A::DTYPE == DType::F32 {
            let t = crate::engine::lanes::avx2::nansum_f32(unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const f32, xs.len()) });
            return A::from_f64(t as f64);
        }
        if A::DTYPE == DType::F64 {
            let t = crate::engine::lanes::avx2::nansum_f64(unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const f64, xs.len()) });
            return A::from_f64(t);
        }
    }
    map_sum_lanes(xs, |x| if x.is_nan() { A::ZERO } else { x })
}

/// `sum(f(x) for x in xs)` in 32 independent lanes, combined pairwise.
#[inline(always)]
fn map_sum_lanes<A: Num, B: Num>(xs: &[A], f: impl Fn(A) -> B) -> B {
    let mut lanes = [B::ZERO; 32];
    let chunks = xs.chunks_exact(32);
    let rest = chunks.remainder();
    for c in chunks {
        let c: &[A; 32] = c.try_into().expect("chunks_exact(32)");
        for j in 0..32 {
            lanes[j] = lanes[j].add(f(c[j]));
        }
    }
    let mut t = B::ZERO;
    for &x in rest {
        t = t.add(f(x));
    }
    let mut w = 32;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            lanes[j] = lanes[j].add(lanes[j + w]);
        }
    }
    lanes[0].add(t)
}

/// Sum and mean (`mean` divides by the count at the end, as CPU's sum-then-divide does).
struct Sum<A> {
    mean: bool,
    skip_nan: bool,
    _a: std::marker::PhantomData<A>,
}
impl<A: Num> Reducer for Sum<A> {
    type In = A;
    type State = A;
    type Out = A;
    fn init(&self) -> A {
        A::ZERO
    }
    #[inline(always)]
    fn step(&self, s: &mut A, x: A, _: i64) {
        if !(self.skip_nan && x.is_nan()) {
            *s = s.add(x);
        }
    }
    #[inline(always)]
    fn step_slice(&self, s: &mut A, xs: &[A], _: i64) {
        *s = s.add(if self.skip_nan { nansum_lanes(xs) } else { sum_lanes(xs) });
    }
    #[inline(always)]
    fn step_lanes(&self, states: &mut [A], xs: &[A], _: i64) {
        if self.skip_nan {
            states.iter_mut().zip(xs).for_each(|(s, &x)| self.step(s, x, 0));
        } else {
            states.iter_mut().zip(xs).for_each(|(s, &x)| *s = s.add(x));
        }
    }
    #[inline(always)]
    fn step_rows(&self, states: &mut [A], rows: [&[A]; 4], index: i64) {
        if self.skip_nan {
            rows.iter().enumerate().for_each(|(k, r)| self.step_lanes(states, r, index + k as i64));
            return;
        }
        // One pass over the states for four rows: a quarter of the state traffic.
        let n = states.len();
        let (r0, r1, r2, r3) = (&rows[0][..n], &rows[1][..n], &rows[2][..n], &rows[3][..n]);
        for j in 0..n {
            states[j] = states[j].add(r0[j].add(r1[j]).add(r2[j].add(r3[j])));
        }
    }
    fn combine(&self, a: A, b: A) -> A {
        a.add(b)
    }
    fn finish(&self, s: A, count: usize) -> [A; 2] {
        [if self.mean { A::from_f64(s.to_f64() / count as f64) } else { s }, A::ZERO]
    }
    const CASCADE: bool = true;
}

struct Prod<A>(std::marker::PhantomData<A>);
impl<A: Num> Reducer for Prod<A> {
    type In = A;
    type State = A;
    type Out = A;
    fn init(&self) -> A {
        A::ONE
    }
    #[inline(always)]
    fn step(&self, s: &mut A, x: A, _: i64) {
        *s = s.mul(x);
    }
    fn combine(&self, a: A, b: A) -> A {
        a.mul(b)
    }
    fn finish(&self, s: A, _: usize) -> [A; 2] {
        [s, A::ZERO]
    }
}

/// amax / amin (NaN propagates).
struct Extremum<A> {
    max: bool,
    _a: std::marker::PhantomData<A>,
}
impl<A: Num> Reducer for Extremum<A> {
    type In = A;
    type State = Option<A>;
    type Out = A;
    fn init(&self) -> Option<A> {
        None
    }
    #[inline(always)]
    fn step(&self, s: &mut Option<A>, x: A, _: i64) {
        *s = Some(match *s {
            None => x,
            Some(c) if self.max => c.max_nan(x),
            Some(c) => c.min_nan(x),
        });
    }
    #[inline(always)]
    fn step_slice(&self, s: &mut Option<A>, xs: &[A], i: i64) {
        if xs.len() < 32 {
            xs.iter().for_each(|&x| self.step(s, x, i));
            return;
        }
        let (v, nan) = if self.max { extremum_lanes::<A, true>(xs) } else { extremum_lanes::<A, false>(xs) };
        if nan {
            let n = xs.iter().copied().find(|v| v.is_nan()).unwrap_or(xs[0]);
            *s = Some(n);
        } else {
            self.step(s, v, i);
        }
    }
    fn combine(&self, a: Option<A>, b: Option<A>) -> Option<A> {
        match (a, b) {
            (Some(x), Some(y)) => Some(if self.max { x.max_nan(y) } else { x.min_nan(y) }),
            (x, None) => x,
            (None, y) => y,
        }
    }
    fn finish(&self, s: Option<A>, _: usize) -> [A; 2] {
        [s.unwrap_or(A::ZERO), A::ZERO]
    }
}

/// The largest (`MAX`) or smallest element of `xs` (at least 32 long) by plain
/// comparisons, and whether any element is NaN (the caller then returns a NaN, as
/// PyTorch's amax does). 32 lanes and a branch-free select vectorise; the NaN flag
/// is an OR of self-comparisons.
///
/// Not inlined on purpose: inlined into `fold_range`, LLVM kept the lanes on the
/// stack and chained the NaN masks (`korw`), at half the speed of this function
/// compiled on its own (perf, 1000x10000 float32 `amax(1)`).
#[inline(never)]
fn extremum_lanes<A: Num, const MAX: bool>(xs: &[A]) -> (A, bool) {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    {
        // SAFETY (both casts): A is the slice's element type, checked by its dtype.
        if A::DTYPE == DType::F32 {
            let (v, nan) = crate::engine::lanes::avx2::extremum_f32::<MAX>(unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const f32, xs.len()) });
            return (A::from_f64(v as f64), nan);
        }
        if A::DTYPE == DType::F64 {
            let (v, nan) = crate::engine::lanes::avx2::extremum_f64::<MAX>(unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const f64, xs.len()) });
            return (A::from_f64(v), nan);
        }
    }
    let mut lanes = [xs[0]; 32];
    let mut nans = [false; 32];
    let chunks = xs.chunks_exact(32);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..32 {
            let v = c[j];
            nans[j] |= v.is_nan();
            let take = if MAX { v > lanes[j] } else { v < lanes[j] };
            lanes[j] = if take { v } else { lanes[j] };
        }
    }
    let mut best = lanes[0];
    let mut nan = nans.iter().any(|&b| b);
    for &v in lanes[1..].iter().chain(rest) {
        nan |= v.is_nan();
        if if MAX { v > best } else { v < best } {
            best = v;
        }
    }
    (best, nan)
}

/// all / any over truthiness.
struct Logical {
    all: bool,
}
impl Reducer for Logical {
    type In = bool;
    type State = bool;
    type Out = bool;
    fn init(&self) -> bool {
        self.all
    }
    #[inline(always)]
    fn step(&self, s: &mut bool, x: bool, _: i64) {
        *s = if self.all { *s & x } else { *s | x };
    }
    fn combine(&self, a: bool, b: bool) -> bool {
        if self.all { a & b } else { a | b }
    }
    fn finish(&self, s: bool, _: usize) -> [bool; 2] {
        [s, false]
    }
}

/// argmax / argmin (index only) and max / min along a dim (value and index):
/// the first index of the extreme value; NaN counts as extreme. Values and
/// indices leave as double (exact for every value of float types and for
/// indices below 2^53).
struct ArgExtremum<A> {
    max: bool,
    with_values: bool,
    _a: std::marker::PhantomData<A>,
}
impl<A: Num> ArgExtremum<A> {
    /// True when (v, i) should replace (c, j).
    #[inline(always)]
    fn better(&self, v: A, i: i64, c: A, j: i64) -> bool {
        if c.is_nan() {
            return v.is_nan() && i < j;
        }
        if v.is_nan() {
            return true;
        }
        let strictly = if self.max { v > c } else { v < c };
        strictly || (v == c && i < j)
    }
}
impl<A: Num> Reducer for ArgExtremum<A> {
    type In = A;
    type State = Option<(A, i64)>;
    type Out = f64;
    fn init(&self) -> Self::State {
        None
    }
    #[inline(always)]
    fn step(&self, s: &mut Self::State, x: A, index: i64) {
        match *s {
            Some((c, j)) if !self.better(x, index, c, j) => {}
            _ => *s = Some((x, index)),
        }
    }
    fn combine(&self, a: Self::State, b: Self::State) -> Self::State {
        match (a, b) {
            (Some((x, i)), Some((y, j))) => Some(if self.better(y, j, x, i) { (y, j) } else { (x, i) }),
            (x, None) => x,
            (None, y) => y,
        }
    }
    fn finish(&self, s: Self::State, _: usize) -> [f64; 2] {
        let (v, i) = s.map_or((0.0, 0.0), |(v, i)| (v.to_f64(), i as f64));
        if self.with_values { [v, i] } else { [i, 0.0] }
    }
}

/// count_nonzero. Every real dtype converts to double without turning a nonzero
/// value into zero, so the input is read as double whatever its dtype.
struct CountNonzero;
impl Reducer for CountNonzero {
    type In = f64;
    type State = i64;
    type Out = i64;
    fn init(&self) -> i64 {
        0
    }
    #[inline(always)]
    fn step(&self, s: &mut i64, x: f64, _: i64) {
        *s += (x != 0.0) as i64;
    }
    fn combine(&self, a: i64, b: i64) -> i64 {
        a + b
    }
    fn finish(&self, s: i64, _: usize) -> [i64; 2] {
        [s, 0]
    }
}

/// Welford's online variance (Welford 1962; Chan, Golub, LeVeque 1979 for combining), in double.
struct Welford {
    correction: f64,
    take_sqrt: bool,
}
impl Reducer for Welford {
    type In = f64;
    type State = (f64, f64, f64);
    type Out = f64;
    fn init(&self) -> Self::State {
        (0.0, 0.0, 0.0)
    }
    #[inline(always)]
    fn step(&self, s: &mut Self::State, x: f64, _: i64) {
        let n = s.2 + 1.0;
        let d = x - s.0;
        let mean = s.0 + d / n;
        *s = (mean, s.1 + d * (x - mean), n);
    }
    fn combine(&self, a: Self::State, b: Self::State) -> Self::State {
        if a.2 == 0.0 {
            return b;
        }
        if b.2 == 0.0 {
            return a;
        }
        let n = a.2 + b.2;
        let d = b.0 - a.0;
        (a.0 + d * b.2 / n, a.1 + b.1 + d * d * a.2 * b.2 / n, n)
    }
    fn finish(&self, s: Self::State, _: usize) -> [f64; 2] {
        let var = s.1 / (s.2 - self.correction).max(0.0);
        [if self.take_sqrt { var.sqrt() } else { var }, s.0]
    }
    const CASCADE: bool = true;
}

/// Vector p-norm.
pub(crate) struct Norm<F> {
    pub(crate) p: f64,
    pub(crate) _f: std::marker::PhantomData<F>,
}
impl<F: Float> Reducer for Norm<F> {
    type In = F;
    type State = F;
    type Out = F;
    fn init(&self) -> F {
        if self.p == f64::NEG_INFINITY { F::infinity() } else { F::ZERO }
    }
    #[inline(always)]
    fn step(&self, s: &mut F, x: F, _: i64) {
        let a = x.abs();
        *s = if self.p == 2.0 {
            *s + a * a
        } else if self.p == 1.0 {
            *s + a
        } else if self.p == f64::INFINITY {
            s.max_nan(a)
        } else if self.p == f64::NEG_INFINITY {
            s.min_nan(a)
        } else if self.p == 0.0 {
            *s + if a != F::ZERO { F::ONE } else { F::ZERO }
        } else {
            *s + a.pow(F::from_f64c(self.p)).unwrap_or(F::ZERO)
        };
    }
    /// Finite p: the powers summed in independent lanes (vectorisable, and each lane
    /// adds only a slice's length / 32 terms in sequence).
    #[inline(always)]
    fn step_slice(&self, s: &mut F, xs: &[F], i: i64) {
        let part = if self.p == 2.0 {
            map_sum_lanes(xs, |x| x * x)
        } else if self.p == 1.0 {
            map_sum_lanes(xs, |x| x.abs())
        } else if self.p == 0.0 {
            map_sum_lanes(xs, |x| if x != F::ZERO { F::ONE } else { F::ZERO })
        } else if self.p.is_finite() {
            let p = F::from_f64c(self.p);
            map_sum_lanes(xs, |x| x.abs().pow(p).unwrap_or(F::ZERO))
        } else {
            xs.iter().for_each(|&x| self.step(s, x, i));
            return;
        };
        *s = *s + part;
    }
    fn combine(&self, a: F, b: F) -> F {
        if self.p == f64::INFINITY {
            a.max_nan(b)
        } else if self.p == f64::NEG_INFINITY {
            a.min_nan(b)
        } else {
            a + b
        }
    }
    fn finish(&self, s: F, _: usize) -> [F; 2] {
        let v = if self.p == 2.0 {
            s.sqrt()
        } else if self.p == 1.0 || self.p == 0.0 || self.p.is_infinite() {
            s
        } else {
            s.pow(F::from_f64c(1.0 / self.p)).unwrap_or(F::ZERO)
        };
        [v, F::ZERO]
    }
    const CASCADE: bool = true;
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
    let mut kept = TensorIter { shape: vec![], operands: it.operands.clone(), strides: vec![vec![]; it.ntensors()], noutputs: nout, threads: it.threads, round_through: None };
    let mut reduced = TensorIter { shape: vec![], operands: vec![it.operands[input]], strides: vec![vec![]], noutputs: 0, threads: it.threads, round_through: None };
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
unsafe fn fold_range<R: Reducer>(r: &R, red: &TensorIter, base: isize, start: usize, end: usize, s: &mut R::State) -> Result<()> {
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
                        unsafe { fold_range(r, &sp.reduced, offs[input], t * chunk, ((t + 1) * chunk).min(nr), &mut s) }.map(|_| s)
                    });
                    let mut s = r.init();
                    for p in parts {
                        match p {
                            Ok(p) => s = r.combine(s, p),
                            Err(e) => return record(Err(e)),
                        }
                    }
                    record(unsafe { write_outputs(r, it, &offs, s, nr) });
                }
            });
        } else {
            // One task per range of outputs, each reduction folded whole.
            sp.kept.parallel_ranges_weighted(nk, nr, |start, end| {
                sp.kept.for_each_row_in(start, end, |koffs, klen| {
                    for j in 0..klen {
                        let offs = sp.kept.offsets_at(koffs, j);
                        let mut s = r.init();
                        // SAFETY: forwarded contract.
                        let res = unsafe { fold_range(r, &sp.reduced, offs[input], 0, nr, &mut s) };
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
        sp.kept.parallel_ranges_weighted(nk, nr, |start, end| {
            // Use the whole operand (edition 2021 would capture only its raw pointer field, which is not Sync).
            let in_op: Operand = in_op;
            let mut states = vec![r.init(); BLOCK];
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
                                let row = |k: usize| unsafe { std::slice::from_raw_parts(in_op.ptr.offset(base + roffs[0] + (first + k) as isize * rs) as *const R::In, n) };
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
                                r.step_lanes(&mut states[..n], unsafe { std::slice::from_raw_parts(p as *const R::In, n) }, index);
                            } else {
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
                    for j in 0..n {
                        let offs = sp.kept.offsets_at(koffs, b + j);
                        record(unsafe { write_outputs(r, it, &offs, states[j], nr) });
                    }
                    b += n;
                }
            });
        });
    }
    errors.into_inner().unwrap()
}

impl TensorIter {
    /// [`TensorIter::parallel_ranges`] over `n` units that each cost `weight` elements.
    fn parallel_ranges_weighted(&self, n: usize, weight: usize, f: impl Fn(usize, usize) + Sync) {
        let tasks = if self.threads <= 1 { 1 } else { (n.saturating_mul(weight) / GRAIN).clamp(1, self.threads.min(n.max(1))) };
        if tasks <= 1 {
            return f(0, n);
        }
        let chunk = n.div_ceil(tasks);
        crate::engine::iter::for_each_task(tasks, |t| f(t * chunk, ((t + 1) * chunk).min(n)));
    }
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
                DType::F32 | DType::F16 | DType::BF16 => { type $A = f32; $e }
                DType::F64 => { type $A = f64; $e }
                _ => { type $A = i64; $e }
            }
        };
    }
    // SAFETY: forwarded contract.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::NanSum => {
                by_acc!(out_dt, |A| run_reducer(&Sum::<A> { mean: op == ReduceOp::Mean, skip_nan: op == ReduceOp::NanSum, _a: P }, it))
            }
            ReduceOp::Prod => by_acc!(out_dt, |A| run_reducer(&Prod::<A>(P), it)),
            ReduceOp::MaxValues | ReduceOp::MinValues => {
                let max = op == ReduceOp::MaxValues;
                if in_dt == DType::U64 {
                    run_reducer(&Extremum::<u64> { max, _a: P }, it)
                } else {
                    by_acc!(in_dt, |A| run_reducer(&Extremum::<A> { max, _a: P }, it))
                }
            }
            ReduceOp::And | ReduceOp::Or => run_reducer(&Logical { all: op == ReduceOp::And }, it),
            ReduceOp::ArgMax | ReduceOp::ArgMin | ReduceOp::MaxWithIndices | ReduceOp::MinWithIndices => {
                let max = matches!(op, ReduceOp::ArgMax | ReduceOp::MaxWithIndices);
                let with_values = matches!(op, ReduceOp::MaxWithIndices | ReduceOp::MinWithIndices);
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
    fn reduce_2d<O: Element>(op: ReduceOp, x: &mut [f32], rows: usize, cols: usize, dim: usize, threads: usize) -> Vec<O> {
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
        for (op, want) in [(ReduceOp::Sum, x.iter().map(|&v| v as f64).sum::<f64>()), (ReduceOp::MaxValues, 100.0)] {
            let it = TensorIter::new("t", &[n as i64], vec![(operand(&mut out), &[0][..]), (operand(&mut x), &[4][..])], 1, 4).unwrap();
            unsafe { reduce(op, &it) }.unwrap();
            assert_eq!(out[0] as f64, want, "{op:?}");
        }
        let it = TensorIter::new("t", &[n as i64], vec![(operand(&mut idx), &[0][..]), (operand(&mut x), &[4][..])], 1, 4).unwrap();
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
        let m: Vec<f32> = reduce_2d(ReduceOp::MaxValues, &mut long, 1, 1000, 1, 1);
        assert_eq!(m[0], 36.0);
        long[517] = f32::NAN;
        let m: Vec<f32> = reduce_2d(ReduceOp::MinValues, &mut long, 1, 1000, 1, 1);
        assert!(m[0].is_nan());
        // The extremum in the tail after the 32-lane blocks, and in a lane.
        long[517] = 5.0;
        long[999] = -1.0;
        let m: Vec<f32> = reduce_2d(ReduceOp::MinValues, &mut long, 1, 1000, 1, 1);
        assert_eq!(m[0], -1.0);
        long[40] = 99.0;
        let m: Vec<f32> = reduce_2d(ReduceOp::MaxValues, &mut long, 1, 1000, 1, 1);
        assert_eq!(m[0], 99.0);
        // nansum along dimension 0 (the four-row outer fold) skips NaN in any row.
        let mut grid: Vec<f32> = (0..9 * 5).map(|i| if i % 7 == 0 { f32::NAN } else { i as f32 }).collect();
        let s: Vec<f32> = reduce_2d(ReduceOp::NanSum, &mut grid, 9, 5, 0, 1);
        for c in 0..5 {
            let want: f32 = (0..9).map(|r| grid[r * 5 + c]).filter(|v| !v.is_nan()).sum();
            assert_eq!(s[c], want, "nansum col {c}");
        }
        let mut nan = vec![1.0f32, f32::NAN, 3.0];
        let m: Vec<f32> = reduce_2d(ReduceOp::MaxValues, &mut nan, 1, 3, 1, 1);
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
            let it = TensorIter::new("t", &[n as i64], vec![(operand(&mut out), &[0][..]), (input, &[esz][..])], 1, 2).unwrap();
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
        let it = TensorIter::new("t", &[5], vec![(operand(&mut out), &[0][..]), (operand(&mut floats), &[4][..])], 1, 1).unwrap();
        unsafe { reduce(ReduceOp::CountNonzero, &it) }.unwrap();
        assert_eq!(out[0], 3);
    }
}
