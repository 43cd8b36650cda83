//! Element conversion between host-side buffers and typed strided operands
//! (typed writes of host values, e.g. `randperm`'s permutation).

use crate::dtype::{DType, Element};
use crate::engine::layout::Layout;
use crate::error::Result;
use crate::with_real_dtype;

/// Writes `values` (in iteration order of `layout`, operand 0 = destination)
/// into `dst` of `dtype`, converting each int64 as `static_cast` would.
///
/// Errors: [`crate::Error::UnsupportedDtype`] for complex dtypes.
///
/// # Safety
/// Every element addressed by operand 0 of `layout` must be valid for writes;
/// `values` must hold at least `layout.numel()` values.
pub unsafe fn cast_from_i64(dtype: DType, layout: &Layout<2>, dst: *mut u8, values: &[i64]) -> Result<()> {
    // SAFETY: forwarded caller contract.
    with_real_dtype!(dtype, "cast", |T| unsafe { write_typed::<T>(layout, dst as *mut T, values) });
    Ok(())
}

unsafe fn write_typed<T: Element>(layout: &Layout<2>, dst: *mut T, values: &[i64]) {
    let stride = layout.strides[0].last().copied().unwrap_or(1);
    let mut k = 0;
    layout.for_each_row(|[o, _], n| {
        for i in 0..n as isize {
            // SAFETY: element o + i*stride is in the caller's layout.
            unsafe { dst.offset(o + i * stride).write_unaligned(T::from_i64(values[k])) };
            k += 1;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_converted_values_strided() {
        let mut out = [0f32; 6];
        let l = Layout::new("cast", &[3], [&[2], &[1]]).unwrap();
        // SAFETY: 3 elements at stride 2 in 6.
        unsafe { cast_from_i64(DType::F32, &l, out.as_mut_ptr() as *mut u8, &[5, -1, 7]).unwrap() };
        assert_eq!(out, [5.0, 0.0, -1.0, 0.0, 7.0, 0.0]);
    }
}
