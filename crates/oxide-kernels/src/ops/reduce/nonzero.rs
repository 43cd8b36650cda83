//! `count_nonzero` and `nonzero` over a strided tensor (PyTorch's
//! `nonzero` is two passes: count, allocate `count x ndim`, then write the
//! coordinates).
//!
//! An element is nonzero when it compares unequal to zero: NaN is nonzero,
//! `-0.0` is zero, bool `true` is nonzero, and a complex number is nonzero
//! when its real or imaginary part is. Elements are visited in row-major (C)
//! order of the logical shape whatever the strides, so coordinates come out
//! sorted as PyTorch's do.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::with_real_dtype;

/// An element type with a zero test.
trait NonZero: Copy {
    fn nonzero(self) -> bool;
}

macro_rules! nz_scalar {
    ($zero:expr => $($t:ty),*) => {$( impl NonZero for $t {
        #[inline(always)]
        #[allow(clippy::float_cmp)]
        fn nonzero(self) -> bool { self != $zero }
    } )*};
}
nz_scalar!(0 => u8, i8, i16, i32, i64, u16, u32, u64);
nz_scalar!(0.0 => f32, f64);
nz_scalar!(false => bool);
nz_scalar!(half::f16::ZERO => half::f16);
nz_scalar!(half::bf16::ZERO => half::bf16);

/// Complex numbers as (real, imaginary) pairs.
impl<T: NonZero> NonZero for [T; 2] {
    #[inline(always)]
    fn nonzero(self) -> bool {
        self[0].nonzero() || self[1].nonzero()
    }
}

/// Runs `$body` with `$T` bound to the [`NonZero`] type of `$dtype`:
/// every real dtype and the complex ones.
macro_rules! with_nz_type {
    ($dtype:expr, $op:expr, |$T:ident| $body:expr) => {
        match $dtype {
            DType::C32 => {
                type $T = [half::f16; 2];
                $body
            }
            DType::C64 => {
                type $T = [f32; 2];
                $body
            }
            DType::C128 => {
                type $T = [f64; 2];
                $body
            }
            d => with_real_dtype!(d, $op, |$T| $body),
        }
    };
}

fn check_layout(op: &'static str, shape: &[usize], strides: &[isize]) -> Result<()> {
    if shape.len() != strides.len() {
        return Err(Error::InvalidLayout {
            op,
            reason: format!("{} strides for {} dimensions", strides.len(), shape.len()),
        });
    }
    Ok(())
}

/// Calls `f(coords, row, len, stride)` for every row along the last
/// dimension in row-major order: `coords` are the coordinates of the row's
/// outer dimensions (all but the last), `row` points at its first element.
/// A 0-dim tensor is one row of one element with no coordinates.
///
/// # Safety
/// Every element addressed by `shape`/`strides` (in elements of `T`) from
/// `data` must be readable as `T`.
unsafe fn for_each_row<T>(
    shape: &[usize],
    strides: &[isize],
    data: *const T,
    mut f: impl FnMut(&[usize], *const T, usize, isize) -> Result<()>,
) -> Result<()> {
    let nd = shape.len();
    if nd == 0 {
        return f(&[], data, 1, 0);
    }
    if shape.contains(&0) {
        return Ok(());
    }
    let (len, stride) = (shape[nd - 1], strides[nd - 1]);
    let outer = &shape[..nd - 1];
    let mut idx = vec![0usize; nd - 1];
    let mut ptr = data;
    loop {
        f(&idx, ptr, len, stride)?;
        // Odometer over the outer dimensions, last fastest.
        let mut d = nd - 1;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            idx[d] += 1;
            ptr = ptr.wrapping_offset(strides[d]);
            if idx[d] < outer[d] {
                break;
            }
            ptr = ptr.wrapping_offset(-(strides[d] * outer[d] as isize));
            idx[d] = 0;
        }
    }
}

/// Number of nonzero elements of a strided tensor.
///
/// Shapes: `strides` (in elements, 0 = broadcast, negative allowed) has one
/// entry per dimension of `shape`; `shape == []` is a 0-dim tensor (count 0
/// or 1); a zero extent gives 0 without touching memory.
///
/// Dtypes: every dtype; NaN counts as nonzero, `-0.0` as zero, complex when
/// either part is nonzero.
///
/// Errors: [`Error::InvalidLayout`] when `strides.len() != shape.len()`.
///
/// # Safety
/// Every element addressed by `shape`/`strides` from `data` must be readable
/// as `dtype`.
pub unsafe fn count_nonzero(dtype: DType, shape: &[usize], strides: &[isize], data: *const u8) -> Result<usize> {
    check_layout("count_nonzero", shape, strides)?;
    with_nz_type!(dtype, "count_nonzero", |T| {
        let mut count = 0usize;
        // SAFETY: caller contract.
        unsafe {
            for_each_row::<T>(shape, strides, data as *const T, |_, row, len, stride| {
                for j in 0..len {
                    count += row.offset(j as isize * stride).read_unaligned().nonzero() as usize;
                }
                Ok(())
            })?;
        }
        Ok(count)
    })
}

