//! complex64 / complex128: the element type, its arithmetic and elementary
//! functions, the complex pointwise families (`ComplexUnary`, `ComplexBinary`,
//! `ComplexCompare`, `ComplexTernary`), the converting [`cast`] between any two
//! dtypes, and the complex reductions (sum, mean, prod, vector norms).
//!
//! [`Complex<T>`] has c10::complex's layout (`#[repr(C)]`, real part first),
//! so a complex64 tensor's memory is read as `Complex<f32>` in place. The
//! conversion rules are PyTorch's: a real value becomes `(v, 0)`, a complex
//! value becomes a real one by taking its real part, and bool by "either part
//! nonzero" ([`Element::from_c64`]).
//!
//! The families are keyed by the same op names as the real ones in
//! [`crate::ops::elementwise::pointwise`]: a pointwise call whose compute dtype is complex is
//! routed here by name ([`run_pointwise`]); an op without a complex entry is
//! an [`Error::UnsupportedDtype`] (the glue keeps those on its counted CPU path).
//!
//! Formulas are the textbook ones (Abramowitz & Stegun 4.3.55-4.3.58 and
//! 4.5.49-4.5.52 for the circular and hyperbolic functions, the principal
//! branches of Kahan, "Branch Cuts for Complex Elementary Functions", 1987,
//! for log/sqrt/asin/acos/atan), division is Smith's algorithm.

use crate::dtype::{DType, Element};
use crate::engine::iter::{in_place_chunks, map, map_in_place, TensorIter};
use crate::engine::math::{Float, Num};
use crate::error::{Error, Result};
use crate::ops::elementwise::pointwise::{family, Ctx, PointwiseOp};
use crate::ops::reduce::reduce::{run_reducer, ReduceOp, Reducer};
use crate::ops::reduce::reducers::Norm;

/// A complex number with c10::complex's memory layout: real part, then imaginary part.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Complex<T> {
    pub re: T,
    pub im: T,
}

impl<T> Complex<T> {
    pub const fn new(re: T, im: T) -> Complex<T> {
        Complex { re, im }
    }
}

macro_rules! complex_element {
    ($($t:ty => $d:ident, $m:ident),*) => {$(
        impl Element for Complex<$t> {
            const DTYPE: DType = DType::$d;
            const COMPLEX: bool = true;
            #[inline]
            fn from_f64(v: f64) -> Self {
                Complex::new(v as $t, 0.0)
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                Complex::new(v as $t, 0.0)
            }
            /// The real part, as PyTorch's complex-to-real conversion.
            #[inline]
            fn to_f64(self) -> f64 {
                self.re as f64
            }
            #[inline]
            fn to_c64(self) -> (f64, f64) {
                (self.re as f64, self.im as f64)
            }
            #[inline]
            fn from_c64(re: f64, im: f64) -> Self {
                Complex::new(re as $t, im as $t)
            }
            #[inline]
            fn mul_scalar(self, s: f64) -> Self {
                Complex::new(self.re * s as $t, self.im * s as $t)
            }
        }
        impl Cplx for Complex<$t> {
            type R = $t;
            #[inline(always)]
            fn new(re: $t, im: $t) -> Self {
                Complex::new(re, im)
            }
            #[inline(always)]
            fn re(self) -> $t {
                self.re
            }
            #[inline(always)]
            fn im(self) -> $t {
                self.im
            }
            fn c99(self, f: C99) -> Self {
                use c99::$m as lib;
                // SAFETY: pure C library functions of one complex value; `Complex<$t>`
                // is `#[repr(C)]` {re, im}, which the x86-64 and AArch64 C ABIs pass
                // and return exactly as `$t _Complex`.
                unsafe {
                    match f {
                        C99::Exp => lib::exp(self),
                        C99::Sin => lib::sin(self),
                        C99::Cos => lib::cos(self),
                        C99::Tan => lib::tan(self),
                        C99::Sinh => lib::sinh(self),
                        C99::Cosh => lib::cosh(self),
                        C99::Tanh => lib::tanh(self),
                        C99::Asin => lib::asin(self),
                        C99::Acos => lib::acos(self),
                        C99::Atan => lib::atan(self),
                        C99::Asinh => lib::asinh(self),
                        C99::Acosh => lib::acosh(self),
                        C99::Atanh => lib::atanh(self),
                    }
                }
            }
            fn c99_pow(self, w: Self) -> Self {
                // SAFETY: a pure C library function of two complex values, passed as in `c99`.
                unsafe { c99_pow::$m(self, w) }
            }
        }
    )*};
}
complex_element!(f32 => C64, f32, f64 => C128, f64);

/// The complex functions taken from the C library for non-finite inputs ([`Cplx::c99`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum C99 {
    Exp,
    Sin,
    Cos,
    Tan,
    Sinh,
    Cosh,
    Tanh,
    Asin,
    Acos,
    Atan,
    Asinh,
    Acosh,
    Atanh,
}

/// The C library's (libm's) complex functions, by element type: one module per
/// type, each function named as its [`C99`] variant and linked to libm's symbol.
macro_rules! libm_complex {
    ($($m:ident: $($f:ident => $sym:literal),*;)*) => {
        mod c99 {$(
            pub mod $m {
                use super::super::Complex;
                extern "C" {$(
                    #[link_name = $sym]
                    pub fn $f(z: Complex<$m>) -> Complex<$m>;
                )*}
            }
        )*}
    };
}
libm_complex! {
    f32: exp => "cexpf", sin => "csinf", cos => "ccosf", tan => "ctanf", sinh => "csinhf", cosh => "ccoshf",
         tanh => "ctanhf", asin => "casinf", acos => "cacosf", atan => "catanf", asinh => "casinhf",
         acosh => "cacoshf", atanh => "catanhf";
    f64: exp => "cexp", sin => "csin", cos => "ccos", tan => "ctan", sinh => "csinh", cosh => "ccosh",
         tanh => "ctanh", asin => "casin", acos => "cacos", atan => "catan", asinh => "casinh",
         acosh => "cacosh", atanh => "catanh";
}

/// The C library's `cpow` by element type: CPU PyTorch's complex `pow` is
/// `std::pow`, which libstdc++ hands to it, so its results (zero and non-finite
/// bases and exponents included) are CPU's exactly.
mod c99_pow {
    use super::Complex;
    extern "C" {
        #[link_name = "cpowf"]
        pub fn f32(z: Complex<f32>, w: Complex<f32>) -> Complex<f32>;
        #[link_name = "cpow"]
        pub fn f64(z: Complex<f64>, w: Complex<f64>) -> Complex<f64>;
    }
}

