//! Nullary kernels whose value depends on the element's linear index:
//! `arange` and `linspace` (PyTorch's `arange_stub` / `linspace_stub`).
//! The output is contiguous and 1-d (PyTorch materialises into a contiguous
//! temporary otherwise), so the iteration index is the element index.

use crate::dtype::DType;
use crate::engine::iter::{store, TensorIter, BLOCK};
use crate::error::Result;

/// What each element holds.
#[derive(Debug, Clone, Copy)]
pub enum Sequence {
    /// `start + i * step`; integers exactly in int64 (`istart`, `istep`), floats in double.
    Arange { start: f64, step: f64, istart: i64, istep: i64 },
    /// `steps` evenly spaced values from `start` to `end`, filled from both
    /// ends toward the middle as PyTorch does so that both end points are exact.
    Linspace { start: f64, end: f64, steps: i64 },
}

/// Fills operand 0 of `it` with `seq`.
///
/// Errors: [`crate::Error::UnsupportedDtype`] for complex outputs.
///
/// # Safety
/// Operand 0 addresses `it.numel()` writable elements.
pub unsafe fn fill_sequence(it: &TensorIter, seq: Sequence) -> Result<()> {
    let out = it.operands[0];
    if out.dtype == DType::Bool {
        let op = if matches!(seq, Sequence::Arange { .. }) { "arange" } else { "linspace" };
        return Err(crate::Error::UnsupportedDtype { op, dtype: out.dtype });
    }
    // Complex outputs take the real sequence (the glue sends complex end points with an
    // imaginary part to the CPU fallback); only integral dtypes take the integer one.
    let integral = !out.dtype.is_float() && !matches!(out.dtype, DType::C32 | DType::C64 | DType::C128);
    let value = move |i: usize| -> (f64, i64) {
        match seq {
            Sequence::Arange { start, step, istart, istep } => {
                (start + i as f64 * step, istart.wrapping_add((i as i64).wrapping_mul(istep)))
            }
            Sequence::Linspace { start, end, steps } => {
                let step = if steps > 1 { (end - start) / (steps - 1) as f64 } else { 0.0 };
                let v = if steps == 1 || (i as i64) < steps / 2 {
                    start + step * i as f64
                } else {
                    end - step * (steps - i as i64 - 1) as f64
                };
                (v, v as i64)
            }
        }
    };
    let errors = std::sync::Mutex::new(Ok(()));
    it.parallel_ranges(it.numel(), |start, end| {
        // The whole operand: edition 2021 closures would capture only its raw-pointer field
        // (not Sync); the rebinding is what makes the closure capture all of it.
        #[allow(clippy::redundant_locals)]
        let out = out;
        let mut fbuf = [0f64; BLOCK];
        let mut ibuf = [0i64; BLOCK];
        let mut pos = start;
        it.for_each_row_in(start, end, |offs, len| {
            let stride = it.inner_stride(0);
            let mut b = 0;
            while b < len {
                let n = BLOCK.min(len - b);
                for j in 0..n {
                    (fbuf[j], ibuf[j]) = value(pos + b + j);
                }
                // SAFETY: caller contract.
                let p = unsafe { out.ptr.offset(offs[0] + b as isize * stride) };
                let r = if integral {
                    // SAFETY: caller contract.
                    unsafe { store::<i64>(out.dtype, p, stride, &ibuf[..n]) }
                } else {
                    // SAFETY: caller contract.
                    unsafe { store::<f64>(out.dtype, p, stride, &fbuf[..n]) }
                };
                if let Err(e) = r {
                    *errors.lock().unwrap() = Err(e);
                }
                b += n;
            }
            pos += len;
        });
    });
    errors.into_inner().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Element;
    use crate::engine::iter::Operand;

    fn run<T: Element>(out: &mut [T], seq: Sequence, threads: usize) {
        let n = out.len() as i64;
        let it = TensorIter::new(
            "t",
            &[n],
            vec![(
                Operand { ptr: out.as_mut_ptr() as *mut u8, dtype: T::DTYPE },
                &[std::mem::size_of::<T>() as i64][..],
            )],
            1,
            threads,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { fill_sequence(&it, seq) }.unwrap();
    }

    #[test]
    fn arange_and_linspace_hit_their_end_points() {
        let mut a = [0i64; 5];
        run(&mut a, Sequence::Arange { start: 3.0, step: -2.0, istart: 3, istep: -2 }, 1);
        assert_eq!(a, [3, 1, -1, -3, -5]);
        let mut l = vec![0f32; 100_001];
        run(&mut l, Sequence::Linspace { start: -1.0, end: 1.0, steps: 100_001 }, 4);
        assert_eq!((l[0], l[50_000], l[100_000]), (-1.0, 0.0, 1.0));
        assert!((l[1] - (-1.0 + 2e-5)).abs() < 1e-7);
        let mut one = [0f64; 1];
        run(&mut one, Sequence::Linspace { start: 5.0, end: 9.0, steps: 1 }, 1);
        assert_eq!(one, [5.0]);
    }
}
