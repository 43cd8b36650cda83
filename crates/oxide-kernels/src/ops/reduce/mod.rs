//! Kernels that reduce, scan, order or count along dimensions.

pub mod reduce;
pub(crate) mod reducers;
pub mod scan;
pub mod sort;
pub mod unique;
pub mod search;
pub mod histogram;
pub mod nonzero;
