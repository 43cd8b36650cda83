//! The machinery every kernel runs on, apart from the ops themselves: the
//! strided layout, the iteration engine, the kernel thread team, the one
//! pointer type tasks share ([`SendPtr`]), SIMD lane reductions, per-thread
//! scratch buffers, the scalar math of the compute types and the probes of the
//! machine's limits (memory bandwidth, FMA peak). Nothing here names an operator; `crate::ops` builds on it.

pub mod convert;
pub mod iter;
pub(crate) mod lanes;
pub mod layout;
pub mod limits;
pub mod math;
pub mod ptr;
pub(crate) mod scratch;
pub mod team;

pub use ptr::SendPtr;
