//! The operator families, one folder each, named as in the C ABI
//! (`torch-oxide-ext`) and the glue (`csrc/aten/<family>/`). Every kernel takes
//! pointers, dtypes, a shape and strides (or a [`crate::engine::iter::TensorIter`])
//! and runs on the engine (`crate::engine`).

/// Pointwise families, complex numbers, dtype casts, copy, fill, factories.
pub mod elementwise;
/// Reductions, scans, sort, unique, searchsorted, histograms, nonzero.
pub mod reduce;
/// Advanced indexing, scatter-reduce and masked_scatter.
pub mod index;
/// Batched strided GEMM.
pub mod linalg;
/// Neural-network layers: softmax, NLL, norms, convolution, pooling, grid
/// sampling, embedding bags, RNN cells, attention.
pub mod nn;
/// Fused optimizer steps and the AMP grad scaler.
pub mod optim;
/// Random distributions over a counter-based bit source.
pub mod random;
/// The custom-operator examples: selu / swish with hand-written backward.
pub mod custom;