impl<T: Float> std::ops::Add for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Complex::new(self.re + o.re, self.im + o.im)
    }
}
impl<T: Float> std::ops::Sub for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Complex::new(self.re - o.re, self.im - o.im)
    }
}
impl<T: Float> std::ops::Mul for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Complex::new(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)
    }
}
impl<T: Float> std::ops::Div for Complex<T> {
    type Output = Self;
    /// Smith's algorithm (R. L. Smith, "Algorithm 116: Complex division",
    /// CACM 5(8), 1962): divide through by the larger of |c| and |d| so that
    /// `c^2 + d^2` is never formed and cannot overflow or underflow.
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        let (a, b, c, d) = (self.re, self.im, o.re, o.im);
        if c.abs() >= d.abs() {
            if c == T::ZERO && d == T::ZERO {
                // x / 0: each part divided by zero (inf or NaN), as C++'s complex division gives.
                return Complex::new(a / c.abs(), b / d.abs());
            }
            let r = d / c;
            let den = c + d * r;
            Complex::new((a + b * r) / den, (b - a * r) / den)
        } else {
            let r = c / d;
            let den = c * r + d;
            Complex::new((a * r + b) / den, (b * r - a) / den)
        }
    }
}
impl<T: Float> std::ops::Neg for Complex<T> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Complex::new(-self.re, -self.im)
    }
}

