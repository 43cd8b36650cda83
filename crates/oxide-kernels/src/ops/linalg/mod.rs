//! Linear algebra kernels.

/// Batched strided GEMM on the `gemm` crate, split over the thread team.
pub mod gemm;
