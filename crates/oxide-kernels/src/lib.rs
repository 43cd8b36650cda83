//! oxide-kernels: loops over raw device memory for torch-oxide.
//!
//! Kernels receive what a loop needs and nothing else: data pointers, a
//! [`DType`], the shape and per-operand strides (in elements). Broadcasting,
//! type promotion and output allocation are decided before a kernel is
//! called (by PyTorch's meta functions in the glue), so nothing here knows
//! PyTorch.

/// Runs `$body` with `$T` bound to the unsigned integer type of `$size` bytes
/// (1, 2, 4, 8, 16): kernels that only move bytes are written once for all dtypes.
/// Any other size returns [`Error::InvalidLayout`] naming `$op`.
macro_rules! with_element_bits {
    ($size:expr, $op:expr, |$T:ident| $body:expr) => {
        match $size {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            16 => {
                type $T = u128;
                $body
            }
            n => return Err($crate::error::Error::InvalidLayout { op: $op, reason: format!("element size {n}") }),
        }
    };
}

pub mod dtype;
pub mod engine;
pub mod error;
pub mod ops;

pub use dtype::{DType, Element};
pub use engine::layout::Layout;
pub use error::{Error, Result};
pub use half;
