//! Batched strided GEMM, `C = alpha * A @ B + beta * C`, on the `gemm` crate
//! (BLIS-style packed micro-kernels, AVX-512 through its `x86-v4` feature, chosen by
//! runtime CPU feature detection), single-threaded per call; products of at least
//! [`SPLIT_MACS`] multiply-adds are split over threads (`iter::for_each_task`): whole batch entries when there
//! are at least as many as threads, else the output's columns (or rows, when it is
//! taller than wide) in one block per thread. Splitting ourselves rather than with
//! `gemm::Parallelism::Rayon` keeps small products on one thread: the crate's own
//! split halved the speed of a [32, 4096] x [4096, 144] product on two threads.
//!
//! Why `gemm` and not `matrixmultiply` (used until stop 11): on the 2-core AVX-512
//! CI machine, single-threaded float32 1024^3 ran at about 155 GF/s against 140,
//! and split over two threads at 215-305 GF/s against 150-165 (512^3 to 2048^3).
//!
//! float32/float64/complex64/complex128 run in place on arbitrary strides;
//! float16/bfloat16 are widened to float32, multiplied, and rounded once
//! (accumulation in float, as PyTorch's CPU kernels do); integer dtypes use
//! a plain loop (PyTorch supports them, nothing fast needs them). As in BLAS,
//! `beta == 0` means C is not read, so NaN in uninitialised memory is ignored.

use std::ops::Range;

use crate::dtype::{DType, Element};
use crate::engine::math::Num;
use crate::error::{Error, Result};

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
// SAFETY: as for `Send` above: shared references only read the descriptor, and tasks that write through it write disjoint elements.
unsafe impl Sync for Matrix {}

