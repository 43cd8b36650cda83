//! Scalar math for the compute types, written so that LLVM can vectorise the
//! elementwise loops that call it.
//!
//! [`Num`] is the arithmetic every real compute type has (integers wrap like
//! C++; bool adds as `or` and multiplies as `and`, as PyTorch's CPU kernels
//! do). [`Float`] adds the transcendental functions for float and double.
//! float32 `exp` (and so `sigmoid`, and `tanh` built on it) is a branch-free polynomial (Cephes
//! `expf`: Moshier, "Methods and Programs for Mathematical Functions", 1989;
//! error about 1 ulp, like SLEEF's `expf_u10` PyTorch uses) because libm's
//! scalar call would not vectorise; the rest call Rust's std / `libm`.

use crate::dtype::{DType, Element};

/// Arithmetic of a real compute type (every dtype except float16/bfloat16,
/// which compute as float32, and complex).
pub trait Num: Element + PartialOrd + Default {
    const ZERO: Self;
    const ONE: Self;
    const IS_FLOAT: bool;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool {
        false
    }
    /// Truncating division; `None` for integer division by zero.
    fn div_trunc(self, o: Self) -> Option<Self>;
    /// Floor division (Python's `//`); `None` for integer division by zero.
    fn div_floor(self, o: Self) -> Option<Self>;
    /// Remainder with the sign of the divisor (Python's `%`).
    fn remainder(self, o: Self) -> Option<Self>;
    /// Remainder with the sign of the dividend (C's `fmod`).
    fn fmod(self, o: Self) -> Option<Self>;
    /// `self ** o`. An integer to a negative integer power is 0 except for bases 1
    /// and -1, as CPU PyTorch's tensor ** tensor computes (tensor ** negative scalar
    /// is refused earlier, by PyTorch's meta function). Always `Some` today.
    fn pow(self, o: Self) -> Option<Self>;
    /// -1, 0 or 1; NaN gives 0 and -0.0 gives 0, as PyTorch's `(0 < x) - (x < 0)`.
    fn sign(self) -> Self {
        if self > Self::ZERO {
            Self::ONE
        } else if self < Self::ZERO {
            Self::ONE.neg()
        } else {
            Self::ZERO
        }
    }
    /// `max` that propagates NaN (`torch.maximum`).
    #[inline(always)]
    fn max_nan(self, o: Self) -> Self {
        // A NaN `o` fails `self > o` and is returned as it is.
        if self.is_nan() || self > o {
            self
        } else {
            o
        }
    }
    /// `min` that propagates NaN (`torch.minimum`).
    #[inline(always)]
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || self < o {
            self
        } else {
            o
        }
    }
    /// `max` that ignores NaN (`torch.fmax`).
    #[inline(always)]
    fn fmax(self, o: Self) -> Self {
        if o.is_nan() || self > o {
            self
        } else {
            o
        }
    }
    /// `min` that ignores NaN (`torch.fmin`).
    #[inline(always)]
    fn fmin(self, o: Self) -> Self {
        if o.is_nan() || self < o {
            self
        } else {
            o
        }
    }
}

macro_rules! int_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const IS_FLOAT: bool = false;
            #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn neg(self) -> Self { (0 as $t).wrapping_sub(self) }
            #[inline(always)] fn abs(self) -> Self { if self < Self::ZERO { self.neg() } else { self } }
            #[inline(always)] fn div_trunc(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_div(o)) }
            }
            #[inline(always)] fn div_floor(self, o: Self) -> Option<Self> {
                if o == 0 { return None; }
                let q = self.wrapping_div(o);
                let r = self.wrapping_rem(o);
                // Round toward negative infinity when the signs differ and there is a remainder.
                Some(if r != 0 && ((r < Self::ZERO) != (o < Self::ZERO)) { q.wrapping_sub(1) } else { q })
            }
            #[inline(always)] fn remainder(self, o: Self) -> Option<Self> {
                if o == 0 { return None; }
                let r = self.wrapping_rem(o);
                Some(if r != 0 && ((r < Self::ZERO) != (o < Self::ZERO)) { r.wrapping_add(o) } else { r })
            }
            #[inline(always)] fn fmod(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_rem(o)) }
            }
            #[inline(always)] fn pow(self, o: Self) -> Option<Self> {
                #[allow(unused_comparisons)]
                if o < Self::ZERO {
                    return if self == 1 as $t { Some(1 as $t) } else if self == (0 as $t).wrapping_sub(1) {
                        Some(if o.wrapping_rem(2 as $t) == 0 { 1 as $t } else { self })
                    } else { Some(0 as $t) };
                }
                let (mut base, mut exp, mut acc) = (self, o as u64, 1 as $t);
                while exp > 0 {
                    if exp & 1 == 1 { acc = acc.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    exp >>= 1;
                }
                Some(acc)
            }
        }
    )*};
}
int_num!(u8, i8, i16, i32, i64, u16, u32, u64);

