//! Neural-network kernels: one module per layer family, forward and backward.

use crate::dtype::DType;
use crate::error::{Error, Result};

/// softmax / log_softmax and backward over `[outer, dim, inner]`.
pub mod softmax;
/// nll_loss / nll_loss2d forward and backward.
pub mod nll;
/// Batch norm, group norm (and layer norm), forward and backward.
pub mod norm;
/// Convolution and transposed convolution, unfold/fold (im2col/col2im + GEMM).
pub mod conv;
/// Max and average pooling, fixed and adaptive windows, forward and backward.
pub mod pool;
/// 2-d grid sampling and its gradients.
pub mod grid_sample;
/// Embedding bags and their gradients.
pub mod embedding;
/// Fused LSTM and GRU cells, forward and backward.
pub mod rnn;
/// Fused scaled dot-product attention (FlashAttention-2), forward and backward.
pub mod attention;

/// Errors with [`Error::UnsupportedDtype`] unless `dtype` is a floating type
/// (softmax and NLL compute in float or double).
pub(crate) fn check_floating(op: &'static str, dtype: DType) -> Result<()> {
    match dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        d => Err(Error::UnsupportedDtype { op, dtype: d }),
    }
}
