//! Non-maximum suppression, torchvision's `nms`.
//!
//! Boxes `(N, 4)` rows `(x1, y1, x2, y2)` and scores `(N)`, contiguous. The
//! boxes are visited by descending score; a box is kept unless a kept box
//! overlaps it with an intersection over union above the threshold. The result
//! is the kept boxes' indices in that order.
//!
//! Rules are torchvision's CPU kernel, restated: areas `(x2 - x1) * (y2 - y1)`,
//! the intersection from `max`/`min` of the corners written as C++'s
//! `std::max`/`std::min` (so NaN coordinates behave as there), widths clamped
//! at 0, arithmetic in the element type, the IoU compared as a double.
//!
//! Order of equal scores: torchvision sorts with PyTorch's unstable sort, whose
//! order among ties is implementation-defined; here ties keep ascending index
//! (a stable sort, NaN scores first, as PyTorch's descending sort puts them).

use std::cmp::Ordering;

use crate::dtype::DType;
use crate::error::{Error, Result};

use super::roi::Real;

/// C++'s `std::max(a, b)`: `a < b ? b : a`.
#[inline]
fn cmax<C: Real>(a: C, b: C) -> C {
    if a < b {
        b
    } else {
        a
    }
}

/// C++'s `std::min(a, b)`: `b < a ? b : a`.
#[inline]
fn cmin<C: Real>(a: C, b: C) -> C {
    if b < a {
        b
    } else {
        a
    }
}

unsafe fn nms_impl<C: Real>(
    n: usize,
    boxes: *const u8,
    scores: *const u8,
    iou_threshold: f64,
    keep: *mut i64,
) -> usize {
    // SAFETY: `nms`'s contract on the buffers.
    let (b, s, keep) = unsafe {
        (
            std::slice::from_raw_parts(boxes as *const C, n * 4),
            std::slice::from_raw_parts(scores as *const C, n),
            std::slice::from_raw_parts_mut(keep, n),
        )
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| {
        let (a, c) = (s[i].to_f64(), s[j].to_f64());
        match (a.is_nan(), c.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => c.partial_cmp(&a).unwrap_or(Ordering::Equal),
        }
    });
    // Coordinates gathered in visiting order, so the inner loop reads memory in sequence.
    let coord = |k: usize| -> Vec<C> { order.iter().map(|&i| b[i * 4 + k]).collect() };
    let (x1, y1, x2, y2) = (coord(0), coord(1), coord(2), coord(3));
    let area: Vec<C> = (0..n).map(|i| (x2[i] - x1[i]) * (y2[i] - y1[i])).collect();
    let mut suppressed = vec![false; n];
    let mut kept = 0;
    for i in 0..n {
        if suppressed[i] {
            continue;
        }
        keep[kept] = order[i] as i64;
        kept += 1;
        for j in i + 1..n {
            if suppressed[j] {
                continue;
            }
            let w = cmax(C::zero(), cmin(x2[i], x2[j]) - cmax(x1[i], x1[j]));
            let h = cmax(C::zero(), cmin(y2[i], y2[j]) - cmax(y1[i], y1[j]));
            let inter = w * h;
            let iou = inter / (area[i] + area[j] - inter);
            if iou.to_f64() > iou_threshold {
                suppressed[j] = true;
            }
        }
    }
    kept
}

/// Non-maximum suppression of `n` boxes (rules in the module documentation):
/// writes the kept indices to the front of `keep` and returns how many.
///
/// Errors: [`Error::UnsupportedDtype`] unless float32/64 (torchvision's CPU dtypes).
///
/// # Safety
/// `boxes` addresses `n * 4` and `scores` `n` contiguous elements of `dtype`;
/// `keep` addresses `n` int64 that overlap neither.
pub unsafe fn nms(
    dtype: DType,
    n: usize,
    boxes: *const u8,
    scores: *const u8,
    iou_threshold: f64,
    keep: *mut i64,
) -> Result<usize> {
    match dtype {
        // SAFETY: forwarded contract.
        DType::F32 => Ok(unsafe { nms_impl::<f32>(n, boxes, scores, iou_threshold, keep) }),
        // SAFETY: forwarded contract.
        DType::F64 => Ok(unsafe { nms_impl::<f64>(n, boxes, scores, iou_threshold, keep) }),
        dtype => Err(Error::UnsupportedDtype { op: "nms", dtype }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(boxes: &[f32], scores: &[f32], t: f64) -> Vec<i64> {
        let n = scores.len();
        let mut keep = vec![-1i64; n];
        // SAFETY: the buffers have the sizes `n` describes.
        let k =
            unsafe { nms(DType::F32, n, boxes.as_ptr().cast(), scores.as_ptr().cast(), t, keep.as_mut_ptr()) }.unwrap();
        keep.truncate(k);
        keep
    }

    #[test]
    fn overlapping_boxes_keep_the_best() {
        let boxes = [0.0, 0.0, 10.0, 10.0, 1.0, 1.0, 11.0, 11.0, 20.0, 20.0, 30.0, 30.0];
        assert_eq!(run(&boxes, &[0.5, 0.9, 0.1], 0.5), vec![1, 2]);
        // IoU 81/119 = 0.68: a higher threshold keeps both.
        assert_eq!(run(&boxes, &[0.5, 0.9, 0.1], 0.7), vec![1, 0, 2]);
    }

    #[test]
    fn equal_scores_keep_ascending_index_and_nan_scores_come_first() {
        let boxes = [0.0, 0.0, 1.0, 1.0, 5.0, 5.0, 6.0, 6.0, 10.0, 10.0, 11.0, 11.0];
        assert_eq!(run(&boxes, &[1.0, 1.0, 1.0], 0.5), vec![0, 1, 2]);
        assert_eq!(run(&boxes, &[1.0, f32::NAN, 2.0], 0.5), vec![1, 2, 0]);
    }
}
