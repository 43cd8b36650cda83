//! Element types. The discriminants are the ABI's dtype codes; they equal
//! `c10::ScalarType`'s values so the glue converts by cast (and checks that
//! with `static_assert`s).

use crate::error::{Error, Result};

/// An element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DType {
    U8 = 0,
    I8 = 1,
    I16 = 2,
    I32 = 3,
    I64 = 4,
    F16 = 5,
    F32 = 6,
    F64 = 7,
    C32 = 8,
    C64 = 9,
    C128 = 10,
    Bool = 11,
    BF16 = 15,
    F8E5M2 = 23,
    F8E4M3FN = 24,
    F8E5M2FNUZ = 25,
    F8E4M3FNUZ = 26,
    U16 = 27,
    U32 = 28,
    U64 = 29,
    F8E8M0FNU = 44,
}

impl DType {
    /// All dtypes the ABI defines.
    pub const ALL: [DType; 21] = [
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::C32,
        DType::C64,
        DType::C128,
        DType::Bool,
        DType::BF16,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F8E5M2,
        DType::F8E4M3FN,
        DType::F8E5M2FNUZ,
        DType::F8E4M3FNUZ,
        DType::F8E8M0FNU,
    ];

    /// The dtype with ABI code `code`.
    ///
    /// Errors: [`Error::UnknownDtype`].
    pub fn from_code(code: i32) -> Result<DType> {
        DType::ALL.into_iter().find(|d| *d as i32 == code).ok_or(Error::UnknownDtype { code })
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::F8E5M2 | DType::F8E4M3FN | DType::F8E5M2FNUZ | DType::F8E4M3FNUZ | DType::F8E8M0FNU => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 | DType::C32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// Whether the dtype is a real floating type (float16, bfloat16, float32, float64).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// `Ok` for a real floating dtype, else [`Error::UnsupportedDtype`] naming `op`:
    /// the check of the kernels that compute in float or double only.
    pub fn require_float(self, op: &'static str) -> Result<()> {
        if self.is_float() {
            Ok(())
        } else {
            Err(Error::UnsupportedDtype { op, dtype: self })
        }
    }

    /// The dtype a kernel computes in for this storage dtype (PyTorch's opmath
    /// type): float32 for float16 and bfloat16, the dtype itself otherwise.
    pub fn compute(self) -> DType {
        match self {
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        }
    }

    /// PyTorch's name for the dtype.
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C32 => "complex32",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::Bool => "bool",
            DType::BF16 => "bfloat16",
            DType::F8E5M2 => "float8_e5m2",
            DType::F8E4M3FN => "float8_e4m3fn",
            DType::F8E5M2FNUZ => "float8_e5m2fnuz",
            DType::F8E4M3FNUZ => "float8_e4m3fnuz",
            DType::F8E8M0FNU => "float8_e8m0fnu",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d as i32).unwrap(), d);
        }
        assert_eq!(DType::from_code(12), Err(Error::UnknownDtype { code: 12 }));
        assert_eq!((DType::U16.size(), DType::U64.name()), (2, "uint64"));
        assert_eq!(DType::C128.size(), 16);
        assert_eq!(DType::BF16.to_string(), "bfloat16");
    }

    #[test]
    fn float_to_int_like_cpu_pytorch_on_x86() {
        // Values checked against CPU PyTorch's tensor.to(dtype).
        assert_eq!(<i32 as Element>::from_f64(1e20), i32::MIN);
        assert_eq!(<i32 as Element>::from_f64(3e9), i32::MIN);
        assert_eq!(<i32 as Element>::from_f64(f64::NAN), i32::MIN);
        assert_eq!(<i32 as Element>::from_f64(-5.7), -5);
        assert_eq!(<i64 as Element>::from_f64(f64::INFINITY), i64::MIN);
        assert_eq!(<i64 as Element>::from_f64(3e9), 3_000_000_000);
        assert_eq!(<i16 as Element>::from_f64(1e20), 0);
        assert_eq!(<u8 as Element>::from_f64(300.0), 44);
        assert_eq!(<u8 as Element>::from_f64(-5.0), 251);
        assert_eq!(<u16 as Element>::from_f64(70000.0), 4464);
        assert_eq!(<u64 as Element>::from_f64(f64::INFINITY), 0);
        assert_eq!(<u64 as Element>::from_f64(1.8446744073709552e19), 0);
        assert_eq!(<u64 as Element>::from_f64(1.5e19), 15_000_000_000_000_000_000);
        assert_eq!(<u64 as Element>::from_f64(f64::NAN), 1 << 63);
        assert_eq!(<u64 as Element>::from_f64(-1.0), u64::MAX);
    }
}

