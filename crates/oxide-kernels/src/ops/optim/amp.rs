//! Kernels behind `torch.amp.GradScaler`, with the semantics of PyTorch's CPU
//! and CUDA implementations (`AmpKernels`): unscale gradients in place while
//! detecting non-finite values, then grow or back off the loss scale.

use crate::dtype::{DType, Element};
use crate::engine::layout::Layout;
use crate::error::Result;
use crate::with_real_dtype;

/// Multiplies every element of `data` by `inv_scale` in place (skipped when
/// `inv_scale == 1`) and returns whether any element was NaN or infinite
/// before scaling.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// Every element addressed by `layout` must be valid for reads and writes.
pub unsafe fn unscale_and_check(dtype: DType, layout: &Layout<1>, data: *mut u8, inv_scale: f64) -> Result<bool> {
    dtype.require_float("_amp_foreach_non_finite_check_and_unscale_")?;
    // SAFETY: forwarded caller contract.
    let found = with_real_dtype!(dtype, "_amp_foreach_non_finite_check_and_unscale_", |T| unsafe {
        unscale_typed::<T>(layout, data as *mut T, inv_scale)
    });
    Ok(found)
}

unsafe fn unscale_typed<T: Element>(layout: &Layout<1>, data: *mut T, inv_scale: f64) -> bool {
    let l = layout.coalesced();
    let stride = l.strides[0].last().copied().unwrap_or(1);
    let mut found = false;
    l.for_each_row(|[o], n| {
        for i in 0..n as isize {
            // SAFETY: element o + i*stride is in the caller's layout.
            unsafe {
                let p = data.offset(o + i * stride);
                let v = p.read_unaligned();
                found |= !v.to_f64().is_finite();
                if inv_scale != 1.0 {
                    p.write_unaligned(v.mul_scalar(inv_scale));
                }
            }
        }
    });
    found
}

/// `_amp_update_scale_` on the three one-element state values: after an
/// overflow (`found_inf > 0`) the scale backs off and the tracker resets;
/// otherwise the tracker counts successful steps and every `growth_interval`
/// steps the scale grows (kept only if the grown scale is finite).
pub fn update_scale(
    scale: &mut f32,
    growth_tracker: &mut i32,
    found_inf: f32,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
) {
    if found_inf > 0.0 {
        *scale *= backoff_factor as f32;
        *growth_tracker = 0;
    } else {
        let successful = *growth_tracker + 1;
        if successful as i64 == growth_interval {
            let grown = *scale * growth_factor as f32;
            if grown.is_finite() {
                *scale = grown;
            }
            *growth_tracker = 0;
        } else {
            *growth_tracker = successful;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unscale_detects_non_finite_and_scales() {
        let mut v = [2.0f32, 4.0, 8.0];
        let l = Layout::new("t", &[3], [&[1]]).unwrap();
        // SAFETY: 3 elements.
        assert!(!unsafe { unscale_and_check(DType::F32, &l, v.as_mut_ptr() as *mut u8, 0.5).unwrap() });
        assert_eq!(v, [1.0, 2.0, 4.0]);
        let mut w = [1.0f64, f64::INFINITY, 3.0, f64::NAN];
        let l = Layout::new("t", &[2], [&[2]]).unwrap(); // only elements 0 and 2
                                                         // SAFETY: 2 elements at stride 2 in 4.
        assert!(!unsafe { unscale_and_check(DType::F64, &l, w.as_mut_ptr() as *mut u8, 1.0).unwrap() });
        let l = Layout::new("t", &[4], [&[1]]).unwrap();
        // SAFETY: 4 elements.
        assert!(unsafe { unscale_and_check(DType::F64, &l, w.as_mut_ptr() as *mut u8, 1.0).unwrap() });
        // SAFETY: rejected before any access.
        assert!(unsafe { unscale_and_check(DType::I32, &l, std::ptr::null_mut(), 1.0) }.is_err());
    }

    #[test]
    fn scale_backs_off_and_grows() {
        let (mut s, mut t) = (1024.0f32, 1);
        update_scale(&mut s, &mut t, 1.0, 2.0, 0.5, 3);
        assert_eq!((s, t), (512.0, 0));
        update_scale(&mut s, &mut t, 0.0, 2.0, 0.5, 2);
        assert_eq!((s, t), (512.0, 1));
        update_scale(&mut s, &mut t, 0.0, 2.0, 0.5, 2);
        assert_eq!((s, t), (1024.0, 0));
        let (mut big, mut t) = (f32::MAX, 0);
        update_scale(&mut big, &mut t, 0.0, 2.0, 0.5, 1);
        assert_eq!((big, t), (f32::MAX, 0), "a grown scale that overflows is not kept");
    }
}
