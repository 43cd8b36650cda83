//! `unique` and `unique_consecutive`, flat (`_unique2`, `_unique`,
//! `unique_consecutive`) and along a dimension (`unique_dim`,
//! `unique_dim_consecutive`): the input is `n` contiguous rows of `m`
//! elements (`m == 1` for the flat ops; the glue moves the dimension first).
//!
//! [`argsort_rows`] orders the rows (lexicographically, stable, by the same
//! order-preserving keys as [`crate::ops::reduce::sort`]: NaN last, `-0.0 == 0.0`), then
//! [`unique_consecutive`] splits the ordered rows into groups of equal rows.
//! Rows are equal when every element compares `==`, as on CPU: a NaN is
//! never equal to anything, so each row holding one is its own group.

use rayon::prelude::*;

use crate::dtype::DType;
use crate::engine::iter::GRAIN;
use crate::error::Result;
use crate::ops::reduce::sort::SortKey;
use crate::with_real_dtype;

/// Writes to `perm` (`n` int64) the stable lexicographic order of the `n`
/// contiguous rows of `m` elements of `dtype` at `data`.
///
/// Dtypes: every real dtype. `threads` bounds the parallelism; the order is
/// a total order (ties broken by position), so it does not depend on it.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) (op
/// `"unique"`) for complex dtypes.
///
/// # Safety
/// `data` holds `n * m` readable elements, `perm` `n` writable int64.
pub unsafe fn argsort_rows(
    dtype: DType,
    n: usize,
    m: usize,
    data: *const u8,
    perm: *mut i64,
    threads: usize,
) -> Result<()> {
    with_real_dtype!(dtype, "unique", |T| {
        // SAFETY: caller contract.
        unsafe { argsort_typed::<T>(n, m, data as *const T, perm, threads) };
        Ok(())
    })
}

/// # Safety
/// As [`argsort_rows`].
unsafe fn argsort_typed<T: SortKey>(n: usize, m: usize, data: *const T, perm: *mut i64, threads: usize) {
    if n == 0 {
        return;
    }
    // SAFETY: caller contract (an empty tensor's pointer may be null: not read).
    let (data, perm) = unsafe {
        (
            if m == 0 { &[][..] } else { std::slice::from_raw_parts(data, n * m) },
            std::slice::from_raw_parts_mut(perm, n),
        )
    };
    let parallel = threads > 1 && n * m.max(1) >= 2 * GRAIN;
    if m == 1 {
        // (key, position) pairs are unique, so the unstable sort gives the stable order.
        let mut pairs: Vec<(u64, usize)> = data.iter().enumerate().map(|(i, v)| (v.key(), i)).collect();
        if parallel {
            pairs.par_sort_unstable();
        } else {
            pairs.sort_unstable();
        }
        perm.iter_mut().zip(&pairs).for_each(|(p, &(_, i))| *p = i as i64);
        return;
    }
    let keys: Vec<u64> = data.iter().map(|v| v.key()).collect();
    let row = |i: usize| &keys[i * m..(i + 1) * m];
    let mut order: Vec<usize> = (0..n).collect();
    let cmp = |a: &usize, b: &usize| row(*a).cmp(row(*b)).then(a.cmp(b));
    if parallel {
        order.par_sort_unstable_by(cmp);
    } else {
        order.sort_unstable_by(cmp);
    }
    perm.iter_mut().zip(&order).for_each(|(p, &i)| *p = i as i64);
}

