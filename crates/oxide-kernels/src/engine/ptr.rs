//! [`SendPtr`]: the one raw pointer type that parallel tasks share.
//!
//! Kernels get raw device pointers from the glue and split the work over the
//! thread team; a closure that captures a `*mut T` is neither `Send` nor
//! `Sync`, so every task would otherwise need its own wrapper. This is that
//! wrapper, once, with its contract in one place.

/// A raw pointer that the tasks of one kernel call may share.
///
/// Contract (what every user of a `SendPtr` upholds): the memory it points to
/// stays valid until every task of the call has finished (the caller of the
/// public kernel vouches for that), and tasks that write through it touch
/// disjoint elements while no task reads an element another task writes. Read
/// the pointer with [`SendPtr::get`] inside a closure, not through a field:
/// closures capture disjoint fields, and a captured bare `*mut T` is not `Send`.
#[derive(Debug)]
pub struct SendPtr<T>(*mut T);

// Manual impls: derives would require `T: Clone`/`T: Copy`, and a pointer is
// copyable whatever it points to.
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}

// SAFETY: sending the pointer to another thread only moves an address; what is
// done through it is governed by the type's contract above (memory valid for
// the call, tasks write disjoint elements), and the pointee is `Send`.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as for `Send`: sharing the address is harmless, and the contract
// rules out two tasks writing (or one writing, one reading) the same element.
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// Wraps `ptr`; the caller takes on the contract of [`SendPtr`].
    #[inline(always)]
    pub fn new(ptr: *mut T) -> SendPtr<T> {
        SendPtr(ptr)
    }

    /// Wraps a read-only pointer (tasks only read through it).
    #[inline(always)]
    pub fn from_const(ptr: *const T) -> SendPtr<T> {
        SendPtr(ptr as *mut T)
    }

    /// The pointer.
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }

    /// Whether the pointer is null (an absent optional operand).
    #[inline(always)]
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }
}
