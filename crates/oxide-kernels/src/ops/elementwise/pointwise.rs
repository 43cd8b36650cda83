//! Pointwise operators, each declared once as one line of a family table.
//!
//! A family fixes the arity, the compute type bound and the result type
//! (for example [`FloatUnary`]: one input, computed in float or double).
//! The op's name is PyTorch's (its `DispatchStub` without `_stub`, or its
//! aten name) and is what the glue resolves once per stub with
//! [`PointwiseOp::lookup`]; names and dispatch are derived from the table by
//! the [`family!`] macro, never written twice. The families: `FloatUnary`,
//! `RealUnary`, `IntUnary`, `IntBinary`, `Predicate`, `Compare`, `RealBinary`,
//! `FloatBinary`, `RealTernary`, `FloatTernary`; the ops include the
//! activations, their backward, and the pointwise losses.
//!
//! The compute type follows PyTorch: float16 and bfloat16 compute in float
//! (their opmath type), everything else in its own type; the engine converts
//! operands of other dtypes on load and store.

// Ops that read their second input in one branch only select instead of branching:
// with an `if`, LLVM sinks that load into the branch and the vectorised loop fetches
// it with a masked gather (`threshold_backward` on 131k float32 ran 2.3x slower than
// `add`); `select_unpredictable` keeps the load unconditional and the loop a blend.
use std::hint::select_unpredictable;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::dtype::{DType, Element};
use crate::engine::iter::{in_place_chunks, map_in_place, TensorIter};
use crate::engine::math::{Float, Num};
use crate::error::{Error, Result};
use crate::ops::elementwise::special;

/// Scalar arguments of one call, given both as double and as int64 so that
/// integer kernels see exact values (PyTorch's `Scalar`).
#[derive(Debug, Default)]
pub struct Ctx {
    pub f: [f64; 4],
    pub i: [i64; 4],
    /// Imaginary parts of complex scalars (0 for real ones); read only by complex compute types.
    pub im: [f64; 4],
    /// Set by a kernel that met an invalid value (integer division by zero, negative integer power).
    pub failed: AtomicBool,
}

impl Ctx {
    /// A context with double scalars `f` (integers take `f as i64`).
    pub fn with_f64(f: [f64; 4]) -> Ctx {
        Ctx { f, i: f.map(|v| v as i64), im: [0.0; 4], failed: AtomicBool::new(false) }
    }

    /// The scalars converted to the compute type: integers and bool from the int64 values.
    pub(crate) fn scalars<C: Element>(&self) -> [C; 4] {
        // bool from the double value: 0.5 is true, as Scalar::to<bool> gives.
        std::array::from_fn(|k| {
            if C::COMPLEX {
                C::from_c64(self.f[k], self.im[k])
            } else if C::INTEGRAL {
                C::from_i64(self.i[k])
            } else {
                C::from_f64(self.f[k])
            }
        })
    }

    #[inline(always)]
    fn fail<C: Num>(&self) -> C {
        self.failed.store(true, Ordering::Relaxed);
        C::ZERO
    }
}

/// Integer compute types (and bool): the bitwise family.
pub trait Bits:
    Num
    + std::ops::BitAnd<Output = Self>
    + std::ops::BitOr<Output = Self>
    + std::ops::BitXor<Output = Self>
    + std::ops::Not<Output = Self>
{
    /// Width in bits.
    const BITS: i64;
}
macro_rules! bits {
    ($($t:ty),*) => {$( impl Bits for $t { const BITS: i64 = (std::mem::size_of::<$t>() * 8) as i64; } )*};
}
bits!(u8, i8, i16, i32, i64, u16, u32, u64, bool);

/// `a << b` as PyTorch defines it: shifts by a negative amount or by the
/// width or more give 0.
#[inline(always)]
fn shl<C: Bits>(a: C, b: C) -> C {
    let s = b.to_i64();
    if !(0..C::BITS).contains(&s) {
        C::ZERO
    } else {
        C::from_i64(((a.to_i64() as u64) << s) as i64)
    }
}

/// `a >> b` (arithmetic for signed types); out-of-range shifts fill with the sign.
#[inline(always)]
fn shr<C: Bits>(a: C, b: C) -> C {
    let s = b.to_i64();
    let s = if !(0..C::BITS).contains(&s) { C::BITS - 1 } else { s };
    let v = a.to_i64();
    // Unsigned values are non-negative in int64 (uint64 above 2^63 aside), so one shift serves both.
    C::from_i64(if s >= 64 {
        if v < 0 {
            -1
        } else {
            0
        }
    } else {
        v >> s
    })
}

/// PyTorch's `lerp`: two formulas for the two halves of the weight range, for accuracy at both ends.
#[inline(always)]
fn lerp<F: Float>(a: F, b: F, w: F) -> F {
    let half = F::from_f64c(0.5);
    if w.abs() < half {
        a + w * (b - a)
    } else {
        b - (b - a) * (F::ONE - w)
    }
}

/// `x * Phi(x)`, Phi the standard normal CDF.
#[inline(always)]
fn gelu_erf<F: Float>(x: F) -> F {
    let half = F::from_f64c(0.5);
    x * half * (F::ONE + (x * F::from_f64c(std::f64::consts::FRAC_1_SQRT_2)).erf())
}

/// d/dx of [`gelu_erf`]: `Phi(x) + x * phi(x)`.
#[inline(always)]
fn gelu_erf_grad<F: Float>(x: F) -> F {
    let half = F::from_f64c(0.5);
    let cdf = half * (F::ONE + (x * F::from_f64c(std::f64::consts::FRAC_1_SQRT_2)).erf());
    // 1 / sqrt(2 pi)
    let pdf = F::from_f64c(0.398_942_280_401_432_7) * (-half * x * x).exp();
    cdf + x * pdf
}

/// The tanh approximation of GELU and its derivative:
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
#[inline(always)]
fn gelu_tanh<F: Float>(x: F) -> (F, F) {
    let half = F::from_f64c(0.5);
    let k0 = F::from_f64c(0.797_884_560_802_865_4); // sqrt(2 / pi)
    let k1 = F::from_f64c(0.044715);
    let inner = k0 * (x + k1 * x * x * x);
    let t = inner.tanh();
    let d_inner = k0 * (F::ONE + F::from_f64c(3.0) * k1 * x * x);
    (half * x * (F::ONE + t), half * (F::ONE + t) + half * x * (F::ONE - t * t) * d_inner)
}

/// `log1p(exp(beta x)) / beta`, or `x` where `beta x > threshold`.
#[inline(always)]
fn softplus<F: Float>(x: F, beta: F, threshold: F) -> F {
    if x * beta > threshold {
        x
    } else {
        (x * beta).exp().ln_1p() / beta
    }
}