impl Num for bool {
    const ZERO: Self = false;
    const ONE: Self = true;
    const IS_FLOAT: bool = false;
    fn add(self, o: Self) -> Self {
        self | o
    }
    fn sub(self, o: Self) -> Self {
        self ^ o
    }
    fn mul(self, o: Self) -> Self {
        self & o
    }
    fn neg(self) -> Self {
        self
    }
    fn abs(self) -> Self {
        self
    }
    fn div_trunc(self, o: Self) -> Option<Self> {
        if o {
            Some(self)
        } else {
            None
        }
    }
    fn div_floor(self, o: Self) -> Option<Self> {
        self.div_trunc(o)
    }
    fn remainder(self, o: Self) -> Option<Self> {
        if o {
            Some(false)
        } else {
            None
        }
    }
    fn fmod(self, o: Self) -> Option<Self> {
        self.remainder(o)
    }
    fn pow(self, o: Self) -> Option<Self> {
        Some(self | !o)
    }
}

macro_rules! float_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const IS_FLOAT: bool = true;
            #[inline(always)] fn add(self, o: Self) -> Self { self + o }
            #[inline(always)] fn sub(self, o: Self) -> Self { self - o }
            #[inline(always)] fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)] fn neg(self) -> Self { -self }
            #[inline(always)] fn abs(self) -> Self { <$t>::abs(self) }
            #[inline(always)] fn is_nan(self) -> bool { self != self }
            #[inline(always)] fn div_trunc(self, o: Self) -> Option<Self> { Some((self / o).trunc()) }
            #[inline(always)] fn div_floor(self, o: Self) -> Option<Self> {
                // PyTorch's div_floor_floating: computed from fmod so that it agrees with remainder.
                if o == 0.0 { return Some(self / o); }
                let m = self % o;
                let mut div = (self - m) / o;
                if m != 0.0 && ((o < 0.0) != (m < 0.0)) { div -= 1.0; }
                let floordiv = if div != 0.0 {
                    let f = div.floor();
                    if div - f > 0.5 { f + 1.0 } else { f }
                } else {
                    (0.0 as $t).copysign(self / o)
                };
                Some(floordiv)
            }
            #[inline(always)] fn remainder(self, o: Self) -> Option<Self> {
                let m = self % o;
                Some(if m != 0.0 && ((o < 0.0) != (m < 0.0)) { m + o } else { m })
            }
            #[inline(always)] fn fmod(self, o: Self) -> Option<Self> { Some(self % o) }
            #[inline(always)] fn pow(self, o: Self) -> Option<Self> { Some(self.powf(o)) }
        }
    )*};
}
float_num!(f32, f64);

