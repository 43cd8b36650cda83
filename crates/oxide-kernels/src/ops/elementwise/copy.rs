//! Strided copy between two operands of the same dtype (the kernel behind
//! device-to-device `copy_`, `clone` and `contiguous`), and [`cat_contiguous`]
//! (`torch.cat` / `torch.stack` of contiguous operands).

use crate::error::{Error, Result};

use crate::engine::iter::{for_each_range, tasks_for, GRAIN};
use crate::engine::layout::Layout;
use crate::engine::SendPtr;

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
    let numel = l.numel();
    let tasks = tasks_for(numel, 1, crate::engine::team::launch_threads());
    let contiguous = l.shape.len() <= 1 && l.strides.iter().all(|s| s.first().is_none_or(|&x| x == 1));
    if contiguous {
        let bytes = numel * elem_size;
        let (d, s) = (SendPtr::new(dst), SendPtr::from_const(src));
        // SAFETY: the caller guarantees numel elements at both pointers, non-overlapping;
        // the ranges partition those bytes.
        for_each_range(bytes, tasks, |a, b| unsafe {
            std::ptr::copy_nonoverlapping(s.get().add(a), d.get().add(a), b - a)
        });
        return Ok(());
    }
    // SAFETY: forwarded caller contract.
    with_element_bits!(elem_size, "copy_", |T| unsafe { strided::<T>(&l, tasks, dst, src) });
    Ok(())
}

/// Concatenation of contiguous parts into a contiguous output (the kernel
/// behind `torch.cat` / `torch.stack` when every operand is contiguous).
/// The output is `outer` rows; row `r` is part 0's `r`-th chunk of
/// `parts[0].1` bytes, then part 1's, and so on (for `cat` along `dim`,
/// `outer` is the product of the sizes before `dim` and a part's chunk is its
/// size along `dim` times the inner sizes times the element size). Copies run
/// on up to `threads` tasks when the output has at least [`GRAIN`] bytes per task.
///
/// # Safety
/// Part `i` holds `outer * parts[i].1` readable bytes at `parts[i].0`; `dst`
/// holds `outer * sum(parts[i].1)` writable bytes that overlap no part.
pub unsafe fn cat_contiguous(outer: usize, parts: &[(*const u8, usize)], dst: *mut u8, threads: usize) {
    let row: usize = parts.iter().map(|p| p.1).sum();
    if outer == 0 || row == 0 {
        return;
    }
    // Starting offset of each part within an output row.
    let starts: Vec<usize> = parts
        .iter()
        .scan(0, |acc, p| {
            let s = *acc;
            *acc += p.1;
            Some(s)
        })
        .collect();
    let d = SendPtr::new(dst);
    let srcs: Vec<SendPtr<u8>> = parts.iter().map(|p| SendPtr::from_const(p.0)).collect();
    let sizes: Vec<usize> = parts.iter().map(|p| p.1).collect();
    // One unit of work = one part's chunk in one row: (row, part) in row-major order.
    let units = outer * parts.len();
    let copy = |u: usize| {
        let (r, i) = (u / sizes.len(), u % sizes.len());
        let n = sizes[i];
        // SAFETY: within part i's r-th chunk and the output's row r (contract).
        unsafe { std::ptr::copy_nonoverlapping(srcs[i].get().add(r * n), d.get().add(r * row + starts[i]), n) };
    };
    let tasks = (outer * row / GRAIN).clamp(1, threads.max(1)).min(units);
    if tasks <= 1 {
        (0..units).for_each(copy);
    } else {
        // Contiguous runs of units per task, balanced by count (parts of one cat
        // are usually alike in size).
        crate::engine::iter::for_each_task(tasks, |t| (units * t / tasks..units * (t + 1) / tasks).for_each(copy));
    }
}

/// Tile edge of the blocked transpose: 32 x 32 elements keeps both the
/// destination rows and the source columns of a tile in L1 for every element size.
const TILE: usize = 32;

