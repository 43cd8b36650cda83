//! Stable sort of contiguous rows with the permutation (PyTorch's `sort`
//! CPU kernel with `stable=True`, which the CPU uses for every sort).
//!
//! Every element is mapped to a `u64` key whose unsigned order is the sort
//! order: NaN above every number (all NaNs one key, so they keep their
//! relative order), `-0.0` equal to `0.0`, integers exact (uint64 included).
//! Sorting `(key, original position)` pairs gives the stable order in both
//! directions (descending breaks ties by ascending position), so the faster
//! unstable sort can be used. Rows are split over rayon tasks; a few long
//! rows use rayon's parallel sort instead.

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_range, tasks_for, GRAIN};
use crate::error::Result;
use crate::with_real_dtype;

/// An element type with an order-preserving `u64` key.
pub(crate) trait SortKey: Element {
    fn key(self) -> u64;
}

macro_rules! signed_key {
    ($($t:ty),*) => {$( impl SortKey for $t {
        #[inline(always)]
        fn key(self) -> u64 { (self as i64 as u64) ^ (1 << 63) }
    } )*};
}
signed_key!(i8, i16, i32, i64);

macro_rules! unsigned_key {
    ($($t:ty),*) => {$( impl SortKey for $t {
        #[inline(always)]
        fn key(self) -> u64 { self as u64 }
    } )*};
}
unsigned_key!(u8, u16, u32, u64, bool);

