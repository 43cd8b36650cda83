//! The tile machinery both passes share: a register-blocked GEMM micro-kernel
//! for 64 x 64 x E tiles (portable, and x86-64 intrinsics for float32), row
//! maxima and sums in fixed-order lanes, and the per-task copies of one key /
//! value block in the layouts the tile products read ([`KeyTile`]).

use crate::dtype::Element;
use crate::engine::math::Float;

use super::{load_row, Attention, Dims, BLOCK_K};

/// Columns of the GEMM micro-kernel's output block, and the unit to which
/// the column count of every tile buffer is padded (with zeros), so that the
/// kernel has no column tail: 32 float32 lanes are two AVX-512 (four AVX2)
/// registers.
const NR: usize = 32;
/// Rows of the micro-kernel's output block: 4 x 32 float32 accumulators are
/// 8 AVX-512 or 16 AVX2 registers, leaving room for the loaded B row (4 was
/// measured faster than 8 on 64 x 64 x 64 tiles with AVX-512).
const MR: usize = 4;

/// `n` rounded up to a multiple of [`NR`]: the row stride of the tile buffers.
pub(super) fn padded(n: usize) -> usize {
    n.div_ceil(NR) * NR
}

/// A row-major tile operand: element (r, c) at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub(super) struct Mat<'x, C> {
    pub(super) data: &'x [C],
    pub(super) rs: usize,
    pub(super) cs: usize,
}

/// `c = (accumulate ? c : 0) + a b` for an `m x n` block with inner size `k`,
/// in a fixed order (the result does not depend on anything but the inputs).
///
/// `a` is read element by element (any strides: the transposed operands of
/// the backward pass read it column-wise). `b` and `c`, each given as (buffer,
/// row stride: `ldb`, `ldc`), are contiguous rows of `padded(n)` columns; the
/// columns of `b` past `n` must be zero or at least finite, and `c`'s are
/// overwritten with garbage. Register blocking after K. Goto and R. van de
/// Geijn, "Anatomy of High-Performance Matrix Multiplication" (2008), without
/// packing: attention tiles (64 x 64 x E) fit in L1/L2 as they are.
///
/// Panics (a bug in the caller, caught at the FFI boundary) when a buffer is
/// shorter than these extents.
pub(super) fn gemm<C: Float>(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<C>,
    (b, ldb): (&[C], usize),
    (c, ldc): (&mut [C], usize),
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let np = padded(n);
    assert!(ldb >= np && ldc >= np && (m - 1) * ldc + np <= c.len(), "attention gemm: output tile too small");
    if k == 0 {
        if !accumulate {
            (0..m).for_each(|r| c[r * ldc..r * ldc + np].fill(C::ZERO));
        }
        return;
    }
    assert!((k - 1) * ldb + np <= b.len(), "attention gemm: B tile too small");
    assert!((m - 1) * a.rs + (k - 1) * a.cs < a.data.len(), "attention gemm: A tile too small");
    let (ap, bp, cp) = (a.data.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    for j in (0..np).step_by(NR) {
        let mut i = 0;
        while i < m {
            let rows = MR.min(m - i);
            // SAFETY: the asserts above bound every element the block touches:
            // A rows i..i+rows, columns 0..k; B rows 0..k, columns j..j+NR <= np;
            // C rows i..i+rows, columns j..j+NR.
            unsafe {
                let (ab, bb, cb) = (ap.add(i * a.rs), bp.add(j), cp.add(i * ldc + j));
                #[cfg(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma"))]
                if std::any::TypeId::of::<C>() == std::any::TypeId::of::<f32>() {
                    // C is f32 (a compile-time fact after monomorphisation).
                    let (ab, bb, cb) = (ab as *const f32, bb as *const f32, cb as *mut f32);
                    match rows {
                        1 => simd::micro_f32::<1>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                        2 => simd::micro_f32::<2>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                        3 => simd::micro_f32::<3>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                        _ => simd::micro_f32::<MR>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    }
                    i += rows;
                    continue;
                }
                match rows {
                    1 => micro::<C, 1>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    2 => micro::<C, 2>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    3 => micro::<C, 3>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                    _ => micro::<C, MR>(k, ab, a.rs, a.cs, bb, ldb, cb, ldc, accumulate),
                }
            }
            i += rows;
        }
    }
}

/// One `R x NR` block of [`gemm`], accumulated in registers (the fixed-size
/// arrays are fully unrolled and vectorised by LLVM).
///
/// # Safety
/// `a` is readable at `r * ars + kk * acs`, `b` at `kk * ldb + 0..NR` and
/// `c` writable (and readable when accumulating) at `r * ldc + 0..NR`, for
/// `r < R`, `kk < k`.
// Register kernel: raw pointers and strides kept as scalars so that they stay in registers.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn micro<C: Float, const R: usize>(
    k: usize,
    a: *const C,
    ars: usize,
    acs: usize,
    b: *const C,
    ldb: usize,
    c: *mut C,
    ldc: usize,
    accumulate: bool,
) {
    let mut acc = [[C::ZERO; NR]; R];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: caller contract.
            *row = unsafe { (c.add(r * ldc) as *const [C; NR]).read_unaligned() };
        }
    }
    for kk in 0..k {
        // SAFETY: caller contract.
        let bv = unsafe { (b.add(kk * ldb) as *const [C; NR]).read_unaligned() };
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: caller contract.
            let x = unsafe { a.add(r * ars + kk * acs).read() };
            for (y, &z) in row.iter_mut().zip(&bv) {
                *y = x.mul_add_fast(z, *y);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        // SAFETY: caller contract.
        unsafe { (c.add(r * ldc) as *mut [C; NR]).write_unaligned(*row) };
    }
}

