//! Batched strided GEMM, `C = alpha * A @ B + beta * C`, on the
//! `matrixmultiply` crate (BLIS-style packed kernels with runtime CPU feature
//! detection, multithreaded through its `threading` feature, sized by
//! `MATMUL_NUM_THREADS` or the number of physical cores).
//!
//! float32/float64/complex64/complex128 run in place on arbitrary strides;
//! float16/bfloat16 are widened to float32, multiplied, and rounded once
//! (accumulation in float, as PyTorch's CPU kernels do); integer dtypes use
//! a plain loop (PyTorch supports them, nothing fast needs them). As in BLAS,
//! `beta == 0` means C is not read, so NaN in uninitialised memory is ignored.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::math::Num;

/// One strided matrix operand: pointer to element (0, 0) of batch 0 and
/// element strides (batch, row, column).
#[derive(Debug, Clone, Copy)]
pub struct Matrix {
    pub ptr: *mut u8,
    pub batch_stride: isize,
    pub row_stride: isize,
    pub col_stride: isize,
}

impl Matrix {
    /// Pointer to batch `b`'s first element for elements of `size` bytes.
    fn at(&self, b: usize, size: usize) -> *mut u8 {
        self.ptr.wrapping_offset(b as isize * self.batch_stride * size as isize)
    }
}

/// Shape of a batched product: `batch` products of (m x k) @ (k x n).
#[derive(Debug, Clone, Copy)]
pub struct GemmShape {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// `C[b] = alpha * A[b] @ B[b] + beta * C[b]` for every batch `b`, all operands of `dtype`.
/// `alpha`/`beta` are real (complex scalars are not needed by PyTorch's real-valued callers).
///
/// Errors: [`Error::UnsupportedDtype`] for bool and complex32.
///
/// # Safety
/// Every addressed element of A, B, C is valid memory of `dtype`; C's
/// elements do not alias each other or A/B.
pub unsafe fn gemm(dtype: DType, s: GemmShape, alpha: f64, a: Matrix, b: Matrix, beta: f64, c: Matrix) -> Result<()> {
    if s.m == 0 || s.n == 0 || s.batch == 0 {
        return Ok(());
    }
    // SAFETY: forwarded contract throughout.
    unsafe {
        match dtype {
            DType::F32 => {
                for i in 0..s.batch {
                    matrixmultiply::sgemm(
                        s.m, s.k, s.n, alpha as f32,
                        a.at(i, 4) as *const f32, a.row_stride, a.col_stride,
                        b.at(i, 4) as *const f32, b.row_stride, b.col_stride,
                        beta as f32, c.at(i, 4) as *mut f32, c.row_stride, c.col_stride,
                    );
                }
            }
            DType::F64 => {
                for i in 0..s.batch {
                    matrixmultiply::dgemm(
                        s.m, s.k, s.n, alpha,
                        a.at(i, 8) as *const f64, a.row_stride, a.col_stride,
                        b.at(i, 8) as *const f64, b.row_stride, b.col_stride,
                        beta, c.at(i, 8) as *mut f64, c.row_stride, c.col_stride,
                    );
                }
            }
            DType::C64 => {
                use matrixmultiply::CGemmOption::Standard;
                for i in 0..s.batch {
                    matrixmultiply::cgemm(
                        Standard, Standard, s.m, s.k, s.n, [alpha as f32, 0.0],
                        a.at(i, 8) as *const [f32; 2], a.row_stride, a.col_stride,
                        b.at(i, 8) as *const [f32; 2], b.row_stride, b.col_stride,
                        [beta as f32, 0.0], c.at(i, 8) as *mut [f32; 2], c.row_stride, c.col_stride,
                    );
                }
            }
            DType::C128 => {
                use matrixmultiply::CGemmOption::Standard;
                for i in 0..s.batch {
                    matrixmultiply::zgemm(
                        Standard, Standard, s.m, s.k, s.n, [alpha, 0.0],
                        a.at(i, 16) as *const [f64; 2], a.row_stride, a.col_stride,
                        b.at(i, 16) as *const [f64; 2], b.row_stride, b.col_stride,
                        [beta, 0.0], c.at(i, 16) as *mut [f64; 2], c.row_stride, c.col_stride,
                    );
                }
            }
            DType::F16 => widened::<half::f16>(s, alpha, a, b, beta, c),
            DType::BF16 => widened::<half::bf16>(s, alpha, a, b, beta, c),
            DType::Bool | DType::C32 => return Err(Error::UnsupportedDtype { op: "mm", dtype }),
            DType::U8 => naive::<u8>(s, alpha, a, b, beta, c),
            DType::I8 => naive::<i8>(s, alpha, a, b, beta, c),
            DType::I16 => naive::<i16>(s, alpha, a, b, beta, c),
            DType::I32 => naive::<i32>(s, alpha, a, b, beta, c),
            DType::I64 => naive::<i64>(s, alpha, a, b, beta, c),
            DType::U16 => naive::<u16>(s, alpha, a, b, beta, c),
            DType::U32 => naive::<u32>(s, alpha, a, b, beta, c),
            DType::U64 => naive::<u64>(s, alpha, a, b, beta, c),
        }
    }
    Ok(())
}

/// Gathers an (r x c) strided matrix of `T` into a row-major f32 buffer.
unsafe fn widen<T: Element>(p: *const T, rows: usize, cols: usize, rs: isize, cs: isize) -> Vec<f32> {
    let mut v = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: caller contract.
            v.push(unsafe { p.offset(i as isize * rs + j as isize * cs).read_unaligned() }.to_f64() as f32);
        }
    }
    v
}

