//! Random-number kernels.

// Named after its family on purpose: the layout mirrors csrc/aten/random/random.cpp.
#[allow(clippy::module_inception)]
pub mod random;
