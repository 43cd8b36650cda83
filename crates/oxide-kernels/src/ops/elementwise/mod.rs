//! Elementwise kernels: every pointwise op (one line each in a family table),
//! complex64/complex128, and the kernels that move or produce elements
//! without arithmetic (copy, fill, typed host writes, arange/linspace).

pub mod pointwise;
pub mod complex;
pub mod cast;
pub mod copy;
pub mod fill;
pub mod factory;
pub mod table_names;
