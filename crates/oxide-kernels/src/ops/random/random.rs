//! Random distributions over a counter-based bit source: uniform, normal,
//! bernoulli, exponential, Cauchy, log-normal, geometric and integers
//! ([`sample`], [`bernoulli_tensor`]), dropout scaling ([`masked_scale`]),
//! [`randperm`] and [`multinomial`].
//!
//! Every element takes its bits from one 128-bit block whose index is the
//! element's position in iteration order (plus the caller's offset inside
//! the [`BitSource`]), so results depend on the seed, the offset and the
//! layout only, never on threads or chunking. Values are computed in double
//! and rounded once into the element type. Formulas: uniform by scaling a
//! 53-bit fraction; normal by Box-Muller; exponential, Cauchy and geometric
//! by inversion; log-normal as exp(normal), as in PyTorch's CPU kernels.

use crate::dtype::{DType, Element};
use crate::engine::layout::Layout;
use crate::error::{Error, Result};
use crate::with_real_dtype;

/// A counter-based source of random bits: block `index` -> 128 bits.
pub trait BitSource: Sync {
    /// The bits of block `index`.
    fn block(&self, index: u64) -> [u32; 4];
}

impl<F: Fn(u64) -> [u32; 4] + Sync> BitSource for F {
    fn block(&self, index: u64) -> [u32; 4] {
        self(index)
    }
}

/// A distribution to sample, with PyTorch's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// `uniform_(from, to)`: [from, to).
    Uniform { from: f64, to: f64 },
    /// `normal_(mean, std)`.
    Normal { mean: f64, std: f64 },
    /// `bernoulli_(p)`: 1 with probability p.
    Bernoulli { p: f64 },
    /// `exponential_(lambd)`.
    Exponential { lambda: f64 },
    /// `cauchy_(median, sigma)`.
    Cauchy { median: f64, sigma: f64 },
    /// `log_normal_(mean, std)`.
    LogNormal { mean: f64, std: f64 },
    /// `geometric_(p)`: trials until the first success, >= 1.
    Geometric { p: f64 },
    /// `random_(from, to)`: `base + bits % range`; `range == 0` means 2^64.
    Integers { base: i64, range: u64 },
}

