//! Optimizer kernels: fused parameter updates and the AMP grad scaler.

pub mod amp;
pub mod fused;