/// A complex compute type (complex64 or complex128) and its functions,
/// written once over the real part type `R`.
pub trait Cplx:
    Element
    + PartialEq
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// The real part's type.
    type R: Float;
    fn new(re: Self::R, im: Self::R) -> Self;
    fn re(self) -> Self::R;
    fn im(self) -> Self::R;

    #[inline(always)]
    fn real(v: f64) -> Self {
        Self::new(Self::R::from_f64c(v), Self::R::ZERO)
    }
    #[inline(always)]
    fn zero() -> Self {
        Self::real(0.0)
    }
    #[inline(always)]
    fn one() -> Self {
        Self::real(1.0)
    }
    #[inline(always)]
    fn conj(self) -> Self {
        Self::new(self.re(), -self.im())
    }
    /// `i * self`.
    #[inline(always)]
    fn mul_i(self) -> Self {
        Self::new(-self.im(), self.re())
    }
    /// |z| without intermediate overflow (hypot).
    #[inline(always)]
    fn norm(self) -> Self::R {
        self.re().hypot(self.im())
    }
    /// The principal argument in (-pi, pi].
    #[inline(always)]
    fn arg(self) -> Self::R {
        self.im().atan2(self.re())
    }
    /// The C library's complex function `f` (glibc's, which CPU PyTorch's
    /// `std::exp(std::complex)` and friends call): the kernels use it for
    /// non-finite inputs, where C99 Annex G fixes each special value's result and
    /// the textbook formulas would produce NaN from `inf * 0` or `inf - inf`.
    fn c99(self, f: C99) -> Self;
    /// The C library's `cpow(self, w)`.
    fn c99_pow(self, w: Self) -> Self;
    /// Both parts finite.
    #[inline(always)]
    fn finite(self) -> bool {
        self.re().is_finite() && self.im().is_finite()
    }
    #[inline(always)]
    fn is_nan_c(self) -> bool {
        self.re().is_nan() || self.im().is_nan()
    }
    #[inline(always)]
    fn exp(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Exp);
        }
        let e = self.re().exp();
        let (s, c) = (self.im().sin(), self.im().cos());
        if self.im() == Self::R::ZERO {
            // exp of a real number stays real (keeps exp(inf + 0i) = inf + 0i).
            return Self::new(e, self.im());
        }
        Self::new(e * c, e * s)
    }
    /// Principal logarithm: ln|z| + i arg z.
    #[inline(always)]
    fn ln(self) -> Self {
        Self::new(self.norm().ln(), self.arg())
    }
    /// Principal square root, computed without cancellation: with
    /// `t = sqrt((|a| + |z|) / 2)` the root is `(t, b / 2t)` for `a >= 0`
    /// and `(|b| / 2t, copysign(t, b))` otherwise.
    #[inline(always)]
    fn sqrt(self) -> Self {
        let (a, b) = (self.re(), self.im());
        let zero = Self::R::ZERO;
        let two = Self::R::from_f64c(2.0);
        if a == zero && b == zero {
            return Self::new(zero, b);
        }
        if b.is_infinite() {
            return Self::new(Self::R::infinity(), b);
        }
        if a.is_nan() {
            return Self::new(a, a);
        }
        if a.is_infinite() {
            return if a > zero {
                Self::new(a, if b.is_nan() { b } else { zero.copysign(b) })
            } else {
                Self::new(if b.is_nan() { b.abs() } else { zero }, a.abs().copysign(b))
            };
        }
        // Scale down huge inputs so that |a| + |z| cannot overflow.
        let big = Self::R::max_value() / Self::R::from_f64c(4.0);
        let scale = a.abs() > big || b.abs() > big;
        let (a2, b2) = if scale { (a / Self::R::from_f64c(4.0), b / Self::R::from_f64c(4.0)) } else { (a, b) };
        let t = ((a2.abs() + a2.hypot(b2)) / two).sqrt();
        let (re, im) = if a2 >= zero { (t, b2 / (two * t)) } else { (b2.abs() / (two * t), t.copysign(b2)) };
        if scale {
            Self::new(re * two, im * two)
        } else {
            Self::new(re, im)
        }
    }
    #[inline(always)]
    fn sin(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Sin);
        }
        let (a, b) = (self.re(), self.im());
        Self::new(a.sin() * b.cosh(), a.cos() * b.sinh())
    }
    #[inline(always)]
    fn cos(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Cos);
        }
        let (a, b) = (self.re(), self.im());
        Self::new(a.cos() * b.cosh(), -(a.sin() * b.sinh()))
    }
    #[inline(always)]
    fn sinh(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Sinh);
        }
        let (a, b) = (self.re(), self.im());
        Self::new(a.sinh() * b.cos(), a.cosh() * b.sin())
    }
    #[inline(always)]
    fn cosh(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Cosh);
        }
        let (a, b) = (self.re(), self.im());
        Self::new(a.cosh() * b.cos(), a.sinh() * b.sin())
    }
    /// tanh by Kahan's formula (Kahan 1987, "Branch Cuts ...", procedure
    /// CTANH): with `t = tan b`, `s = sinh a`, `r = sqrt(1 + s^2)`,
    /// `tanh z = (r s (1 + t^2) + i t) / (1 + s^2 (1 + t^2))`; for large |a|
    /// the real part is ±1 and the imaginary part `4 sin b cos b e^{-2|a|}`.
    #[inline(always)]
    fn tanh(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Tanh);
        }
        let (a, b) = (self.re(), self.im());
        let one = Self::R::ONE;
        if a.abs() > Self::R::from_f64c(22.0) {
            let e = (-(a.abs() + a.abs())).exp();
            return Self::new(one.copysign(a), Self::R::from_f64c(4.0) * b.sin() * b.cos() * e);
        }
        let t = b.tan();
        let beta = one + t * t;
        let s = a.sinh();
        let r = (one + s * s).sqrt();
        let den = one + beta * s * s;
        Self::new(beta * r * s / den, t / den)
    }
    /// tan z = -i tanh(i z).
    #[inline(always)]
    fn tan(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Tan);
        }
        let w = self.mul_i().tanh();
        Self::new(w.im(), -w.re())
    }
    /// 1 + z, keeping the sign of a zero imaginary part (a complex addition of
    /// 1 + 0i would turn -0 into +0 and put the branch cuts on the wrong side).
    #[inline(always)]
    fn one_plus(self) -> Self {
        Self::new(Self::R::ONE + self.re(), self.im())
    }
    /// 1 - z, the imaginary part negated exactly (see [`Cplx::one_plus`]).
    #[inline(always)]
    fn one_minus(self) -> Self {
        Self::new(Self::R::ONE - self.re(), -self.im())
    }
    /// Kahan's (1987) cancellation-free form of `-i ln(i z + sqrt(1 - z^2))`:
    /// with `p = sqrt(1 - z)`, `q = sqrt(1 + z)`,
    /// `asin z = atan2(Re z, Re(p q)) + i asinh(Im(conj(p) q))`.
    #[inline(always)]
    fn asin(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Asin);
        }
        let p = self.one_minus().sqrt();
        let q = self.one_plus().sqrt();
        let re = self.re().atan2(p.re() * q.re() - p.im() * q.im());
        let im = (p.re() * q.im() - p.im() * q.re()).asinh();
        Self::new(re, im)
    }
    /// Kahan's (1987) form: with `p = sqrt(1 - z)`, `q = sqrt(1 + z)`,
    /// `acos z = 2 atan2(Re p, Re q) + i asinh(Im(conj(q) p))`.
    #[inline(always)]
    fn acos(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Acos);
        }
        let p = self.one_minus().sqrt();
        let q = self.one_plus().sqrt();
        let re = Self::R::from_f64c(2.0) * p.re().atan2(q.re());
        let im = (q.re() * p.im() - q.im() * p.re()).asinh();
        Self::new(re, im)
    }
    /// atan z = (i/2) (ln(1 - i z) - ln(1 + i z)).
    #[inline(always)]
    fn atan(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Atan);
        }
        let iz = self.mul_i();
        let d = iz.one_minus().ln() - iz.one_plus().ln();
        let half = Self::R::from_f64c(0.5);
        Self::new(-d.im() * half, d.re() * half)
    }
    /// asinh z = -i asin(i z) (the identity C99 Annex G states for casinh), so it
    /// inherits Kahan's cancellation-free asin.
    #[inline(always)]
    fn asinh(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Asinh);
        }
        let w = self.mul_i().asin();
        Self::new(w.im(), -w.re())
    }
    /// atanh z = -i atan(i z).
    #[inline(always)]
    fn atanh(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Atanh);
        }
        let w = self.mul_i().atan();
        Self::new(w.im(), -w.re())
    }
    /// Kahan's (1987) procedure CACOSH: with `p = sqrt(z - 1)`, `q = sqrt(z + 1)`,
    /// `acosh z = asinh(Re(conj(p) q)) + 2i atan2(Im p, Re q)`; free of
    /// cancellation and on the principal branch (real part >= 0).
    #[inline(always)]
    fn acosh(self) -> Self {
        if !self.finite() {
            return self.c99(C99::Acosh);
        }
        let p = Self::new(self.re() - Self::R::ONE, self.im()).sqrt();
        let q = self.one_plus().sqrt();
        let re = (p.re() * q.re() + p.im() * q.im()).asinh();
        Self::new(re, Self::R::from_f64c(2.0) * p.im().atan2(q.re()))
    }
    /// e^z - 1 without cancellation near 0: with z = a + ib,
    /// `Re = expm1(a) cos b - 2 sin^2(b / 2)` (since `cos b - 1 = -2 sin^2(b / 2)`)
    /// and `Im = e^a sin b`.
    #[inline(always)]
    fn expm1(self) -> Self {
        let (a, b) = (self.re(), self.im());
        let h = (b * Self::R::from_f64c(0.5)).sin();
        Self::new(a.exp_m1() * b.cos() - Self::R::from_f64c(2.0) * h * h, a.exp() * b.sin())
    }
    /// ln(1 + z) without cancellation near 0: `Re = log1p(2a + a^2 + b^2) / 2`
    /// (`|1 + z|^2 = 1 + 2a + a^2 + b^2`), `Im = atan2(b, 1 + a)`; away from 0
    /// (|z| >= 1/2) the plain principal logarithm of 1 + z, which cannot overflow.
    #[inline(always)]
    fn log1p(self) -> Self {
        let (a, b) = (self.re(), self.im());
        if self.norm() >= Self::R::from_f64c(0.5) || self.is_nan_c() {
            return self.one_plus().ln();
        }
        let t = a * (Self::R::from_f64c(2.0) + a) + b * b;
        Self::new(t.ln_1p() * Self::R::from_f64c(0.5), b.atan2(Self::R::ONE + a))
    }
    /// z / |z|, and 0 for 0 (torch.sgn).
    #[inline(always)]
    fn sgn(self) -> Self {
        let n = self.norm();
        if n == Self::R::ZERO {
            Self::zero()
        } else {
            Self::new(self.re() / n, self.im() / n)
        }
    }
    /// Principal power `exp(w ln z)` as the C library's `cpow` computes it, which
    /// is what CPU runs: `0 ** i` is NaN and `0 ** -1` is `inf + NaN i` there, not 0.
    #[inline(always)]
    fn powc(self, w: Self) -> Self {
        self.c99_pow(w)
    }
    /// PyTorch's lerp: two formulas for the two halves of the weight range.
    #[inline(always)]
    fn lerp(self, end: Self, w: Self) -> Self {
        if w.norm() < Self::R::from_f64c(0.5) {
            self + w * (end - self)
        } else {
            end - (end - self) * (Self::one() - w)
        }
    }
    /// tensor ** scalar with the exponents CPU special-cases (sqrt, squares, cubes, reciprocals).
    #[inline(always)]
    fn pow_scalar(self, e: Self) -> Self {
        let real = |v: f64| e == Self::real(v);
        if real(0.5) {
            self.sqrt()
        } else if real(2.0) {
            self * self
        } else if real(3.0) {
            self * self * self
        } else if real(-0.5) {
            Self::one() / self.sqrt()
        } else if real(-1.0) {
            Self::one() / self
        } else if real(-2.0) {
            Self::one() / (self * self)
        } else {
            self.powc(e)
        }
    }
}

