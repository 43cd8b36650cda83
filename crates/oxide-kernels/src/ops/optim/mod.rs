//! Optimizer kernels: fused parameter updates and the AMP grad scaler.

/// Fused Adam / AdamW and SGD steps.
pub mod fused;
/// GradScaler: unscale with non-finite check, loss-scale update.
pub mod amp;