/// `v` rounded to the half type `code` names (1 float16, 2 bfloat16; anything else
/// leaves it): for ops CPU computes op by op in the half type rather than in float.
#[inline(always)]
fn storage_round<F: Float>(v: F, code: F) -> F {
    let dt = if code == F::ONE {
        DType::F16
    } else if code == F::from_f64c(2.0) {
        DType::BF16
    } else {
        return v;
    };
    crate::engine::math::round_to(dt, v)
}

/// `min(max(x + 3, 0), 6)`, shared by hardsigmoid and hardswish.
#[inline(always)]
fn hard<F: Float>(x: F) -> F {
    (x + F::from_f64c(3.0)).max_nan(F::ZERO).min_nan(F::from_f64c(6.0))
}

macro_rules! family {
    (
        $(#[$doc:meta])* $fam:ident: arity $n:literal, $C:ident: $bound:ident => $O:ty $(, in_place_chunks $chunks:literal)?;
        $( $name:ident = |$x:ident, $s:ident, $ctx:ident| $body:expr; )*
    ) => {
        $(#[$doc])*
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $fam { $( $name ),* }

        impl $fam {
            /// Whether an in-place call computes its blocks where they lie ([`in_place_chunks`],
            /// families marked `in_place_chunks`) instead of from a staged copy ([`crate::engine::iter::map`]).
            const IN_PLACE_CHUNKS: bool = false $(|| $chunks)?;

            /// Every op of the family.
            pub const ALL: &'static [$fam] = &[$( $fam::$name ),*];

            /// PyTorch's name for the op.
            pub fn name(self) -> &'static str {
                match self { $( $fam::$name => stringify!($name) ),* }
            }

            /// Runs the op over `it` computing in `$C`.
            ///
            /// # Safety
            /// As [`map`].
            #[allow(unused_variables)]
            unsafe fn run<$C: $bound>(self, it: &TensorIter, ctx: &Ctx) -> Result<()> {
                match self { $(
                    // SAFETY: forwarded contract.
                    $fam::$name => unsafe {
                        let $s: [$C; 4] = ctx.scalars::<$C>();
                        let $ctx = ctx;
                        map_in_place::<$C, $O, $n>(it, Self::IN_PLACE_CHUNKS, |o, ins, len, aliased| {
                            if Self::IN_PLACE_CHUNKS && aliased {
                                in_place_chunks(o, ins, len, |$x: [$C; $n]| -> $O { $body });
                                return;
                            }
                            for i in 0..len {
                                let $x: [$C; $n] = std::array::from_fn(|k| *ins[k].add(i));
                                *o.add(i) = $body;
                            }
                        })
                    },
                )* }
            }
        }
    };
}

// The complex families (crate::ops::elementwise::complex) are declared with the same macro.
pub(crate) use family;

family! {
    /// One floating input, computed in float (float32/16/bfloat16) or double.
    FloatUnary: arity 1, F: Float => F;
    exp = |x, s, c| x[0].exp();
    exp2 = |x, s, c| x[0].exp2();
    expm1 = |x, s, c| x[0].exp_m1();
    log = |x, s, c| x[0].ln();
    log2 = |x, s, c| x[0].log2();
    log10 = |x, s, c| x[0].log10();
    log1p = |x, s, c| x[0].ln_1p();
    sqrt = |x, s, c| x[0].sqrt();
    rsqrt = |x, s, c| F::ONE / x[0].sqrt();
    sin = |x, s, c| x[0].sin();
    cos = |x, s, c| x[0].cos();
    tan = |x, s, c| x[0].tan();
    asin = |x, s, c| x[0].asin();
    acos = |x, s, c| x[0].acos();
    atan = |x, s, c| x[0].atan();
    sinh = |x, s, c| x[0].sinh();
    cosh = |x, s, c| x[0].cosh();
    tanh = |x, s, c| x[0].tanh();
    asinh = |x, s, c| x[0].asinh();
    acosh = |x, s, c| x[0].acosh();
    atanh = |x, s, c| x[0].atanh();
    sigmoid = |x, s, c| x[0].sigmoid();
    erf = |x, s, c| x[0].erf();
    erfc = |x, s, c| x[0].erfc();
    erfinv = |x, s, c| x[0].erfinv();
    // s[0] = eps, negative without one (PyTorch passes -1); x is clamped to [eps, 1 - eps]
    // first, NaN staying NaN as in CPU's comparisons. s[1]: the half type whose rounding
    // each step takes (see `storage_round`), as CPU computes half types op by op.
    logit = |x, s, c| {
        let r = |v: F| storage_round(v, s[1]);
        let (lo, hi) = (r(s[0]), r(F::ONE - r(s[0])));
        let z = if s[0] < F::ZERO { x[0] } else if x[0] < lo { lo } else if x[0] > hi { hi } else { x[0] };
        r(z / r(F::ONE - z)).ln()
    };
    lgamma = |x, s, c| x[0].lgamma();
    reciprocal = |x, s, c| x[0].recip();
    floor = |x, s, c| x[0].floor();
    ceil = |x, s, c| x[0].ceil();
    round = |x, s, c| x[0].round_even();
    trunc = |x, s, c| x[0].trunc();
    frac = |x, s, c| x[0] - x[0].trunc();
    // s[0] = 10^|decimals|, s[1] = 1 when decimals < 0 (PyTorch's round(decimals=)).
    round_decimals = |x, s, c| if s[1] != F::ZERO { (x[0] / s[0]).round_even() * s[0] } else { (x[0] * s[0]).round_even() / s[0] };
    // s = (nan, posinf, neginf) replacements, already defaulted to the dtype's limits.
    nan_to_num = |x, s, c| if x[0].is_nan() { s[0] } else if x[0] == F::infinity() { s[1] } else if x[0] == -F::infinity() { s[2] } else { x[0] };
    // tensor ** scalar (s[0]) through pow; float16 always (CPU special-cases float, double
    // and bfloat16 only), the other float types for exponents without a special case.
    pow_scalar = |x, s, c| x[0].pow(s[0]).unwrap_or(F::ZERO);
    // PyTorch's special exponents of tensor ** scalar (sqrt for 0.5 keeps sqrt(-inf) = NaN),
    // one op each, picked once per call (`PointwiseOp::run`): a per-element choice that can
    // fall through to libm's powf keeps the loop scalar (x ** 3 ran 6x slower than x * x * x).
    pow_scalar_square = |x, s, c| x[0] * x[0];
    pow_scalar_cube = |x, s, c| x[0] * x[0] * x[0];
    pow_scalar_sqrt = |x, s, c| x[0].sqrt();
    pow_scalar_rsqrt = |x, s, c| F::ONE / x[0].sqrt();
    pow_scalar_reciprocal = |x, s, c| F::ONE / x[0];
    pow_scalar_inverse_square = |x, s, c| F::ONE / (x[0] * x[0]);
    sinc = |x, s, c| if x[0] == F::ZERO { F::ONE } else { let y = x[0] * F::from_f64c(std::f64::consts::PI); y.sin() / y };
    // Activations (the stubs of PyTorch's ATen/native/Activation.h); formulas as torch.nn.functional documents them.
    // s[0] = 0: exact GELU, x * Phi(x); s[0] = 1: the tanh approximation (Hendrycks & Gimpel 2016).
    gelu = |x, s, c| if s[0] == F::ZERO { gelu_erf(x[0]) } else { gelu_tanh(x[0]).0 };
    // gelu's two forms as ops of their own, picked once per call (`PointwiseOp::run`), so
    // that each loop holds one formula and vectorises.
    gelu_exact = |x, s, c| gelu_erf(x[0]);
    gelu_tanh_approx = |x, s, c| gelu_tanh(x[0]).0;
    silu = |x, s, c| x[0] * x[0].sigmoid();
    mish = |x, s, c| x[0] * softplus(x[0], F::ONE, F::from_f64c(20.0)).tanh();
    // s = (beta, threshold): linear above threshold, for stability.
    softplus = |x, s, c| softplus(x[0], s[0], s[1]);
    // s = (alpha, scale, input_scale): x > 0 ? scale * x : alpha * scale * expm1(input_scale * x).
    elu = |x, s, c| if x[0] > F::ZERO { x[0] * s[1] } else { (x[0] * s[2]).exp_m1() * s[0] * s[1] };
    leaky_relu = |x, s, c| if x[0] > F::ZERO { x[0] } else { x[0] * s[0] };
    hardsigmoid = |x, s, c| hard(x[0]) / F::from_f64c(6.0);
    hardswish = |x, s, c| x[0] * hard(x[0]) / F::from_f64c(6.0);
    // s[0] = lambda
    hardshrink = |x, s, c| if x[0] >= -s[0] && x[0] <= s[0] { F::ZERO } else { x[0] };
    softshrink = |x, s, c| if x[0] > s[0] { x[0] - s[0] } else if x[0] < -s[0] { x[0] + s[0] } else { F::ZERO };
    // log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), exact for large |x|.
    log_sigmoid = |x, s, c| x[0].min_nan(F::ZERO) - (-x[0].abs()).exp().ln_1p();
    // The argument of a real number: pi for negatives, 0 otherwise, NaN kept (torch.angle).
    angle = |x, s, c| if x[0].is_nan() { x[0] } else if x[0] < F::ZERO { F::from_f64c(std::f64::consts::PI) } else { F::ZERO };
    // Special functions (ops/elementwise/special.rs), CPU's algorithms in the compute type.
    i0 = |x, s, c| special::i0(x[0]);
    special_i0e = |x, s, c| special::i0e(x[0]);
    special_i1 = |x, s, c| special::i1(x[0]);
    special_i1e = |x, s, c| special::i1e(x[0]);
    special_entr = |x, s, c| special::entr(x[0]);
    special_erfcx = |x, s, c| special::erfcx(x[0]);
    special_ndtri = |x, s, c| special::ndtri(x[0]);
    special_log_ndtr = |x, s, c| special::log_ndtr(x[0]);
    digamma = |x, s, c| special::digamma(x[0]);
    // s[0] = n >= 0 (checked by PyTorch's meta function); s[1]: the half type, as for logit.
    polygamma = |x, s, c| special::polygamma(s[0], x[0], s[1]);
    special_bessel_j0 = |x, s, c| special::bessel_j0(x[0]);
    special_bessel_j1 = |x, s, c| special::bessel_j1(x[0]);
    special_bessel_y0 = |x, s, c| special::bessel_y0(x[0]);
    special_bessel_y1 = |x, s, c| special::bessel_y1(x[0]);
    special_modified_bessel_i0 = |x, s, c| special::i0(x[0]);
    special_modified_bessel_i1 = |x, s, c| special::modified_bessel_i1(x[0]);
    special_modified_bessel_k0 = |x, s, c| special::modified_bessel_k0(x[0], false);
    special_modified_bessel_k1 = |x, s, c| special::modified_bessel_k1(x[0], false);
    special_scaled_modified_bessel_k0 = |x, s, c| special::modified_bessel_k0(x[0], true);
    special_scaled_modified_bessel_k1 = |x, s, c| special::modified_bessel_k1(x[0], true);
    special_spherical_bessel_j0 = |x, s, c| special::spherical_bessel_j0(x[0]);
    special_airy_ai = |x, s, c| special::airy_ai(x[0]);
}

family! {
    /// One input of any real dtype, same-type result.
    RealUnary: arity 1, C: Num => C;
    abs = |x, s, c| x[0].abs();
    neg = |x, s, c| x[0].neg();
    sign = |x, s, c| x[0].sign();
    sgn = |x, s, c| x[0].sign();
    // Conjugation leaves real numbers unchanged (conj_physical_out on a real tensor).
    conj_physical = |x, s, c| x[0];
    // clamp with scalar bounds: s[0] = min, s[1] = max (NaN inputs stay NaN, as std::min/max do).
    clamp_scalar = |x, s, c| { let y = if x[0] < s[0] { s[0] } else { x[0] }; if s[1] < y { s[1] } else { y } };
    clamp_min_scalar = |x, s, c| if x[0] < s[0] { s[0] } else { x[0] };
    clamp_max_scalar = |x, s, c| if s[0] < x[0] { s[0] } else { x[0] };
    // tensor ** scalar (s[0] the exponent) for integers; floats run FloatUnary::pow_scalar.
    pow_tensor_scalar = |x, s, c| x[0].pow(s[0]).unwrap_or_else(|| c.fail());
}

family! {
    /// Integer (and bool) bitwise ops.
    IntUnary: arity 1, C: Bits => C;
    bitwise_not = |x, s, c| !x[0];
}

family! {
    /// Integer (and bool) bitwise binary ops.
    IntBinary: arity 2, C: Bits => C;
    bitwise_and = |x, s, c| x[0] & x[1];
    bitwise_or = |x, s, c| x[0] | x[1];
    bitwise_xor = |x, s, c| x[0] ^ x[1];
    lshift = |x, s, c| shl(x[0], x[1]);
    rshift = |x, s, c| shr(x[0], x[1]);
    gcd = |x, s, c| special::gcd(x[0], x[1]);
    lcm = |x, s, c| special::lcm(x[0], x[1], C::BITS);
}

family! {
    /// Predicates on one real input: bool result.
    Predicate: arity 1, C: Num => bool;
    logical_not = |x, s, c| x[0] == C::ZERO;
    signbit = |x, s, c| x[0] < C::ZERO || (C::IS_FLOAT && x[0] == C::ZERO && x[0].to_f64().is_sign_negative());
    isposinf = |x, s, c| C::IS_FLOAT && x[0].to_f64() == f64::INFINITY;
    isneginf = |x, s, c| C::IS_FLOAT && x[0].to_f64() == f64::NEG_INFINITY;
}

family! {
    /// Comparisons and logical ops on two real inputs: bool result.
    Compare: arity 2, C: Num => bool;
    lt = |x, s, c| x[0] < x[1];
    le = |x, s, c| x[0] <= x[1];
    gt = |x, s, c| x[0] > x[1];
    ge = |x, s, c| x[0] >= x[1];
    eq = |x, s, c| x[0] == x[1];
    ne = |x, s, c| x[0] != x[1];
    logical_and = |x, s, c| (x[0] != C::ZERO) & (x[1] != C::ZERO);
    logical_or = |x, s, c| (x[0] != C::ZERO) | (x[1] != C::ZERO);
    logical_xor = |x, s, c| (x[0] != C::ZERO) ^ (x[1] != C::ZERO);
}

family! {
    /// Binary arithmetic on any real dtype, same-type result.
    RealBinary: arity 2, C: Num => C, in_place_chunks true;
    // a + alpha * b with s[0] = alpha (sub passes -alpha, as PyTorch's sub does).
    add = |x, s, c| if s[0] == C::ONE { x[0].add(x[1]) } else { x[0].add(s[0].mul(x[1])) };
    mul = |x, s, c| x[0].mul(x[1]);
    div_trunc = |x, s, c| x[0].div_trunc(x[1]).unwrap_or_else(|| c.fail());
    div_floor = |x, s, c| x[0].div_floor(x[1]).unwrap_or_else(|| c.fail());
    remainder = |x, s, c| x[0].remainder(x[1]).unwrap_or_else(|| c.fail());
    fmod = |x, s, c| x[0].fmod(x[1]).unwrap_or_else(|| c.fail());
    maximum = |x, s, c| x[0].max_nan(x[1]);
    minimum = |x, s, c| x[0].min_nan(x[1]);
    fmax = |x, s, c| x[0].fmax(x[1]);
    fmin = |x, s, c| x[0].fmin(x[1]);
    pow = |x, s, c| x[0].pow(x[1]).unwrap_or_else(|| c.fail());
    // (mask, self) -> self with s[0] where mask is set
    masked_fill = |x, s, c| select_unpredictable(x[0] != C::ZERO, s[0], x[1]);
    heaviside = |x, s, c| select_unpredictable(x[0] == C::ZERO, x[1], if x[0] > C::ZERO { C::ONE } else { C::ZERO });
    // (self, other) -> self <= threshold ? value : other, s = (threshold, value); threshold_backward passes grad as other.
    threshold = |x, s, c| select_unpredictable(x[0] <= s[0], s[1], x[1]);
}

family! {
    /// Binary floating ops.
    FloatBinary: arity 2, F: Float => F;
    div_true = |x, s, c| x[0] / x[1];
    // trunc(a / b) with the quotient first rounded to the storage type (s[0]: 1 float16, 2 bfloat16), as CPU does for half types.
    div_trunc_half = |x, s, c| {
        let q = (x[0] / x[1]).to_f64();
        let r = if s[0] == F::ONE { half::f16::from_f64(q).to_f64() } else { half::bf16::from_f64(q).to_f64() };
        F::from_f64c(r).trunc()
    };
    atan2 = |x, s, c| x[0].atan2(x[1]);
    hypot = |x, s, c| x[0].hypot(x[1]);
    copysign = |x, s, c| x[0].copysign(x[1]);
    logaddexp = |x, s, c| {
        let m = x[0].max_nan(x[1]);
        if m.is_infinite() && x[0] == x[1] { x[0] } else { m + (-(x[0] - x[1]).abs()).exp().ln_1p() }
    };
    logaddexp2 = |x, s, c| {
        let m = x[0].max_nan(x[1]);
        let ln2 = F::from_f64c(std::f64::consts::LN_2);
        if m.is_infinite() && x[0] == x[1] { x[0] } else { m + (-(x[0] - x[1]).abs()).exp2().ln_1p() / ln2 }
    };
    xlogy = |x, s, c| if x[1].is_nan() { x[1] } else if x[0] == F::ZERO { F::ZERO } else { x[0] * x[1].ln() };
    xlog1py = |x, s, c| if x[1].is_nan() { x[1] } else if x[0] == F::ZERO { F::ZERO } else { x[0] * x[1].ln_1p() };
    // (grad, output) -> grad_input
    sigmoid_backward = |x, s, c| x[0] * (F::ONE - x[1]) * x[1];
    // (grad, input), s[0] = eps and s[1] the half type as for logit: outside [0, 1] the
    // gradient is NaN without eps, outside [eps, 1 - eps] it is 0 with one (CPU's logit_backward).
    logit_backward = |x, s, c| {
        let r = |v: F| storage_round(v, s[1]);
        let (lo, hi) = if s[0] < F::ZERO { (F::ZERO, F::ONE) } else { (r(s[0]), r(F::ONE - r(s[0]))) };
        if x[1] < lo || x[1] > hi {
            if s[0] < F::ZERO { F::nan() } else { F::ZERO }
        } else {
            x[0] / r(x[1] * r(F::ONE - x[1]))
        }
    };
    tanh_backward = |x, s, c| x[0] * (F::ONE - x[1] * x[1]);
    // lerp with a scalar weight s[0]
    lerp_scalar = |x, s, c| lerp(x[0], x[1], s[0]);
    // Activation backward: (grad_output, self) -> grad_input, scalars as in the forward op.
    gelu_backward = |x, s, c| x[0] * if s[0] == F::ZERO { gelu_erf_grad(x[1]) } else { gelu_tanh(x[1]).1 };
    gelu_exact_backward = |x, s, c| x[0] * gelu_erf_grad(x[1]);
    gelu_tanh_approx_backward = |x, s, c| x[0] * gelu_tanh(x[1]).1;
    silu_backward = |x, s, c| { let sg = x[1].sigmoid(); x[0] * sg * (F::ONE + x[1] * (F::ONE - sg)) };
    mish_backward = |x, s, c| {
        let t = softplus(x[1], F::ONE, F::from_f64c(20.0)).tanh();
        x[0] * (t + x[1] * x[1].sigmoid() * (F::ONE - t * t))
    };
    softplus_backward = |x, s, c| if x[1] * s[0] > s[1] { x[0] } else { let z = (x[1] * s[0]).exp(); x[0] * z / (z + F::ONE) };
    // (grad, self or result), s = (alpha, scale, input_scale, is_result)
    elu_backward = |x, s, c| {
        let (g, v) = (x[0], x[1]);
        if v > F::ZERO { g * s[1] }
        else if s[3] != F::ZERO { g * s[2] * (v + s[0] * s[1]) }
        else { g * s[2] * s[0] * s[1] * (v * s[2]).exp() }
    };
    // (self or result, grad): PyTorch's iterator puts self first for this one.
    leaky_relu_backward = |x, s, c| if x[0] > F::ZERO { x[1] } else { x[1] * s[0] };
    hardsigmoid_backward = |x, s, c| if x[1] > F::from_f64c(-3.0) && x[1] < F::from_f64c(3.0) { x[0] / F::from_f64c(6.0) } else { F::ZERO };
    hardswish_backward = |x, s, c| {
        let three = F::from_f64c(3.0);
        if x[1] <= -three { F::ZERO } else if x[1] < three { x[0] * (x[1] / three + F::from_f64c(0.5)) } else { x[0] }
    };
    // s[0] = lambda (hardshrink and softshrink share it)
    shrink_backward = |x, s, c| if x[1] >= -s[0] && x[1] <= s[0] { F::ZERO } else { x[0] };
    // s = (min, max)
    hardtanh_backward = |x, s, c| if x[1] <= s[0] || x[1] >= s[1] { F::ZERO } else { x[0] };
    // (self, grad): d/dx log(sigmoid(x)) = sigmoid(-x), from exp(-|x|) for stability.
    log_sigmoid_backward = |x, s, c| {
        let z = (-x[0].abs()).exp();
        let q = z / (F::ONE + z);
        x[1] * if x[0] < F::ZERO { F::ONE - q } else { q }
    };
    // (self, weight): x > 0 ? x : weight * x
    prelu = |x, s, c| if x[0] > F::ZERO { x[0] } else { x[1] * x[0] };
    // glu's halves (a, b): a * sigmoid(b)
    glu = |x, s, c| x[0] * x[1].sigmoid();
    // Pointwise losses (input, target), before reduction.
    mse = |x, s, c| { let d = x[0] - x[1]; d * d };
    // s[0] = beta
    smooth_l1 = |x, s, c| { let d = (x[0] - x[1]).abs(); if d < s[0] { F::from_f64c(0.5) * d * d / s[0] } else { d - F::from_f64c(0.5) * s[0] } };
    // s[0] = delta
    huber = |x, s, c| { let d = (x[0] - x[1]).abs(); if d < s[0] { F::from_f64c(0.5) * d * d } else { s[0] * (d - F::from_f64c(0.5) * s[0]) } };
    // -(y ln x + (1 - y) ln(1 - x)) with each log clamped at -100, as PyTorch does; x outside [0, 1] fails.
    binary_cross_entropy = |x, s, c| {
        if !(x[0] >= F::ZERO && x[0] <= F::ONE) { c.fail() } else {
            let lo = F::from_f64c(-100.0);
            (x[1] - F::ONE) * (F::ONE - x[0]).ln().max_nan(lo) - x[1] * x[0].ln().max_nan(lo)
        }
    };
    // Hurwitz zeta(x, q), accumulated in double for float as CPU does.
    zeta = |x, s, c| F::from_f64c(special::zeta(x[0].to_f64(), x[1].to_f64()));
    // s[0]: the half type whose neighbour is wanted (see `storage_round`), 0 for F's own.
    nextafter = |x, s, c| special::nextafter(x[0], x[1], s[0]);
    // Orthogonal polynomials (x, n), n truncated to int64 as CPU does.
    chebyshev_polynomial_t = |x, s, c| special::chebyshev_t(x[0], x[1]);
    chebyshev_polynomial_u = |x, s, c| special::chebyshev_u(x[0], x[1]);
    chebyshev_polynomial_v = |x, s, c| special::chebyshev_v(x[0], x[1]);
    chebyshev_polynomial_w = |x, s, c| special::chebyshev_w(x[0], x[1]);
    shifted_chebyshev_polynomial_t = |x, s, c| special::shifted_chebyshev(x[0], x[1], 0);
    shifted_chebyshev_polynomial_u = |x, s, c| special::shifted_chebyshev(x[0], x[1], 1);
    shifted_chebyshev_polynomial_v = |x, s, c| special::shifted_chebyshev(x[0], x[1], 2);
    shifted_chebyshev_polynomial_w = |x, s, c| special::shifted_chebyshev(x[0], x[1], 3);
    hermite_polynomial_h = |x, s, c| special::hermite_h(x[0], x[1]);
    hermite_polynomial_he = |x, s, c| special::hermite_he(x[0], x[1]);
    laguerre_polynomial_l = |x, s, c| special::laguerre_l(x[0], x[1]);
    legendre_polynomial_p = |x, s, c| special::legendre_p(x[0], x[1]);
}

family! {
    /// Ternary ops on any real dtype.
    RealTernary: arity 3, C: Num => C, in_place_chunks true;
    // (condition, self, other); the condition arrives converted to C (0 or 1).
    r#where = |x, s, c| if x[0] != C::ZERO { x[1] } else { x[2] };
    // (self, min, max) with tensor bounds: NaN in any operand propagates.
    clamp = |x, s, c| {
        if x[0].is_nan() { x[0] } else { let y = x[0].max_nan(x[1]); y.min_nan(x[2]) }
    };
    // self + value * t1 * t2, s[0] = value
    addcmul = |x, s, c| x[0].add(s[0].mul(x[1]).mul(x[2]));
    // (self, vec1 as a column, vec2) -> beta * self + (alpha * vec1) * vec2, s = (beta, alpha),
    // for integers (floats: FloatTernary::addr_float); beta == 0 ignores self.
    addr_int = |x, s, c| {
        let p = s[1].mul(x[1]).mul(x[2]);
        if s[0] == C::ZERO { p } else { s[0].mul(x[0]).add(p) }
    };
}

family! {
    /// Ternary floating ops.
    FloatTernary: arity 3, F: Float => F, in_place_chunks true;
    // self + value * t1 / t2, s[0] = value
    addcdiv = |x, s, c| x[0] + s[0] * x[1] / x[2];
    // addr: (self, vec1 as a column, vec2) -> beta * self + (alpha * vec1) * vec2 in CPU's
    // order, s = (beta, alpha, h) with beta and alpha already in the element type; with h
    // (see `storage_round`) every step rounds to the half type, as CPU's Half arithmetic
    // does. beta == 0 ignores self, NaN included.
    addr_float = |x, s, c| {
        let r = |v: F| storage_round(v, s[2]);
        let p = r(r(s[1] * x[1]) * x[2]);
        if s[0] == F::ZERO { p } else { r(r(s[0] * x[0]) + p) }
    };
    // (self, end, weight)
    lerp_tensor = |x, s, c| lerp(x[0], x[1], x[2]);
    // Loss backward: (input, target, grad_output) -> grad_input, s[0] = norm (1/numel for mean).
    mse_backward = |x, s, c| s[0] * (x[0] - x[1]) * x[2];
    // s[1] = beta
    smooth_l1_backward = |x, s, c| {
        let d = x[0] - x[1];
        if d < -s[1] { -s[0] * x[2] } else if d > s[1] { s[0] * x[2] } else { s[0] * d * x[2] / s[1] }
    };
    // s[1] = delta
    huber_backward = |x, s, c| {
        let d = x[0] - x[1];
        if d < -s[1] { -s[0] * x[2] * s[1] } else if d > s[1] { s[0] * x[2] * s[1] } else { s[0] * d * x[2] }
    };
    // (grad, input, target): grad * (x - y) / max(x (1 - x), 1e-12), PyTorch's EPSILON.
    binary_cross_entropy_backward = |x, s, c| x[0] * (x[1] - x[2]) / ((F::ONE - x[1]) * x[1]).max_nan(F::from_f64c(1e-12));
}

/// A resolved pointwise op: its family and the op within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointwiseOp {
    FloatUnary(FloatUnary),
    RealUnary(RealUnary),
    IntUnary(IntUnary),
    IntBinary(IntBinary),
    Predicate(Predicate),
    Compare(Compare),
    RealBinary(RealBinary),
    FloatBinary(FloatBinary),
    RealTernary(RealTernary),
    FloatTernary(FloatTernary),
}

