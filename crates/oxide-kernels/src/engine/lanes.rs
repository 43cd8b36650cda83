//! Row reductions written with independent accumulator lanes.
//!
//! A single running sum is a chain of dependent additions that LLVM may not
//! reorder (floating-point addition is not associative), so it runs at one
//! element per add latency. Sixteen independent lanes let it vectorise; the
//! lanes are combined in a fixed order, so results do not depend on anything
//! but the input. The norms and softmax use these for their row statistics.
//! The `avx2` module adds explicit AVX2 float32/float64 sums and NaN-aware
//! max/min for the whole-row reductions.

use crate::dtype::Element;
use crate::engine::math::Float;

const L: usize = 16;

/// `sum(x)` accumulated in double.
#[inline]
pub(crate) fn sum_f64<T: Element>(x: &[T]) -> f64 {
    let mut acc = [0f64; L];
    let mut it = x.chunks_exact(L);
    for c in &mut it {
        for k in 0..L {
            acc[k] += c[k].to_f64();
        }
    }
    let tail: f64 = it.remainder().iter().map(|v| v.to_f64()).sum();
    acc.iter().sum::<f64>() + tail
}

/// `sum((x - m)^2)` accumulated in double.
#[inline]
pub(crate) fn sq_dev_f64<T: Element>(x: &[T], m: f64) -> f64 {
    let mut acc = [0f64; L];
    let mut it = x.chunks_exact(L);
    for c in &mut it {
        for k in 0..L {
            let d = c[k].to_f64() - m;
            acc[k] += d * d;
        }
    }
    let tail: f64 = it.remainder().iter().map(|v| (v.to_f64() - m) * (v.to_f64() - m)).sum();
    acc.iter().sum::<f64>() + tail
}

/// `sum(a * b)` accumulated in double (`a` and `b` of equal length).
#[inline]
pub(crate) fn dot_f64<T: Element>(a: &[T], b: &[T]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f64; L];
    let full = n / L * L;
    for (ca, cb) in a[..full].chunks_exact(L).zip(b[..full].chunks_exact(L)) {
        for k in 0..L {
            acc[k] += ca[k].to_f64() * cb[k].to_f64();
        }
    }
    let tail: f64 = a[full..].iter().zip(&b[full..]).map(|(p, q)| p.to_f64() * q.to_f64()).sum();
    acc.iter().sum::<f64>() + tail
}

/// `sum(x)` accumulated in the compute type `F` (what CPU's softmax does).
#[inline]
pub(crate) fn sum<F: Float>(x: &[F]) -> F {
    let mut acc = [F::ZERO; L];
    let mut it = x.chunks_exact(L);
    for c in &mut it {
        for k in 0..L {
            acc[k] = acc[k] + c[k];
        }
    }
    let tail = it.remainder().iter().fold(F::ZERO, |s, &v| s + v);
    acc.iter().fold(F::ZERO, |s, &v| s + v) + tail
}

/// `sum(a * b)` in the compute type `F`.
#[inline]
pub(crate) fn dot<F: Float>(a: &[F], b: &[F]) -> F {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [F::ZERO; L];
    let full = n / L * L;
    for (ca, cb) in a[..full].chunks_exact(L).zip(b[..full].chunks_exact(L)) {
        for k in 0..L {
            acc[k] = acc[k] + ca[k] * cb[k];
        }
    }
    let tail = a[full..].iter().zip(&b[full..]).fold(F::ZERO, |s, (&p, &q)| s + p * q);
    acc.iter().fold(F::ZERO, |s, &v| s + v) + tail
}

/// The largest element, ignoring NaN (`-inf` for an empty or all-NaN slice).
/// Softmax only needs a finite shift: a NaN element makes its row NaN anyway.
#[inline]
pub(crate) fn max<F: Float>(x: &[F]) -> F {
    let mut acc = [-F::infinity(); L];
    let mut it = x.chunks_exact(L);
    for c in &mut it {
        for k in 0..L {
            acc[k] = if c[k] > acc[k] { c[k] } else { acc[k] };
        }
    }
    let m = it.remainder().iter().fold(-F::infinity(), |m, &v| if v > m { v } else { m });
    acc.iter().fold(m, |m, &v| if v > m { v } else { m })
}

