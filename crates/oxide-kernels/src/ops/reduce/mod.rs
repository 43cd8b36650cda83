//! Kernels that reduce, scan, order or count along dimensions.

// Named after its family on purpose: the layout mirrors csrc/aten/reduce/reduce.cpp.
pub mod histogram;
pub mod nonzero;
#[allow(clippy::module_inception)]
pub mod reduce;
pub(crate) mod reducers;
pub mod scan;
pub mod search;
pub mod sort;
pub mod unique;
