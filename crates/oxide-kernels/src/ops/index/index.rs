//! Advanced indexing (`x[idx]` and `x[idx] = v`, PyTorch's `index_stub` and
//! `index_put_stub`). The iterator's operands are (destination, source,
//! index tensors...): for `index` the destination is the result and the
//! source the indexed tensor restrided so that indexed dimensions have stride
//! 0; for `index_put` the destination is that restrided tensor and the source
//! the values. Element i's byte offset into the restrided tensor is
//! `sum_k wrap(idx_k[i]) * indexed_strides[k]` with negative indices wrapped
//! once and bounds checked, as PyTorch's `IndexToOffset` does.

use crate::dtype::{DType, Element};
use crate::engine::iter::{load, TensorIter, BLOCK};
use crate::engine::math::Num;
use crate::error::{Error, Result};

/// Sizes and byte strides of the indexed dimensions, one per index operand.
#[derive(Debug, Clone)]
pub struct Indexed<'a> {
    pub sizes: &'a [i64],
    pub strides: &'a [i64],
    /// Negative indices count from the end (`x[idx]`); false for `index_select`
    /// and `embedding`, where PyTorch rejects them as out of range.
    pub wrap_negative: bool,
}

/// Offsets (bytes) of `n` consecutive elements into the restrided tensor.
///
/// # Safety
/// Index operands address `n` readable integers from `offs`.
unsafe fn offsets(
    it: &TensorIter,
    ix: &Indexed,
    offs: &[isize],
    b: usize,
    n: usize,
    out: &mut [isize],
    buf: &mut [i64],
) -> Result<()> {
    out[..n].iter_mut().for_each(|o| *o = 0);
    for (k, (&size, &stride)) in ix.sizes.iter().zip(ix.strides).enumerate() {
        let op = it.operands[2 + k];
        let s = it.inner_stride(2 + k);
        // SAFETY: caller contract.
        unsafe { load::<i64>(op.dtype, op.ptr.offset(offs[2 + k] + b as isize * s), s, n, buf)? };
        for j in 0..n {
            let mut v = buf[j];
            if !ix.wrap_negative && (v < 0 || v >= size) {
                // index_select's (and embedding's) message on CPU.
                return Err(Error::OutOfRange { op: "index_select", reason: "index out of range in self".into() });
            }
            if v < -size || v >= size {
                return Err(Error::IndexOutOfBounds { index: v, dim: k as i64, size });
            }
            if v < 0 {
                v += size;
            }
            out[j] += v as isize * stride as isize;
        }
    }
    Ok(())
}

/// The shared loop of [`index`] and [`index_put`]: `f(dst, src, n, dst_stride, src_stride)`
/// over runs of `n` elements, where the operand on the restrided side (`put`: the
/// destination, else the source) is displaced by the run's index offset.
///
/// A row along which every index operand is constant (inner stride 0: the indices are
/// broadcast along it, as for `index_select`, `embedding` and `x[idx]` on a leading
/// dimension of a matrix) is one run, its offset computed once; any other row gives
/// runs of one element with their own offsets.
unsafe fn for_each_indexed(
    it: &TensorIter,
    ix: &Indexed,
    put: bool,
    f: impl Fn(*mut u8, *const u8, usize, isize, isize) -> Result<()> + Sync,
) -> Result<()> {
    let errors = std::sync::Mutex::new(Ok(()));
    // Set with the first error: the remaining rows are skipped, as the remaining
    // elements were when the loop returned at it.
    let failed = std::sync::atomic::AtomicBool::new(false);
    let nidx = ix.sizes.len();
    let rows_share_offset = (0..nidx).all(|k| it.inner_stride(2 + k) == 0);
    it.parallel_ranges(it.numel(), |start, end| {
        let (dst, src) = (it.operands[0], it.operands[1]);
        let (sd, ss) = (it.inner_stride(0), it.inner_stride(1));
        let block = if rows_share_offset { 1 } else { BLOCK };
        let mut off = vec![0isize; block];
        let mut buf = vec![0i64; block];
        it.for_each_row_in(start, end, |offs, len| {
            if failed.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let at = |b: usize, o: isize| {
                let (od, os) = if put { (o, 0) } else { (0, o) };
                // SAFETY: in-bounds by the index checks and the caller contract.
                unsafe {
                    (dst.ptr.offset(offs[0] + b as isize * sd + od), src.ptr.offset(offs[1] + b as isize * ss + os))
                }
            };
            let r = if rows_share_offset {
                // SAFETY: forwarded contract.
                unsafe { offsets(it, ix, offs, 0, 1, &mut off, &mut buf) }.and_then(|_| {
                    let (d, s) = at(0, off[0]);
                    f(d, s, len, sd, ss)
                })
            } else {
                let mut r = Ok(());
                let mut b = 0;
                while b < len && r.is_ok() {
                    let n = block.min(len - b);
                    // SAFETY: forwarded contract.
                    r = unsafe { offsets(it, ix, offs, b, n, &mut off, &mut buf) }.and_then(|_| {
                        off[..n].iter().enumerate().try_for_each(|(j, &o)| {
                            let (d, s) = at(b + j, o);
                            f(d, s, 1, 0, 0)
                        })
                    });
                    b += n;
                }
                r
            };
            if let Err(e) = r {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                *errors.lock().unwrap() = Err(e);
            }
        });
    });
    errors.into_inner().unwrap()
}