/// Explicit AVX2 loops for the whole-row float32/float64 reductions (`sum`,
/// `amax`/`amin`). LLVM's auto-vectorisation of the generic lane loops depended on
/// the surrounding code: perf showed the same source compiled two floats wide
/// (`vmovsd` + `vaddps xmm`) or with its lanes spilled to the stack every
/// iteration, at half the speed of a plain vector loop on cached data. These fix
/// the vector code. The kernels are compiled once per CPU capability
/// (`.cargo/config.toml`), so the AVX2 path exists in the avx2 and avx512 builds;
/// the default (x86-64-v2) build runs the generic lane loops.
#[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// One element type's loops: `$w` lanes per 256-bit vector, and the type's intrinsics.
    macro_rules! row_reductions {
        ($t:ty, $w:literal, $sum:ident, $nansum:ident, $extremum:ident, $v:ty, $zero:ident, $set1:ident, $load:ident,
         $store:ident, $add:ident, $and:ident, $max:ident, $min:ident, $or:ident, $cmp:ident, $movemask:ident) => {
            /// `sum(xs)` in four vector accumulators, combined in a fixed order.
            #[inline]
            pub(crate) fn $sum(xs: &[$t]) -> $t {
                let n = xs.len() / (4 * $w) * (4 * $w);
                let p = xs.as_ptr();
                // SAFETY: AVX2 is enabled at compile time; every load reads one vector below `n`.
                unsafe {
                    let (mut a0, mut a1, mut a2, mut a3) = ($zero(), $zero(), $zero(), $zero());
                    let mut i = 0;
                    while i < n {
                        a0 = $add(a0, $load(p.add(i)));
                        a1 = $add(a1, $load(p.add(i + $w)));
                        a2 = $add(a2, $load(p.add(i + 2 * $w)));
                        a3 = $add(a3, $load(p.add(i + 3 * $w)));
                        i += 4 * $w;
                    }
                    let mut lanes = [0 as $t; $w];
                    $store(lanes.as_mut_ptr(), $add($add(a0, a1), $add(a2, a3)));
                    let mut t = 0 as $t;
                    for &l in lanes.iter().chain(&xs[n..]) {
                        t += l;
                    }
                    t
                }
            }

            /// `sum(xs)` over the elements that are not NaN (`nansum`), in the same four
            /// accumulators as the plain sum: an ordered self-compare masks each NaN to 0.
            #[inline]
            pub(crate) fn $nansum(xs: &[$t]) -> $t {
                let n = xs.len() / (4 * $w) * (4 * $w);
                let p = xs.as_ptr();
                // SAFETY: AVX2 is enabled at compile time; every load reads one vector below `n`.
                unsafe {
                    let keep = |v: $v| $and(v, $cmp::<_CMP_ORD_Q>(v, v));
                    let (mut a0, mut a1, mut a2, mut a3) = ($zero(), $zero(), $zero(), $zero());
                    let mut i = 0;
                    while i < n {
                        a0 = $add(a0, keep($load(p.add(i))));
                        a1 = $add(a1, keep($load(p.add(i + $w))));
                        a2 = $add(a2, keep($load(p.add(i + 2 * $w))));
                        a3 = $add(a3, keep($load(p.add(i + 3 * $w))));
                        i += 4 * $w;
                    }
                    let mut lanes = [0 as $t; $w];
                    $store(lanes.as_mut_ptr(), $add($add(a0, a1), $add(a2, a3)));
                    let mut t = 0 as $t;
                    for &l in lanes.iter().chain(xs[n..].iter().filter(|v| !v.is_nan())) {
                        t += l;
                    }
                    t
                }
            }

            /// The largest (`MAX`) or smallest element of a non-empty `xs`, ignoring NaN,
            /// and whether any element is NaN. `vmaxps(v, m)` returns `m` when `v` is NaN,
            /// so NaNs are counted apart: an unordered compare of two vectors is true where
            /// either holds a NaN.
            #[inline]
            pub(crate) fn $extremum<const MAX: bool>(xs: &[$t]) -> ($t, bool) {
                let n = xs.len() / (4 * $w) * (4 * $w);
                let p = xs.as_ptr();
                // SAFETY: AVX2 is enabled at compile time; every load reads one vector below `n`.
                unsafe {
                    let pick = |a: $v, b: $v| if MAX { $max(a, b) } else { $min(a, b) };
                    let first = $set1(xs[0]);
                    let (mut m0, mut m1, mut m2, mut m3) = (first, first, first, first);
                    let mut nan = $zero();
                    let mut i = 0;
                    while i < n {
                        let (v0, v1) = ($load(p.add(i)), $load(p.add(i + $w)));
                        let (v2, v3) = ($load(p.add(i + 2 * $w)), $load(p.add(i + 3 * $w)));
                        m0 = pick(v0, m0);
                        m1 = pick(v1, m1);
                        m2 = pick(v2, m2);
                        m3 = pick(v3, m3);
                        nan = $or(nan, $or($cmp::<_CMP_UNORD_Q>(v0, v1), $cmp::<_CMP_UNORD_Q>(v2, v3)));
                        i += 4 * $w;
                    }
                    let mut lanes = [0 as $t; $w];
                    $store(lanes.as_mut_ptr(), pick(pick(m0, m1), pick(m2, m3)));
                    let mut any_nan = $movemask(nan) != 0;
                    let mut best = lanes[0];
                    for &v in lanes[1..].iter().chain(&xs[n..]) {
                        any_nan |= v.is_nan();
                        if if MAX { v > best } else { v < best } {
                            best = v;
                        }
                    }
                    (best, any_nan)
                }
            }
        };
    }

    row_reductions!(
        f32,
        8,
        sum_f32,
        nansum_f32,
        extremum_f32,
        __m256,
        _mm256_setzero_ps,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_add_ps,
        _mm256_and_ps,
        _mm256_max_ps,
        _mm256_min_ps,
        _mm256_or_ps,
        _mm256_cmp_ps,
        _mm256_movemask_ps
    );
    row_reductions!(
        f64,
        4,
        sum_f64,
        nansum_f64,
        extremum_f64,
        __m256d,
        _mm256_setzero_pd,
        _mm256_set1_pd,
        _mm256_loadu_pd,
        _mm256_storeu_pd,
        _mm256_add_pd,
        _mm256_and_pd,
        _mm256_max_pd,
        _mm256_min_pd,
        _mm256_or_pd,
        _mm256_cmp_pd,
        _mm256_movemask_pd
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    #[test]
    fn avx2_row_reductions_match_scalar_loops() {
        for n in [1usize, 7, 31, 32, 33, 64, 100, 1000, 4099] {
            let a: Vec<f32> = (0..n).map(|k| ((k * 37 % 101) as f32 - 50.0) * 0.25).collect();
            let d: Vec<f64> = a.iter().map(|&v| v as f64 * 1.5).collect();
            let s: f64 = a.iter().map(|&v| v as f64).sum();
            assert!((avx2::sum_f32(&a) as f64 - s).abs() < 1e-3, "n={n}");
            assert!((avx2::sum_f64(&d) - 1.5 * s).abs() < 1e-9, "n={n}");
            assert_eq!(avx2::nansum_f32(&a), avx2::sum_f32(&a), "n={n}");
            // NaN in the vector body and in the tail is skipped.
            let mut holes = a.clone();
            let mut kept = a.clone();
            for at in [0, n / 2, n - 1] {
                holes[at] = f32::NAN;
                kept[at] = 0.0;
            }
            assert_eq!(avx2::nansum_f32(&holes), avx2::sum_f32(&kept), "n={n}");
            let holes64: Vec<f64> = holes.iter().map(|&v| v as f64).collect();
            let kept64: Vec<f64> = kept.iter().map(|&v| v as f64).collect();
            assert_eq!(avx2::nansum_f64(&holes64), avx2::sum_f64(&kept64), "n={n}");
            let (mx, mn) = (a.iter().fold(f32::MIN, |m, &v| m.max(v)), a.iter().fold(f32::MAX, |m, &v| m.min(v)));
            assert_eq!(avx2::extremum_f32::<true>(&a), (mx, false));
            assert_eq!(avx2::extremum_f32::<false>(&a), (mn, false));
            assert_eq!(avx2::extremum_f64::<true>(&d), (mx as f64 * 1.5, false));
            assert_eq!(avx2::extremum_f64::<false>(&d), (mn as f64 * 1.5, false));
            // A NaN anywhere (vector body, each of the four accumulators, or the tail) is reported.
            for at in [0, n / 3, n / 2, n - 1] {
                let mut b = a.clone();
                b[at] = f32::NAN;
                assert!(avx2::extremum_f32::<true>(&b).1, "n={n} at={at}");
                assert!(avx2::extremum_f32::<false>(&b).1, "n={n} at={at}");
                let mut e = d.clone();
                e[at] = f64::NAN;
                assert!(avx2::extremum_f64::<true>(&e).1, "n={n} at={at}");
            }
        }
    }

    #[test]
    fn lane_reductions_match_plain_sums() {
        for n in [0usize, 1, 15, 16, 17, 100, 1000] {
            let a: Vec<f32> = (0..n).map(|k| ((k * 37 % 101) as f32 - 50.0) * 0.25).collect();
            let b: Vec<f32> = (0..n).map(|k| ((k * 13 % 29) as f32 - 14.0) * 0.5).collect();
            let s: f64 = a.iter().map(|&v| v as f64).sum();
            assert!((sum_f64(&a) - s).abs() < 1e-9);
            assert!((sum(&a) as f64 - s).abs() < 1e-3);
            let m = if n == 0 { 0.0 } else { s / n as f64 };
            let q: f64 = a.iter().map(|&v| (v as f64 - m).powi(2)).sum();
            assert!((sq_dev_f64(&a, m) - q).abs() < 1e-6);
            let d: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            assert!((dot_f64(&a, &b) - d).abs() < 1e-9);
            assert!((dot(&a, &b) as f64 - d).abs() < 1e-2);
            let mx = a.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            assert_eq!(max(&a), mx);
        }
        assert_eq!(max(&[1.0f32, f32::NAN, 3.0]), 3.0);
    }
}
