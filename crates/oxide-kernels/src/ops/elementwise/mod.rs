//! Elementwise kernels: every pointwise op (one line each in a family table),
//! complex64/complex128, and the kernels that move or produce elements
//! without arithmetic (copy, fill, typed host writes, arange/linspace).

pub mod cast;
pub mod complex;
pub mod copy;
pub mod factory;
pub mod fill;
pub mod pointwise;
pub mod special;
#[cfg(test)]
mod special_tests;
pub mod table_names;
