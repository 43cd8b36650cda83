//! The custom-operator example family (the seed's custom autograd examples).

pub mod activation;