/// The key of a double: NaN is the largest key, `-0.0` maps like `0.0`,
/// and otherwise the IEEE bit pattern made monotone (negative numbers
/// inverted, positive ones offset above them).
#[inline(always)]
fn f64_key(v: f64) -> u64 {
    if v.is_nan() {
        return u64::MAX;
    }
    let bits = (v + 0.0).to_bits(); // -0.0 + 0.0 == +0.0
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

macro_rules! float_key {
    ($($t:ty),*) => {$( impl SortKey for $t {
        #[inline(always)]
        fn key(self) -> u64 { f64_key(self.to_f64()) }
    } )*};
}
float_key!(f32, f64, half::f16, half::bf16);

/// Sorts each of `rows` contiguous rows of `len` elements of `dtype` at
/// `data` in place, and writes each element's original position (`0..len`)
/// to `indices` (`rows * len` int64, row-major).
///
/// The sort is always stable: equal elements keep their original order in
/// both directions. NaN sorts above every number (last ascending, first
/// descending; NaNs keep their relative order); `-0.0` and `0.0` compare
/// equal. float16/bfloat16 compare as float; bool as false < true; integers
/// exactly.
///
/// Dtypes: every real dtype. `threads` bounds the parallelism (1 = serial).
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) (op
/// `"sort"`) for complex dtypes. `rows == 0` or `len == 0` returns `Ok`
/// without touching memory.
///
/// # Safety
/// `data` must address `rows * len` readable and writable elements of
/// `dtype`, and `indices` `rows * len` writable int64, not overlapping `data`.
pub unsafe fn sort_rows(
    dtype: DType,
    rows: usize,
    len: usize,
    data: *mut u8,
    indices: *mut i64,
    descending: bool,
    threads: usize,
) -> Result<()> {
    with_real_dtype!(dtype, "sort", |T| {
        if rows == 0 || len == 0 {
            return Ok(());
        }
        // SAFETY: caller contract.
        unsafe { sort_typed::<T>(rows, len, data as usize, indices as usize, descending, threads) };
        Ok(())
    })
}

/// Reusable per-task buffers.
struct Scratch<T> {
    vals: Vec<T>,
    pairs: Vec<(u64, usize)>,
}

/// # Safety
/// As [`sort_rows`], with `T` the element type of `dtype`.
unsafe fn sort_typed<T: SortKey>(
    rows: usize,
    len: usize,
    data: usize,
    indices: usize,
    descending: bool,
    threads: usize,
) {
    let total = rows.saturating_mul(len);
    let tasks = tasks_for(total, 1, threads);
    // Few long rows: sort each one with rayon's parallel sort.
    let parallel_row = tasks > 1 && rows < tasks && len >= 2 * GRAIN;
    let do_rows = |start: usize, end: usize| {
        let mut s = Scratch { vals: Vec::with_capacity(len), pairs: Vec::with_capacity(len) };
        for r in start..end {
            // SAFETY: caller contract; row r is only touched by this call.
            unsafe {
                sort_row::<T>(
                    &mut s,
                    (data as *mut T).add(r * len),
                    (indices as *mut i64).add(r * len),
                    len,
                    descending,
                    parallel_row,
                )
            };
        }
    };
    if tasks <= 1 || parallel_row {
        do_rows(0, rows);
        return;
    }
    for_each_range(rows, tasks.min(rows), do_rows);
}

/// Sorts one row of `len` elements at `row`, writing the permutation to `idx`.
///
/// # Safety
/// `row` must address `len` readable and writable `T`, `idx` `len` writable int64.
#[inline]
unsafe fn sort_row<T: SortKey>(
    s: &mut Scratch<T>,
    row: *mut T,
    idx: *mut i64,
    len: usize,
    descending: bool,
    parallel: bool,
) {
    s.vals.clear();
    s.pairs.clear();
    for i in 0..len {
        // SAFETY: caller contract.
        let v = unsafe { row.add(i).read_unaligned() };
        s.vals.push(v);
        s.pairs.push((v.key(), i));
    }
    // Positions are unique, so ordering by (key, position) is a total order
    // that equals the stable order: unstable sorting is safe.
    let desc = |a: &(u64, usize), b: &(u64, usize)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
    match (descending, parallel) {
        (false, false) => s.pairs.sort_unstable(),
        (false, true) => s.pairs.par_sort_unstable(),
        (true, false) => s.pairs.sort_unstable_by(desc),
        (true, true) => s.pairs.par_sort_unstable_by(desc),
    }
    for (i, &(_, j)) in s.pairs.iter().enumerate() {
        // SAFETY: caller contract; i < len.
        unsafe {
            row.add(i).write_unaligned(s.vals[j]);
            idx.add(i).write_unaligned(j as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use half::{bf16, f16};
    use std::cmp::Ordering;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// Reference order: NaN greatest, everything else by value (-0 == 0).
    fn cmp_f64(a: f64, b: f64) -> Ordering {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => a.partial_cmp(&b).unwrap(),
        }
    }

    /// Sorts `x` (rows x len) with `sort_rows` and checks values (bitwise)
    /// and indices against a naive stable sort with comparator `cmp`.
    fn check<T: Element + PartialEq + std::fmt::Debug>(
        x: &[T],
        rows: usize,
        len: usize,
        cmp: impl Fn(T, T) -> Ordering,
        bits: impl Fn(T) -> u64,
    ) {
        for descending in [false, true] {
            for threads in [1, 4] {
                let mut data = x.to_vec();
                let mut idx = vec![-1i64; x.len()];
                // SAFETY: the pointers address live local buffers sized for the call.
                unsafe {
                    sort_rows(T::DTYPE, rows, len, data.as_mut_ptr() as *mut u8, idx.as_mut_ptr(), descending, threads)
                }
                .unwrap();
                for r in 0..rows {
                    let row = &x[r * len..(r + 1) * len];
                    let mut perm: Vec<usize> = (0..len).collect();
                    // `sort_by` is stable.
                    if descending {
                        perm.sort_by(|&a, &b| cmp(row[b], row[a]));
                    } else {
                        perm.sort_by(|&a, &b| cmp(row[a], row[b]));
                    }
                    for (i, &p) in perm.iter().enumerate() {
                        let k = r * len + i;
                        assert_eq!(idx[k], p as i64, "{:?} row {r} pos {i} desc {descending}", T::DTYPE);
                        assert_eq!(bits(data[k]), bits(row[p]), "{:?} row {r} pos {i} desc {descending}", T::DTYPE);
                    }
                }
            }
        }
    }

    fn floats(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| match lcg(&mut s) % 20 {
                0 => f64::NAN,
                1 => -0.0,
                2 => 0.0,
                3 => f64::INFINITY,
                4 => f64::NEG_INFINITY,
                r => (r as f64 - 12.0) * 0.5,
            })
            .collect()
    }

    #[test]
    fn floats_stable_with_nan_and_signed_zero() {
        let (rows, len) = (13, 97);
        let x = floats(rows * len, 3);
        check(&x, rows, len, cmp_f64, f64::to_bits);
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        check(&x32, rows, len, |a, b| cmp_f64(a as f64, b as f64), |v| v.to_bits() as u64);
        let xh: Vec<f16> = x.iter().map(|&v| f16::from_f64(v)).collect();
        check(&xh, rows, len, |a, b| cmp_f64(a.to_f64(), b.to_f64()), |v| v.to_bits() as u64);
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
        check(&xb, rows, len, |a, b| cmp_f64(a.to_f64(), b.to_f64()), |v| v.to_bits() as u64);
        // NaNs with distinct payloads keep their order.
        let x = [f64::NAN, 1.0, -f64::NAN, f64::from_bits(0x7ff8_0000_0000_0001), -1.0];
        check(&x, 1, 5, cmp_f64, f64::to_bits);
        let mut d = x;
        let mut idx = [0i64; 5];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { sort_rows(DType::F64, 1, 5, d.as_mut_ptr() as *mut u8, idx.as_mut_ptr(), true, 1) }.unwrap();
        assert_eq!(idx, [0, 2, 3, 1, 4]);
    }

    #[test]
    fn integers_and_bool() {
        let (rows, len) = (9, 70);
        let mut s = 11;
        let x: Vec<i64> = (0..rows * len)
            .map(|_| (lcg(&mut s) % 9) as i64 - 4 + if lcg(&mut s).is_multiple_of(7) { i64::MIN / 2 } else { 0 })
            .collect();
        check(&x, rows, len, |a: i64, b| a.cmp(&b), |v| v as u64);
        let xi8: Vec<i8> = x.iter().map(|&v| v as i8).collect();
        check(&xi8, rows, len, |a: i8, b| a.cmp(&b), |v| v as u64);
        let xu8: Vec<u8> = x.iter().map(|&v| v as u8).collect();
        check(&xu8, rows, len, |a: u8, b| a.cmp(&b), |v| v as u64);
        let xu64: Vec<u64> = x.iter().map(|&v| (v as u64).rotate_left(1)).collect();
        check(&xu64, rows, len, |a: u64, b| a.cmp(&b), |v| v);
        let xu16: Vec<u16> = x.iter().map(|&v| v as u16).collect();
        check(&xu16, rows, len, |a: u16, b| a.cmp(&b), |v| v as u64);
        let xi32: Vec<i32> = x.iter().map(|&v| (v as i32).wrapping_mul(1 << 29)).collect();
        check(&xi32, rows, len, |a: i32, b| a.cmp(&b), |v| v as u64);
        let xb: Vec<bool> = x.iter().map(|&v| v > 0).collect();
        check(&xb, rows, len, |a: bool, b| a.cmp(&b), |v| v as u64);
        // Exact uint64 / int64 extremes (not representable as doubles).
        let x = [u64::MAX, u64::MAX - 1, 0, 1 << 63, (1 << 63) + 1];
        check(&x, 1, 5, |a: u64, b| a.cmp(&b), |v| v);
        let x = [i64::MAX, i64::MIN, i64::MAX - 1, -1, 0, i64::MIN + 1];
        check(&x, 1, 6, |a: i64, b| a.cmp(&b), |v| v as u64);
    }

    #[test]
    fn parallel_paths_match() {
        // Many rows split over tasks, and one long row with the parallel sort.
        let x: Vec<f32> = floats(3 * GRAIN + 7, 5).iter().map(|&v| v as f32).collect();
        check(&x, 1, x.len(), |a, b| cmp_f64(a as f64, b as f64), |v| v.to_bits() as u64);
        let x: Vec<i16> = floats(GRAIN * 2, 9).iter().map(|&v| if v.is_nan() { 7 } else { (v * 2.0) as i16 }).collect();
        check(&x, 4096, 16, |a: i16, b| a.cmp(&b), |v| v as u64);
    }

    #[test]
    fn empty_and_errors() {
        let null = std::ptr::null_mut();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { sort_rows(DType::F32, 0, 5, null, std::ptr::null_mut(), false, 4) }.unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { sort_rows(DType::I64, 3, 0, null, std::ptr::null_mut(), true, 1) }.unwrap();
        let mut one = [7.5f32];
        let mut idx = [9i64];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { sort_rows(DType::F32, 1, 1, one.as_mut_ptr() as *mut u8, idx.as_mut_ptr(), false, 1) }.unwrap();
        assert_eq!((one, idx), ([7.5], [0]));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { sort_rows(DType::C64, 1, 1, null, std::ptr::null_mut(), false, 1) };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "sort", dtype: DType::C64 }));
    }
}
