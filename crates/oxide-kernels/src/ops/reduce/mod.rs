//! Kernels that reduce, scan, order or count along dimensions.

/// Reductions over a reduction iterator: the ops, the inner/outer schedules.
pub mod reduce;
/// The folds of `reduce` (sum, prod, extrema, logical, arg extrema, Welford, norms).
pub(crate) mod reducers;
/// cumsum, cumprod, cummax, cummin along a dimension.
pub mod scan;
/// Stable row sort with indices.
pub mod sort;
/// `unique` / `unique_consecutive`, flat and along a dimension.
pub mod unique;
/// `searchsorted` binary search.
pub mod search;
/// `bincount` and `histc`.
pub mod histogram;
/// `count_nonzero` and `nonzero` coordinates.
pub mod nonzero;
