//! The Python view of sharing device memory between processes
//! (`oxide_runtime::ipc`), for `torch_oxide._multiprocessing`.
//!
//! The sending side names a block and counts its sends in the process's
//! counter file (`_ipc_send`, `_ipc_counts`); `_ipc_collect` frees what every
//! receiver released. The receiving side maps the block
//! (`_ipc_open`) and gets a DLPack capsule of it: `torch.utils.dlpack.from_dlpack`
//! turns that into an oxide tensor whose storage owns the mapping, and when
//! PyTorch frees the storage the capsule's deleter unmaps it and takes one
//! off the sender's count, from whichever thread frees it, without the GIL
//! (or the runtime does at exit, for blocks still open then).

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use oxide_runtime::runtime;

use crate::to_py;

/// `kDLExtDev`: the device type PyTorch gives PrivateUse1 tensors in DLPack.
const DL_EXT_DEV: i32 = 12;
/// `kDLUInt`.
const DL_UINT: u8 = 1;
const CAPSULE_NAME: &std::ffi::CStr = c"dltensor";

#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// One opened block: the DLPack tensor handed to PyTorch (first, so that a
/// pointer to it is a pointer to the whole) and what closing it needs.
#[repr(C)]
struct Opened {
    managed: DlManagedTensor,
    shape: [i64; 1],
    ptr: usize,
}

/// The capsule's deleter, called by PyTorch when the storage dies (or by the
/// capsule's destructor when nobody consumed it).
unsafe extern "C" fn close_opened(managed: *mut DlManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the first field of an `Opened` leaked by `_ipc_open`,
    // and PyTorch calls the deleter exactly once.
    let opened = unsafe { Box::from_raw(managed as *mut Opened) };
    let ptr = opened.ptr;
    let closed = std::panic::catch_unwind(|| {
        let rt = runtime()?;
        let closed = rt.ipc_close(ptr);
        rt.ipc().release_opened(ptr);
        closed
    });
    if !matches!(closed, Ok(Ok(()))) {
        // Nothing can be raised from a deleter; the mapping stays, which costs only address space.
        eprintln!("torch_oxide: could not unmap shared oxide memory at {ptr:#x}: {closed:?}");
    }
}

/// Destructor of a capsule: runs the deleter only when PyTorch did not take
/// the tensor (it renames consumed capsules to "used_dltensor").
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with a live capsule; the name check tells whether it
    // still owns its tensor.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, CAPSULE_NAME.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, CAPSULE_NAME.as_ptr()) as *mut DlManagedTensor;
            close_opened(managed);
        } else {
            // PyCapsule_IsValid does not set an error, but be safe for the caller.
            pyo3::ffi::PyErr_Clear();
        }
    }
}

/// Sends the device memory at `ptr`: waits for its block's streams, counts the
/// send, and returns `(device, fd, offset, slot)`; `fd` stays owned by the runtime
/// (duplicate it to send it).
#[pyfunction]
fn _ipc_send(py: Python<'_>, ptr: usize) -> PyResult<(usize, i32, usize, usize)> {
    let (h, slot) = py.detach(|| runtime().and_then(|rt| rt.ipc_send(ptr))).map_err(to_py)?;
    Ok((h.device, h.fd, h.offset, slot))
}

/// True when `ptr` is device memory received from another process.
#[pyfunction]
fn _ipc_is_imported(ptr: usize) -> PyResult<bool> {
    runtime().map(|rt| rt.ipc_is_imported(ptr)).map_err(to_py)
}

/// `(token, fd)` of this process's counter file (created on the first call).
#[pyfunction]
fn _ipc_counts() -> PyResult<(String, i32)> {
    let rt = runtime().map_err(to_py)?;
    let mut ipc = rt.ipc();
    let counts = ipc.counts().map_err(to_py)?;
    Ok((counts.token().to_owned(), counts.fd()))
}

/// Frees the sent blocks every receiver released after their tensors freed them;
/// forgets the others' counts. Returns how many sent blocks were released.
#[pyfunction]
fn _ipc_collect(py: Python<'_>) -> PyResult<usize> {
    let rt = runtime().map_err(to_py)?;
    let before = rt.ipc().sent_count();
    let freed = py.detach(|| rt.ipc_collect());
    for ptr in freed {
        // Its access history ends here (a freed block of a live tensor would be poisoned).
        crate::sanitize::forget(ptr);
    }
    Ok(before - rt.ipc().sent_count())
}