/// The float32 micro-kernel written with x86-64 intrinsics (AVX-512F where
/// the build targets it, else AVX2/FMA: the avx512 and avx2 builds of the
/// kernels; the default build runs [`micro`]). It computes the same sums in the same order as the portable
/// [`micro`] (one fused multiply-add per term, ascending `kk`), but LLVM's
/// vectoriser was seen to shuffle that one's accumulators through memory
/// once inlined into the attention loops, at well under half the speed, and
/// it keeps to 256-bit vectors on CPUs that have 512-bit ones; intrinsics pin
/// the register blocking.
#[cfg(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma"))]
mod simd {
    #[cfg(target_feature = "avx512f")]
    mod v {
        use std::arch::x86_64::*;
        pub type F = __m512;
        pub const W: usize = 16;
        // The intrinsics below: the target feature is enabled at compile time; callers
        // pass addresses of W readable/writable floats.
        #[inline(always)]
        pub fn zero() -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm512_setzero_ps() }
        }
        #[inline(always)]
        pub unsafe fn load(p: *const f32) -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm512_loadu_ps(p) }
        }
        #[inline(always)]
        pub unsafe fn store(p: *mut f32, x: F) {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm512_storeu_ps(p, x) }
        }
        #[inline(always)]
        pub fn splat(x: f32) -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm512_set1_ps(x) }
        }
        #[inline(always)]
        pub fn fmadd(a: F, b: F, c: F) -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
    }

    #[cfg(not(target_feature = "avx512f"))]
    mod v {
        use std::arch::x86_64::*;
        pub type F = __m256;
        pub const W: usize = 8;
        // The intrinsics below: as above.
        #[inline(always)]
        pub fn zero() -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        pub unsafe fn load(p: *const f32) -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        pub unsafe fn store(p: *mut f32, x: F) {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm256_storeu_ps(p, x) }
        }
        #[inline(always)]
        pub fn splat(x: f32) -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        pub fn fmadd(a: F, b: F, c: F) -> F {
            // SAFETY: the module is compiled only with these target features; pointers address W floats (caller contract).
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
    }

    /// Vectors per `NR`-wide row.
    const V: usize = super::NR / v::W;

    /// [`super::micro`] for float32.
    ///
    /// # Safety
    /// As [`super::micro`].
    // Register kernel: the same scalar pointer-and-stride parameters as `micro`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn micro_f32<const R: usize>(
        k: usize,
        a: *const f32,
        ars: usize,
        acs: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    ) {
        // SAFETY: the caller's contract bounds every address.
        unsafe {
            let mut acc = [[v::zero(); V]; R];
            if accumulate {
                for (r, row) in acc.iter_mut().enumerate() {
                    for (j, x) in row.iter_mut().enumerate() {
                        *x = v::load(c.add(r * ldc + v::W * j));
                    }
                }
            }
            for kk in 0..k {
                let bk = b.add(kk * ldb);
                let mut bv = [v::zero(); V];
                for (j, x) in bv.iter_mut().enumerate() {
                    *x = v::load(bk.add(v::W * j));
                }
                let ak = a.add(kk * acs);
                for (r, row) in acc.iter_mut().enumerate() {
                    let x = v::splat(ak.add(r * ars).read());
                    for (y, &z) in row.iter_mut().zip(&bv) {
                        *y = v::fmadd(x, z, *y);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                for (j, x) in row.iter().enumerate() {
                    v::store(c.add(r * ldc + v::W * j), *x);
                }
            }
        }
    }
}

/// Lanes of the row reductions: independent partial results that LLVM keeps
/// in vector registers (a single running float sum or max would be a serial
/// dependency chain, which it may not reorder).
const LANES: usize = 16;

/// The largest element of `x` (`-inf` for an empty row); NaN-free input.
pub(super) fn row_max<C: Float>(x: &[C]) -> C {
    let mut acc = [-C::infinity(); LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for ch in chunks {
        for (a, &y) in acc.iter_mut().zip(ch) {
            *a = if y > *a { y } else { *a };
        }
    }
    tail.iter().chain(acc.iter()).fold(-C::infinity(), |m, &y| if y > m { y } else { m })
}

/// The sum of `x`, in a fixed order (lane-wise partial sums, then the lanes and the tail).
pub(super) fn row_sum<C: Float>(x: &[C]) -> C {
    let mut acc = [C::ZERO; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for ch in chunks {
        for (a, &y) in acc.iter_mut().zip(ch) {
            *a = *a + y;
        }
    }
    acc.iter().chain(tail).fold(C::ZERO, |s, &y| s + y)
}

/// Per-task copies of one key block `j0 .. j0 + nk` of (b, kv head), in the
/// layouts the tile products read as their B operand. Buffers are allocated
/// zeroed and only the `nk` keys / `E` features are rewritten, so padding
/// columns stay zero (a transposed buffer re-zeroes its columns past `nk`).
pub(super) struct KeyTile<C> {
    /// Keys transposed `[E][padded(BLOCK_K)]` (S = Q K^T).
    pub(super) kt: Vec<C>,
    /// Keys `[BLOCK_K][padded(E)]` (backward: dQ += dS K).
    pub(super) k: Vec<C>,
    /// Values `[BLOCK_K][padded(Ev)]` (forward: O += P V).
    pub(super) v: Vec<C>,
    /// Values transposed `[Ev][padded(BLOCK_K)]` (backward: dP = dO V^T).
    pub(super) vt: Vec<C>,
    /// One key or value row (scratch).
    row: Vec<C>,
}

/// Which layouts [`KeyTile::load`] fills besides `kt`.
#[derive(Clone, Copy)]
pub(super) struct Layouts {
    pub(super) k: bool,
    pub(super) v: bool,
    pub(super) vt: bool,
}

impl<C: Float> KeyTile<C> {
    pub(super) fn new(d: &Dims) -> Self {
        let kp = padded(BLOCK_K);
        KeyTile {
            kt: vec![C::ZERO; d.dim_qk * kp],
            k: vec![C::ZERO; BLOCK_K * padded(d.dim_qk)],
            v: vec![C::ZERO; BLOCK_K * padded(d.dim_v)],
            vt: vec![C::ZERO; d.dim_v * kp],
            row: vec![C::ZERO; d.dim_qk.max(d.dim_v)],
        }
    }

    /// Loads keys (and values) `j0 .. j0 + nk` of (b, hk).
    ///
    /// # Safety
    /// The key/value operands of `a` are readable for these elements.
    pub(super) unsafe fn load<T: Element>(
        &mut self,
        a: &Attention,
        b: usize,
        hk: usize,
        j0: usize,
        nk: usize,
        want: Layouts,
    ) {
        let (e_n, ev_n, kp) = (a.dims.dim_qk, a.dims.dim_v, padded(BLOCK_K));
        let (ep, evp) = (padded(e_n), padded(ev_n));
        for jj in 0..nk {
            let row = &mut self.row[..e_n];
            // SAFETY: caller contract.
            unsafe { load_row::<T, C>(&a.key, b, hk, j0 + jj, row) };
            for (d, &x) in row.iter().enumerate() {
                self.kt[d * kp + jj] = x;
            }
            if want.k {
                self.k[jj * ep..jj * ep + e_n].copy_from_slice(row);
            }
            if want.v || want.vt {
                let row = &mut self.row[..ev_n];
                // SAFETY: caller contract.
                unsafe { load_row::<T, C>(&a.value, b, hk, j0 + jj, row) };
                if want.v {
                    self.v[jj * evp..jj * evp + ev_n].copy_from_slice(row);
                }
                if want.vt {
                    for (e, &x) in row.iter().enumerate() {
                        self.vt[e * kp + jj] = x;
                    }
                }
            }
        }
        if nk < kp {
            // A short last block: the transposed layouts' columns past nk must be zero again.
            self.kt.chunks_exact_mut(kp).for_each(|r| r[nk..].fill(C::ZERO));
            if want.vt {
                self.vt.chunks_exact_mut(kp).for_each(|r| r[nk..].fill(C::ZERO));
            }
        }
    }
}
