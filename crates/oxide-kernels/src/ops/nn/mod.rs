//! Neural-network kernels: one module per layer family, forward and backward.

pub mod attention;
pub mod conv;
pub mod embedding;
pub mod grid_sample;
pub mod margin;
pub mod nll;
pub mod norm;
pub mod pool;
pub mod rnn;
pub mod softmax;
