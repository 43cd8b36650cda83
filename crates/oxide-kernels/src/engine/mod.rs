//! The machinery every kernel runs on, apart from the ops themselves: the
//! strided layout, the iteration engine, the kernel thread team, SIMD lane
//! reductions, per-thread scratch buffers and the scalar math of the compute
//! types. Nothing here names an operator; `crate::ops` builds on it.

/// `Layout<N>`: a shape and N stride arrays; dimension coalescing.
pub mod layout;
/// `TensorIter` and the task splitting above `GRAIN` (the iteration engine).
pub mod iter;
/// The kernel thread team (OpenMP-style fork/join).
pub mod team;
/// Row reductions over independent accumulator lanes (norms, softmax, reductions).
pub(crate) mod lanes;
/// Per-thread reusable scratch buffers for large kernel temporaries.
pub(crate) mod scratch;
/// `Num` and `Float`: scalar arithmetic and transcendentals of the compute types.
pub mod math;