unsafe fn widened<T: Element>(s: GemmShape, alpha: f64, a: Matrix, b: Matrix, beta: f64, c: Matrix) {
    for i in 0..s.batch {
        // SAFETY: forwarded contract.
        unsafe {
            let aw = widen(a.at(i, 2) as *const T, s.m, s.k, a.row_stride, a.col_stride);
            let bw = widen(b.at(i, 2) as *const T, s.k, s.n, b.row_stride, b.col_stride);
            let cp = c.at(i, 2) as *mut T;
            let mut cw = if beta != 0.0 { widen(cp, s.m, s.n, c.row_stride, c.col_stride) } else { vec![0.0; s.m * s.n] };
            matrixmultiply::sgemm(
                s.m, s.k, s.n, alpha as f32,
                aw.as_ptr(), s.k as isize, 1, bw.as_ptr(), s.n as isize, 1,
                if beta != 0.0 { beta as f32 } else { 0.0 }, cw.as_mut_ptr(), s.n as isize, 1,
            );
            for r in 0..s.m {
                for q in 0..s.n {
                    cp.offset(r as isize * c.row_stride + q as isize * c.col_stride).write_unaligned(T::from_f64(cw[r * s.n + q] as f64));
                }
            }
        }
    }
}

/// Integer GEMM (wrapping arithmetic, as C++ integers).
unsafe fn naive<T: Element + Num>(s: GemmShape, alpha: f64, a: Matrix, b: Matrix, beta: f64, c: Matrix) {
    let (alpha, beta) = (T::from_f64(alpha), T::from_f64(beta));
    for i in 0..s.batch {
        let (ap, bp, cp) = (a.at(i, size_of::<T>()) as *const T, b.at(i, size_of::<T>()) as *const T, c.at(i, size_of::<T>()) as *mut T);
        for r in 0..s.m {
            for q in 0..s.n {
                let mut acc = T::ZERO;
                for l in 0..s.k {
                    // SAFETY: caller contract.
                    let (x, y) = unsafe {
                        (
                            ap.offset(r as isize * a.row_stride + l as isize * a.col_stride).read_unaligned(),
                            bp.offset(l as isize * b.row_stride + q as isize * b.col_stride).read_unaligned(),
                        )
                    };
                    acc = acc.add(x.mul(y));
                }
                // SAFETY: caller contract.
                unsafe {
                    let o = cp.offset(r as isize * c.row_stride + q as isize * c.col_stride);
                    let prev = if beta == T::ZERO { T::ZERO } else { beta.mul(o.read_unaligned()) };
                    o.write_unaligned(prev.add(alpha.mul(acc)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mat<T>(v: &mut [T], rs: isize, cs: isize) -> Matrix {
        Matrix { ptr: v.as_mut_ptr() as *mut u8, batch_stride: 0, row_stride: rs, col_stride: cs }
    }

    #[test]
    fn float_half_and_int_gemm_match_naive() {
        // A (2x3) row-major, B (3x2) given transposed (column-major), C strided with beta.
        let mut a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut b = [1.0f32, 0.0, -1.0, 2.0, 1.0, 0.5];
        let mut c = [1.0f32, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0];
        let want = [-2.0f32 * 2.0 + 0.5, 5.5 * 2.0 + 0.5, -2.0 * 2.0 + 0.5, 16.0 * 2.0 + 0.5];
        let s = GemmShape { batch: 1, m: 2, n: 2, k: 3 };
        unsafe { gemm(DType::F32, s, 2.0, mat(&mut a, 3, 1), mat(&mut b, 1, 3), 0.5, mat(&mut c, 4, 2)).unwrap() };
        assert_eq!([c[0], c[2], c[4], c[6]], want);
        let mut ah = a.map(half::f16::from_f32);
        let mut bh = b.map(half::f16::from_f32);
        let mut ch = [half::f16::from_f32(f32::NAN); 4];
        unsafe { gemm(DType::F16, s, 1.0, mat(&mut ah, 3, 1), mat(&mut bh, 1, 3), 0.0, mat(&mut ch, 2, 1)).unwrap() };
        assert_eq!(ch.map(|v| v.to_f32()), [-2.0, 5.5, -2.0, 16.0]);
        let mut ai = [1i64, 2, 3, 4, 5, 6];
        let mut bi = [1i64, 0, -1, 2, 1, 3];
        let mut ci = [0i64; 4];
        unsafe { gemm(DType::I64, s, 1.0, mat(&mut ai, 3, 1), mat(&mut bi, 1, 3), 0.0, mat(&mut ci, 2, 1)).unwrap() };
        assert_eq!(ci, [-2, 13, -2, 31]);
        assert!(unsafe { gemm(DType::Bool, s, 1.0, mat(&mut ai, 3, 1), mat(&mut bi, 1, 3), 0.0, mat(&mut ci, 2, 1)) }.is_err());
    }

    #[test]
    fn batched_and_empty() {
        let mut a = [1.0f64, 2.0, 3.0, 4.0];
        let mut b = [10.0f64, 100.0];
        let mut c = [0.0f64; 2];
        // Two batches of (1x2)@(2x1) with B broadcast (batch stride 0).
        let s = GemmShape { batch: 2, m: 1, n: 1, k: 2 };
        let am = Matrix { batch_stride: 2, ..mat(&mut a, 2, 1) };
        let cm = Matrix { batch_stride: 1, ..mat(&mut c, 1, 1) };
        unsafe { gemm(DType::F64, s, 1.0, am, mat(&mut b, 1, 1), 0.0, cm).unwrap() };
        assert_eq!(c, [210.0, 430.0]);
        // k == 0: C = beta * C.
        let s = GemmShape { batch: 1, m: 1, n: 2, k: 0 };
        unsafe { gemm(DType::F64, s, 1.0, am, mat(&mut b, 1, 1), 0.0, mat(&mut c, 1, 1)).unwrap() };
        assert_eq!(c, [0.0, 0.0]);
    }
}
