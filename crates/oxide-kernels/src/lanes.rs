//! Row reductions written with independent accumulator lanes.
//!
//! A single running sum is a chain of dependent additions that LLVM may not
//! reorder (floating-point addition is not associative), so it runs at one
//! element per add latency. Sixteen independent lanes let it vectorise; the
//! lanes are combined in a fixed order, so results do not depend on anything
//! but the input. The norms and softmax use these for their row statistics.

use crate::dtype::Element;
use crate::math::Float;

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

#[cfg(test)]
mod tests {
    use super::*;

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
