//! oxide-kernels: loops over raw device memory for torch-oxide.
//!
//! Kernels receive what a loop needs and nothing else: data pointers, a
//! [`DType`], the shape and per-operand strides (in elements). Broadcasting,
//! type promotion and output allocation are decided before a kernel is
//! called (by PyTorch's meta functions in the glue), so nothing here knows
//! PyTorch.

pub mod copy;
pub mod dtype;
pub mod error;
pub mod fill;
pub mod layout;

pub use dtype::DType;
pub use error::{Error, Result};
pub use layout::Layout;
