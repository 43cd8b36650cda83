//! Random-number kernels.

/// Distributions over a counter-based bit source, dropout scaling, randperm, multinomial.
pub mod random;
