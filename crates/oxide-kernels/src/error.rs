//! The kernels' error type.

use crate::dtype::DType;

/// Errors a kernel reports instead of touching memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The kernel has no loop for this dtype.
    #[error("{op}: dtype {dtype} is not supported on oxide")]
    UnsupportedDtype { op: &'static str, dtype: DType },
    /// A dtype code the ABI does not define.
    #[error("dtype code {code} (a c10::ScalarType) is not supported on oxide")]
    UnknownDtype { code: i32 },
    /// Input values the operation rejects (PyTorch raises RuntimeError for these).
    #[error("{reason}")]
    InvalidValue { op: &'static str, reason: String },
    /// An index outside `[-size, size)` (PyTorch raises IndexError).
    #[error("index {index} is out of bounds for dimension {dim} with size {size}")]
    IndexOutOfBounds { index: i64, dim: i64, size: i64 },
    /// A class or bin index outside its range, with PyTorch's message (PyTorch raises IndexError).
    #[error("{reason}")]
    OutOfRange { op: &'static str, reason: String },
    /// Operands whose shape/stride arrays disagree in length, or a negative extent.
    #[error("{op}: invalid layout: {reason}")]
    InvalidLayout { op: &'static str, reason: String },
}

impl Error {
    /// The operator that reported the error, when the error names one.
    pub fn op(&self) -> Option<&'static str> {
        match self {
            Error::UnsupportedDtype { op, .. }
            | Error::InvalidValue { op, .. }
            | Error::OutOfRange { op, .. }
            | Error::InvalidLayout { op, .. } => Some(op),
            Error::UnknownDtype { .. } | Error::IndexOutOfBounds { .. } => None,
        }
    }
}

/// Shorthand used throughout the kernels.
pub type Result<T> = std::result::Result<T, Error>;
