//! Neural-network kernels: one module per layer family, forward and backward.

use crate::dtype::DType;
use crate::error::{Error, Result};

pub mod softmax;
pub mod nll;
pub mod norm;
pub mod conv;
pub mod pool;
pub mod grid_sample;
pub mod embedding;
pub mod rnn;
pub mod attention;

/// Errors with [`Error::UnsupportedDtype`] unless `dtype` is a floating type
/// (softmax and NLL compute in float or double).
pub(crate) fn check_floating(op: &'static str, dtype: DType) -> Result<()> {
    match dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        d => Err(Error::UnsupportedDtype { op, dtype: d }),
    }
}
