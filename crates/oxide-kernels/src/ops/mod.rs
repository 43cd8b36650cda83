//! The operator families, one folder each, named as in the C ABI
//! (`torch-oxide-ext`) and the glue (`csrc/aten/<family>/`). Every kernel takes
//! pointers, dtypes, a shape and strides (or a [`crate::engine::iter::TensorIter`])
//! and runs on the engine (`crate::engine`).

pub mod custom;
pub mod elementwise;
/// Discrete Fourier transforms: complex-to-complex, real-to-complex, complex-to-real
pub mod fft;
pub mod index;
pub mod linalg;
/// Neural-network layers: softmax, NLL, norms, convolution, pooling, grid
pub mod nn;
pub mod optim;
pub mod random;
pub mod reduce;
/// torchvision's detection operators: nms, RoI align/pool (plain and position-sensitive), deformable convolution
pub mod torchvision;