/// Sorted flat `unique` of `n` one-byte elements (bool, uint8, int8) by counting,
/// in place of sorting `n` (key, index) pairs: 256 counters, no memory in
/// proportion to `n` beyond the `inverse` the caller asks for. Writes the
/// distinct values in ascending order to `values` (room for 256), their counts
/// to `counts` (room for 256, may be null) and each element's position among
/// them to `inverse` (`n`, may be null); returns the number of distinct values.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for other dtypes.
///
/// # Safety
/// `data` holds `n` readable bytes; the outputs are writable as described.
pub unsafe fn unique_bytes(
    dtype: DType,
    n: usize,
    data: *const u8,
    values: *mut u8,
    inverse: *mut i64,
    counts: *mut i64,
) -> Result<usize> {
    // The rank of a byte in ascending order of its dtype: int8 orders -128 first.
    let rank: fn(u8) -> usize = match dtype {
        DType::Bool | DType::U8 => |b: u8| b as usize,
        DType::I8 => |b: u8| (b ^ 0x80) as usize,
        d => return Err(crate::Error::UnsupportedDtype { op: "unique", dtype: d }),
    };
    // SAFETY: caller contract (an empty tensor's pointer may be null: not read).
    let data = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(data, n) } };
    let chunk = (2 * GRAIN).max(n.div_ceil(crate::engine::team::launch_threads().max(1)));
    let tally = data
        .par_chunks(chunk.max(1))
        .map(|c| {
            let mut h = [0u64; 256];
            c.iter().for_each(|&b| h[rank(b)] += 1);
            h
        })
        .reduce(
            || [0u64; 256],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        );
    // Position of each present rank among the distinct values, and the values themselves.
    let mut position = [0i64; 256];
    let mut k = 0usize;
    for r in 0..256 {
        if tally[r] > 0 {
            position[r] = k as i64;
            let byte = if dtype == DType::I8 { (r as u8) ^ 0x80 } else { r as u8 };
            // SAFETY: `values` has room for 256, and k < 256 here.
            unsafe {
                values.add(k).write(byte);
                if !counts.is_null() {
                    counts.add(k).write(tally[r] as i64);
                }
            }
            k += 1;
        }
    }
    if !inverse.is_null() && n > 0 {
        // SAFETY: caller contract: `inverse` holds n writable int64.
        let inv = unsafe { std::slice::from_raw_parts_mut(inverse, n) };
        inv.par_chunks_mut(chunk.max(1)).zip(data.par_chunks(chunk.max(1))).for_each(|(o, c)| {
            o.iter_mut().zip(c).for_each(|(o, &b)| *o = position[rank(b)]);
        });
    }
    Ok(k)
}

/// Where [`unique_consecutive`] writes its groups (int64 each): `reps[g]`, the
/// first row of group `g`; `counts[g]`, its size; `inverse[r]`, the group of row
/// `r`. `counts` and `inverse` may be null (not wanted).
#[derive(Debug, Clone, Copy)]
pub struct Groups {
    pub reps: *mut i64,
    pub inverse: *mut i64,
    pub counts: *mut i64,
}

/// Groups of equal consecutive rows among the `n` contiguous rows of `m`
/// elements at `data`, visited in the order `perm` gives (null: `0..n`).
/// For group `g` (numbered in visiting order) writes the row index of its
/// first row to `out.reps[g]` and its size to `out.counts[g]`; for every row `r`,
/// `out.inverse[r] = g` of its group ([`Groups`]). Returns
/// the number of groups. With `m == 0` every row is equal to every other.
///
/// Dtypes: every real dtype.
///
/// Errors: as [`argsort_rows`].
///
/// # Safety
/// `data` holds `n * m` elements; `perm` (if non-null) is a permutation of
/// `0..n`; `reps` and `counts` hold `n` writable int64, `inverse` `n`.
pub unsafe fn unique_consecutive(
    dtype: DType,
    n: usize,
    m: usize,
    data: *const u8,
    perm: *const i64,
    out: Groups,
) -> Result<usize> {
    with_real_dtype!(dtype, "unique", |T| {
        // SAFETY: caller contract.
        Ok(unsafe { groups::<T>(n, m, data as *const T, perm, out) })
    })
}