impl PointwiseOp {
    /// True for the ops whose kernels can reject their input values (an integer
    /// division by zero, an integer to a negative power, a binary cross-entropy
    /// input outside [0, 1]), so the error depends on the data, not the call.
    pub fn checks_values(&self) -> bool {
        matches!(
            self,
            PointwiseOp::RealBinary(
                RealBinary::div_trunc
                    | RealBinary::div_floor
                    | RealBinary::remainder
                    | RealBinary::fmod
                    | RealBinary::pow
            ) | PointwiseOp::RealUnary(RealUnary::pow_tensor_scalar)
                | PointwiseOp::FloatBinary(FloatBinary::binary_cross_entropy)
        )
    }
}

macro_rules! for_each_family {
    ($m:ident) => {
        $m!(
            FloatUnary,
            RealUnary,
            IntUnary,
            IntBinary,
            Predicate,
            Compare,
            RealBinary,
            FloatBinary,
            RealTernary,
            FloatTernary
        )
    };
}

impl PointwiseOp {
    /// Every op of every family.
    pub fn all() -> Vec<PointwiseOp> {
        let mut v = Vec::new();
        macro_rules! push {
            ($($f:ident),*) => { $( v.extend($f::ALL.iter().map(|&o| PointwiseOp::$f(o))); )* };
        }
        for_each_family!(push);
        v
    }