impl Matrix {
    /// Pointer to batch `b`'s first element for elements of `size` bytes.
    fn at(&self, b: usize, size: usize) -> *mut u8 {
        self.ptr.wrapping_offset(b as isize * self.batch_stride * size as isize)
    }
    /// Pointer to element (`row`, `col`) of batch `b`, as `T`.
    fn elem<T>(&self, b: usize, row: usize, col: usize) -> *mut T {
        (self.at(b, size_of::<T>()) as *mut T)
            .wrapping_offset(row as isize * self.row_stride + col as isize * self.col_stride)
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
    let threads = crate::engine::team::launch_threads();
    let macs = s.m.saturating_mul(s.n).saturating_mul(s.k);
    if threads <= 1 || macs.saturating_mul(s.batch) < SPLIT_MACS {
        (0..s.batch).for_each(|b| part(b, 0..s.m, 0..s.n));
    } else if s.batch >= threads || macs < SPLIT_MACS {
        // Whole batch entries, in one contiguous run per thread.
        let per = s.batch.div_ceil(threads);
        crate::engine::iter::for_each_task(s.batch.div_ceil(per), |p| {
            (p * per..((p + 1) * per).min(s.batch)).for_each(|b| part(b, 0..s.m, 0..s.n))
        });
    } else {
        let by_cols = s.n >= s.m;
        let len = if by_cols { s.n } else { s.m };
        let chunk = len.div_ceil(threads).next_multiple_of(16);
        for b in 0..s.batch {
            crate::engine::iter::for_each_task(len.div_ceil(chunk), |p| {
                let r = p * chunk..((p + 1) * chunk).min(len);
                if by_cols {
                    part(b, 0..s.m, r)
                } else {
                    part(b, r, 0..s.n)
                }
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
            DType::F32 => schedule(s, |i, r, q| packed::<f32>(i, r, q, s.k, alpha as f32, a, b, beta as f32, c)),
            DType::F64 => schedule(s, |i, r, q| packed::<f64>(i, r, q, s.k, alpha, a, b, beta, c)),
            DType::C64 => schedule(s, |i, r, q| {
                packed::<gemm::c32>(
                    i,
                    r,
                    q,
                    s.k,
                    gemm::c32::new(alpha as f32, 0.0),
                    a,
                    b,
                    gemm::c32::new(beta as f32, 0.0),
                    c,
                )
            }),
            DType::C128 => schedule(s, |i, r, q| {
                packed::<gemm::c64>(i, r, q, s.k, gemm::c64::new(alpha, 0.0), a, b, gemm::c64::new(beta, 0.0), c)
            }),
            DType::F16 => widened::<half::f16>(s, alpha, a, b, beta, c),
            DType::BF16 => widened::<half::bf16>(s, alpha, a, b, beta, c),
            DType::Bool
            | DType::C32
            | DType::F8E5M2
            | DType::F8E4M3FN
            | DType::F8E5M2FNUZ
            | DType::F8E4M3FNUZ
            | DType::F8E8M0FNU => return Err(Error::UnsupportedDtype { op: "mm", dtype }),
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

/// Most rows of a block for which a column-major B goes through [`reoriented`].
const REORIENT_MAX_ROWS: usize = 256;

/// Least ratio `k / m` for which a column-major B goes through [`reoriented`]: its
/// gain scales with `k * n` (B's slow packing), its cost with `m * n` (adding the
/// column-major result into C). At [32, 128] x [128, 512] (ratio 4) the two broke even
/// (47 us either way); at [32, 2048] x [2048, 144] (ratio 64) it took 0.2-0.27 ms against 0.39-0.53.
const REORIENT_MIN_DEPTH_RATIO: usize = 8;

/// Block (`rows`, `cols`) of batch entry `i` of `C = alpha * A @ B + beta * C` through
/// the `gemm` crate, single-threaded (the caller's [`schedule`] splits work over threads).
/// `gemm::gemm` computes `dst = alpha' * dst + beta' * lhs @ rhs`, reading dst only when
/// asked, so our (alpha, beta) are its (beta', alpha') and dst is read only for `beta != 0`.
// The BLAS parameter list (block, k, alpha, A, B, beta, C) of `gemm`, per scheduled block.
#[allow(clippy::too_many_arguments)]
unsafe fn packed<T: Scalar>(
    i: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    k: usize,
    alpha: T,
    a: Matrix,
    b: Matrix,
    beta: T,
    c: Matrix,
) {
    let (m, n) = (rows.len(), cols.len());
    let (ap, bp, cp) =
        (a.elem::<T>(i, rows.start, 0), b.elem::<T>(i, 0, cols.start), c.elem::<T>(i, rows.start, cols.start));
    if c.col_stride == 1
        && b.row_stride == 1
        && b.col_stride != 1
        && m <= REORIENT_MAX_ROWS
        && k >= REORIENT_MIN_DEPTH_RATIO * m
        && m * n * k >= 1 << 14
    {
        // SAFETY: forwarded contract.
        return unsafe {
            reoriented(m, n, k, alpha, (ap, a.row_stride, a.col_stride), (bp, b.col_stride), beta, (cp, c.row_stride))
        };
    }
    // SAFETY: the caller's contract (`gemm`): every addressed element is valid, C's block is exclusive.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            cp,
            c.col_stride,
            c.row_stride,
            beta != T::default(),
            ap,
            a.col_stride,
            a.row_stride,
            bp,
            b.col_stride,
            b.row_stride,
            beta,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The element types `packed` multiplies.
trait Scalar: 'static + Copy + PartialEq + Default + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {}
impl<T: 'static + Copy + PartialEq + Default + std::ops::Add<Output = T> + std::ops::Mul<Output = T>> Scalar for T {}

/// `C (m x n, row stride ldc, unit column stride) = alpha * A @ B + beta * C` for a B
/// stored column by column (`B[l, q]` at `b + q * ldb`, as `gy @ columns^T` in a
/// convolution's weight gradient, or `x @ W^T` in `nn.Linear` with many input
/// features), few rows and a long inner dimension.
///
/// Why: `gemm` packs its left operand in its column-major frame; with a row-major C
/// that operand is B^T, and a column-major B makes that packing a strided gather
/// that dominates when m is small (a [32, 2048] x [2048, 144] product ran at about
/// 40 GF/s against 120 with B row-major). Here the product is formed column-major,
/// `D (m x n) = A @ B` with A copied m-contiguous (unless it already is), which reads
/// B along its contiguous columns; D is then added into C. The copies cost
/// `m * k + m * n` element moves against `m * n * k` multiply-adds.
// BLAS-style raw operands (pointer, strides) of one block, as `gemm::gemm` takes them.
#[allow(clippy::too_many_arguments)]
unsafe fn reoriented<T: Scalar>(
    m: usize,
    n: usize,
    k: usize,
    alpha: T,
    (ap, ars, acs): (*const T, isize, isize),
    (bp, ldb): (*const T, isize),
    beta: T,
    (cp, ldc): (*mut T, isize),
) {
    // SAFETY: the caller's contract; every offset stays within the operands.
    unsafe {
        let copied: Vec<T>;
        let (lhs, lhs_cs) = if ars == 1 {
            (ap, acs)
        } else {
            // Eight rows at a time: eight sequential read streams along k, and each
            // write lands eight contiguous elements (a row at a time would gather with stride k).
            let mut at = vec![T::default(); m * k];
            for r0 in (0..m).step_by(8) {
                let rb = 8.min(m - r0);
                for l in 0..k {
                    let dst = &mut at[l * m + r0..l * m + r0 + rb];
                    for (i, v) in dst.iter_mut().enumerate() {
                        *v = *ap.offset((r0 + i) as isize * ars + l as isize * acs);
                    }
                }
            }
            copied = at;
            (copied.as_ptr(), m as isize)
        };
        let mut d = vec![T::default(); m * n];
        gemm::gemm(
            m,
            n,
            k,
            d.as_mut_ptr(),
            m as isize,
            1,
            false,
            lhs,
            lhs_cs,
            1,
            bp,
            ldb,
            1,
            T::default(),
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
        let read_c = beta != T::default();
        for r in 0..m {
            let row = cp.offset(r as isize * ldc);
            for q in 0..n {
                let v = d[q * m + r];
                let o = row.add(q);
                *o = if read_c { v + beta * *o } else { v };
            }
        }
    }
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
            let mut cw =
                if beta != 0.0 { widen(cp, s.m, s.n, c.row_stride, c.col_stride) } else { vec![0.0; s.m * s.n] };
            let row_major = |p: *const f32, cols: usize| Matrix {
                ptr: p as *mut u8,
                batch_stride: 0,
                row_stride: cols as isize,
                col_stride: 1,
            };
            let one = GemmShape { batch: 1, ..s };
            gemm(
                DType::F32,
                one,
                alpha,
                row_major(aw.as_ptr(), s.k),
                row_major(bw.as_ptr(), s.n),
                beta,
                row_major(cw.as_mut_ptr(), s.n),
            )
            .expect("float32 is supported");
            for r in 0..s.m {
                for q in 0..s.n {
                    cp.offset(r as isize * c.row_stride + q as isize * c.col_stride)
                        .write_unaligned(T::from_f64(cw[r * s.n + q] as f64));
                }
            }
        }
    }
}

/// Integer GEMM (wrapping arithmetic, as C++ integers).
unsafe fn naive<T: Element + Num>(s: GemmShape, alpha: f64, a: Matrix, b: Matrix, beta: f64, c: Matrix) {
    let (alpha, beta) = (T::from_f64(alpha), T::from_f64(beta));
    for i in 0..s.batch {
        let (ap, bp, cp) = (
            a.at(i, size_of::<T>()) as *const T,
            b.at(i, size_of::<T>()) as *const T,
            c.at(i, size_of::<T>()) as *mut T,
        );
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
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { gemm(DType::F32, s, 2.0, mat(&mut a, 3, 1), mat(&mut b, 1, 3), 0.5, mat(&mut c, 4, 2)).unwrap() };
        assert_eq!([c[0], c[2], c[4], c[6]], want);
        let mut ah = a.map(half::f16::from_f32);
        let mut bh = b.map(half::f16::from_f32);
        let mut ch = [half::f16::from_f32(f32::NAN); 4];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { gemm(DType::F16, s, 1.0, mat(&mut ah, 3, 1), mat(&mut bh, 1, 3), 0.0, mat(&mut ch, 2, 1)).unwrap() };
        assert_eq!(ch.map(|v| v.to_f32()), [-2.0, 5.5, -2.0, 16.0]);
        let mut ai = [1i64, 2, 3, 4, 5, 6];
        let mut bi = [1i64, 0, -1, 2, 1, 3];
        let mut ci = [0i64; 4];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { gemm(DType::I64, s, 1.0, mat(&mut ai, 3, 1), mat(&mut bi, 1, 3), 0.0, mat(&mut ci, 2, 1)).unwrap() };
        assert_eq!(ci, [-2, 13, -2, 31]);
        // SAFETY: the pointers address live local buffers sized for the call.
        assert!(unsafe { gemm(DType::Bool, s, 1.0, mat(&mut ai, 3, 1), mat(&mut bi, 1, 3), 0.0, mat(&mut ci, 2, 1)) }
            .is_err());
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
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { gemm(DType::F64, s, 1.0, am, mat(&mut b, 1, 1), 0.0, cm).unwrap() };
        assert_eq!(c, [210.0, 430.0]);
        // k == 0: C = beta * C.
        let s = GemmShape { batch: 1, m: 1, n: 2, k: 0 };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { gemm(DType::F64, s, 1.0, am, mat(&mut b, 1, 1), 0.0, mat(&mut c, 1, 1)).unwrap() };
        assert_eq!(c, [0.0, 0.0]);
    }

    /// Deterministic values in [-1, 1) (a linear congruential sequence).
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    #[test]
    fn large_split_products_match_naive_for_real_and_complex() {
        // 96 x 80 x 130: above SPLIT_MACS, so split into column blocks over threads
        // (ragged: 130 is not a multiple of 16); A transposed, C strided with beta != 0.
        let (m, n, k) = (96usize, 130usize, 80usize);
        let (av, bv, cv) = (values(m * k, 1), values(k * n, 2), values(m * n, 3));
        let reference = |alpha: f64, beta: f64| -> Vec<f64> {
            (0..m * n)
                .map(|e| {
                    let (r, q) = (e / n, e % n);
                    alpha * (0..k).map(|l| av[l * m + r] * bv[l * n + q]).sum::<f64>() + beta * cv[e]
                })
                .collect()
        };
        let s = GemmShape { batch: 1, m, n, k };
        let want = reference(1.5, -0.5);
        let mut a32: Vec<f32> = av.iter().map(|&v| v as f32).collect();
        let mut b32: Vec<f32> = bv.iter().map(|&v| v as f32).collect();
        let mut c32: Vec<f32> = cv.iter().flat_map(|&v| [v as f32, f32::NAN]).collect();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            gemm(
                DType::F32,
                s,
                1.5,
                mat(&mut a32, 1, m as isize),
                mat(&mut b32, n as isize, 1),
                -0.5,
                mat(&mut c32, 2 * n as isize, 2),
            )
            .unwrap()
        };
        for e in 0..m * n {
            assert!((c32[2 * e] as f64 - want[e]).abs() < 1e-4, "f32 {e}: {} vs {}", c32[2 * e], want[e]);
            assert!(c32[2 * e + 1].is_nan(), "f32 wrote outside its block");
        }
        let (mut a64, mut b64) = (av.clone(), bv.clone());
        let mut c64 = vec![f64::NAN; m * n];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            gemm(
                DType::F64,
                s,
                1.0,
                mat(&mut a64, 1, m as isize),
                mat(&mut b64, n as isize, 1),
                0.0,
                mat(&mut c64, n as isize, 1),
            )
            .unwrap()
        };
        let want0 = reference(1.0, 0.0);
        for e in 0..m * n {
            assert!((c64[e] - want0[e]).abs() < 1e-12, "f64 {e}: beta 0 must ignore NaN in C");
        }
        // complex64: A = av + i*bv' and B real-valued plus an imaginary copy; compared
        // with the real products (a + ib)(c + id) = (ac - bd) + i(ad + bc).
        let ai: Vec<f64> = values(m * k, 4);
        let bi: Vec<f64> = values(k * n, 5);
        let mut ac: Vec<[f32; 2]> = av.iter().zip(&ai).map(|(&r, &i)| [r as f32, i as f32]).collect();
        let mut bc: Vec<[f32; 2]> = bv.iter().zip(&bi).map(|(&r, &i)| [r as f32, i as f32]).collect();
        let mut cc = vec![[0f32; 2]; m * n];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            gemm(
                DType::C64,
                s,
                1.0,
                mat(&mut ac, 1, m as isize),
                mat(&mut bc, n as isize, 1),
                0.0,
                mat(&mut cc, n as isize, 1),
            )
            .unwrap()
        };
        for (e, got) in cc.iter().enumerate() {
            let (r, q) = (e / n, e % n);
            let (mut re, mut im) = (0.0, 0.0);
            for l in 0..k {
                let (x, y) = ((av[l * m + r], ai[l * m + r]), (bv[l * n + q], bi[l * n + q]));
                re += x.0 * y.0 - x.1 * y.1;
                im += x.0 * y.1 + x.1 * y.0;
            }
            assert!((got[0] as f64 - re).abs() < 1e-4 && (got[1] as f64 - im).abs() < 1e-4, "c64 {e}");
        }
    }

    #[test]
    fn column_major_b_with_few_rows_is_reoriented_and_matches_naive() {
        // x @ W^T as nn.Linear forms it: B column-major, C row-major, m small and k long
        // enough for `reoriented`; A row-major (copied m-contiguous) and column-major (in place).
        let (m, n, k) = (8usize, 72usize, 80usize);
        assert!(k >= REORIENT_MIN_DEPTH_RATIO * m && m <= REORIENT_MAX_ROWS && m * n * k >= 1 << 14);
        let (av, bv, cv) = (values(m * k, 7), values(k * n, 8), values(m * n, 9));
        let b_at = |l: usize, q: usize| bv[q * k + l];
        for a_row_major in [true, false] {
            let a_at = |r: usize, l: usize| if a_row_major { av[r * k + l] } else { av[l * m + r] };
            let (ars, acs) = if a_row_major { (k as isize, 1) } else { (1, m as isize) };
            for (alpha, beta) in [(1.0, 0.0), (0.5, 2.0)] {
                let mut a: Vec<f64> = av.clone();
                let mut b: Vec<f64> = bv.clone();
                let mut c: Vec<f64> = if beta == 0.0 { vec![f64::NAN; m * n] } else { cv.clone() };
                let s = GemmShape { batch: 1, m, n, k };
                // SAFETY: the pointers address live local buffers sized for the call.
                unsafe {
                    gemm(
                        DType::F64,
                        s,
                        alpha,
                        mat(&mut a, ars, acs),
                        mat(&mut b, 1, k as isize),
                        beta,
                        mat(&mut c, n as isize, 1),
                    )
                    .unwrap()
                };
                for r in 0..m {
                    for q in 0..n {
                        let want = alpha * (0..k).map(|l| a_at(r, l) * b_at(l, q)).sum::<f64>() + beta * cv[r * n + q];
                        assert!(
                            (c[r * n + q] - want).abs() < 1e-12,
                            "a_row_major={a_row_major} beta={beta} ({r}, {q})"
                        );
                    }
                }
            }
        }
    }
}