/// Sent blocks some receiver may still use.
#[pyfunction]
fn _ipc_sent_count() -> PyResult<usize> {
    runtime().map(|rt| rt.ipc().sent_count()).map_err(to_py)
}

/// Takes one off `slot`'s count in the sender `token`'s counter file (this
/// process's descriptor of it: `counts_fd`): a receive whose block is already open.
#[pyfunction]
fn _ipc_release_send(token: &str, counts_fd: i32, slot: usize) -> PyResult<()> {
    let rt = runtime().map_err(to_py)?;
    let count = rt.ipc().sender_count(token, counts_fd, slot).map_err(to_py)?;
    count.fetch_sub(1, Ordering::AcqRel);
    Ok(())
}

/// Gives back the senders' counts of every block this process still has open
/// (a process about to exit); returns how many.
#[pyfunction]
fn _ipc_release_all_opened() -> PyResult<usize> {
    runtime().map(|rt| rt.ipc().release_all_opened()).map_err(to_py)
}

/// Removes this process's memory-counter file (`python -m torch_oxide` reads it)
/// for a process about to end without `atexit`.
#[pyfunction]
fn _remove_published() {
    oxide_runtime::publish::remove_now();
}

/// Maps `nbytes` at `offset` of the sender's device memory file `fd` into
/// oxide:`device` and returns a DLPack capsule of it (uint8, `nbytes` long).
/// When PyTorch frees the tensor made from it, the memory is unmapped and
/// `slot`'s count in the sender `token`'s counter file (`counts_fd` here) drops by one.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn _ipc_open(
    py: Python<'_>,
    device: i64,
    fd: i32,
    offset: usize,
    nbytes: usize,
    token: &str,
    counts_fd: i32,
    slot: usize,
) -> PyResult<Py<PyAny>> {
    let rt = runtime().map_err(to_py)?;
    let count = rt.ipc().sender_count(token, counts_fd, slot).map_err(to_py)?;
    let ptr = rt.ipc_open(device, fd, offset, nbytes).map_err(|e| {
        // This receive holds nothing: its count goes back, or the sender would keep the block.
        count.fetch_sub(1, Ordering::AcqRel);
        to_py(e)
    })?;
    let len = i64::try_from(nbytes).map_err(|_| PyRuntimeError::new_err("storage too large"))?;
    let opened = Box::into_raw(Box::new(Opened {
        managed: DlManagedTensor {
            dl_tensor: DlTensor {
                data: ptr as *mut c_void,
                device: DlDevice { device_type: DL_EXT_DEV, device_id: device as i32 },
                ndim: 1,
                dtype: DlDataType { code: DL_UINT, bits: 8, lanes: 1 },
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(close_opened),
        },
        shape: [len],
        ptr,
    }));
    rt.ipc().note_opened(ptr, count);
    // SAFETY: `opened` was just leaked and is valid; the shape lives inside it.
    unsafe {
        (*opened).managed.dl_tensor.shape = (*opened).shape.as_mut_ptr();
        (*opened).managed.manager_ctx = opened as *mut c_void;
    }
    // SAFETY: a capsule owning `opened` (freed by the destructor unless PyTorch
    // consumes it); the name is a static C string.
    let capsule = unsafe {
        pyo3::ffi::PyCapsule_New(
            opened as *mut c_void,
            CAPSULE_NAME.as_ptr() as *const c_char,
            Some(capsule_destructor),
        )
    };
    if capsule.is_null() {
        // SAFETY: no capsule took ownership: close it here.
        unsafe { close_opened(opened as *mut DlManagedTensor) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
}

/// Adds this module's functions to `torch_oxide._C`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_ipc_send, m)?)?;
    m.add_function(wrap_pyfunction!(_ipc_is_imported, m)?)?;
    m.add_function(wrap_pyfunction!(_ipc_counts, m)?)?;
    m.add_function(wrap_pyfunction!(_ipc_collect, m)?)?;
    m.add_function(wrap_pyfunction!(_ipc_sent_count, m)?)?;
    m.add_function(wrap_pyfunction!(_ipc_release_send, m)?)?;
    m.add_function(wrap_pyfunction!(_ipc_open, m)?)?;
    m.add_function(wrap_pyfunction!(_ipc_release_all_opened, m)?)?;
    m.add_function(wrap_pyfunction!(_remove_published, m)?)?;
    Ok(())
}