family! {
    /// One complex input, complex result. `abs` and `angle` leave the real
    /// result in the real part: PyTorch runs them complex-to-complex and
    /// copies the real part out.
    ComplexUnary: arity 1, C: Cplx => C;
    neg = |x, s, c| -x[0];
    conj_physical = |x, s, c| x[0].conj();
    reciprocal = |x, s, c| C::one() / x[0];
    abs = |x, s, c| C::new(x[0].norm(), C::R::ZERO);
    angle = |x, s, c| C::new(x[0].arg(), C::R::ZERO);
    sgn = |x, s, c| x[0].sgn();
    exp = |x, s, c| x[0].exp();
    exp2 = |x, s, c| (x[0] * C::real(std::f64::consts::LN_2)).exp();
    log = |x, s, c| x[0].ln();
    log2 = |x, s, c| { let l = x[0].ln(); let k = C::R::from_f64c(std::f64::consts::LOG2_E); C::new(l.re() * k, l.im() * k) };
    log10 = |x, s, c| { let l = x[0].ln(); let k = C::R::from_f64c(std::f64::consts::LOG10_E); C::new(l.re() * k, l.im() * k) };
    sqrt = |x, s, c| x[0].sqrt();
    rsqrt = |x, s, c| C::one() / x[0].sqrt();
    sin = |x, s, c| x[0].sin();
    cos = |x, s, c| x[0].cos();
    tan = |x, s, c| x[0].tan();
    sinh = |x, s, c| x[0].sinh();
    cosh = |x, s, c| x[0].cosh();
    tanh = |x, s, c| x[0].tanh();
    asin = |x, s, c| x[0].asin();
    acos = |x, s, c| x[0].acos();
    atan = |x, s, c| x[0].atan();
    asinh = |x, s, c| x[0].asinh();
    acosh = |x, s, c| x[0].acosh();
    atanh = |x, s, c| x[0].atanh();
    expm1 = |x, s, c| x[0].expm1();
    log1p = |x, s, c| x[0].log1p();
    sigmoid = |x, s, c| C::one() / (C::one() + (-x[0]).exp());
    // s[0] = the exponent.
    pow_tensor_scalar = |x, s, c| x[0].pow_scalar(s[0]);
}

family! {
    /// Two complex inputs, complex result.
    ComplexBinary: arity 2, C: Cplx => C;
    // a + alpha * b, s[0] = alpha (sub passes -alpha).
    add = |x, s, c| if s[0] == C::one() { x[0] + x[1] } else { x[0] + s[0] * x[1] };
    mul = |x, s, c| x[0] * x[1];
    div_true = |x, s, c| x[0] / x[1];
    pow = |x, s, c| x[0].powc(x[1]);
    // s[0] = weight
    lerp_scalar = |x, s, c| x[0].lerp(x[1], s[0]);
    // (grad, output): the conjugate derivatives autograd uses for complex inputs.
    sigmoid_backward = |x, s, c| x[0] * ((C::one() - x[1]) * x[1]).conj();
    tanh_backward = |x, s, c| x[0] * (C::one() - x[1] * x[1]).conj();
}

family! {
    /// Complex comparisons: equality of both parts.
    ComplexCompare: arity 2, C: Cplx => bool;
    eq = |x, s, c| x[0] == x[1];
    ne = |x, s, c| x[0] != x[1];
}

family! {
    /// Three complex inputs.
    ComplexTernary: arity 3, C: Cplx => C;
    // (condition, self, other); the condition arrives as 0 or 1.
    r#where = |x, s, c| if x[0] != C::zero() { x[1] } else { x[2] };
    // self + value * t1 * t2, s[0] = value
    addcmul = |x, s, c| x[0] + s[0] * x[1] * x[2];
    // self + value * t1 / t2, s[0] = value
    addcdiv = |x, s, c| x[0] + s[0] * x[1] / x[2];
    lerp_tensor = |x, s, c| x[0].lerp(x[1], x[2]);
}

/// A complex op: the complex kernel of the pointwise op of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ComplexOp {
    Unary(ComplexUnary),
    Binary(ComplexBinary),
    Compare(ComplexCompare),
    Ternary(ComplexTernary),
}

impl ComplexOp {
    /// Every complex op.
    fn all() -> impl Iterator<Item = ComplexOp> {
        let unary = ComplexUnary::ALL.iter().map(|&o| ComplexOp::Unary(o));
        let binary = ComplexBinary::ALL.iter().map(|&o| ComplexOp::Binary(o));
        let compare = ComplexCompare::ALL.iter().map(|&o| ComplexOp::Compare(o));
        unary.chain(binary).chain(compare).chain(ComplexTernary::ALL.iter().map(|&o| ComplexOp::Ternary(o)))
    }

