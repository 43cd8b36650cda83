//! Indexing kernels: advanced indexing and scatter with a reduction.

/// Advanced indexing: gather through index tensors, `index_put_`.
pub mod index;
/// scatter with reduction (sum/prod/mean/amax/amin), `masked_scatter_`.
pub mod scatter;
