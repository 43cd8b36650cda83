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
            1 => { type $T = u8; $body }
            2 => { type $T = u16; $body }
            4 => { type $T = u32; $body }
            8 => { type $T = u64; $body }
            16 => { type $T = u128; $body }
            n => return Err($crate::error::Error::InvalidLayout { op: $op, reason: format!("element size {n}") }),
        }
    };
}

pub mod activation;
pub mod amp;
pub mod attention;
pub mod cast;
pub mod complex;
pub mod conv;
pub mod copy;
pub mod dtype;
pub mod embedding;
pub mod engine;
pub mod error;
pub mod factory;
pub mod fill;
pub mod grid_sample;
pub mod histogram;
pub mod index;
pub mod linalg;
pub mod nn;
pub mod norm;
pub mod nonzero;
pub mod optim;
pub mod pool;
pub mod pointwise;
pub mod random;
pub mod reduce;
pub mod rnn;
pub mod scan;
pub mod scatter;
pub mod search;
pub mod sort;
pub mod unique;

pub use dtype::{DType, Element};
pub use half;
pub use error::{Error, Result};
pub use engine::layout::Layout;
