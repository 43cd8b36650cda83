//! Batched strided GEMM, `C = alpha * A @ B + beta * C`, on the
//! `matrixmultiply` crate (BLIS-style packed kernels with runtime CPU feature
//! detection), single-threaded per call; products of at least [`SPLIT_MACS`]
//! multiply-adds are split over rayon: whole batch entries when there are at
//! least as many as threads, else the output's columns (or rows, when it is
//! taller than wide) in one block per thread. `matrixmultiply`'s own
//! `threading` feature is off: on these machines it ran no faster on two
//! threads than on one, and its thread wake-ups tripled the time of small
//! products (a [32, 128] x [128, 512] mm took 109 us against 40 us single-threaded).
//!
//! float32/float64/complex64/complex128 run in place on arbitrary strides;
//! float16/bfloat16 are widened to float32, multiplied, and rounded once
//! (accumulation in float, as PyTorch's CPU kernels do); integer dtypes use
//! a plain loop (PyTorch supports them, nothing fast needs them). As in BLAS,
//! `beta == 0` means C is not read, so NaN in uninitialised memory is ignored.

use std::ops::Range;

use rayon::prelude::*;

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

// SAFETY: a descriptor of memory the caller of `gemm` vouches for; the
// parallel parts write disjoint blocks of C.
unsafe impl Send for Matrix {}
unsafe impl Sync for Matrix {}

impl Matrix {
    /// Pointer to batch `b`'s first element for elements of `size` bytes.
    fn at(&self, b: usize, size: usize) -> *mut u8 {
        self.ptr.wrapping_offset(b as isize * self.batch_stride * size as isize)
    }
    /// Pointer to element (`row`, `col`) of batch `b`, as `T`.
    fn elem<T>(&self, b: usize, row: usize, col: usize) -> *mut T {
        (self.at(b, size_of::<T>()) as *mut T).wrapping_offset(row as isize * self.row_stride + col as isize * self.col_stride)
    }
}

/// Multiply-adds from which a product is split over threads: a rayon fork costs a
/// few microseconds, about what one thread needs for 2^19 multiply-adds.
pub const SPLIT_MACS: usize = 1 << 19;

/// Calls `part(b, rows, cols)` for output blocks covering every batch entry's
/// (m x n) product exactly once, in parallel when the work is large (see the
/// module documentation). Blocks are multiples of 16 columns or rows wide, so
/// they line up with the micro-kernels' tiles.
fn schedule(s: GemmShape, part: impl Fn(usize, Range<usize>, Range<usize>) + Sync) {
    let threads = rayon::current_num_threads();
    let macs = s.m.saturating_mul(s.n).saturating_mul(s.k);
    if threads <= 1 || macs.saturating_mul(s.batch) < SPLIT_MACS {
        (0..s.batch).for_each(|b| part(b, 0..s.m, 0..s.n));
    } else if s.batch >= threads || macs < SPLIT_MACS {
        (0..s.batch).into_par_iter().for_each(|b| part(b, 0..s.m, 0..s.n));
    } else {
        let by_cols = s.n >= s.m;
        let len = if by_cols { s.n } else { s.m };
        let chunk = len.div_ceil(threads).next_multiple_of(16);
        for b in 0..s.batch {
            (0..len.div_ceil(chunk)).into_par_iter().for_each(|p| {
                let r = p * chunk..((p + 1) * chunk).min(len);
                if by_cols { part(b, 0..s.m, r) } else { part(b, r, 0..s.n) }
            });
        }
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
            DType::F32 => schedule(s, |i, r, q| {
                matrixmultiply::sgemm(
                    r.len(), s.k, q.len(), alpha as f32,
                    a.elem::<f32>(i, r.start, 0), a.row_stride, a.col_stride,
                    b.elem::<f32>(i, 0, q.start), b.row_stride, b.col_stride,
                    beta as f32, c.elem::<f32>(i, r.start, q.start), c.row_stride, c.col_stride,
                )
            }),
            DType::F64 => schedule(s, |i, r, q| {
                matrixmultiply::dgemm(
                    r.len(), s.k, q.len(), alpha,
                    a.elem::<f64>(i, r.start, 0), a.row_stride, a.col_stride,
                    b.elem::<f64>(i, 0, q.start), b.row_stride, b.col_stride,
                    beta, c.elem::<f64>(i, r.start, q.start), c.row_stride, c.col_stride,
                )
            }),
            DType::C64 => schedule(s, |i, r, q| {
                use matrixmultiply::CGemmOption::Standard;
                matrixmultiply::cgemm(
                    Standard, Standard, r.len(), s.k, q.len(), [alpha as f32, 0.0],
                    a.elem::<[f32; 2]>(i, r.start, 0), a.row_stride, a.col_stride,
                    b.elem::<[f32; 2]>(i, 0, q.start), b.row_stride, b.col_stride,
                    [beta as f32, 0.0], c.elem::<[f32; 2]>(i, r.start, q.start), c.row_stride, c.col_stride,
                )
            }),
            DType::C128 => schedule(s, |i, r, q| {
                use matrixmultiply::CGemmOption::Standard;
                matrixmultiply::zgemm(
                    Standard, Standard, r.len(), s.k, q.len(), [alpha, 0.0],
                    a.elem::<[f64; 2]>(i, r.start, 0), a.row_stride, a.col_stride,
                    b.elem::<[f64; 2]>(i, 0, q.start), b.row_stride, b.col_stride,
                    [beta, 0.0], c.elem::<[f64; 2]>(i, r.start, q.start), c.row_stride, c.col_stride,
                )
            }),
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
            let row_major = |p: *const f32, cols: usize| Matrix { ptr: p as *mut u8, batch_stride: 0, row_stride: cols as isize, col_stride: 1 };
            let one = GemmShape { batch: 1, ..s };
            gemm(DType::F32, one, alpha, row_major(aw.as_ptr(), s.k), row_major(bw.as_ptr(), s.n), beta, row_major(cw.as_mut_ptr(), s.n)).expect("float32 is supported");
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
