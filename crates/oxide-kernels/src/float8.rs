//! The 8-bit floating types (`torch.float8_*`) and complex32 as kernel
//! elements. Kernels do not compute in them: PyTorch's CPU kernels do not
//! either. They exist so that converting copies (`tensor.to(dtype)`) run on the
//! device, bit for bit as c10 converts.
//!
//! Conversion rules, as c10 implements them in torch 2.15 (each checked against
//! CPU PyTorch over every code and the rounding boundaries, in the tests below
//! and in `tests/python/test_float8.py`):
//! - every conversion goes through float32, as c10's constructors take a
//!   `float` (a double is rounded to float first);
//! - round to nearest, ties to even, with subnormals;
//! - `e4m3fn`: no infinity; a value beyond the largest finite one, infinity
//!   included, saturates to +-448; NaN is 0x7f with the sign;
//! - `e5m2`: IEEE-like; overflow becomes infinity;
//! - `e4m3fnuz`, `e5m2fnuz`: no infinity and no negative zero; overflow,
//!   infinity and NaN all become the single NaN 0x80;
//! - `e8m0fnu`: a power of two 2^(code - 127), no sign (the sign is dropped),
//!   no zero (0 becomes 2^-127); infinity and NaN become NaN (0xff); the
//!   mantissa rounds to nearest, ties to even on the exponent's implied bit.

use crate::dtype::{DType, Element};
use crate::ops::elementwise::complex::Complex;

/// The layout of a sign/exponent/mantissa float8 format.
struct Format {
    mantissa_bits: u32,
    bias: i32,
    /// Largest finite magnitude code.
    max_code: u8,
    /// Negative zero and infinity absent; 0x80 is the only NaN.
    fnuz: bool,
    /// What a finite overflow or an infinity becomes (magnitude code, before the sign).
    overflow_code: u8,
    /// NaN code (before the sign; fnuz formats ignore the sign).
    nan_code: u8,
}

const E4M3FN: Format =
    Format { mantissa_bits: 3, bias: 7, max_code: 0x7e, fnuz: false, overflow_code: 0x7e, nan_code: 0x7f };
const E5M2: Format =
    Format { mantissa_bits: 2, bias: 15, max_code: 0x7b, fnuz: false, overflow_code: 0x7c, nan_code: 0x7f };
const E4M3FNUZ: Format =
    Format { mantissa_bits: 3, bias: 8, max_code: 0x7f, fnuz: true, overflow_code: 0x80, nan_code: 0x80 };
const E5M2FNUZ: Format =
    Format { mantissa_bits: 2, bias: 16, max_code: 0x7f, fnuz: true, overflow_code: 0x80, nan_code: 0x80 };

impl Format {
    /// The code of float32 `x`.
    fn encode(&self, x: f32) -> u8 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        if x.is_nan() {
            return if self.fnuz { 0x80 } else { self.nan_code | sign };
        }
        let a = f64::from(x.abs());
        let magnitude = if x.is_infinite() {
            self.overflow_code
        } else if a == 0.0 {
            0
        } else {
            // The quantum at `a`: 2^(e - M) in the normal range, 2^(1 - bias - M) below it.
            let m = self.mantissa_bits as i32;
            let min_exp = 1 - self.bias;
            let e = (a.log2().floor() as i32).max(min_exp);
            // log2 may be off by one at exact powers of two: fix e so that 2^e <= a < 2^(e+1).
            let e = if e > min_exp && 2f64.powi(e) > a {
                e - 1
            } else if 2f64.powi(e + 1) <= a {
                e + 1
            } else {
                e
            };
            let quantum = 2f64.powi(e - m);
            // a / quantum is exact (a power-of-two scaling of a float32 value).
            let steps = (a / quantum).round_ties_even() as u64;
            // Codes are continuous across the subnormal/normal boundary and across
            // exponents: code = (exponent field << M) + mantissa.
            let code = if e == min_exp && steps < (1 << m) {
                steps
            } else {
                (((e + self.bias) as u64) << m) + steps - (1 << m)
            };
            if code > u64::from(self.max_code) {
                self.overflow_code
            } else {
                code as u8
            }
        };
        if self.fnuz {
            // No negative zero; the overflow code is NaN, which has no sign either.
            if magnitude == 0 || magnitude == 0x80 {
                magnitude
            } else {
                magnitude | sign
            }
        } else {
            magnitude | sign
        }
    }

    /// The float32 value of `code`.
    fn decode(&self, code: u8) -> f32 {
        if self.fnuz && code == 0x80 {
            return f32::NAN;
        }
        let negative = code & 0x80 != 0;
        let magnitude = code & 0x7f;
        let m = self.mantissa_bits;
        let exp_field = i32::from(magnitude >> m);
        let mant = u32::from(magnitude) & ((1 << m) - 1);
        let value = if !self.fnuz && magnitude > self.max_code {
            // e4m3fn: 0x7f is NaN; e5m2: exponent all ones, infinity or NaN.
            if mant == 0 && magnitude == self.overflow_code {
                f32::INFINITY
            } else {
                f32::NAN
            }
        } else if exp_field == 0 {
            mant as f32 * 2f32.powi(1 - self.bias - m as i32)
        } else {
            (1.0 + mant as f32 / (1u32 << m) as f32) * 2f32.powi(exp_field - self.bias)
        };
        if negative {
            -value
        } else {
            value
        }
    }
}

