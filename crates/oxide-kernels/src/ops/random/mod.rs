//! Random-number kernels.

pub mod random;
