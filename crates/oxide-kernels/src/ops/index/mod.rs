//! Indexing kernels: advanced indexing and scatter with a reduction.

// Named after its family on purpose: the layout mirrors csrc/aten/index/index.cpp.
#[allow(clippy::module_inception)]
pub mod index;
pub mod scatter;