/// float and double: the floating compute types.
pub trait Float:
    Num
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    fn exp(self) -> Self;
    fn exp2(self) -> Self;
    fn exp_m1(self) -> Self;
    fn ln(self) -> Self;
    fn log2(self) -> Self;
    fn log10(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn tanh(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn trunc(self) -> Self;
    /// Round half to even (`torch.round`).
    fn round_even(self) -> Self;
    fn atan2(self, o: Self) -> Self;
    fn hypot(self, o: Self) -> Self;
    fn copysign(self, o: Self) -> Self;
    fn erf(self) -> Self;
    fn erfc(self) -> Self;
    fn lgamma(self) -> Self;
    fn is_infinite(self) -> bool;
    fn is_finite(self) -> bool;
    fn is_sign_negative(self) -> bool;
    fn max_value() -> Self;
    fn min_value() -> Self;
    fn infinity() -> Self;
    fn nan() -> Self;
    fn from_f64c(v: f64) -> Self;
    /// `self * a + b`: one fused rounding where the target has FMA
    /// instructions, else a multiply and an add. Rust never contracts
    /// `x * y + z` by itself, so dense product loops (attention's tiles) call this to
    /// get FMA throughput; without FMA hardware a fused `mul_add` would be a
    /// slow software call, hence the fallback.
    #[inline(always)]
    fn mul_add_fast(self, a: Self, b: Self) -> Self {
        self * a + b
    }
    #[inline(always)]
    fn recip(self) -> Self {
        Self::ONE / self
    }
    #[inline(always)]
    fn sigmoid(self) -> Self {
        Self::ONE / (Self::ONE + (-self).exp())
    }
    /// Inverse error function: Giles' single-precision approximation
    /// ("Approximating the erfinv function", GPU Computing Gems, 2011) refined
    /// by two Newton steps on `erf`, computed in double.
    fn erfinv(self) -> Self {
        Self::from_f64c(erfinv_f64(self.to_f64()))
    }
}

impl Float for f32 {
    /// Cephes `expf` with a two-step scale so that results down to the
    /// denormal range are exact to about 1 ulp; branch-free for vectorisation.
    #[inline(always)]
    fn exp(self) -> f32 {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const C1: f32 = 0.693_359_4;
        const C2: f32 = -2.121_944_4e-4;
        // Round to nearest even by adding and removing 1.5 * 2^23 (exact for |x * LOG2E| < 2^22),
        // and read the integer from that sum's mantissa: `round_ties_even` and a saturating
        // `as i32` keep LLVM from vectorising the loop (about 4x slower), these give the same n.
        const MAGIC: f32 = 12_582_912.0;
        // Fused multiply-adds where the target has them (one rounding each, and about
        // a third fewer instructions in the vectorised loop).
        let fma = |a: f32, b: f32, c: f32| a.mul_add_fast(b, c);
        let x = self.clamp(-104.0, 89.0);
        let shifted = fma(x, LOG2E, MAGIC);
        let n = shifted - MAGIC;
        let r = fma(-n, C2, fma(-n, C1, x));
        let z = r * r;
        let p = fma(
            fma(
                fma(fma(fma(1.987_569_1e-4, r, 1.398_199_9e-3), r, 8.333_452e-3), r, 4.166_579_6e-2),
                r,
                1.666_666_5e-1,
            ),
            r,
            5e-1,
        );
        let y = fma(p, z, r) + 1.0;
        let ni = (shifted.to_bits() as i32) - 0x4B40_0000;
        let n1 = ni >> 1;
        let n2 = ni - n1;
        let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
        let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
        let v = y * s1 * s2;
        let v = if self > 88.722_84 { f32::INFINITY } else { v };
        let v = if self < -103.972_08 { 0.0 } else { v };
        if self.is_nan() {
            self
        } else {
            v
        }
    }
    fn exp2(self) -> f32 {
        f32::exp2(self)
    }
    fn exp_m1(self) -> f32 {
        f32::exp_m1(self)
    }
    fn ln(self) -> f32 {
        f32::ln(self)
    }
    fn log2(self) -> f32 {
        f32::log2(self)
    }
    fn log10(self) -> f32 {
        f32::log10(self)
    }
    fn ln_1p(self) -> f32 {
        f32::ln_1p(self)
    }
    #[inline(always)]
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    fn sin(self) -> f32 {
        f32::sin(self)
    }
    fn cos(self) -> f32 {
        f32::cos(self)
    }
    fn tan(self) -> f32 {
        f32::tan(self)
    }
    fn asin(self) -> f32 {
        f32::asin(self)
    }
    fn acos(self) -> f32 {
        f32::acos(self)
    }
    fn atan(self) -> f32 {
        f32::atan(self)
    }
    fn sinh(self) -> f32 {
        f32::sinh(self)
    }
    fn cosh(self) -> f32 {
        f32::cosh(self)
    }
    /// Cephes `tanhf` (Moshier 1989): an odd polynomial below 0.625 in
    /// magnitude, `1 - 2 / (exp(2|x|) + 1)` above, both evaluated and one
    /// selected so that the loop stays branch-free and vectorises (libm's
    /// scalar call does not, and the recurrent cells call this per gate).
    /// Error about 2 ulp, within SLEEF's `tanhf_u10` that PyTorch uses by an ulp.
    #[inline(always)]
    fn tanh(self) -> f32 {
        let a = self.abs();
        let z = self * self;
        let fma = |a: f32, b: f32, c: f32| a.mul_add_fast(b, c);
        let poly = fma(
            fma(fma(fma(-5.704_988_7e-3, z, 2.063_909e-2), z, -5.373_971_6e-2), z, 1.333_144_2e-1),
            z,
            -3.333_328e-1,
        );
        let small = fma(poly * z, self, self);
        let e = Float::exp(a + a);
        let large = (1.0 - 2.0 / (e + 1.0)).copysign(self);
        // copysign keeps the sign of -0.0, which the polynomial's sum would lose.
        let v = if a < 0.625 { small.copysign(self) } else { large };
        if self.is_nan() {
            self
        } else {
            v
        }
    }
    fn asinh(self) -> f32 {
        f32::asinh(self)
    }
    fn acosh(self) -> f32 {
        f32::acosh(self)
    }
    fn atanh(self) -> f32 {
        f32::atanh(self)
    }
    #[inline(always)]
    fn floor(self) -> f32 {
        f32::floor(self)
    }
    #[inline(always)]
    fn ceil(self) -> f32 {
        f32::ceil(self)
    }
    #[inline(always)]
    fn trunc(self) -> f32 {
        f32::trunc(self)
    }
    #[inline(always)]
    fn round_even(self) -> f32 {
        f32::round_ties_even(self)
    }
    fn atan2(self, o: f32) -> f32 {
        f32::atan2(self, o)
    }
    fn hypot(self, o: f32) -> f32 {
        f32::hypot(self, o)
    }
    #[inline(always)]
    fn copysign(self, o: f32) -> f32 {
        f32::copysign(self, o)
    }
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn erfc(self) -> f32 {
        libm::erfcf(self)
    }
    fn lgamma(self) -> f32 {
        libm::lgammaf(self)
    }
    fn is_infinite(self) -> bool {
        f32::is_infinite(self)
    }
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    fn is_sign_negative(self) -> bool {
        f32::is_sign_negative(self)
    }
    fn max_value() -> f32 {
        f32::MAX
    }
    fn min_value() -> f32 {
        f32::MIN
    }
    fn infinity() -> f32 {
        f32::INFINITY
    }
    fn nan() -> f32 {
        f32::NAN
    }
    fn from_f64c(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn mul_add_fast(self, a: f32, b: f32) -> f32 {
        if cfg!(target_feature = "fma") {
            f32::mul_add(self, a, b)
        } else {
            self * a + b
        }
    }
}

impl Float for f64 {
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    fn exp2(self) -> f64 {
        f64::exp2(self)
    }
    fn exp_m1(self) -> f64 {
        f64::exp_m1(self)
    }
    fn ln(self) -> f64 {
        f64::ln(self)
    }
    fn log2(self) -> f64 {
        f64::log2(self)
    }
    fn log10(self) -> f64 {
        f64::log10(self)
    }
    fn ln_1p(self) -> f64 {
        f64::ln_1p(self)
    }
    #[inline(always)]
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    fn sin(self) -> f64 {
        f64::sin(self)
    }
    fn cos(self) -> f64 {
        f64::cos(self)
    }
    fn tan(self) -> f64 {
        f64::tan(self)
    }
    fn asin(self) -> f64 {
        f64::asin(self)
    }
    fn acos(self) -> f64 {
        f64::acos(self)
    }
    fn atan(self) -> f64 {
        f64::atan(self)
    }
    fn sinh(self) -> f64 {
        f64::sinh(self)
    }
    fn cosh(self) -> f64 {
        f64::cosh(self)
    }
    fn tanh(self) -> f64 {
        f64::tanh(self)
    }
    fn asinh(self) -> f64 {
        f64::asinh(self)
    }
    fn acosh(self) -> f64 {
        f64::acosh(self)
    }
    fn atanh(self) -> f64 {
        f64::atanh(self)
    }
    #[inline(always)]
    fn floor(self) -> f64 {
        f64::floor(self)
    }
    #[inline(always)]
    fn ceil(self) -> f64 {
        f64::ceil(self)
    }
    #[inline(always)]
    fn trunc(self) -> f64 {
        f64::trunc(self)
    }
    #[inline(always)]
    fn round_even(self) -> f64 {
        f64::round_ties_even(self)
    }
    fn atan2(self, o: f64) -> f64 {
        f64::atan2(self, o)
    }
    fn hypot(self, o: f64) -> f64 {
        f64::hypot(self, o)
    }
    #[inline(always)]
    fn copysign(self, o: f64) -> f64 {
        f64::copysign(self, o)
    }
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn erfc(self) -> f64 {
        libm::erfc(self)
    }
    fn lgamma(self) -> f64 {
        libm::lgamma(self)
    }
    fn is_infinite(self) -> bool {
        f64::is_infinite(self)
    }
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    fn is_sign_negative(self) -> bool {
        f64::is_sign_negative(self)
    }
    fn max_value() -> f64 {
        f64::MAX
    }
    fn min_value() -> f64 {
        f64::MIN
    }
    fn infinity() -> f64 {
        f64::INFINITY
    }
    fn nan() -> f64 {
        f64::NAN
    }
    fn from_f64c(v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn mul_add_fast(self, a: f64, b: f64) -> f64 {
        if cfg!(target_feature = "fma") {
            f64::mul_add(self, a, b)
        } else {
            self * a + b
        }
    }
}

/// `v` rounded to the element type `dt` (float16 or bfloat16; any other dtype leaves
/// it): for kernels that compute half types in `F` but round each step as CPU's
/// element-type arithmetic does (through float, as c10's half constructors take one).
#[inline(always)]
pub fn round_to<F: Float>(dt: DType, v: F) -> F {
    match dt {
        DType::F16 => F::from_f64c(half::f16::from_f32(v.to_f64() as f32).to_f64()),
        DType::BF16 => F::from_f64c(half::bf16::from_f32(v.to_f64() as f32).to_f64()),
        _ => v,
    }
}

/// `erfinv` in double: Giles' approximation as a start, then Newton on `erf`.
pub fn erfinv_f64(y: f64) -> f64 {
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y == 1.0 {
        return f64::INFINITY;
    }
    if y == -1.0 {
        return f64::NEG_INFINITY;
    }
    let mut w = -((1.0 - y) * (1.0 + y)).ln();
    let mut x = if w < 5.0 {
        w -= 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ] {
            p = c + p * w;
        }
        p * y
    } else {
        w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ] {
            p = c + p * w;
        }
        p * y
    };
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    for _ in 0..2 {
        let err = libm::erf(x) - y;
        x -= err / (two_over_sqrt_pi * (-x * x).exp());
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expf_matches_std_within_two_ulp() {
        let mut x = -103.0f32;
        while x < 88.7 {
            let (a, b) = (Float::exp(x), f32::exp(x));
            let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
            assert!(ulps <= 2 || (b < 1e-37 && (a - b).abs() < 1e-44), "exp({x}) = {a} vs {b}");
            x += 0.013;
        }
        assert_eq!(Float::exp(100.0f32), f32::INFINITY);
        assert_eq!(Float::exp(-200.0f32), 0.0);
        assert!(Float::exp(f32::NAN).is_nan());
        assert_eq!(Float::exp(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn tanhf_matches_std_within_three_ulp() {
        let mut x = -12.0f32;
        while x < 12.0 {
            for v in [x, x * 1e-3, x * 1e-6] {
                let (a, b) = (Float::tanh(v), f32::tanh(v));
                let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
                assert!(ulps <= 3, "tanh({v}) = {a} vs {b}");
            }
            x += 0.0037;
        }
        assert_eq!(Float::tanh(100.0f32), 1.0);
        assert_eq!(Float::tanh(f32::NEG_INFINITY), -1.0);
        assert!(Float::tanh(f32::NAN).is_nan());
        assert!(Float::tanh(-0.0f32).is_sign_negative());
    }

    #[test]
    fn integer_division_family_matches_python() {
        assert_eq!(Num::div_floor(-7i32, 2), Some(-4));
        assert_eq!((-7i32).div_trunc(2), Some(-3));
        assert_eq!((-7i32).remainder(2), Some(1));
        assert_eq!((7i32).remainder(-2), Some(-1));
        assert_eq!((-7i32).fmod(2), Some(-1));
        assert_eq!(Num::div_floor(5u8, 0), None);
        assert_eq!((-7.0f64).div_floor(2.0), Some(-4.0));
        assert_eq!((-7.5f32).remainder(2.0), Some(0.5));
        assert_eq!(Num::pow(2i64, 10), Some(1024));
        assert_eq!(Num::pow(2i64, -1), Some(0));
        assert_eq!(Num::pow(0i64, -1), Some(0));
        assert_eq!(Num::pow(-1i64, -3), Some(-1));
        assert_eq!(Num::pow(-1i8, -3), Some(-1));
    }

    #[test]
    fn erfinv_inverts_erf() {
        for y in [-0.999, -0.5, -1e-6, 0.0, 0.3, 0.9, 0.999_999] {
            let x = erfinv_f64(y);
            assert!((libm::erf(x) - y).abs() < 1e-15, "erfinv({y}) = {x}");
        }
        assert_eq!(erfinv_f64(1.0), f64::INFINITY);
        assert!(erfinv_f64(1.5).is_nan());
    }

    #[test]
    fn nan_aware_min_max() {
        assert!(1.0f32.max_nan(f32::NAN).is_nan());
        assert!(f32::NAN.min_nan(1.0).is_nan());
        assert_eq!(1.0f32.fmax(f32::NAN), 1.0);
        assert_eq!(f32::NAN.fmin(2.0), 2.0);
        assert_eq!(3i32.max_nan(5), 5);
    }
}