/// A real element type a kernel can read and write. Conversions follow C++
/// `static_cast` semantics as PyTorch uses them (float -> int truncates;
/// nonzero -> true).
pub trait Element: Copy + Send + Sync + 'static {
    /// The dtype of this Rust type.
    const DTYPE: DType;
    /// Rounds/truncates a double into this type.
    fn from_f64(v: f64) -> Self;
    /// Converts an integer into this type (exact where representable).
    fn from_i64(v: i64) -> Self;
    /// Widens to double.
    fn to_f64(self) -> f64;
    /// Converts to int64 as `static_cast` would (floats truncate toward zero).
    fn to_i64(self) -> i64 {
        self.to_f64() as i64
    }
    /// True for the integral dtypes (not bool, not floating).
    const INTEGRAL: bool = false;
    /// True for complex64/complex128 (see `crate::ops::elementwise::complex`).
    const COMPLEX: bool = false;
    /// Widens to a (real, imaginary) pair of doubles; real types have imaginary part 0.
    #[inline(always)]
    fn to_c64(self) -> (f64, f64) {
        (self.to_f64(), 0.0)
    }
    /// Converts a (real, imaginary) pair: real types keep the real part, as
    /// c10's complex-to-real `static_cast` does.
    #[inline(always)]
    fn from_c64(re: f64, _im: f64) -> Self {
        Self::from_f64(re)
    }
    /// Converts into another element type with C++ `static_cast` semantics:
    /// integer to integer goes through int64 (wrapping), anything complex
    /// through a pair of doubles, everything else through double.
    #[inline(always)]
    fn cast<T: Element>(self) -> T {
        if Self::INTEGRAL && T::INTEGRAL {
            T::from_i64(self.to_i64())
        } else if Self::COMPLEX || T::COMPLEX {
            let (re, im) = self.to_c64();
            T::from_c64(re, im)
        } else {
            T::from_f64(self.to_f64())
        }
    }
    /// `self * s` computed as PyTorch's CPU kernels do for a tensor-scalar
    /// product: in float for float32/float16/bfloat16 (the scalar rounded to
    /// float), in double for float64, through double for integers.
    fn mul_scalar(self, s: f64) -> Self {
        Self::from_f64(self.to_f64() * s)
    }
}

/// Float -> int32 as CPU PyTorch converts on x86 (`cvttsd2si`): truncation, and
/// the "integer indefinite" value `i32::MIN` for NaN and anything out of range
/// (Rust's `as` would saturate instead).
#[inline]
fn f64_to_i32_x86(v: f64) -> i32 {
    if v > -2147483649.0 && v < 2147483648.0 {
        v as i32
    } else {
        i32::MIN
    }
}

/// Float -> int64 as [`f64_to_i32_x86`], with `i64::MIN` as the indefinite value.
#[inline]
fn f64_to_i64_x86(v: f64) -> i64 {
    if (-9223372036854775808.0..9223372036854775808.0).contains(&v) {
        v as i64
    } else {
        i64::MIN
    }
}

/// Float -> uint64 as CPU PyTorch converts on x86: below 2^63 (and NaN) the int64
/// conversion; from 2^63 up, the int64 conversion of `v - 2^63` with the top bit
/// flipped, so values of 2^64 and more (and infinity) give 0 (compilers' unsigned
/// conversion sequence; measured: CPU gives 0 there, not the int64 indefinite value).
#[inline]
fn f64_to_u64_x86(v: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if v >= TWO_63 {
        (f64_to_i64_x86(v - TWO_63) as u64) ^ (1 << 63)
    } else {
        f64_to_i64_x86(v) as u64
    }
}