/// e8m0fnu from float32: the exponent field, rounded up when the mantissa is
/// above one half, or exactly one half with an implied bit of 1 (a normal number).
fn e8m0_encode(x: f32) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xff;
    if exponent == 0xff {
        return 0xff;
    }
    let guard = bits & 0x40_0000 != 0;
    let rest = bits & 0x3f_ffff != 0;
    let round_up = guard && (rest || exponent > 0);
    (exponent + u32::from(round_up)) as u8
}

fn e8m0_decode(code: u8) -> f32 {
    if code == 0xff {
        f32::NAN
    } else if code == 0 {
        // 2^-127 is a float32 subnormal: build it from its bits.
        f32::from_bits(0x0040_0000)
    } else {
        f32::from_bits(u32::from(code) << 23)
    }
}

macro_rules! float8_element {
    ($($name:ident => $d:ident, $enc:expr, $dec:expr, nan_to_int_is_zero: $nan_zero:expr;)*) => {$(
        #[doc = concat!("One element of `torch.", stringify!($d), "` (see the module's rules).")]
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name(pub u8);

        impl $name {
            /// The element nearest to float32 `x`, as c10 rounds.
            #[inline]
            pub fn from_f32(x: f32) -> Self {
                $name($enc(x))
            }
            /// The float32 value.
            #[inline]
            pub fn to_f32(self) -> f32 {
                $dec(self.0)
            }
        }

        impl Element for $name {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn from_f64(v: f64) -> Self {
                Self::from_f32(v as f32)
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                Self::from_f32(v as f32)
            }
            #[inline]
            fn to_f64(self) -> f64 {
                f64::from(self.to_f32())
            }
            /// As the default, except NaN to an integer type for the formats whose
            /// c10 NaN is a constant (fnuz, e8m0fnu): converting that constant is
            /// undefined in C++, and the CPU build folds it to 0 (measured: CPU
            /// PyTorch gives 0 there, and the x86 "integer indefinite" for e4m3fn's NaN).
            #[inline(always)]
            fn cast<T: Element>(self) -> T {
                if T::INTEGRAL && $nan_zero && self.to_f32().is_nan() {
                    T::from_i64(0)
                } else if T::COMPLEX {
                    T::from_c64(self.to_f64(), 0.0)
                } else {
                    T::from_f64(self.to_f64())
                }
            }
        }
    )*};
}

float8_element! {
    Float8E4M3Fn => F8E4M3FN, |x| E4M3FN.encode(x), |c| E4M3FN.decode(c), nan_to_int_is_zero: false;
    Float8E5M2 => F8E5M2, |x| E5M2.encode(x), |c| E5M2.decode(c), nan_to_int_is_zero: false;
    Float8E4M3Fnuz => F8E4M3FNUZ, |x| E4M3FNUZ.encode(x), |c| E4M3FNUZ.decode(c), nan_to_int_is_zero: true;
    Float8E5M2Fnuz => F8E5M2FNUZ, |x| E5M2FNUZ.encode(x), |c| E5M2FNUZ.decode(c), nan_to_int_is_zero: true;
    Float8E8M0Fnu => F8E8M0FNU, e8m0_encode, e8m0_decode, nan_to_int_is_zero: true;
}