/// Copies `n` elements of `elem_size` bytes from `s` (byte stride `ss`) to `d` (`sd`):
/// one `memcpy` when both runs are dense, else a copy per element of a fixed width.
///
/// # Safety
/// Both runs address `n` elements of live memory that do not overlap.
unsafe fn copy_run(d: *mut u8, s: *const u8, n: usize, sd: isize, ss: isize, elem_size: usize) {
    unsafe fn strided<T: Copy>(d: *mut u8, s: *const u8, n: usize, sd: isize, ss: isize) {
        for j in 0..n as isize {
            // SAFETY: caller contract.
            unsafe { (d.offset(j * sd) as *mut T).write_unaligned((s.offset(j * ss) as *const T).read_unaligned()) };
        }
    }
    let es = elem_size as isize;
    // SAFETY: caller contract.
    unsafe {
        if n == 1 || (sd == es && ss == es) {
            crate::engine::convert::copy_elements(s, d, n * elem_size);
            return;
        }
        match elem_size {
            1 => strided::<u8>(d, s, n, sd, ss),
            2 => strided::<u16>(d, s, n, sd, ss),
            4 => strided::<u32>(d, s, n, sd, ss),
            8 => strided::<u64>(d, s, n, sd, ss),
            16 => strided::<u128>(d, s, n, sd, ss),
            _ => (0..n as isize)
                .for_each(|j| std::ptr::copy_nonoverlapping(s.offset(j * ss), d.offset(j * sd), elem_size)),
        }
    }
}

/// `dst[i] = src[offset(i)]` (gather through the indices), for elements of `elem_size` bytes.
///
/// Errors: [`Error::IndexOutOfBounds`].
///
/// # Safety
/// The iterator addresses live memory; every in-bounds offset is a valid element of the source.
pub unsafe fn index(it: &TensorIter, ix: &Indexed, elem_size: usize) -> Result<()> {
    // SAFETY: forwarded contract; elements do not overlap.
    unsafe {
        for_each_indexed(it, ix, false, |d, s, n, sd, ss| {
            copy_run(d, s, n, sd, ss, elem_size);
            Ok(())
        })
    }
}

/// `dst[offset(i)] = src[i]`, or `+=` with `accumulate` (then serial, so
/// repeated indices add up deterministically).
///
/// Errors: [`Error::IndexOutOfBounds`]; [`Error::UnsupportedDtype`] for accumulating complex values.
///
/// # Safety
/// As [`index`], with the destination writable.
pub unsafe fn index_put(it: &TensorIter, ix: &Indexed, elem_size: usize, accumulate: bool) -> Result<()> {
    let dtype = it.dtype(0);
    let mut it = it.clone();
    if accumulate {
        it.threads = 1;
    }
    // SAFETY: forwarded contract.
    unsafe {
        for_each_indexed(&it, ix, true, |d, s, n, sd, ss| {
            if accumulate {
                (0..n as isize).try_for_each(|j| add_into(dtype, d.offset(j * sd), s.offset(j * ss)))
            } else {
                copy_run(d, s, n, sd, ss, elem_size);
                Ok(())
            }
        })
    }
}