/// # Safety
/// As [`unique_consecutive`].
unsafe fn groups<T: SortKey>(n: usize, m: usize, data: *const T, perm: *const i64, out: Groups) -> usize {
    let Groups { reps, inverse, counts } = out;
    if n == 0 {
        return 0;
    }
    // SAFETY: caller contract.
    let data = if m == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(data, n * m) } };
    // SAFETY: caller contract.
    let nth = |i: usize| if perm.is_null() { i } else { unsafe { perm.add(i).read_unaligned() as usize } };
    let equal = |a: usize, b: usize| {
        (0..m).all(|j| {
            let (x, y) = (data[a * m + j], data[b * m + j]);
            x.key() == y.key() && !x.to_f64().is_nan()
        })
    };
    let mut g = 0usize;
    let mut first = nth(0);
    let mut size = 0i64;
    // SAFETY: n > 0 and `reps` holds n int64 (caller contract).
    unsafe { reps.write(first as i64) };
    for i in 0..n {
        let r = nth(i);
        if i > 0 && !equal(first, r) {
            if !counts.is_null() {
                // SAFETY: g < n groups, `counts` holds n int64 (caller contract).
                unsafe { counts.add(g).write(size) };
            }
            g += 1;
            first = r;
            size = 0;
            // SAFETY: g < n groups, `reps` holds n int64 (caller contract).
            unsafe { reps.add(g).write(r as i64) };
        }
        size += 1;
        if !inverse.is_null() {
            // SAFETY: r < n (`perm` is a permutation of 0..n), `inverse` holds n int64 (caller contract).
            unsafe { inverse.add(r).write(g as i64) };
        }
    }
    if !counts.is_null() {
        // SAFETY: g < n groups, `counts` holds n int64 (caller contract).
        unsafe { counts.add(g).write(size) };
    }
    g + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_bytes_counts_in_each_dtype_order() {
        let data: Vec<u8> = [3u8, 0x80, 3, 255, 0, 0x80, 7].repeat(20000);
        for (dtype, want) in [(DType::U8, vec![0u8, 3, 7, 0x80, 255]), (DType::I8, vec![0x80, 255, 0, 3, 7])] {
            let (mut values, mut counts, mut inverse) = ([0u8; 256], [0i64; 256], vec![0i64; data.len()]);
            // SAFETY: the pointers address live local buffers sized for the call.
            let k = unsafe {
                unique_bytes(
                    dtype,
                    data.len(),
                    data.as_ptr(),
                    values.as_mut_ptr(),
                    inverse.as_mut_ptr(),
                    counts.as_mut_ptr(),
                )
            }
            .unwrap();
            assert_eq!(&values[..k], &want[..], "{dtype:?}");
            for (i, &b) in data.iter().enumerate() {
                assert_eq!(values[inverse[i] as usize], b);
            }
            let total: i64 = counts[..k].iter().sum();
            assert_eq!(total as usize, data.len());
            assert_eq!(counts[want.iter().position(|&v| v == 0x80).unwrap()], 40000);
        }
        let bools = [1u8, 0, 1];
        let mut values = [0u8; 256];
        // SAFETY: the pointers address live local buffers sized for the call.
        let k = unsafe {
            unique_bytes(
                DType::Bool,
                3,
                bools.as_ptr(),
                values.as_mut_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
        .unwrap();
        assert_eq!(&values[..k], &[0, 1]);
        // SAFETY: the pointers address live local buffers sized for the call.
        assert!(unsafe {
            unique_bytes(
                DType::I16,
                0,
                std::ptr::null(),
                values.as_mut_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
        .is_err());
    }
    use crate::dtype::Element;
    use crate::error::Error;

    struct Unique {
        reps: Vec<i64>,
        inverse: Vec<i64>,
        counts: Vec<i64>,
    }

    fn unique<T: Element>(data: &[T], m: usize, sorted: bool, threads: usize) -> Unique {
        let n = data.len().checked_div(m).unwrap_or(0);
        let mut perm = vec![0i64; n];
        if sorted {
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { argsort_rows(T::DTYPE, n, m, data.as_ptr() as *const u8, perm.as_mut_ptr(), threads) }.unwrap();
        }
        let (mut reps, mut inverse, mut counts) = (vec![-1i64; n], vec![-1i64; n], vec![-1i64; n]);
        let p = if sorted { perm.as_ptr() } else { std::ptr::null() };
        let out = Groups { reps: reps.as_mut_ptr(), inverse: inverse.as_mut_ptr(), counts: counts.as_mut_ptr() };
        // SAFETY: the pointers address live local buffers sized for the call.
        let k = unsafe { unique_consecutive(T::DTYPE, n, m, data.as_ptr() as *const u8, p, out) }.unwrap();
        reps.truncate(k);
        counts.truncate(k);
        Unique { reps, inverse, counts }
    }

    #[test]
    fn flat_sorted_with_nan_and_signed_zero() {
        // CPU: unique([2, nan, 1, nan, 2, -0, 0]) = [-0, 1, 2, nan, nan], inverse [2, 3, 1, 4, 2, 0, 0], counts [2, 1, 2, 1, 1]
        let x = [2.0f32, f32::NAN, 1.0, f32::NAN, 2.0, -0.0, 0.0];
        for threads in [1, 4] {
            let u = unique(&x, 1, true, threads);
            assert_eq!(u.reps, [5, 2, 0, 1, 3]);
            assert_eq!(u.inverse, [2, 3, 1, 4, 2, 0, 0]);
            assert_eq!(u.counts, [2, 1, 2, 1, 1]);
        }
        // consecutive: [1, nan, nan, 1, 1] -> groups [1], [nan], [nan], [1, 1]
        let u = unique(&[1.0f64, f64::NAN, f64::NAN, 1.0, 1.0], 1, false, 1);
        assert_eq!((u.reps, u.inverse, u.counts), (vec![0, 1, 2, 3], vec![0, 1, 2, 3, 3], vec![1, 1, 1, 2]));
    }

    #[test]
    fn rows_lexicographic_against_naive() {
        let mut s = 5u64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) % 3
        };
        let (n, m) = (3 * GRAIN / 2, 3);
        let data: Vec<i64> = (0..n * m).map(|_| next() as i64 - 1).collect();
        let rows: Vec<&[i64]> = data.chunks(m).collect();
        let mut distinct: Vec<&[i64]> = rows.clone();
        distinct.sort();
        distinct.dedup();
        for threads in [1, 4] {
            let u = unique(&data, m, true, threads);
            assert_eq!(u.reps.len(), distinct.len());
            for (g, &r) in u.reps.iter().enumerate() {
                assert_eq!(rows[r as usize], distinct[g]);
                // the representative is the first occurrence (stable order)
                assert_eq!(rows.iter().position(|x| *x == distinct[g]).unwrap(), r as usize);
                assert_eq!(u.counts[g] as usize, rows.iter().filter(|x| **x == distinct[g]).count());
            }
            for (i, &g) in u.inverse.iter().enumerate() {
                assert_eq!(rows[i], distinct[g as usize]);
            }
        }
        // uint64 above 2^53 and bool keep exact order.
        let u = unique(&[u64::MAX, 1 << 60, u64::MAX - 1, 1 << 60], 1, true, 1);
        assert_eq!((u.reps, u.counts), (vec![1, 2, 0], vec![2, 1, 1]));
        let u = unique(&[true, false, false, true], 2, true, 1);
        assert_eq!((u.reps, u.inverse), (vec![1, 0], vec![1, 0]));
    }

    #[test]
    fn empty_rows_and_errors() {
        assert_eq!(unique::<f32>(&[], 1, true, 1).reps, Vec::<i64>::new());
        // m == 0: all rows equal
        let mut reps = [9i64; 3];
        let mut inv = [9i64; 3];
        let out = Groups { reps: reps.as_mut_ptr(), inverse: inv.as_mut_ptr(), counts: std::ptr::null_mut() };
        // SAFETY: the pointers address live local buffers sized for the call.
        let k = unsafe {
            unique_consecutive(
                DType::F32,
                3,
                0,
                std::ptr::NonNull::<f32>::dangling().as_ptr() as *const u8,
                std::ptr::null(),
                out,
            )
        }
        .unwrap();
        assert_eq!((k, reps[0], inv), (1, 0, [0, 0, 0]));
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe { argsort_rows(DType::C64, 1, 1, std::ptr::null(), std::ptr::null_mut(), 1) };
        assert_eq!(e, Err(Error::UnsupportedDtype { op: "unique", dtype: DType::C64 }));
    }
}
