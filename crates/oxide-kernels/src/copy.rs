//! Strided copy between two operands of the same dtype (the kernel behind
//! device-to-device `copy_`, `clone` and `contiguous`).

use crate::error::{Error, Result};
use crate::layout::Layout;

/// Copies `layout.numel()` elements of `elem_size` bytes from `src` to `dst`
/// (operand 0 = destination, 1 = source; strides in elements).
///
/// Errors: [`Error::InvalidLayout`] for an element size other than 1, 2, 4, 8 or 16.
///
/// # Safety
/// Every element addressed by the layout must be valid for reads (`src`) or
/// writes (`dst`), and the destination elements must not overlap the source.
pub unsafe fn copy_strided(elem_size: usize, layout: &Layout<2>, dst: *mut u8, src: *const u8) -> Result<()> {
    if ![1, 2, 4, 8, 16].contains(&elem_size) {
        return Err(Error::InvalidLayout { op: "copy_", reason: format!("element size {elem_size}") });
    }
    let l = layout.coalesced();
    let contiguous = l.shape.len() <= 1 && l.strides.iter().all(|s| s.first().is_none_or(|&x| x == 1));
    if contiguous {
        // SAFETY: the caller guarantees numel elements at both pointers, non-overlapping.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, l.numel() * elem_size) };
        return Ok(());
    }
    // SAFETY: forwarded caller contract.
    with_element_bits!(elem_size, "copy_", |T| unsafe { rows::<T>(&l, dst, src) });
    Ok(())
}

unsafe fn rows<T: Copy>(l: &Layout<2>, dst: *mut u8, src: *const u8) {
    let (dst, src) = (dst as *mut T, src as *const T);
    let last = l.shape.len().saturating_sub(1);
    let (ds, ss) = (l.strides[0].get(last).copied().unwrap_or(1), l.strides[1].get(last).copied().unwrap_or(1));
    l.for_each_row(|[od, os], n| {
        for i in 0..n as isize {
            // SAFETY: offsets come from the layout the caller vouched for; unaligned access is
            // used because a storage offset may leave an element off its natural alignment.
            unsafe { dst.offset(od + i * ds).write_unaligned(src.offset(os + i * ss).read_unaligned()) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(shape: &[i64], ds: &[i64], ss: &[i64], off_s: usize, src: &[f32], dst: &mut [f32]) {
        let n: i64 = shape.iter().product();
        for lin in 0..n {
            let (mut rem, mut od, mut os) = (lin, 0i64, off_s as i64);
            for d in (0..shape.len()).rev() {
                let i = rem % shape[d];
                rem /= shape[d];
                od += i * ds[d];
                os += i * ss[d];
            }
            dst[od as usize] = src[os as usize];
        }
    }

    fn check(shape: &[i64], ds: &[i64], ss: &[i64], off_s: usize) {
        let src: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let (mut got, mut want) = (vec![-1f32; 64], vec![-1f32; 64]);
        naive(shape, ds, ss, off_s, &src, &mut want);
        let l = Layout::new("copy", shape, [ds, ss]).unwrap();
        // SAFETY: all offsets stay below 64 elements in these cases.
        unsafe { copy_strided(4, &l, got.as_mut_ptr() as *mut u8, src.as_ptr().add(off_s) as *const u8).unwrap() };
        assert_eq!(got, want, "shape {shape:?} dst {ds:?} src {ss:?} offset {off_s}");
    }

    #[test]
    fn matches_naive_reference() {
        check(&[4, 4], &[4, 1], &[4, 1], 0); // contiguous
        check(&[4, 4], &[4, 1], &[1, 4], 0); // transposed source
        check(&[4, 4], &[1, 4], &[4, 1], 3); // transposed destination, storage offset
        check(&[3, 4], &[4, 1], &[0, 1], 5); // broadcast source
        check(&[2, 3, 2], &[6, 2, 1], &[1, 8, 2], 1); // permuted
        check(&[], &[], &[], 7); // 0-dim
        check(&[0, 3], &[3, 1], &[3, 1], 0); // empty
    }

    #[test]
    fn every_element_size() {
        for size in [1usize, 2, 4, 8, 16] {
            let src: Vec<u8> = (0..(4 * size) as u8).collect();
            let mut dst = vec![0u8; 4 * size];
            let l = Layout::new("copy", &[2, 2], [&[2, 1], &[1, 2]]).unwrap();
            // SAFETY: 4 elements of `size` bytes on each side.
            unsafe { copy_strided(size, &l, dst.as_mut_ptr(), src.as_ptr()).unwrap() };
            let el = |v: &[u8], i: usize| v[i * size..(i + 1) * size].to_vec();
            assert_eq!((el(&dst, 1), el(&dst, 2)), (el(&src, 2), el(&src, 1)));
        }
        let l = Layout::new("copy", &[2, 2], [&[2, 1], &[1, 2]]).unwrap();
        // SAFETY: rejected before any access.
        assert!(unsafe { copy_strided(3, &l, std::ptr::null_mut(), std::ptr::null()) }.is_err());
    }
}