/// complex32: a pair of float16, as c10::complex<c10::Half>. Conversions go
/// through a pair of doubles like the other complex types; each part rounds to
/// float16 as a float16 conversion does.
impl Element for Complex<half::f16> {
    const DTYPE: DType = DType::C32;
    const COMPLEX: bool = true;
    #[inline]
    fn from_f64(v: f64) -> Self {
        Complex::new(<half::f16 as Element>::from_f64(v), half::f16::ZERO)
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        Complex::new(<half::f16 as Element>::from_i64(v), half::f16::ZERO)
    }
    /// The real part, as PyTorch's complex-to-real conversion.
    #[inline]
    fn to_f64(self) -> f64 {
        self.re.to_f64()
    }
    #[inline]
    fn to_c64(self) -> (f64, f64) {
        (self.re.to_f64(), self.im.to_f64())
    }
    #[inline]
    fn from_c64(re: f64, im: f64) -> Self {
        Complex::new(<half::f16 as Element>::from_f64(re), <half::f16 as Element>::from_f64(im))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips() {
        // Decoding then encoding gives the code back for every non-NaN code.
        for c in 0..=255u8 {
            for (enc, dec) in [
                (&E4M3FN as &Format, &E4M3FN as &Format),
                (&E5M2, &E5M2),
                (&E4M3FNUZ, &E4M3FNUZ),
                (&E5M2FNUZ, &E5M2FNUZ),
            ] {
                let v = dec.decode(c);
                if v.is_nan() || (enc.fnuz && c == 0x80) {
                    continue;
                }
                // e4m3fn saturates infinity; e5m2's infinity codes round-trip.
                assert_eq!(enc.encode(v), c, "code {c:#x} value {v}");
            }
            if c != 0xff {
                assert_eq!(e8m0_encode(e8m0_decode(c)), c);
            }
        }
    }

    #[test]
    fn boundaries_like_cpu_pytorch() {
        // Values checked against CPU PyTorch 2.15's tensor.to(dtype).view(torch.uint8).
        assert_eq!(E4M3FN.encode(448.0), 126);
        assert_eq!(E4M3FN.encode(479.36), 126);
        assert_eq!(E4M3FN.encode(1e30), 126);
        assert_eq!(E4M3FN.encode(f32::INFINITY), 126);
        assert_eq!(E4M3FN.encode(f32::NEG_INFINITY), 254);
        assert_eq!(E4M3FN.encode(f32::NAN), 127);
        assert_eq!(E4M3FN.encode(-0.0), 128);
        assert_eq!(E4M3FN.encode(0.000_976_562_5), 0);
        assert_eq!(E4M3FN.encode(0.000_996_093_7), 1);
        assert_eq!(E5M2.encode(61_358.08), 123);
        assert_eq!(E5M2.encode(68_812.8), 124);
        assert_eq!(E5M2.encode(f32::NEG_INFINITY), 252);
        assert_eq!(E4M3FNUZ.encode(247.2), 127);
        assert_eq!(E4M3FNUZ.encode(254.976), 128);
        assert_eq!(E4M3FNUZ.encode(-0.0), 0);
        assert_eq!(E4M3FNUZ.encode(0.000_498_046_87), 1);
        assert_eq!(E5M2FNUZ.encode(61_358.08), 127);
        assert_eq!(E5M2FNUZ.encode(68_812.8), 128);
        assert_eq!(E5M2FNUZ.encode(f32::NAN), 128);
        assert_eq!([1.0f32, 1.5, 1.4999, 1.75, 3.0, 0.75, -2.0].map(e8m0_encode), [127, 128, 127, 128, 129, 127, 128]);
        assert_eq!([0.0f32, 1e-45, 2f32.powi(-126), 1.7632415e-38, 3.4e38].map(e8m0_encode), [0, 0, 1, 2, 255]);
        assert_eq!(e8m0_encode(f32::INFINITY), 255);
        assert_eq!(e8m0_decode(0), 2f64.powi(-127) as f32);
        // NaN to int64 (CPU: 0 for the constant NaNs, the x86 indefinite value for e4m3fn's).
        assert_eq!(Float8E4M3Fnuz(0x80).cast::<i64>(), 0);
        assert_eq!(Float8E8M0Fnu(0xff).cast::<i32>(), 0);
        assert_eq!(Float8E4M3Fn(0x7f).cast::<i64>(), i64::MIN);
        assert_eq!(Float8E5M2(0x3c).cast::<i64>(), 1);
    }
}