    fn name(self) -> &'static str {
        match self {
            ComplexOp::Unary(o) => o.name(),
            ComplexOp::Binary(o) => o.name(),
            ComplexOp::Compare(o) => o.name(),
            ComplexOp::Ternary(o) => o.name(),
        }
    }

    /// The complex kernel of `op`, if it has one. The table pairs the two op
    /// lists by name once; a test checks that every complex op names a
    /// pointwise op, so a misspelt complex op cannot go unused.
    fn of(op: PointwiseOp) -> Option<ComplexOp> {
        static TABLE: std::sync::OnceLock<Vec<(PointwiseOp, ComplexOp)>> = std::sync::OnceLock::new();
        let table = TABLE.get_or_init(|| {
            ComplexOp::all()
                .filter_map(|c| PointwiseOp::lookup(c.name().trim_start_matches("r#")).map(|p| (p, c)))
                .collect()
        });
        table.iter().find(|(p, _)| *p == op).map(|&(_, c)| c)
    }
}

/// Whether pointwise op `op` has a complex kernel.
pub fn supports(op: PointwiseOp) -> bool {
    ComplexOp::of(op).is_some()
}

/// Runs the complex kernel of pointwise op `op` over `it`, computing in
/// `compute` (complex64 or complex128); scalars come from `ctx` (`f` real
/// parts, `im` imaginary parts).
///
/// Errors: [`Error::UnsupportedDtype`] when the op has no complex kernel or
/// `compute` is not complex64/complex128.
///
/// # Safety
/// As [`map`].
pub unsafe fn run_pointwise(op: PointwiseOp, it: &TensorIter, compute: DType, ctx: &Ctx) -> Result<()> {
    let unsupported = Error::UnsupportedDtype { op: op.name(), dtype: compute };
    let op = ComplexOp::of(op).ok_or(unsupported.clone())?;
    macro_rules! by_type {
        ($o:expr) => {
            match compute {
                DType::C64 => $o.run::<Complex<f32>>(it, ctx),
                DType::C128 => $o.run::<Complex<f64>>(it, ctx),
                _ => Err(unsupported),
            }
        };
    }
    // SAFETY: forwarded contract.
    unsafe {
        match op {
            ComplexOp::Unary(o) => by_type!(o),
            ComplexOp::Binary(o) => by_type!(o),
            ComplexOp::Compare(o) => by_type!(o),
            ComplexOp::Ternary(o) => by_type!(o),
        }
    }
}

/// Converting copy: operand 0 (any dtype) = operand 1 (any dtype), element
/// for element, with [`Element::cast`] (C++ `static_cast`, complex to real
/// takes the real part, complex to bool tests both parts). The value is
/// converted once, straight into the destination's type.
///
/// Every pair of ABI dtypes converts, complex32 and the float8 types included
/// ([`crate::float8`]).
///
/// # Safety
/// As [`map`]; the two operands do not overlap.
pub unsafe fn cast(it: &TensorIter) -> Result<()> {
    let from_complex = matches!(it.dtype(1), DType::C32 | DType::C64 | DType::C128);
    // SAFETY: forwarded contract.
    crate::with_dtype!(it.dtype(0), "copy_", |D| unsafe {
        if from_complex && !D::COMPLEX {
            // The engine never narrows a complex input to a real compute type on
            // its own: read it whole (exactly, as complex128) and convert here.
            map::<Complex<f64>, D, 1>(it, |o, [x], n| {
                for i in 0..n {
                    *o.add(i) = (*x.add(i)).cast::<D>();
                }
            })
        } else {
            map::<D, D, 1>(it, |o, [x], n| {
                for i in 0..n {
                    *o.add(i) = *x.add(i);
                }
            })
        }
    })
}

/// Complex sum and mean: 16 independent partial sums per run (the same
/// blocking as the real sum), then a tree.
struct CSum<A> {
    mean: bool,
    _a: std::marker::PhantomData<A>,
}
impl<A: Cplx> Reducer for CSum<A> {
    type In = A;
    type State = A;
    type Out = A;
    fn init(&self) -> A {
        A::zero()
    }
    #[inline(always)]
    fn step(&self, s: &mut A, x: A, _: i64) {
        *s = *s + x;
    }
    #[inline(always)]
    fn step_slice(&self, s: &mut A, xs: &[A], _: i64) {
        let mut lanes = [A::zero(); 16];
        let chunks = xs.chunks_exact(16);
        let rest = chunks.remainder();
        for c in chunks {
            for j in 0..16 {
                lanes[j] = lanes[j] + c[j];
            }
        }
        let mut w = 16;
        while w > 1 {
            w /= 2;
            for j in 0..w {
                lanes[j] = lanes[j] + lanes[j + w];
            }
        }
        let mut t = lanes[0];
        for &x in rest {
            t = t + x;
        }
        *s = *s + t;
    }
    fn combine(&self, a: A, b: A) -> A {
        a + b
    }
    fn finish(&self, s: A, count: usize) -> [A; 2] {
        if self.mean {
            let n = A::R::from_f64c(count as f64);
            [A::new(s.re() / n, s.im() / n), A::zero()]
        } else {
            [s, A::zero()]
        }
    }
    const CASCADE: bool = true;
}

struct CProd<A>(std::marker::PhantomData<A>);
impl<A: Cplx> Reducer for CProd<A> {
    type In = A;
    type State = A;
    type Out = A;
    fn init(&self) -> A {
        A::one()
    }
    #[inline(always)]
    fn step(&self, s: &mut A, x: A, _: i64) {
        *s = *s * x;
    }
    fn combine(&self, a: A, b: A) -> A {
        a * b
    }
    fn finish(&self, s: A, _: usize) -> [A; 2] {
        [s, A::zero()]
    }
}

/// The vector p-norm of complex values: the real p-norm of their moduli,
/// accumulated in the real part's type (float for complex64, as CPU does).
struct CNorm<A: Cplx>(Norm<A::R>);
impl<A: Cplx> Reducer for CNorm<A> {
    type In = A;
    type State = A::R;
    type Out = A::R;
    fn init(&self) -> A::R {
        self.0.init()
    }
    #[inline(always)]
    fn step(&self, s: &mut A::R, x: A, index: i64) {
        self.0.step(s, x.norm(), index);
    }
    fn combine(&self, a: A::R, b: A::R) -> A::R {
        self.0.combine(a, b)
    }
    fn finish(&self, s: A::R, count: usize) -> [A::R; 2] {
        self.0.finish(s, count)
    }
    const CASCADE: bool = true;
}

