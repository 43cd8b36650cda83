//! Batched strided GEMM (`csrc/aten/linalg/`, `oxide_kernels::ops::linalg`).

use super::*;

/// `c[b] = alpha * a[b] @ b[b] + beta * c[b]` for operands of one dtype, all
/// 2-d (`(m, k) @ (k, n)`, one product) or all 3-d (a batch of them), on `on`
/// (`beta == 0`: `c` is not read).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `c` does not
/// overlap `a` or `b`.
#[no_mangle]
pub unsafe extern "C" fn oxide_gemm(
    on: OxideLaunch,
    c: OxideTensor,
    alpha: f64,
    a: OxideTensor,
    b: OxideTensor,
    beta: f64,
) -> i32 {
    use oxide_kernels::ops::linalg::gemm::{gemm, GemmShape, Matrix};
    ffi(|| {
        // SAFETY: the function's contract.
        let [c, a, b] = unsafe { required("mm", [&c, &a, &b]) }?;
        let dt = common_dtype("mm", &[&c, &a, &b])?;
        let nd = c.sizes.len();
        let batched = nd == 3;
        let mismatch =
            || AbiError::Invalid(format!("mm: operands of sizes {:?} @ {:?} into {:?}", a.sizes, b.sizes, c.sizes));
        if !(nd == 2 || batched) || a.sizes.len() != nd || b.sizes.len() != nd {
            return Err(mismatch());
        }
        let r = nd - 2;
        let (m, n, k) = (c.sizes[r], c.sizes[r + 1], a.sizes[r + 1]);
        if a.sizes[r] != m
            || b.sizes[r] != k
            || b.sizes[r + 1] != n
            || (batched && (a.sizes[0] != c.sizes[0] || b.sizes[0] != c.sizes[0]))
        {
            return Err(mismatch());
        }
        let batch = if batched { c.sizes[0] as usize } else { 1 };
        // A 2-d operand is a batch of one (batch stride 0).
        let mat = move |x: &Operand| Matrix {
            ptr: x.data as *mut u8,
            batch_stride: if batched { x.strides[0] as isize } else { 0 },
            row_stride: x.strides[r] as isize,
            col_stride: x.strides[r + 1] as isize,
        };
        let shape = GemmShape { batch, m: m as usize, n: n as usize, k: k as usize };
        launch(&on, move || {
            // SAFETY: the three operands' sizes match the product's shape (checked above), so
            // the kernel addresses only their elements.
            unsafe { gemm(dt, shape, alpha, mat(&a), mat(&b), beta, mat(&c)) }
        })
    })
}