    /// The op named `name` (`r#where` is spelled "where").
    pub fn lookup(name: &str) -> Option<PointwiseOp> {
        PointwiseOp::all().into_iter().find(|o| o.name().trim_start_matches("r#") == name)
    }

    /// PyTorch's name for the op.
    pub fn name(self) -> &'static str {
        macro_rules! name {
            ($($f:ident),*) => { match self { $( PointwiseOp::$f(o) => o.name(), )* } };
        }
        for_each_family!(name)
    }

    /// Stable integer id for the ABI: position in [`PointwiseOp::all`].
    pub fn id(self) -> i32 {
        PointwiseOp::all().iter().position(|&o| o == self).map_or(-1, |p| p as i32)
    }

    /// The op with ABI id `id`.
    pub fn from_id(id: i32) -> Option<PointwiseOp> {
        static ALL: std::sync::OnceLock<Vec<PointwiseOp>> = std::sync::OnceLock::new();
        usize::try_from(id).ok().and_then(|i| ALL.get_or_init(PointwiseOp::all).get(i).copied())
    }

    /// Ops PyTorch's CPU kernels do not define for bool (they raise NotImplementedError).
    fn rejects_bool(self) -> bool {
        use PointwiseOp as P;
        matches!(
            self,
            P::RealBinary(
                RealBinary::div_trunc
                    | RealBinary::div_floor
                    | RealBinary::remainder
                    | RealBinary::fmod
                    | RealBinary::pow
                    | RealBinary::threshold
            ) | P::IntBinary(IntBinary::lshift | IntBinary::rshift)
                | P::RealTernary(RealTernary::clamp | RealTernary::addcmul)
                | P::RealUnary(RealUnary::abs)
        )
    }

    /// Whether CPU's kernel has a loop for compute type `dt` where the family's
    /// would: most special functions are defined for float and double only, and
    /// gcd/lcm for the signed integers and uint8 only (CPU raises for the others,
    /// which the glue's fallback then reproduces).
    fn cpu_defines(self, dt: DType) -> bool {
        use PointwiseOp as P;
        let half = matches!(dt, DType::F16 | DType::BF16);
        match self {
            P::FloatUnary(
                FloatUnary::special_erfcx
                | FloatUnary::special_ndtri
                | FloatUnary::special_log_ndtr
                | FloatUnary::special_bessel_j0
                | FloatUnary::special_bessel_j1
                | FloatUnary::special_bessel_y0
                | FloatUnary::special_bessel_y1
                | FloatUnary::special_modified_bessel_i0
                | FloatUnary::special_modified_bessel_i1
                | FloatUnary::special_modified_bessel_k0
                | FloatUnary::special_modified_bessel_k1
                | FloatUnary::special_scaled_modified_bessel_k0
                | FloatUnary::special_scaled_modified_bessel_k1
                | FloatUnary::special_spherical_bessel_j0
                | FloatUnary::special_airy_ai,
            )
            | P::FloatBinary(
                FloatBinary::zeta
                | FloatBinary::chebyshev_polynomial_t
                | FloatBinary::chebyshev_polynomial_u
                | FloatBinary::chebyshev_polynomial_v
                | FloatBinary::chebyshev_polynomial_w
                | FloatBinary::shifted_chebyshev_polynomial_t
                | FloatBinary::shifted_chebyshev_polynomial_u
                | FloatBinary::shifted_chebyshev_polynomial_v
                | FloatBinary::shifted_chebyshev_polynomial_w
                | FloatBinary::hermite_polynomial_h
                | FloatBinary::hermite_polynomial_he
                | FloatBinary::laguerre_polynomial_l
                | FloatBinary::legendre_polynomial_p,
            ) => !half,
            P::IntBinary(IntBinary::gcd | IntBinary::lcm) => {
                matches!(dt, DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64)
            }
            _ => true,
        }
    }

    /// The dtype the op computes in when the caller gives no common dtype:
    /// the output's for same-type families, the first input's for predicates
    /// and comparisons.
    fn default_compute(self, it: &TensorIter) -> DType {
        match self {
            PointwiseOp::Predicate(_) | PointwiseOp::Compare(_) => it.dtype(it.noutputs),
            _ => it.dtype(0),
        }
    }

    /// Runs the op over `it` (one output first, then the inputs) computing in
    /// the opmath type of `common` (PyTorch's common dtype; `None` picks the
    /// family's default), with scalar arguments from `ctx`.
    ///
    /// Errors: [`Error::UnsupportedDtype`] when the family has no loop for the
    /// dtype (e.g. a bitwise op on float), [`Error::InvalidValue`] for integer
    /// division by zero or an integer raised to a negative power.
    ///
    /// # Safety
    /// As [`map`].
    pub unsafe fn run(self, it: &TensorIter, common: Option<DType>, ctx: &Ctx) -> Result<()> {
        // `where`'s iterator computes no meaningful common dtype (the bool condition takes part).
        let common = if self == PointwiseOp::RealTernary(RealTernary::r#where) { None } else { common };
        let compute = common.unwrap_or_else(|| self.default_compute(it));
        if matches!(compute, DType::C64 | DType::C128) {
            // SAFETY: forwarded contract.
            return unsafe { crate::ops::elementwise::complex::run_pointwise(self, it, compute, ctx) };
        }
        let op = self.name();
        let unsupported = || Error::UnsupportedDtype { op, dtype: compute };
        if compute == DType::Bool && self.rejects_bool() {
            return Err(unsupported());
        }
        if !self.cpu_defines(compute) {
            return Err(unsupported());
        }
        let half_code = match compute {
            DType::F16 => 1.0,
            DType::BF16 => 2.0,
            _ => 0.0,
        };
        if half_code != 0.0 {
            // The half type's own neighbour, and polygamma's half rounding of its zeta factor:
            // the kernels learn the storage type from a scalar, as logit's do.
            let with_code = match self {
                PointwiseOp::FloatBinary(FloatBinary::nextafter) if ctx.f[0] == 0.0 => [half_code, 0.0, 0.0, 0.0],
                PointwiseOp::FloatUnary(FloatUnary::polygamma) if ctx.f[1] == 0.0 => [ctx.f[0], half_code, 0.0, 0.0],
                _ => [0.0; 4],
            };
            if with_code != [0.0; 4] {
                // SAFETY: forwarded contract.
                return unsafe { self.run(it, Some(compute), &Ctx::with_f64(with_code)) };
            }
        }
        if self == PointwiseOp::RealUnary(RealUnary::pow_tensor_scalar) && compute.is_float() {
            // CPU special-cases exponents for float, double and bfloat16, not for float16.
            // The exponent in the compute type (float for the half types), as CPU compares it.
            let e = if compute == DType::F64 { ctx.f[0] } else { ctx.f[0] as f32 as f64 };
            let op = match e {
                _ if compute == DType::F16 => FloatUnary::pow_scalar,
                0.5 => FloatUnary::pow_scalar_sqrt,
                2.0 => FloatUnary::pow_scalar_square,
                3.0 => FloatUnary::pow_scalar_cube,
                -0.5 => FloatUnary::pow_scalar_rsqrt,
                -1.0 => FloatUnary::pow_scalar_reciprocal,
                -2.0 => FloatUnary::pow_scalar_inverse_square,
                _ => FloatUnary::pow_scalar,
            };
            // SAFETY: forwarded contract.
            return unsafe { PointwiseOp::FloatUnary(op).run(it, Some(compute), ctx) };
        }
        let logit = matches!(
            self,
            PointwiseOp::FloatUnary(FloatUnary::logit) | PointwiseOp::FloatBinary(FloatBinary::logit_backward)
        );
        if logit && matches!(compute, DType::F16 | DType::BF16) && ctx.f[1] == 0.0 {
            // CPU computes logit of the half types op by op in the half type: s[1] says which.
            let half = Ctx::with_f64([ctx.f[0], if compute == DType::F16 { 1.0 } else { 2.0 }, 0.0, 0.0]);
            // SAFETY: forwarded contract.
            return unsafe { self.run(it, Some(compute), &half) };
        }
        if self == PointwiseOp::FloatUnary(FloatUnary::gelu) {
            let op = if ctx.f[0] == 0.0 { FloatUnary::gelu_exact } else { FloatUnary::gelu_tanh_approx };
            // SAFETY: forwarded contract.
            return unsafe { PointwiseOp::FloatUnary(op).run(it, Some(compute), ctx) };
        }
        if self == PointwiseOp::FloatBinary(FloatBinary::gelu_backward) {
            let op =
                if ctx.f[0] == 0.0 { FloatBinary::gelu_exact_backward } else { FloatBinary::gelu_tanh_approx_backward };
            // SAFETY: forwarded contract.
            return unsafe { PointwiseOp::FloatBinary(op).run(it, Some(compute), ctx) };
        }
        if self == PointwiseOp::RealBinary(RealBinary::div_trunc)
            && compute == DType::BF16
            && it.strides.get(2).is_some_and(|s| s.iter().any(|&x| x != 0))
        {
            // CPU rounds the bfloat16 quotient before truncating, except for a scalar
            // divisor (then it divides in float); float16 is never rounded.
            let half = Ctx::with_f64([2.0, 0.0, 0.0, 0.0]);
            // SAFETY: forwarded contract.
            return unsafe { PointwiseOp::FloatBinary(FloatBinary::div_trunc_half).run(it, Some(compute), &half) };
        }
        // Operands of another dtype are rounded to a half-precision common dtype
        // before widening, as CPU's type promotion materialises them.
        let mut rounded;
        let it = if matches!(compute, DType::F16 | DType::BF16) && it.operands.iter().any(|o| o.dtype != compute) {
            rounded = it.clone();
            rounded.round_through = Some(compute);
            &rounded
        } else {
            it
        };
        macro_rules! floating {
            ($o:expr) => {
                match compute {
                    DType::F32 | DType::F16 | DType::BF16 => $o.run::<f32>(it, ctx),
                    DType::F64 => $o.run::<f64>(it, ctx),
                    _ => Err(unsupported()),
                }
            };
        }
        macro_rules! integral {
            ($o:expr) => {
                match compute {
                    DType::U8 => $o.run::<u8>(it, ctx),
                    DType::I8 => $o.run::<i8>(it, ctx),
                    DType::I16 => $o.run::<i16>(it, ctx),
                    DType::I32 => $o.run::<i32>(it, ctx),
                    DType::I64 => $o.run::<i64>(it, ctx),
                    DType::U16 => $o.run::<u16>(it, ctx),
                    DType::U32 => $o.run::<u32>(it, ctx),
                    DType::U64 => $o.run::<u64>(it, ctx),
                    DType::Bool => $o.run::<bool>(it, ctx),
                    _ => Err(unsupported()),
                }
            };
        }
        macro_rules! real {
            ($o:expr) => {
                match compute {
                    DType::F32 | DType::F16 | DType::BF16 => $o.run::<f32>(it, ctx),
                    DType::F64 => $o.run::<f64>(it, ctx),
                    _ => integral!($o),
                }
            };
        }
        // SAFETY: forwarded contract.
        let r = unsafe {
            match self {
                PointwiseOp::FloatUnary(o) => floating!(o),
                PointwiseOp::FloatBinary(o) => floating!(o),
                PointwiseOp::FloatTernary(o) => floating!(o),
                PointwiseOp::IntUnary(o) => integral!(o),
                PointwiseOp::IntBinary(o) => integral!(o),
                PointwiseOp::RealUnary(o) => real!(o),
                PointwiseOp::Predicate(o) => real!(o),
                PointwiseOp::Compare(o) => real!(o),
                PointwiseOp::RealBinary(o) => real!(o),
                PointwiseOp::RealTernary(o) => real!(o),
            }
        };
        r?;
        if ctx.failed.load(Ordering::Relaxed) {
            let reason = match self {
                PointwiseOp::RealBinary(RealBinary::pow) | PointwiseOp::RealUnary(RealUnary::pow_tensor_scalar) => {
                    "Integers to negative integer powers are not allowed.".to_string()
                }
                PointwiseOp::FloatBinary(FloatBinary::binary_cross_entropy) => {
                    "all elements of input should be between 0 and 1".to_string()
                }
                _ => "ZeroDivisionError".to_string(),
            };
            return Err(Error::InvalidValue { op, reason });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::iter::Operand;

    fn operand<T>(v: &mut [T]) -> Operand {
        Operand { ptr: v.as_mut_ptr() as *mut u8, dtype: DType::F32 }
    }

    /// Runs `op` on contiguous float32 inputs of equal length and returns the output.
    fn run_f32(op: &str, inputs: &mut [Vec<f32>], ctx: &Ctx) -> Vec<f32> {
        let n = inputs[0].len();
        let mut out = vec![0f32; n];
        let mut ops = vec![(operand(&mut out), &[4i64][..])];
        for v in inputs.iter_mut() {
            ops.push((operand(v), &[4i64][..]));
        }
        let it = TensorIter::new("t", &[n as i64], ops, 1, 1).unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { PointwiseOp::lookup(op).unwrap().run(&it, Some(DType::F32), ctx) }.unwrap();
        out
    }

    #[test]
    fn names_are_unique_and_resolve() {
        let all = PointwiseOp::all();
        for (i, o) in all.iter().enumerate() {
            assert_eq!(PointwiseOp::from_id(o.id()), Some(*o));
            assert_eq!(o.id(), i as i32);
        }
        let mut names: Vec<_> = all.iter().map(|o| o.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert_eq!(PointwiseOp::lookup("where"), Some(PointwiseOp::RealTernary(RealTernary::r#where)));
        assert_eq!(PointwiseOp::lookup("nope"), None);
    }

    #[test]
    fn source_reading_gives_the_table_in_order() {
        let read = crate::ops::elementwise::table_names::pointwise_op_names(include_str!("pointwise.rs"));
        let compiled: Vec<String> =
            PointwiseOp::all().iter().map(|o| o.name().trim_start_matches("r#").to_string()).collect();
        assert_eq!(
            read, compiled,
            "the glue's op ids (read from this file by build.rs) must follow PointwiseOp::all()"
        );
    }

    #[test]
    fn float_unary_ops_match_std() {
        let x: Vec<f32> = vec![-2.5, -1.0, -0.25, 0.0, 0.3, 0.75, 1.5, 3.0];
        let ctx = Ctx::default();
        type Reference = (&'static str, fn(f32) -> f32);
        let reference: [Reference; 8] = [
            ("exp", f32::exp),
            ("log1p", f32::ln_1p),
            ("sin", f32::sin),
            ("tanh", f32::tanh),
            ("floor", f32::floor),
            ("round", f32::round_ties_even),
            ("sigmoid", |v| 1.0 / (1.0 + (-v).exp())),
            ("frac", |v| v - v.trunc()),
        ];
        for (name, f) in reference {
            let got = run_f32(name, &mut [x.clone()], &ctx);
            for (g, &v) in got.iter().zip(&x) {
                let r = f(v);
                assert!(
                    *g == r || (g - r).abs() <= 2e-7 * r.abs().max(1.0) || (g.is_nan() && r.is_nan()),
                    "{name}({v}) = {g}, want {r}"
                );
            }
        }
    }

    #[test]
    fn integer_division_by_zero_is_an_error() {
        let mut out = [0i32; 2];
        let mut a = [4i32, 5];
        let mut b = [2i32, 0];
        let mk = |v: &mut [i32]| Operand { ptr: v.as_mut_ptr() as *mut u8, dtype: DType::I32 };
        let it = TensorIter::new(
            "t",
            &[2],
            vec![(mk(&mut out), &[4][..]), (mk(&mut a), &[4][..]), (mk(&mut b), &[4][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        let err = unsafe { PointwiseOp::lookup("div_floor").unwrap().run(&it, None, &Ctx::default()) }.unwrap_err();
        assert!(err.to_string().contains("ZeroDivisionError"));
        // SAFETY: the pointers address live local buffers sized for the call.
        let err = unsafe { PointwiseOp::lookup("atan2").unwrap().run(&it, None, &Ctx::default()) }.unwrap_err();
        assert!(matches!(err, Error::UnsupportedDtype { .. }));
    }

    #[test]
    fn add_with_alpha_where_and_compare() {
        let ctx = Ctx::with_f64([2.0, 0.0, 0.0, 0.0]);
        assert_eq!(run_f32("add", &mut [vec![1.0, 2.0], vec![10.0, 20.0]], &ctx), vec![21.0, 42.0]);
        let r = run_f32("where", &mut [vec![1.0, 0.0], vec![5.0, 6.0], vec![7.0, 8.0]], &ctx);
        assert_eq!(r, vec![5.0, 8.0]);
        assert_eq!(
            run_f32("lerp_scalar", &mut [vec![0.0, 10.0], vec![10.0, 20.0]], &Ctx::with_f64([0.25, 0., 0., 0.])),
            vec![2.5, 12.5]
        );
    }
}