// Types narrower than 64 bits convert through int32 and keep its low bits, as
// CPU does (300.0 -> uint8 44, 1e20 -> int16 0); 64-bit types through int64.
macro_rules! int_element {
    ($($t:ty => $d:ident via $via:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline] fn from_f64(v: f64) -> Self { $via(v) as $t }
            #[inline] fn from_i64(v: i64) -> Self { v as $t }
            #[inline] fn to_f64(self) -> f64 { self as f64 }
            #[inline] fn to_i64(self) -> i64 { self as i64 }
            const INTEGRAL: bool = true;
        }
    )*};
}
int_element!(u8 => U8 via f64_to_i32_x86, i8 => I8 via f64_to_i32_x86, i16 => I16 via f64_to_i32_x86, i32 => I32 via f64_to_i32_x86,
    i64 => I64 via f64_to_i64_x86, u16 => U16 via f64_to_i32_x86, u32 => U32 via f64_to_i64_x86, u64 => U64 via f64_to_u64_x86);

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn mul_scalar(self, s: f64) -> Self {
        self * s as f32
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v as f32
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v as f64
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
}

/// float16 and bfloat16: stored narrow, computed in float (PyTorch's opmath type).
///
/// A double or an integer becomes a half type as in C++ `static_cast<c10::Half>`:
/// through float (c10's constructors take a float), one rounding to float, then
/// one to the half type. This also avoids the `half` crate's direct double ->
/// bfloat16 rounding, which truncated float32 subnormals such as 0x002a8001
/// instead of rounding them up.
macro_rules! half_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn mul_scalar(self, s: f64) -> Self {
                <$t>::from_f32(self.to_f32() * s as f32)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f32(v as f32)
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
            #[inline]
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
        }
    )*};
}
half_element!(half::f16 => F16, half::bf16 => BF16);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    #[inline]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    /// A complex value is true when either part is nonzero.
    #[inline]
    fn from_c64(re: f64, im: f64) -> Self {
        re != 0.0 || im != 0.0
    }
}

/// Runs `$body` with `$T` bound to the [`Element`] type of `$dtype` (real dtypes only).
/// Any other dtype returns [`Error::UnsupportedDtype`] naming `$op`.
#[macro_export]
macro_rules! with_real_dtype {
    ($dtype:expr, $op:expr, |$T:ident| $body:expr) => {
        match $dtype {
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
            d => return Err($crate::Error::UnsupportedDtype { op: $op, dtype: d }),
        }
    };
}

/// Runs `$body` with `$T` the storage type and `$C` the compute (opmath) type of
/// the floating `$dtype`: float16 and bfloat16 compute in float32, as PyTorch does.
/// Any other dtype returns [`Error::UnsupportedDtype`] naming `$op`.
#[macro_export]
macro_rules! with_float_dtype {
    ($dtype:expr, $op:expr, |$T:ident, $C:ident| $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                type $C = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                type $C = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                type $C = f32;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                type $C = f32;
                $body
            }
            d => return Err($crate::Error::UnsupportedDtype { op: $op, dtype: d }),
        }
    };
}

/// Runs `$body` with `$T` bound to the [`Element`] type of `$dtype`: the real
/// dtypes of [`with_real_dtype!`], the complex types and the float8 types (these
/// last and complex32 only convert: see [`crate::float8`]). Every ABI dtype has one.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $op:expr, |$T:ident| $body:expr) => {
        match $dtype {
            $crate::DType::C64 => {
                type $T = $crate::ops::elementwise::complex::Complex<f32>;
                $body
            }
            $crate::DType::C128 => {
                type $T = $crate::ops::elementwise::complex::Complex<f64>;
                $body
            }
            $crate::DType::C32 => {
                type $T = $crate::ops::elementwise::complex::Complex<$crate::half::f16>;
                $body
            }
            $crate::DType::F8E5M2 => {
                type $T = $crate::float8::Float8E5M2;
                $body
            }
            $crate::DType::F8E4M3FN => {
                type $T = $crate::float8::Float8E4M3Fn;
                $body
            }
            $crate::DType::F8E5M2FNUZ => {
                type $T = $crate::float8::Float8E5M2Fnuz;
                $body
            }
            $crate::DType::F8E4M3FNUZ => {
                type $T = $crate::float8::Float8E4M3Fnuz;
                $body
            }
            $crate::DType::F8E8M0FNU => {
                type $T = $crate::float8::Float8E8M0Fnu;
                $body
            }
            d => $crate::with_real_dtype!(d, $op, |$T| $body),
        }
    };
}