/// Writes the coordinates of the nonzero elements, in row-major (C) order of
/// `shape`, to `out`: `count` rows of `shape.len()` int64 (row-major).
///
/// `count` must be [`count_nonzero`]'s result for the same tensor. Nothing
/// is written past `count` rows.
///
/// Shapes and dtypes as [`count_nonzero`]; a 0-dim tensor has 0 columns, so
/// nothing is written.
///
/// Errors: [`Error::InvalidLayout`] when `strides.len() != shape.len()`;
/// [`Error::InvalidValue`] when the tensor holds more or fewer than `count`
/// nonzero elements (it changed since it was counted).
///
/// # Safety
/// As [`count_nonzero`]; `out` must address `count * shape.len()` writable int64.
pub unsafe fn nonzero(
    dtype: DType,
    shape: &[usize],
    strides: &[isize],
    data: *const u8,
    out: *mut i64,
    count: usize,
) -> Result<()> {
    check_layout("nonzero", shape, strides)?;
    let nd = shape.len();
    let changed = || Error::InvalidValue {
        op: "nonzero",
        reason: format!("nonzero: the tensor changed while its {count} nonzero elements were being listed"),
    };
    with_nz_type!(dtype, "nonzero", |T| {
        let mut found = 0usize;
        // SAFETY: caller contract; rows are written only while found < count.
        unsafe {
            for_each_row::<T>(shape, strides, data as *const T, |coords, row, len, stride| {
                for j in 0..len {
                    if !row.offset(j as isize * stride).read_unaligned().nonzero() {
                        continue;
                    }
                    if found == count {
                        return Err(changed());
                    }
                    if nd > 0 {
                        let dst = out.add(found * nd);
                        for (d, &c) in coords.iter().enumerate() {
                            dst.add(d).write_unaligned(c as i64);
                        }
                        dst.add(nd - 1).write_unaligned(j as i64);
                    }
                    found += 1;
                }
                Ok(())
            })?;
        }
        if found != count {
            return Err(changed());
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// Reference: coordinates (row-major) of elements with `pred` true.
    fn reference(shape: &[usize], pred: impl Fn(&[usize]) -> bool) -> Vec<i64> {
        let numel: usize = shape.iter().product();
        let mut out = vec![];
        for mut l in 0..numel {
            let mut c = vec![0usize; shape.len()];
            for d in (0..shape.len()).rev() {
                c[d] = l % shape[d];
                l /= shape[d];
            }
            if pred(&c) {
                out.extend(c.iter().map(|&v| v as i64));
            }
        }
        out
    }

    /// Runs count_nonzero + nonzero on `data` viewed with `shape`/`strides`.
    fn run<T>(dtype: DType, shape: &[usize], strides: &[isize], data: &[T]) -> Vec<i64> {
        let p = data.as_ptr() as *const u8;
        // SAFETY: the pointers address live local buffers sized for the call.
        let n = unsafe { count_nonzero(dtype, shape, strides, p) }.unwrap();
        let mut out = vec![-1i64; n * shape.len()];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { nonzero(dtype, shape, strides, p, out.as_mut_ptr(), n) }.unwrap();
        out
    }

    fn at(strides: &[isize], c: &[usize]) -> usize {
        c.iter().zip(strides).map(|(&i, &s)| i as isize * s).sum::<isize>() as usize
    }

    #[test]
    fn contiguous_and_strided_float() {
        let vals = [0.0f32, 1.5, -0.0, f32::NAN, 0.0, -2.0, f32::INFINITY, 0.0];
        let data: Vec<f32> = (0..60).map(|i| vals[(i * 7 + i / 5) % 8]).collect();
        let shape = [3usize, 4, 5];
        for strides in [[20isize, 5, 1], [1, 3, 12], [0, 5, 1], [20, 0, 4]] {
            let want = reference(&shape, |c| {
                let v = data[at(&strides, c)];
                v != 0.0 || v.is_nan()
            });
            assert_eq!(run(DType::F32, &shape, &strides, &data), want, "strides {strides:?}");
            let h: Vec<f16> = data.iter().map(|&v| f16::from_f32(v)).collect();
            assert_eq!(run(DType::F16, &shape, &strides, &h), want, "f16 strides {strides:?}");
        }
        // Negative strides (a flipped view) start from the last element.
        let d = [0.0f64, 1.0, 2.0, 0.0];
        // SAFETY: the pointers address live local buffers sized for the call.
        let p = unsafe { d.as_ptr().add(3) } as *const u8;
        // SAFETY: the pointers address live local buffers sized for the call.
        let n = unsafe { count_nonzero(DType::F64, &[4], &[-1], p) }.unwrap();
        let mut out = vec![0i64; n];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { nonzero(DType::F64, &[4], &[-1], p, out.as_mut_ptr(), n) }.unwrap();
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn integer_bool_and_complex_dtypes() {
        let shape = [4usize, 6];
        let ints: Vec<i64> = (0..24).map(|i| if i % 3 == 0 { 0 } else { i - 12 }).collect();
        let want = reference(&shape, |c| ints[c[0] * 6 + c[1]] != 0);
        assert_eq!(run(DType::I64, &shape, &[6, 1], &ints), want);
        let u: Vec<u8> = ints.iter().map(|&v| (v * 16) as u8).collect();
        let want_u = reference(&shape, |c| u[c[0] * 6 + c[1]] != 0);
        assert_eq!(run(DType::U8, &shape, &[6, 1], &u), want_u);
        let b: Vec<bool> = ints.iter().map(|&v| v > 0).collect();
        let want_b = reference(&shape, |c| b[c[0] * 6 + c[1]]);
        assert_eq!(run(DType::Bool, &shape, &[6, 1], &b), want_b);
        // Transposed bool view: coordinates still in row-major order of the view.
        let want_t = reference(&[6, 4], |c| b[c[1] * 6 + c[0]]);
        assert_eq!(run(DType::Bool, &[6, 4], &[1, 6], &b), want_t);
        // complex64: (re, im) pairs.
        let c: Vec<[f32; 2]> = vec![[0.0, 0.0], [0.0, 1.0], [-0.0, 0.0], [2.0, 0.0], [f32::NAN, 0.0]];
        assert_eq!(run(DType::C64, &[5], &[1], &c), vec![1, 3, 4]);
        let c: Vec<[f64; 2]> = vec![[0.0, -0.0], [0.0, 1e-300]];
        assert_eq!(run(DType::C128, &[2], &[1], &c), vec![1]);
        let c: Vec<[f16; 2]> = vec![[f16::ONE, f16::ZERO], [f16::ZERO, f16::NEG_ZERO]];
        assert_eq!(run(DType::C32, &[2], &[1], &c), vec![0]);
    }

    #[test]
    fn zero_dim_empty_and_errors() {
        // 0-dim: count 0 or 1, no columns.
        let one = [3i32];
        let zero = [0i32];
        // SAFETY: the pointers address live local buffers sized for the call.
        assert_eq!(unsafe { count_nonzero(DType::I32, &[], &[], one.as_ptr() as *const u8) }, Ok(1));
        // SAFETY: the pointers address live local buffers sized for the call.
        assert_eq!(unsafe { count_nonzero(DType::I32, &[], &[], zero.as_ptr() as *const u8) }, Ok(0));
        assert_eq!(run(DType::I32, &[], &[], &one), Vec::<i64>::new());
        // Zero extent: memory untouched.
        let null = std::ptr::null();
        // SAFETY: the pointers address live local buffers sized for the call.
        assert_eq!(unsafe { count_nonzero(DType::F32, &[3, 0, 2], &[0, 2, 1], null) }, Ok(0));
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { nonzero(DType::F32, &[3, 0, 2], &[0, 2, 1], null, std::ptr::null_mut(), 0) }.unwrap();
        // The count disagrees with the data.
        let d = [1.0f32, 0.0, 2.0];
        let mut out = [-1i64; 4];
        let p = d.as_ptr() as *const u8;
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { nonzero(DType::F32, &[3], &[1], p, out.as_mut_ptr(), 1) };
        assert!(matches!(e, Err(Error::InvalidValue { op: "nonzero", .. })));
        assert_eq!(out, [0, -1, -1, -1]); // nothing past `count` rows
                                          // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { nonzero(DType::F32, &[3], &[1], p, out.as_mut_ptr(), 3) };
        assert!(matches!(e, Err(Error::InvalidValue { .. })));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { count_nonzero(DType::F32, &[3], &[1, 1], p) };
        assert!(matches!(e, Err(Error::InvalidLayout { .. })));
    }
}