/// Complex reductions: `sum`, `mean` and `prod` into a complex64/complex128
/// output (accumulating in the output's type, as CPU does), and the vector
/// `norm` of a complex input into a real output.
///
/// Errors: [`Error::UnsupportedDtype`] for any other reduction or dtype combination.
///
/// # Safety
/// As [`crate::ops::reduce::reduce::reduce`].
pub unsafe fn reduce(op: ReduceOp, it: &TensorIter) -> Result<()> {
    use std::marker::PhantomData as P;
    let out = it.dtype(0);
    let unsupported = || Error::UnsupportedDtype { op: op.name(), dtype: out };
    macro_rules! by_type {
        (|$A:ident| $e:expr) => {
            match out {
                DType::C64 => {
                    type $A = Complex<f32>;
                    $e
                }
                DType::C128 => {
                    type $A = Complex<f64>;
                    $e
                }
                _ => Err(unsupported()),
            }
        };
    }
    // SAFETY: forwarded contract.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => {
                by_type!(|A| run_reducer(&CSum::<A> { mean: op == ReduceOp::Mean, _a: P }, it))
            }
            ReduceOp::Prod => by_type!(|A| run_reducer(&CProd::<A>(P), it)),
            ReduceOp::Norm { p } => match (it.dtype(it.ntensors() - 1), out) {
                (DType::C64, DType::F32 | DType::F64 | DType::F16 | DType::BF16) => {
                    run_reducer(&CNorm::<Complex<f32>>(Norm { p, _f: P }), it)
                }
                (DType::C128, DType::F32 | DType::F64) => run_reducer(&CNorm::<Complex<f64>>(Norm { p, _f: P }), it),
                _ => Err(unsupported()),
            },
            _ => Err(unsupported()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::iter::Operand;

    #[test]
    fn every_complex_op_is_the_kernel_of_one_pointwise_op() {
        for c in ComplexOp::all() {
            let p = PointwiseOp::lookup(c.name().trim_start_matches("r#"))
                .unwrap_or_else(|| panic!("complex op {} names no pointwise op", c.name()));
            assert_eq!(ComplexOp::of(p), Some(c));
        }
    }
    use crate::ops::elementwise::pointwise::PointwiseOp;

    type C = Complex<f64>;

    #[test]
    fn non_finite_inputs_take_c99_special_values() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let same = |got: C, want: C| {
            let eq = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || (a == b && a.signum() == b.signum());
            assert!(eq(got.re, want.re) && eq(got.im, want.im), "{got:?} != {want:?}");
        };
        // Annex G: cexp(-inf + i nan) = ±0 ± 0i, ctanh(inf + i y) = 1 + i 0 sin(2y),
        // csin(i inf) = 0 + i inf, catan(inf + i y) = pi/2 + 0i, cexp(inf + 0i) = inf + 0i.
        let e = C::new(-inf, nan).exp();
        assert!(e.re == 0.0 && e.im == 0.0, "{e:?}");
        same(C::new(inf, inf).tanh(), C::new(1.0, 0.0));
        same(C::new(0.0, inf).sin(), C::new(0.0, inf));
        same(C::new(inf, 1.0).atan(), C::new(std::f64::consts::FRAC_PI_2, 0.0));
        same(C::new(inf, 0.0).exp(), C::new(inf, 0.0));
        same(C::new(nan, 0.0).sinh(), C::new(nan, 0.0));
        // Finite inputs keep the kernels' own formulas.
        assert!(close(C::new(0.5, -1.0).tanh(), C::new(0.5, -1.0).c99(C99::Tanh), 1e-15));
        let f = Complex::<f32>::new(f32::INFINITY, f32::INFINITY).tanh();
        assert_eq!((f.re, f.im), (1.0, 0.0));
    }

    fn operand<T: Element>(v: &mut [T]) -> Operand {
        Operand { ptr: v.as_mut_ptr() as *mut u8, dtype: T::DTYPE }
    }

    fn close(a: C, b: C, tol: f64) -> bool {
        let d = ((a.re - b.re).powi(2) + (a.im - b.im).powi(2)).sqrt();
        d <= tol * (1.0 + b.re.hypot(b.im))
    }

    const SAMPLES: [C; 8] = [
        C::new(0.5, 0.25),
        C::new(-1.5, 0.75),
        C::new(2.0, -3.0),
        C::new(-0.3, -0.2),
        C::new(1e-3, 2.0),
        C::new(-4.0, 1e-4),
        C::new(0.7, 0.0),
        C::new(0.0, -1.2),
    ];

    /// Naive references in double, by the defining identities.
    fn reference(name: &str, z: C) -> C {
        let (a, b) = (z.re, z.im);
        let mul = |x: C, y: C| C::new(x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re);
        let div = |x: C, y: C| {
            let d = y.re * y.re + y.im * y.im;
            C::new((x.re * y.re + x.im * y.im) / d, (x.im * y.re - x.re * y.im) / d)
        };
        let exp = |x: C| C::new(x.re.exp() * x.im.cos(), x.re.exp() * x.im.sin());
        let ln = |x: C| C::new(x.re.hypot(x.im).ln(), x.im.atan2(x.re));
        let sqrt = |x: C| {
            let r = x.re.hypot(x.im).sqrt();
            let t = x.im.atan2(x.re) / 2.0;
            C::new(r * t.cos(), r * t.sin())
        };
        let one = C::new(1.0, 0.0);
        let i = C::new(0.0, 1.0);
        let sinh = |x: C| div(exp(x) - exp(-x), C::new(2.0, 0.0));
        let cosh = |x: C| div(exp(x) + exp(-x), C::new(2.0, 0.0));
        match name {
            "exp" => exp(z),
            "log" => ln(z),
            "sqrt" => sqrt(z),
            "rsqrt" => div(one, sqrt(z)),
            "reciprocal" => div(one, z),
            "sinh" => sinh(z),
            "cosh" => cosh(z),
            "tanh" => div(sinh(z), cosh(z)),
            "sin" => div(exp(mul(i, z)) - exp(-mul(i, z)), C::new(0.0, 2.0)),
            "cos" => div(exp(mul(i, z)) + exp(-mul(i, z)), C::new(2.0, 0.0)),
            "tan" => {
                let (s, c) = (exp(mul(i, z)) - exp(-mul(i, z)), exp(mul(i, z)) + exp(-mul(i, z)));
                div(s, mul(i, c))
            }
            // sin(asin z) = z etc. are checked separately; here the log forms.
            "asin" => -mul(i, ln(mul(i, z) + sqrt(one - mul(z, z)))),
            "acos" => C::new(std::f64::consts::FRAC_PI_2, 0.0) + mul(i, ln(mul(i, z) + sqrt(one - mul(z, z)))),
            // 1 ± iz with exact signed zeros: SAMPLES[7] lies on atan's branch cut, where
            // the side is chosen by the sign of a zero real part (as CPU PyTorch does).
            "atan" => {
                let iz = C::new(-b, a);
                mul(C::new(0.0, 0.5), ln(C::new(1.0 - iz.re, -iz.im)) - ln(C::new(1.0 + iz.re, iz.im)))
            }
            "sigmoid" => div(one, one + exp(-z)),
            // z^2 + 1 keeps the sign of a zero imaginary part (SAMPLES[7] is on the cut).
            "asinh" => {
                let zz = mul(z, z);
                ln(z + sqrt(C::new(zz.re + 1.0, zz.im)))
            }
            "acosh" => ln(z + mul(sqrt(z + one), sqrt(z - one))),
            "atanh" => mul(C::new(0.5, 0.0), ln(one + z) - ln(one - z)),
            "expm1" => exp(z) - one,
            "log1p" => ln(one + z),
            "abs" => C::new(a.hypot(b), 0.0),
            "angle" => C::new(b.atan2(a), 0.0),
            "neg" => -z,
            "conj_physical" => C::new(a, -b),
            _ => panic!("no reference for {name}"),
        }
    }

    fn run_unary<T: Cplx>(name: &str, xs: &[T], ctx: &Ctx) -> Vec<T> {
        let mut input = xs.to_vec();
        let mut out = vec![T::zero(); xs.len()];
        let size = std::mem::size_of::<T>() as i64;
        let it = TensorIter::new(
            "t",
            &[xs.len() as i64],
            vec![(operand(&mut out), &[size][..]), (operand(&mut input), &[size][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { PointwiseOp::lookup(name).unwrap().run(&it, Some(T::DTYPE), ctx) }.unwrap();
        out
    }

    #[test]
    fn layout_matches_c10_complex() {
        assert_eq!(std::mem::size_of::<Complex<f32>>(), 8);
        assert_eq!(std::mem::size_of::<Complex<f64>>(), 16);
        let z = [Complex::new(1.0f32, 2.0)];
        // SAFETY: the pointers address live local buffers sized for the call.
        let parts: &[f32; 2] = unsafe { &*(z.as_ptr() as *const [f32; 2]) };
        assert_eq!(parts, &[1.0, 2.0]);
    }

    #[test]
    fn unary_ops_match_naive_reference() {
        let names = [
            "exp",
            "log",
            "sqrt",
            "rsqrt",
            "reciprocal",
            "sinh",
            "cosh",
            "tanh",
            "sin",
            "cos",
            "tan",
            "asin",
            "acos",
            "atan",
            "sigmoid",
            "abs",
            "angle",
            "neg",
            "conj_physical",
            "asinh",
            "acosh",
            "atanh",
            "expm1",
            "log1p",
        ];
        let ctx = Ctx::default();
        for name in names {
            let got = run_unary(name, &SAMPLES, &ctx);
            for (g, &z) in got.iter().zip(&SAMPLES) {
                let want = reference(name, z);
                assert!(close(*g, want, 1e-12), "{name}({z:?}) = {g:?}, want {want:?}");
            }
            // complex64 agrees with the double reference to float precision.
            let xs: Vec<Complex<f32>> = SAMPLES.iter().map(|z| Complex::new(z.re as f32, z.im as f32)).collect();
            let got = run_unary(name, &xs, &ctx);
            for (g, &z) in got.iter().zip(&SAMPLES) {
                let want = reference(name, z);
                let g = C::new(g.re as f64, g.im as f64);
                assert!(close(g, want, 2e-5), "{name}({z:?}) as complex64 = {g:?}, want {want:?}");
            }
        }
        // Near 0, expm1 and log1p keep the digits that exp(z) - 1 and ln(1 + z) lose.
        let tiny = C::new(1e-10, -2e-10);
        assert!(close(tiny.expm1(), C::new(1e-10 + (1e-20 - 4e-20) / 2.0, -2e-10 + 1e-10 * -2e-10), 1e-6 * 2e-10));
        assert!(close(tiny.log1p(), C::new(1e-10 - (1e-20 - 4e-20) / 2.0, -2e-10 + 1e-10 * 2e-10), 1e-6 * 2e-10));
        // Inverse functions invert.
        for &z in &SAMPLES {
            assert!(
                close(z.asinh().sinh(), z, 1e-12)
                    && close(z.acosh().cosh(), z, 1e-12)
                    && close(z.atanh().tanh(), z, 1e-12),
                "{z:?}"
            );
            assert!(
                close(z.asin().sin(), z, 1e-12) && close(z.acos().cos(), z, 1e-12) && close(z.atan().tan(), z, 1e-12),
                "{z:?}"
            );
        }
    }

    #[test]
    fn smith_division_avoids_overflow_and_matches_naive() {
        for &x in &SAMPLES {
            for &y in &SAMPLES {
                let d = y.re * y.re + y.im * y.im;
                let want = C::new((x.re * y.re + x.im * y.im) / d, (x.im * y.re - x.re * y.im) / d);
                assert!(close(x / y, want, 1e-14), "{x:?} / {y:?}");
            }
        }
        // c^2 + d^2 would overflow here; Smith's scaling does not.
        let q = C::new(1e300, 1e300) / C::new(1e300, 1e300);
        assert!(close(q, C::new(1.0, 0.0), 1e-15), "{q:?}");
        let q = C::new(1.0, 0.0) / C::new(0.0, 0.0);
        assert!(q.re.is_infinite() && q.im.is_nan());
    }

    #[test]
    fn binary_ops_with_complex_scalars_broadcast_and_mixed_dtypes() {
        // out (complex128) = a (complex64, contiguous) + alpha * b (float64 scalar, broadcast), alpha = 1 - 2i.
        let mut out = vec![C::default(); 3];
        let mut a = vec![Complex::new(1.0f32, 1.0), Complex::new(-2.0, 0.5), Complex::new(0.0, -3.0)];
        let mut b = [2.0f64];
        let it = TensorIter::new(
            "t",
            &[3],
            vec![(operand(&mut out), &[16][..]), (operand(&mut a), &[8][..]), (operand(&mut b), &[0][..])],
            1,
            1,
        )
        .unwrap();
        let ctx = Ctx { f: [1.0, 0.0, 0.0, 0.0], im: [-2.0, 0.0, 0.0, 0.0], ..Default::default() };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { PointwiseOp::lookup("add").unwrap().run(&it, Some(DType::C128), &ctx) }.unwrap();
        assert_eq!(out, vec![C::new(3.0, -3.0), C::new(0.0, -3.5), C::new(2.0, -7.0)]);
        // eq / ne produce bool; where takes a bool condition.
        let mut flags = [false; 3];
        let mut other = vec![Complex::new(1.0f32, 1.0), Complex::new(-2.0, 0.0), Complex::new(0.0, -3.0)];
        let it = TensorIter::new(
            "t",
            &[3],
            vec![(operand(&mut flags), &[1][..]), (operand(&mut a), &[8][..]), (operand(&mut other), &[8][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { PointwiseOp::lookup("eq").unwrap().run(&it, Some(DType::C64), &Ctx::default()) }.unwrap();
        assert_eq!(flags, [true, false, true]);
        let mut picked = vec![Complex::<f32>::default(); 3];
        let it = TensorIter::new(
            "t",
            &[3],
            vec![
                (operand(&mut picked), &[8][..]),
                (operand(&mut flags), &[1][..]),
                (operand(&mut a), &[8][..]),
                (operand(&mut other), &[8][..]),
            ],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { PointwiseOp::lookup("where").unwrap().run(&it, None, &Ctx::default()) }.unwrap();
        assert_eq!(picked, vec![a[0], other[1], a[2]]);
        // A real-only op refuses complex.
        // SAFETY: the pointers address live local buffers sized for the call.
        let err =
            unsafe { PointwiseOp::lookup("floor").unwrap().run(&it, Some(DType::C64), &Ctx::default()) }.unwrap_err();
        assert!(matches!(err, Error::UnsupportedDtype { .. }));
    }

    #[test]
    fn cast_between_complex_and_real() {
        // complex64 (transposed 2x2) -> int32, bool, float64, complex128.
        let mut src =
            vec![Complex::new(1.5f32, 2.0), Complex::new(0.0, -1.0), Complex::new(-3.7, 0.0), Complex::new(0.0, 0.0)];
        let mut ints = [0i32; 4];
        let mut bools = [false; 4];
        let mut wide = vec![C::default(); 4];
        let mut back = vec![Complex::<f32>::default(); 4];
        let mut run = |dst: Operand, size: i64| {
            let it = TensorIter::new(
                "t",
                &[2, 2],
                vec![(dst, &[size, 2 * size][..]), (operand(&mut src), &[16, 8][..])],
                1,
                1,
            )
            .unwrap();
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { cast(&it) }.unwrap();
        };
        run(operand(&mut ints), 4);
        run(operand(&mut bools), 1);
        run(operand(&mut wide), 16);
        assert_eq!(ints, [1, -3, 0, 0]);
        assert_eq!(bools, [true, true, true, false]);
        assert_eq!(wide[1], C::new(-3.7f32 as f64, 0.0));
        // real -> complex sets the imaginary part to 0.
        let mut reals = [2.5f64, -1.0, 0.0, 7.0];
        let it =
            TensorIter::new("t", &[4], vec![(operand(&mut back), &[8][..]), (operand(&mut reals), &[8][..])], 1, 1)
                .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { cast(&it) }.unwrap();
        assert_eq!(back[0], Complex::new(2.5, 0.0));
        assert_eq!(back[3], Complex::new(7.0, 0.0));
    }

    #[test]
    fn sum_mean_prod_reduce_complex() {
        let n = 100usize;
        let mut x: Vec<C> = (0..n).map(|k| C::new(k as f64 * 0.5, 1.0 - k as f64 * 0.25)).collect();
        let want = x.iter().fold(C::default(), |s, &v| s + v);
        for (op, scale) in [(ReduceOp::Sum, 1.0), (ReduceOp::Mean, n as f64)] {
            let mut out = [C::default()];
            let it = TensorIter::new(
                "t",
                &[n as i64],
                vec![(operand(&mut out), &[0][..]), (operand(&mut x), &[16][..])],
                1,
                2,
            )
            .unwrap();
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { crate::ops::reduce::reduce::reduce(op, &it) }.unwrap();
            assert!(close(C::new(out[0].re * scale, out[0].im * scale), want, 1e-14), "{op:?}");
        }
        let mut y: Vec<C> = SAMPLES.to_vec();
        let mut out = [C::default()];
        let it = TensorIter::new("t", &[8], vec![(operand(&mut out), &[0][..]), (operand(&mut y), &[16][..])], 1, 1)
            .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { crate::ops::reduce::reduce::reduce(ReduceOp::Prod, &it) }.unwrap();
        let want = SAMPLES.iter().fold(C::new(1.0, 0.0), |s, &v| s * v);
        assert!(close(out[0], want, 1e-14));
        // SAFETY: the pointers address live local buffers sized for the call.
        let err = unsafe { crate::ops::reduce::reduce::reduce(ReduceOp::Amax, &it) }.unwrap_err();
        assert!(matches!(err, Error::UnsupportedDtype { .. }));
        // Vector norms of the moduli into a real output.
        for p in [2.0, 1.0, f64::INFINITY, 0.0, 3.0] {
            let mut out = [0f64];
            let it =
                TensorIter::new("t", &[8], vec![(operand(&mut out), &[0][..]), (operand(&mut y), &[16][..])], 1, 1)
                    .unwrap();
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { crate::ops::reduce::reduce::reduce(ReduceOp::Norm { p }, &it) }.unwrap();
            let m: Vec<f64> = SAMPLES.iter().map(|z| z.re.hypot(z.im)).collect();
            let want = match p {
                0.0 => m.iter().filter(|&&v| v != 0.0).count() as f64,
                f64::INFINITY => m.iter().cloned().fold(0.0, f64::max),
                _ => m.iter().map(|v| v.powf(p)).sum::<f64>().powf(1.0 / p),
            };
            assert!((out[0] - want).abs() <= 1e-12 * want, "p = {p}: {} vs {want}", out[0]);
        }
    }
}
