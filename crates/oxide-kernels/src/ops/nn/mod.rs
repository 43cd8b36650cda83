//! Neural-network kernels: one module per layer family, forward and backward.

pub mod softmax;
pub mod nll;
pub mod norm;
pub mod conv;
pub mod pool;
pub mod grid_sample;
pub mod embedding;
pub mod rnn;
pub mod attention;
