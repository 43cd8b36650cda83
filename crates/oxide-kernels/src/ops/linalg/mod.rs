//! Linear algebra kernels.

pub mod gemm;
