//! The machinery every kernel runs on, apart from the ops themselves: the
//! strided layout, the iteration engine, the kernel thread team, the one
//! pointer type tasks share ([`SendPtr`]), SIMD lane reductions, per-thread
//! scratch buffers and the scalar math of the compute types. Nothing here names an operator; `crate::ops` builds on it.

pub mod layout;
pub mod iter;
pub mod team;
pub mod ptr;
pub(crate) mod lanes;
pub(crate) mod scratch;
pub mod math;

pub use ptr::SendPtr;