/// Non-contiguous copy of a coalesced layout, split over `tasks` rayon tasks.
///
/// Rows run along the last dimension. When the source's fastest dimension is
/// another one (a transposition), rows would read the source one cache line per
/// element; instead the two dimensions are walked in [`TILE`]-square tiles so that
/// every source line fetched is used for a whole tile column.
unsafe fn strided<T: Copy>(l: &Layout<2>, tasks: usize, dst: *mut u8, src: *const u8) {
    let nd = l.shape.len();
    let z = nd - 1;
    // The source's fastest-moving dimension (smallest non-zero stride), if not the last one.
    let a = (0..nd)
        .filter(|&d| l.strides[1][d] != 0 && l.shape[d] >= TILE)
        .min_by_key(|&d| l.strides[1][d].unsigned_abs())
        .filter(|&d| d != z && l.shape[z] >= TILE && l.strides[1][z].unsigned_abs() > l.strides[1][d].unsigned_abs());
    let (dp, sp) = (SendPtr::new(dst), SendPtr::from_const(src));
    // Work units: (index over the dims other than `z` and `a`, block of TILE along `a`).
    let blocks_a = a.map_or(1, |a| l.shape[a].div_ceil(TILE));
    let outer: Vec<usize> = (0..z).filter(|&d| Some(d) != a).collect();
    let outer_count: usize = outer.iter().map(|&d| l.shape[d]).product();
    let units = outer_count * blocks_a;
    let run = |u0: usize, u1: usize| {
        let (dst, src) = (dp.get() as *mut T, sp.get() as *const T);
        let (dz, sz) = (l.strides[0][z], l.strides[1][z]);
        for u in u0..u1 {
            let (mut rem, blk) = (u / blocks_a, u % blocks_a);
            let (mut od, mut os) = (0isize, 0isize);
            for &d in outer.iter().rev() {
                let i = (rem % l.shape[d]) as isize;
                rem /= l.shape[d];
                od += i * l.strides[0][d];
                os += i * l.strides[1][d];
            }
            match a {
                None => {
                    for j in 0..l.shape[z] as isize {
                        // SAFETY: offsets come from the layout the caller vouched for; unaligned
                        // access because a storage offset may leave an element off its alignment.
                        unsafe { dst.offset(od + j * dz).write_unaligned(src.offset(os + j * sz).read_unaligned()) };
                    }
                }
                Some(a) => {
                    let (da, sa) = (l.strides[0][a], l.strides[1][a]);
                    let (i0, i1) = (blk * TILE, ((blk + 1) * TILE).min(l.shape[a]));
                    for j0 in (0..l.shape[z]).step_by(TILE) {
                        let j1 = (j0 + TILE).min(l.shape[z]);
                        for i in i0 as isize..i1 as isize {
                            for j in j0 as isize..j1 as isize {
                                // SAFETY: as above.
                                unsafe {
                                    dst.offset(od + i * da + j * dz)
                                        .write_unaligned(src.offset(os + i * sa + j * sz).read_unaligned())
                                };
                            }
                        }
                    }
                }
            }
        }
    };
    for_each_range(units, if units < 2 { 1 } else { tasks }, run);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cat_contiguous_interleaves_rows_serial_and_parallel() {
        // cat of [outer, 2] and [outer, 3] u16 parts along dim 1, small and above GRAIN.
        for outer in [0usize, 1, 5, 20_000] {
            let a: Vec<u16> = (0..outer * 2).map(|k| k as u16).collect();
            let b: Vec<u16> = (0..outer * 3).map(|k| (k as u16).wrapping_add(40_000)).collect();
            let mut out = vec![0u16; outer * 5];
            for threads in [1, 2] {
                out.fill(0);
                // SAFETY: sizes as documented.
                unsafe {
                    cat_contiguous(
                        outer,
                        &[(a.as_ptr() as *const u8, 4), (b.as_ptr() as *const u8, 6)],
                        out.as_mut_ptr() as *mut u8,
                        threads,
                    )
                };
                for r in 0..outer {
                    assert_eq!(&out[r * 5..r * 5 + 2], &a[r * 2..r * 2 + 2]);
                    assert_eq!(&out[r * 5 + 2..r * 5 + 5], &b[r * 3..r * 3 + 3]);
                }
            }
        }
    }

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

    /// Large enough for the tiled transpose (both dims >= TILE, ragged edges) and
    /// for several rayon tasks (numel >= GRAIN), in 2-d and 3-d with a storage offset.
    #[test]
    fn tiled_and_parallel_paths_match_naive() {
        // (shape, destination strides, source strides, source offset)
        type Case<'a> = (&'a [i64], &'a [i64], &'a [i64], usize);
        let cases: [Case; 4] = [
            (&[200, 170], &[170, 1], &[1, 200], 0),              // transpose
            (&[3, 70, 90], &[6300, 90, 1], &[1, 3, 210], 5),     // permuted, offset
            (&[4, 100, 100], &[10000, 100, 1], &[0, 1, 100], 0), // broadcast + transpose
            (&[300, 130], &[130, 1], &[260, 2], 1),              // strided rows, no transpose
        ];
        for (shape, ds, ss, off) in cases {
            let n: i64 = shape.iter().product();
            let span = ss.iter().zip(shape).map(|(s, d)| s * (d - 1)).sum::<i64>() as usize + off + 1;
            let src: Vec<u32> = (0..span as u32).collect();
            let (mut got, mut want) = (vec![0u32; n as usize], vec![0u32; n as usize]);
            for lin in 0..n {
                let (mut rem, mut od, mut os) = (lin, 0i64, off as i64);
                for d in (0..shape.len()).rev() {
                    let i = rem % shape[d];
                    rem /= shape[d];
                    od += i * ds[d];
                    os += i * ss[d];
                }
                want[od as usize] = src[os as usize];
            }
            let l = Layout::new("copy", shape, [ds, ss]).unwrap();
            // SAFETY: offsets stay inside both buffers by construction of `span`.
            unsafe { copy_strided(4, &l, got.as_mut_ptr() as *mut u8, src.as_ptr().add(off) as *const u8).unwrap() };
            assert!(got == want, "shape {shape:?} dst {ds:?} src {ss:?}");
        }
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
