//! Indexing kernels: advanced indexing and scatter with a reduction.

pub mod index;
pub mod scatter;
