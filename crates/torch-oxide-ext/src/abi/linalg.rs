//! Batched strided GEMM (`csrc/aten/linalg/`, `oxide_kernels::ops::linalg`).

use super::*;

/// One operand of [`oxide_gemm`]: pointer to element (0, 0) of batch 0 and element strides.
#[repr(C)]
pub struct OxideMatrix {
    pub data: *mut c_void,
    pub batch_stride: i64,
    pub row_stride: i64,
    pub col_stride: i64,
}

/// `C[b] = alpha * A[b] @ B[b] + beta * C[b]` for `batch` products of
/// (m x k) @ (k x n), all of dtype `dtype_code`, on `stream` of `device`
/// (`beta == 0`: C is not read).
///
/// # Safety
/// Every addressed element is live device memory; C does not overlap A or B.
#[no_mangle]
pub unsafe extern "C" fn oxide_gemm(
    device: i32,
    stream: i64,
    dtype_code: i32,
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: OxideMatrix,
    b: OxideMatrix,
    beta: f64,
    c: OxideMatrix,
) -> i32 {
    use oxide_kernels::ops::linalg::gemm::{gemm, GemmShape, Matrix};
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let mat = |x: &OxideMatrix| Matrix { ptr: x.data as *mut u8, batch_stride: x.batch_stride as isize, row_stride: x.row_stride as isize, col_stride: x.col_stride as isize };
        let work = batch * m * n;
        let operands = if k == 0 { vec![c.data as *const c_void] } else { vec![a.data as *const c_void, b.data as *const c_void, c.data as *const c_void] };
        launch_raw(device, stream, work, &operands, || unsafe { gemm(dt, GemmShape { batch, m, n, k }, alpha, mat(&a), mat(&b), beta, mat(&c)) })
    })
}
