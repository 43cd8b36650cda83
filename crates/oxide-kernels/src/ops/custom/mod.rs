//! The custom-operator example family (the seed's custom autograd examples).

/// selu / swish forward and backward, used by oxide's autograd kernels and `oxide::swish`.
pub mod activation;
