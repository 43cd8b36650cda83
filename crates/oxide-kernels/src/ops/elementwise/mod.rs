//! Elementwise kernels: every pointwise op (one line each in a family table),
//! complex64/complex128, and the kernels that move or produce elements
//! without arithmetic (copy, fill, typed host writes, arange/linspace).

/// Every pointwise op, one line each in a family table (`family!`).
pub mod pointwise;
/// complex64/complex128: the element type, its functions, families and reductions.
pub mod complex;
/// Typed writes of host values into a strided operand (`randperm`).
pub mod cast;
/// Strided copy of same-size elements; `cat` of contiguous operands.
pub mod copy;
/// Strided fill with one element's bytes (`fill_`, `zero_`).
pub mod fill;
/// `arange` and `linspace`.
pub mod factory;
