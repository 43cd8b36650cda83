//! Optimizer kernels: fused parameter updates and the AMP grad scaler.

pub mod fused;
pub mod amp;
