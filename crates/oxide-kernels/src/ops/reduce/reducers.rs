//! The reducers of [`super::reduce`]: one fold per reduction (sum / mean /
//! nansum, prod, amax / amin, all / any, argmax / argmin and max / min with
//! indices, count_nonzero, Welford's var / std, p-norms), each a [`Reducer`],
//! and the lane loops they fold contiguous slices with (vectorisable sums
//! and extrema, explicit AVX2 for float32/float64).

// The explicit AVX2 paths are compiled only into the avx2/avx512 builds (.cargo/config.toml).
#[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
use crate::dtype::DType;
use crate::engine::math::{Float, Num};

use super::reduce::Reducer;
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
        // SAFETY: A is the slice's element type, checked by its dtype.
        if A::DTYPE == DType::F32 {
            // SAFETY: A is the slice's element type, checked by its dtype.
            let t = crate::engine::lanes::avx2::sum_f32(unsafe {
                std::slice::from_raw_parts(xs.as_ptr() as *const f32, xs.len())
            });
            return A::from_f64(t as f64);
        }
        if A::DTYPE == DType::F64 {
            // SAFETY: A is the slice's element type, checked by its dtype.
            let t = crate::engine::lanes::avx2::sum_f64(unsafe {
                std::slice::from_raw_parts(xs.as_ptr() as *const f64, xs.len())
            });
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
        // SAFETY: A is the slice's element type, checked by its dtype.
        if A::DTYPE == DType::F32 {
            // SAFETY: A is the slice's element type, checked by its dtype.
            let t = crate::engine::lanes::avx2::nansum_f32(unsafe {
                std::slice::from_raw_parts(xs.as_ptr() as *const f32, xs.len())
            });
            return A::from_f64(t as f64);
        }
        if A::DTYPE == DType::F64 {
            // SAFETY: A is the slice's element type, checked by its dtype.
            let t = crate::engine::lanes::avx2::nansum_f64(unsafe {
                std::slice::from_raw_parts(xs.as_ptr() as *const f64, xs.len())
            });
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
pub(super) struct Sum<A> {
    pub(super) mean: bool,
    pub(super) skip_nan: bool,
    pub(super) _a: std::marker::PhantomData<A>,
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

pub(super) struct Prod<A>(pub(super) std::marker::PhantomData<A>);
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
pub(super) struct Extremum<A> {
    pub(super) max: bool,
    pub(super) _a: std::marker::PhantomData<A>,
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
        // SAFETY: A is the slice's element type, checked by its dtype.
        if A::DTYPE == DType::F32 {
            // SAFETY: A is the slice's element type, checked by its dtype.
            let (v, nan) = crate::engine::lanes::avx2::extremum_f32::<MAX>(unsafe {
                std::slice::from_raw_parts(xs.as_ptr() as *const f32, xs.len())
            });
            return (A::from_f64(v as f64), nan);
        }
        if A::DTYPE == DType::F64 {
            // SAFETY: A is the slice's element type, checked by its dtype.
            let (v, nan) = crate::engine::lanes::avx2::extremum_f64::<MAX>(unsafe {
                std::slice::from_raw_parts(xs.as_ptr() as *const f64, xs.len())
            });
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
pub(super) struct Logical {
    pub(super) all: bool,
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
        if self.all {
            a & b
        } else {
            a | b
        }
    }
    fn finish(&self, s: bool, _: usize) -> [bool; 2] {
        [s, false]
    }
}

/// argmax / argmin (index only) and max / min along a dim (value and index):
/// the first index of the extreme value; NaN counts as extreme. Values and
/// indices leave as double (exact for every value of float types and for
/// indices below 2^53).
pub(super) struct ArgExtremum<A> {
    pub(super) max: bool,
    pub(super) with_values: bool,
    pub(super) _a: std::marker::PhantomData<A>,
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
        if self.with_values {
            [v, i]
        } else {
            [i, 0.0]
        }
    }
}

/// count_nonzero. Every real dtype converts to double without turning a nonzero
/// value into zero, so the input is read as double whatever its dtype.
pub(super) struct CountNonzero;
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
pub(super) struct Welford {
    pub(super) correction: f64,
    pub(super) take_sqrt: bool,
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
        if self.p == f64::NEG_INFINITY {
            F::infinity()
        } else {
            F::ZERO
        }
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