/// `*d += *s` for one element of `dtype` (half types through float).
unsafe fn add_into(dtype: DType, d: *mut u8, s: *const u8) -> Result<()> {
    unsafe fn typed<T: Element, C: Num>(d: *mut u8, s: *const u8) {
        // SAFETY: caller contract.
        unsafe {
            let (x, y) = ((d as *const T).read_unaligned().cast::<C>(), (s as *const T).read_unaligned().cast::<C>());
            (d as *mut T).write_unaligned(x.add(y).cast::<T>());
        }
    }
    // SAFETY: caller contract.
    unsafe {
        match dtype {
            DType::F32 => typed::<f32, f32>(d, s),
            DType::F64 => typed::<f64, f64>(d, s),
            DType::F16 => typed::<half::f16, f32>(d, s),
            DType::BF16 => typed::<half::bf16, f32>(d, s),
            DType::U8 => typed::<u8, u8>(d, s),
            DType::I8 => typed::<i8, i8>(d, s),
            DType::I16 => typed::<i16, i16>(d, s),
            DType::I32 => typed::<i32, i32>(d, s),
            DType::I64 => typed::<i64, i64>(d, s),
            DType::U16 => typed::<u16, u16>(d, s),
            DType::U32 => typed::<u32, u32>(d, s),
            DType::U64 => typed::<u64, u64>(d, s),
            DType::Bool => typed::<bool, bool>(d, s),
            d => return Err(Error::UnsupportedDtype { op: "index_put_", dtype: d }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::iter::Operand;

    fn op<T: Element>(v: &mut [T]) -> Operand {
        Operand { ptr: v.as_mut_ptr() as *mut u8, dtype: T::DTYPE }
    }

    #[test]
    fn gather_scatter_and_bounds() {
        // src = [10, 20, 30, 40] indexed by [3, -1, 0] -> [40, 40, 10]
        let mut src = [10f32, 20.0, 30.0, 40.0];
        let mut out = [0f32; 3];
        let mut idx = [3i64, -1, 0];
        let ix = Indexed { sizes: &[4], strides: &[4], wrap_negative: true };
        let it = TensorIter::new(
            "t",
            &[3],
            vec![(op(&mut out), &[4][..]), (op(&mut src), &[0][..]), (op(&mut idx), &[8][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { index(&it, &ix, 4) }.unwrap();
        assert_eq!(out, [40.0, 40.0, 10.0]);
        // accumulate: dst[idx] += [1, 2, 3] with a repeated index
        let mut vals = [1f32, 2.0, 3.0];
        let it = TensorIter::new(
            "t",
            &[3],
            vec![(op(&mut src), &[0][..]), (op(&mut vals), &[4][..]), (op(&mut idx), &[8][..])],
            1,
            2,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { index_put(&it, &ix, 4, true) }.unwrap();
        assert_eq!(src, [13.0, 20.0, 30.0, 43.0]);
        let mut bad = [4i64, 0, 0];
        let it = TensorIter::new(
            "t",
            &[3],
            vec![(op(&mut out), &[4][..]), (op(&mut src), &[0][..]), (op(&mut bad), &[8][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { index(&it, &ix, 4) }.unwrap_err();
        assert_eq!(e.to_string(), "index 4 is out of bounds for dimension 0 with size 4");
    }

    #[test]
    fn rows_with_a_broadcast_index_move_as_runs() {
        // table[3, 2] (row stride 8 bytes), out[i, :] = table[idx[i], :] with idx broadcast
        // along the row (inner stride 0): the row-run path, dense and strided.
        let mut table = [0f32, 1.0, 10.0, 11.0, 20.0, 21.0];
        let mut idx = [2i64, 0, 2];
        let ix = Indexed { sizes: &[3], strides: &[8], wrap_negative: false };
        let mut out = [0f32; 6];
        let it = TensorIter::new(
            "t",
            &[2, 3],
            vec![(op(&mut out), &[4, 8][..]), (op(&mut table), &[4, 0][..]), (op(&mut idx), &[0, 8][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { index(&it, &ix, 4) }.unwrap();
        assert_eq!(out, [20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
        // A transposed destination (element stride 12 bytes): runs copied element by element.
        let mut out_t = [0f32; 6];
        let it = TensorIter::new(
            "t",
            &[2, 3],
            vec![(op(&mut out_t), &[12, 4][..]), (op(&mut table), &[4, 0][..]), (op(&mut idx), &[0, 8][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: as above.
        unsafe { index(&it, &ix, 4) }.unwrap();
        assert_eq!(out_t, [20.0, 0.0, 20.0, 21.0, 1.0, 21.0]);
        // Accumulating rows with a repeated index: row 2 receives two rows.
        let mut vals = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let it = TensorIter::new(
            "t",
            &[2, 3],
            vec![(op(&mut table), &[4, 0][..]), (op(&mut vals), &[4, 8][..]), (op(&mut idx), &[0, 8][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: as above.
        unsafe { index_put(&it, &ix, 4, true) }.unwrap();
        assert_eq!(table, [3.0, 5.0, 10.0, 11.0, 26.0, 29.0]);
        // An out-of-range row index is an error, not a read past the table.
        let mut bad = [0i64, 3, 0];
        let it = TensorIter::new(
            "t",
            &[2, 3],
            vec![(op(&mut out), &[4, 8][..]), (op(&mut table), &[4, 0][..]), (op(&mut bad), &[0, 8][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: as above.
        let e = unsafe { index(&it, &ix, 4) }.unwrap_err();
        assert_eq!(e.to_string(), "index out of range in self");
    }
}
