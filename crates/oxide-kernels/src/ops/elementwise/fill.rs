//! Fill: writes one element's bytes to every element of a strided operand
//! (the kernel behind `fill_` and `zero_`; the glue turns the scalar into the
//! destination dtype's bytes, so this loop is dtype-agnostic).

use crate::engine::layout::Layout;
use crate::error::Result;

/// Writes `pattern` (`elem_size` bytes) to every element of `dst` addressed by `layout`.
///
/// Errors: [`Error::InvalidLayout`] for an element size other than 1, 2, 4, 8 or 16.
///
/// # Safety
/// Every element addressed by the layout must be valid for writes and
/// `pattern` valid for `elem_size` bytes of reads.
pub unsafe fn fill_strided(elem_size: usize, layout: &Layout<1>, dst: *mut u8, pattern: *const u8) -> Result<()> {
    let l = layout.coalesced();
    // SAFETY: forwarded caller contract.
    with_element_bits!(elem_size, "fill_", |T| unsafe { rows::<T>(&l, dst, pattern) });
    Ok(())
}

unsafe fn rows<T: Copy>(l: &Layout<1>, dst: *mut u8, pattern: *const u8) {
    // SAFETY: pattern holds one T (caller contract); unaligned because it is a byte buffer.
    let value = unsafe { (pattern as *const T).read_unaligned() };
    let dst = dst as *mut T;
    let stride = l.strides[0].last().copied().unwrap_or(1);
    l.for_each_row(|[o], n| {
        if stride == 1 && (dst as usize).is_multiple_of(std::mem::align_of::<T>()) {
            // SAFETY: n contiguous, aligned elements starting at offset o are in the layout.
            unsafe { std::slice::from_raw_parts_mut(dst.offset(o), n) }.fill(value);
        } else {
            for i in 0..n as isize {
                // SAFETY: element o + i*stride is in the layout.
                unsafe { dst.offset(o + i * stride).write_unaligned(value) };
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_strided_views_only() {
        let mut buf = vec![0f64; 12];
        let l = Layout::new("fill_", &[3, 2], [&[4, 2]]).unwrap(); // every other column of a 3x4
        let v = 2.5f64.to_ne_bytes();
        // SAFETY: offsets stay below 12.
        unsafe { fill_strided(8, &l, buf.as_mut_ptr() as *mut u8, v.as_ptr()).unwrap() };
        let want: Vec<f64> = (0..12).map(|i| if i % 2 == 0 { 2.5 } else { 0.0 }).collect();
        assert_eq!(buf, want);
    }

    #[test]
    fn contiguous_0dim_empty_and_sizes() {
        for size in [1usize, 2, 4, 8, 16] {
            let mut buf = vec![0u8; 5 * size];
            let pat: Vec<u8> = (1..=size as u8).collect();
            let l = Layout::new("fill_", &[5], [&[1]]).unwrap();
            // SAFETY: 5 elements of `size` bytes.
            unsafe { fill_strided(size, &l, buf.as_mut_ptr(), pat.as_ptr()).unwrap() };
            assert!(buf.chunks(size).all(|c| c == pat.as_slice()));
        }
        let mut one = [0u32; 2];
        let l = Layout::<1>::new("fill_", &[], [&[]]).unwrap();
        // SAFETY: a 0-dim layout writes exactly one element.
        unsafe { fill_strided(4, &l, one.as_mut_ptr() as *mut u8, 9u32.to_ne_bytes().as_ptr()).unwrap() };
        assert_eq!(one, [9, 0]);
        let l = Layout::<1>::new("fill_", &[0, 4], [&[4, 1]]).unwrap();
        // SAFETY: empty layouts touch nothing.
        unsafe { fill_strided(4, &l, std::ptr::null_mut(), 9u32.to_ne_bytes().as_ptr()).unwrap() };
        // SAFETY: rejected before any access.
        assert!(unsafe { fill_strided(3, &l, std::ptr::null_mut(), std::ptr::null()) }.is_err());
    }
}
