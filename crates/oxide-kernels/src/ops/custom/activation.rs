//! Activation functions with hand-written backward, used by the oxide
//! autograd kernels (`selu`) and the `oxide::swish` custom operator.
//! Values are computed in double and rounded once into the element type.
//! SELU constants from Klambauer et al., "Self-Normalizing Neural Networks"
//! (NeurIPS 2017), as PyTorch defines them.

use crate::dtype::{DType, Element};
use crate::engine::layout::Layout;
use crate::error::Result;
use crate::with_real_dtype;

/// SELU's alpha.
pub const SELU_ALPHA: f64 = 1.673_263_242_354_377_284_817_042_991_671_7;
/// SELU's scale (lambda).
pub const SELU_SCALE: f64 = 1.050_700_987_355_480_493_419_334_985_294_6;

/// Forward activations: `y = f(x)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// `scale * (x > 0 ? x : alpha * (exp(x) - 1))`.
    Selu,
    /// `x * sigmoid(x)`.
    Swish,
}

/// Backward activations: `dx = dy * f'(x)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backward {
    /// `dy * scale * (x > 0 ? 1 : alpha * exp(x))`.
    Selu,
    /// `dy * s * (1 + x * (1 - s))` with `s = sigmoid(x)`.
    Swish,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Forward {
    fn apply(self, x: f64) -> f64 {
        match self {
            Forward::Selu => SELU_SCALE * if x > 0.0 { x } else { SELU_ALPHA * x.exp_m1() },
            Forward::Swish => x * sigmoid(x),
        }
    }
}

impl Backward {
    fn apply(self, dy: f64, x: f64) -> f64 {
        match self {
            Backward::Selu => dy * SELU_SCALE * if x > 0.0 { 1.0 } else { SELU_ALPHA * x.exp() },
            Backward::Swish => {
                let s = sigmoid(x);
                dy * s * (1.0 + x * (1.0 - s))
            }
        }
    }
}

/// `out = f(x)` over operands (out, x) of floating `dtype`.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// Both operands' elements addressed by `layout` must be valid (out for writes).
pub unsafe fn forward(f: Forward, dtype: DType, layout: &Layout<2>, out: *mut u8, x: *const u8) -> Result<()> {
    dtype.require_float("activation")?;
    // SAFETY: forwarded caller contract.
    with_real_dtype!(dtype, "activation", |T| unsafe {
        map::<T, 2>(layout, [out, x as *mut u8], |v| T::from_f64(f.apply(v[1].to_f64())))
    });
    Ok(())
}

/// `dx = dy * f'(x)` over operands (dx, dy, x) of floating `dtype`.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// All operands' elements addressed by `layout` must be valid (dx for writes).
pub unsafe fn backward(
    f: Backward,
    dtype: DType,
    layout: &Layout<3>,
    dx: *mut u8,
    dy: *const u8,
    x: *const u8,
) -> Result<()> {
    dtype.require_float("activation_backward")?;
    // SAFETY: forwarded caller contract.
    with_real_dtype!(dtype, "activation_backward", |T| unsafe {
        map::<T, 3>(layout, [dx, dy as *mut u8, x as *mut u8], |v| T::from_f64(f.apply(v[1].to_f64(), v[2].to_f64())))
    });
    Ok(())
}

/// Writes `f(inputs)` to operand 0 for every element; operands 1.. are read.
unsafe fn map<T: Element, const N: usize>(layout: &Layout<N>, ptrs: [*mut u8; N], f: impl Fn([T; N]) -> T) {
    let l = layout.coalesced();
    let last = l.shape.len().saturating_sub(1);
    let strides: [isize; N] = std::array::from_fn(|k| l.strides[k].get(last).copied().unwrap_or(1));
    let ptrs = ptrs.map(|p| p as *mut T);
    l.for_each_row(|offsets, n| {
        for i in 0..n as isize {
            // SAFETY: every offset is in the caller's layout; operand 0's slot is read
            // before it is written, which is harmless for an output.
            unsafe {
                let vals: [T; N] =
                    std::array::from_fn(|k| ptrs[k].offset(offsets[k] + i * strides[k]).read_unaligned());
                ptrs[0].offset(offsets[0] + i * strides[0]).write_unaligned(f(vals));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_matches_formulas_and_backward_matches_finite_differences() {
        let xs = [-3.0f64, -0.5, 0.0, 0.25, 2.0];
        for (fw, bw) in [(Forward::Selu, Backward::Selu), (Forward::Swish, Backward::Swish)] {
            let mut y = [0f64; 5];
            let l2 = Layout::new("t", &[5], [&[1], &[1]]).unwrap();
            // SAFETY: 5 elements each.
            unsafe { forward(fw, DType::F64, &l2, y.as_mut_ptr() as *mut u8, xs.as_ptr() as *const u8).unwrap() };
            let dy = [1.0f64; 5];
            let mut dx = [0f64; 5];
            let l3 = Layout::new("t", &[5], [&[1], &[1], &[1]]).unwrap();
            // SAFETY: 5 elements each.
            unsafe {
                backward(
                    bw,
                    DType::F64,
                    &l3,
                    dx.as_mut_ptr() as *mut u8,
                    dy.as_ptr() as *const u8,
                    xs.as_ptr() as *const u8,
                )
                .unwrap()
            };
            for (i, &x) in xs.iter().enumerate() {
                assert!((y[i] - fw.apply(x)).abs() < 1e-15);
                if x != 0.0 {
                    let h = 1e-6;
                    let numeric = (fw.apply(x + h) - fw.apply(x - h)) / (2.0 * h);
                    assert!((dx[i] - numeric).abs() < 1e-6, "{fw:?} at {x}: {} vs {numeric}", dx[i]);
                }
            }
        }
        assert!((Forward::Selu.apply(1.0) - SELU_SCALE).abs() < 1e-15);
    }

    #[test]
    fn rejects_integers_and_handles_bf16() {
        let l2 = Layout::new("t", &[1], [&[1], &[1]]).unwrap();
        // SAFETY: rejected before any access.
        assert!(unsafe { forward(Forward::Swish, DType::I32, &l2, std::ptr::null_mut(), std::ptr::null()) }.is_err());
        let x = [half::bf16::from_f32(2.0)];
        let mut y = [half::bf16::ZERO];
        // SAFETY: one element each.
        unsafe {
            forward(Forward::Swish, DType::BF16, &l2, y.as_mut_ptr() as *mut u8, x.as_ptr() as *const u8).unwrap()
        };
        assert!((y[0].to_f64() - 2.0 * sigmoid(2.0)).abs() < 0.01);
    }
}