/// Uniform in [0, 1) with 53 random bits.
#[inline]
fn unit(hi: u32, lo: u32) -> f64 {
    (((hi as u64) << 32 | lo as u64) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[inline]
fn standard_normal(b: [u32; 4]) -> f64 {
    let u1 = 1.0 - unit(b[0], b[1]); // (0, 1]: log is finite
    let u2 = unit(b[2], b[3]);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

impl Distribution {
    /// The value of one element from its 128 bits, in double.
    #[inline]
    pub fn draw(&self, b: [u32; 4]) -> f64 {
        let u = || unit(b[0], b[1]);
        match *self {
            Distribution::Uniform { from, to } => from + (to - from) * u(),
            Distribution::Normal { mean, std } => mean + std * standard_normal(b),
            Distribution::Bernoulli { p } => (u() < p) as u8 as f64,
            Distribution::Exponential { lambda } => -(-u()).ln_1p() / lambda,
            Distribution::Cauchy { median, sigma } => median + sigma * (std::f64::consts::PI * (u() - 0.5)).tan(),
            Distribution::LogNormal { mean, std } => (mean + std * standard_normal(b)).exp(),
            Distribution::Geometric { p } => ((1.0 - u()).ln() / (-p).ln_1p()).ceil().max(1.0),
            Distribution::Integers { .. } => unreachable!("integer draws go through draw_integer"),
        }
    }

    #[inline]
    fn write<T: Element>(&self, b: [u32; 4]) -> T {
        match *self {
            Distribution::Integers { base, range } => {
                let bits = (b[0] as u64) << 32 | b[1] as u64;
                let r = if range == 0 { bits } else { bits % range };
                T::from_i64(base.wrapping_add(r as i64))
            }
            Distribution::Uniform { from, to } => {
                let v = T::from_f64(self.draw(b));
                // Rounding into a narrow type can reach `to`; the interval is half-open.
                if v.to_f64() >= to && to > from {
                    T::from_f64(from)
                } else {
                    v
                }
            }
            _ => T::from_f64(self.draw(b)),
        }
    }
}

/// Fills the strided operand `dst` of `dtype` with samples of `dist`, element k
/// (in iteration order) taking block k of `bits`.
///
/// Errors: [`Error::UnsupportedDtype`] for complex dtypes.
///
/// # Safety
/// Every element addressed by `layout` must be valid for writes.
pub unsafe fn sample(
    dtype: DType,
    layout: &Layout<1>,
    dst: *mut u8,
    dist: Distribution,
    bits: &impl BitSource,
) -> Result<()> {
    // SAFETY: forwarded caller contract.
    with_real_dtype!(dtype, "random", |T| unsafe { sample_typed::<T>(layout, dst, dist, bits) });
    Ok(())
}

unsafe fn sample_typed<T: Element>(layout: &Layout<1>, dst: *mut u8, dist: Distribution, bits: &impl BitSource) {
    let l = layout.coalesced();
    let dst = dst as *mut T;
    let stride = l.strides[0].last().copied().unwrap_or(1);
    let mut index = 0u64;
    l.for_each_row(|[o], n| {
        for i in 0..n as isize {
            // SAFETY: element o + i*stride is in the caller's layout.
            unsafe { dst.offset(o + i * stride).write_unaligned(dist.write::<T>(bits.block(index))) };
            index += 1;
        }
    });
}

/// `bernoulli_(p_tensor)`: element k of `dst` (operand 0) is 1 with the
/// probability held by operand 1, a float64 operand broadcast to `dst`.
///
/// Errors: [`Error::UnsupportedDtype`] for complex dtypes; [`Error::InvalidValue`]
/// (CPU's message) when a probability is outside [0, 1] or NaN, before anything is written.
///
/// # Safety
/// Both operands' elements must be valid (`dst` for writes, `p` for reads).
pub unsafe fn bernoulli_tensor(
    dtype: DType,
    layout: &Layout<2>,
    dst: *mut u8,
    p: *const f64,
    bits: &impl BitSource,
) -> Result<()> {
    let l = layout.coalesced();
    let last = l.shape.len().saturating_sub(1);
    let ps = l.strides[1].get(last).copied().unwrap_or(1);
    let mut valid = true;
    l.for_each_row(|[_, op], n| {
        for i in 0..n as isize {
            // SAFETY: operand 1's offsets are in the caller's layout.
            let prob = unsafe { p.offset(op + i * ps).read_unaligned() };
            valid &= (0.0..=1.0).contains(&prob);
        }
    });
    if !valid {
        return Err(Error::InvalidValue {
            op: "bernoulli_",
            reason: "Expected p_in >= 0 && p_in <= 1 to be true, but got false.".into(),
        });
    }
    // SAFETY: forwarded caller contract.
    with_real_dtype!(dtype, "bernoulli_", |T| unsafe { bernoulli_typed::<T>(layout, dst as *mut T, p, bits) });
    Ok(())
}

unsafe fn bernoulli_typed<T: Element>(layout: &Layout<2>, dst: *mut T, p: *const f64, bits: &impl BitSource) {
    let l = layout.coalesced();
    let last = l.shape.len().saturating_sub(1);
    let (ds, ps) = (l.strides[0].get(last).copied().unwrap_or(1), l.strides[1].get(last).copied().unwrap_or(1));
    let mut index = 0u64;
    l.for_each_row(|[od, op], n| {
        for i in 0..n as isize {
            let b = bits.block(index);
            index += 1;
            // SAFETY: both offsets are in the caller's layout.
            unsafe {
                let prob = p.offset(op + i * ps).read_unaligned();
                dst.offset(od + i * ds).write_unaligned(T::from_i64((unit(b[0], b[1]) < prob) as i64));
            }
        }
    });
}

/// Dropout's scaling: `out = mask ? input * scale : 0`, operands (out, input, mask)
/// with `out`/`input` of `dtype` and `mask` of bool, all strided over `layout`.
///
/// Errors: [`Error::UnsupportedDtype`] for complex dtypes.
///
/// # Safety
/// All three operands' elements must be valid (out for writes).
pub unsafe fn masked_scale(
    dtype: DType,
    layout: &Layout<3>,
    out: *mut u8,
    input: *const u8,
    mask: *const bool,
    scale: f64,
) -> Result<()> {
    // SAFETY: forwarded caller contract.
    with_real_dtype!(dtype, "masked_scale", |T| unsafe {
        masked_scale_typed::<T>(layout, out as *mut T, input as *const T, mask, scale)
    });
    Ok(())
}

unsafe fn masked_scale_typed<T: Element>(
    layout: &Layout<3>,
    out: *mut T,
    input: *const T,
    mask: *const bool,
    scale: f64,
) {
    let l = layout.coalesced();
    let last = l.shape.len().saturating_sub(1);
    let s = |k: usize| l.strides[k].get(last).copied().unwrap_or(1);
    let (so, si, sm) = (s(0), s(1), s(2));
    l.for_each_row(|[oo, oi, om], n| {
        for i in 0..n as isize {
            // SAFETY: all offsets are in the caller's layout.
            unsafe {
                let keep = mask.offset(om + i * sm).read_unaligned();
                let v =
                    if keep { input.offset(oi + i * si).read_unaligned().mul_scalar(scale) } else { T::from_i64(0) };
                out.offset(oo + i * so).write_unaligned(v);
            }
        }
    });
}

/// A uniformly random permutation of `0..n` (Fisher-Yates; swap i takes block i).
pub fn randperm(n: usize, bits: &impl BitSource) -> Vec<i64> {
    let mut perm: Vec<i64> = (0..n as i64).collect();
    for i in (1..n).rev() {
        let b = bits.block(i as u64);
        let j = (((b[0] as u64) << 32 | b[1] as u64) % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    perm
}

/// `multinomial`: `samples` category indices per row of the row-major
/// `rows x categories` weights. With replacement: inverse CDF on the row's
/// cumulative sum (block `row * samples + j` for draw j); without: the
/// `samples` largest keys `ln(u) / w` (Efraimidis and Spirakis, "Weighted
/// random sampling with a reservoir", IPL 2006; block `row * categories + c`).
///
/// Without replacement, once the positive-weight categories are used up the
/// remaining draws take zero-weight categories (in index order), as CPU
/// PyTorch's exponential-keys implementation does.
///
/// Errors: [`Error::InvalidValue`] with CPU PyTorch's messages for a negative,
/// infinite or NaN weight, or a row summing to 0.
pub fn multinomial<T: Element>(
    weights: &[T],
    rows: usize,
    categories: usize,
    samples: usize,
    replacement: bool,
    bits: &impl BitSource,
    out: &mut [i64],
) -> Result<()> {
    for r in 0..rows {
        let w: Vec<f64> = weights[r * categories..(r + 1) * categories].iter().map(|x| x.to_f64()).collect();
        if w.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err(Error::InvalidValue {
                op: "multinomial",
                reason: "probability tensor contains either `inf`, `nan` or element < 0".into(),
            });
        }
        let total: f64 = w.iter().sum();
        if total <= 0.0 {
            return Err(Error::InvalidValue {
                op: "multinomial",
                reason: "invalid multinomial distribution (sum of probabilities <= 0)".into(),
            });
        }
        let row_out = &mut out[r * samples..(r + 1) * samples];
        if replacement {
            let mut cdf = Vec::with_capacity(categories);
            let mut acc = 0.0;
            for x in &w {
                acc += x / total;
                cdf.push(acc);
            }
            for (j, slot) in row_out.iter_mut().enumerate() {
                let b = bits.block((r * samples + j) as u64);
                let u = unit(b[0], b[1]);
                // First category whose cumulative probability exceeds u, skipping zero-weight ones.
                let mut c = cdf.partition_point(|&v| v <= u).min(categories - 1);
                while w[c] == 0.0 && c > 0 {
                    c -= 1;
                }
                *slot = c as i64;
            }
        } else {
            let mut keys: Vec<(f64, usize)> = w
                .iter()
                .enumerate()
                .map(|(c, &x)| {
                    let b = bits.block((r * categories + c) as u64);
                    let u = 1.0 - unit(b[0], b[1]);
                    (if x > 0.0 { u.ln() / x } else { f64::NEG_INFINITY }, c)
                })
                .collect();
            keys.sort_by(|a, b| b.0.total_cmp(&a.0));
            for (slot, (_, c)) in row_out.iter_mut().zip(keys) {
                *slot = c as i64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A deterministic stand-in for Philox: a SplitMix64 hash of the index.
    fn bits(index: u64) -> [u32; 4] {
        let mut z = index.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        let (a, b) = (next(), next());
        [(a >> 32) as u32, a as u32, (b >> 32) as u32, b as u32]
    }

    fn draw_f64(dist: Distribution, n: usize) -> Vec<f64> {
        let mut v = vec![0f64; n];
        let l = Layout::new("t", &[n as i64], [&[1]]).unwrap();
        // SAFETY: n elements.
        unsafe { sample(DType::F64, &l, v.as_mut_ptr() as *mut u8, dist, &bits).unwrap() };
        v
    }

    fn mean_var(v: &[f64]) -> (f64, f64) {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (m, v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64)
    }

    #[test]
    fn moments_match_the_distributions() {
        let n = 200_000;
        let (m, v) = mean_var(&draw_f64(Distribution::Uniform { from: 2.0, to: 4.0 }, n));
        assert!((m - 3.0).abs() < 0.01 && (v - 1.0 / 3.0).abs() < 0.01, "{m} {v}");
        let (m, v) = mean_var(&draw_f64(Distribution::Normal { mean: 1.0, std: 2.0 }, n));
        assert!((m - 1.0).abs() < 0.02 && (v - 4.0).abs() < 0.06, "{m} {v}");
        let (m, _) = mean_var(&draw_f64(Distribution::Exponential { lambda: 2.0 }, n));
        assert!((m - 0.5).abs() < 0.01, "{m}");
        let (m, _) = mean_var(&draw_f64(Distribution::Bernoulli { p: 0.3 }, n));
        assert!((m - 0.3).abs() < 0.01, "{m}");
        let (m, _) = mean_var(&draw_f64(Distribution::Geometric { p: 0.25 }, n));
        assert!((m - 4.0).abs() < 0.05, "{m}");
        let ln = draw_f64(Distribution::LogNormal { mean: 0.0, std: 0.5 }, n);
        let (m, _) = mean_var(&ln.iter().map(|x| x.ln()).collect::<Vec<_>>());
        assert!(m.abs() < 0.01 && ln.iter().all(|x| *x > 0.0));
        let c = draw_f64(Distribution::Cauchy { median: 5.0, sigma: 1.0 }, n);
        let below = c.iter().filter(|x| **x < 5.0).count() as f64 / n as f64;
        assert!((below - 0.5).abs() < 0.01);
    }

    #[test]
    fn integers_stay_in_range_and_narrow_types_stay_below_to() {
        let mut v = vec![0i16; 10_000];
        let l = Layout::new("t", &[10_000], [&[1]]).unwrap();
        // SAFETY: 10_000 elements.
        unsafe {
            sample(DType::I16, &l, v.as_mut_ptr() as *mut u8, Distribution::Integers { base: -3, range: 7 }, &bits)
                .unwrap()
        };
        assert!(v.iter().all(|x| (-3..4).contains(x)));
        assert!((-3..4).all(|k| v.contains(&k)));
        let mut h = vec![half::bf16::ZERO; 50_000];
        let l = Layout::new("t", &[50_000], [&[1]]).unwrap();
        // SAFETY: 50_000 elements.
        unsafe {
            sample(DType::BF16, &l, h.as_mut_ptr() as *mut u8, Distribution::Uniform { from: 0.0, to: 1.0 }, &bits)
                .unwrap()
        };
        assert!(h.iter().all(|x| x.to_f64() >= 0.0 && x.to_f64() < 1.0));
    }

    #[test]
    fn layout_order_not_chunking_decides_values() {
        // A strided destination gets the same sequence as a contiguous one, in iteration order.
        let contiguous = draw_f64(Distribution::Normal { mean: 0.0, std: 1.0 }, 6);
        let mut strided = vec![0f64; 12];
        let l = Layout::new("t", &[6], [&[2]]).unwrap();
        // SAFETY: 6 elements at stride 2 within 12.
        unsafe {
            sample(DType::F64, &l, strided.as_mut_ptr() as *mut u8, Distribution::Normal { mean: 0.0, std: 1.0 }, &bits)
                .unwrap()
        };
        assert_eq!(strided.iter().step_by(2).copied().collect::<Vec<_>>(), contiguous);
        assert!(strided.iter().skip(1).step_by(2).all(|x| *x == 0.0));
        let l = Layout::new("t", &[2], [&[1]]).unwrap();
        // SAFETY: rejected before any access.
        let r = unsafe { sample(DType::C64, &l, std::ptr::null_mut(), Distribution::Bernoulli { p: 0.5 }, &bits) };
        assert!(r.is_err());
    }

    #[test]
    fn bernoulli_tensor_and_masked_scale() {
        let bad = [0.5f64, 1.5];
        let mut untouched = [3.0f32; 2];
        let l2 = Layout::new("t", &[2], [&[1], &[1]]).unwrap();
        // SAFETY: 2 elements each.
        assert!(unsafe { bernoulli_tensor(DType::F32, &l2, untouched.as_mut_ptr() as *mut u8, bad.as_ptr(), &bits) }
            .is_err());
        assert_eq!(untouched, [3.0, 3.0], "nothing is written when a probability is invalid");
        let p = [0.0f64, 1.0, 0.0, 1.0];
        let mut out = [7.0f32; 4];
        let l = Layout::new("t", &[4], [&[1], &[1]]).unwrap();
        // SAFETY: 4 elements each.
        unsafe { bernoulli_tensor(DType::F32, &l, out.as_mut_ptr() as *mut u8, p.as_ptr(), &bits).unwrap() };
        assert_eq!(out, [0.0, 1.0, 0.0, 1.0]);
        let input = [1.0f32, 2.0, 3.0, 4.0];
        let mask = [true, false, true, false];
        let mut res = [9.0f32; 4];
        let l = Layout::new("t", &[4], [&[1], &[1], &[1]]).unwrap();
        // SAFETY: 4 elements each.
        unsafe {
            masked_scale(DType::F32, &l, res.as_mut_ptr() as *mut u8, input.as_ptr() as *const u8, mask.as_ptr(), 2.0)
                .unwrap()
        };
        assert_eq!(res, [2.0, 0.0, 6.0, 0.0]);
    }

    #[test]
    fn randperm_is_a_permutation() {
        let mut p = randperm(1000, &bits);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        p.sort();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
        assert!(randperm(0, &bits).is_empty());
    }

    #[test]
    fn multinomial_frequencies_and_errors() {
        let w = [1.0f32, 0.0, 3.0];
        let mut out = vec![0i64; 40_000];
        multinomial(&w, 1, 3, 40_000, true, &bits, &mut out).unwrap();
        let twos = out.iter().filter(|&&c| c == 2).count() as f64 / 40_000.0;
        assert!((twos - 0.75).abs() < 0.01 && !out.contains(&1));
        let mut out = vec![0i64; 4];
        multinomial(&[0.1f64, 0.2, 0.3, 0.4, 0.0, 0.1, 0.1, 0.8], 2, 4, 2, false, &bits, &mut out).unwrap();
        assert_ne!(out[0], out[1]);
        assert!(out[2] != out[3] && out[2..].iter().all(|&c| c != 0), "row 2 never picks its zero-weight category 0");
        let mut one = [0i64; 1];
        assert!(multinomial(&[-1.0f32, 1.0], 1, 2, 1, true, &bits, &mut one).is_err());
        assert!(multinomial(&[0.0f32, 0.0], 1, 2, 1, true, &bits, &mut one).is_err());
        let mut two = [0i64; 2];
        multinomial(&[0.0f32, 1.0], 1, 2, 2, false, &bits, &mut two).unwrap();
        assert_eq!(two, [1, 0], "positive weights first, then zero-weight categories");
    }
}
