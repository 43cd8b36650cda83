//! Attention forward (FlashAttention-2's online softmax): one task per
//! (batch, head, query block) after packing every key/value tile once per
//! call; writes the output and the logsumexp the backward pass reads.

use crate::dtype::Element;
use crate::engine::math::Float;
use crate::engine::scratch::{self, Plain};
use crate::error::Result;

use super::tile::{gemm, padded, row_max, row_sum, KeyTile, Layouts, Mat};
use super::{check, for_tasks, key_end, load_row, mask_scores, store_row, Attention, Keep, Operand, BLOCK_K, BLOCK_Q};

/// Forward pass: writes `out` (`[B, Hq, L, Ev]`, strided, type `a.dtype`)
/// and `lse` (`[B, Hq, L]` contiguous, float64 for float64 inputs, else
/// float32).
///
/// Errors: [`Error::UnsupportedDtype`](crate::error::Error::UnsupportedDtype) for dtypes other than
/// float16/bfloat16/float32/float64; [`Error::InvalidValue`](crate::error::Error::InvalidValue) when `Hq` is
/// not a multiple of `Hkv` or the dropout probability is outside [0, 1].
///
/// # Safety
/// Every element the shapes and strides of `a` and `out` address is valid
/// memory of `a.dtype`; `lse` holds `B * Hq * L` elements; `out` and `lse`
/// overlap no input and `out`'s elements do not alias each other.
pub unsafe fn forward(a: &Attention, out: Operand, lse: *mut u8) -> Result<()> {
    check(a)?;
    crate::with_float_dtype!(a.dtype, "scaled_dot_product_attention", |T, C| {
        // SAFETY: forwarded contract.
        unsafe { forward_typed::<T, C>(a, out, lse as usize) };
    });
    Ok(())
}

unsafe fn forward_typed<T: Element, C: Float + Plain>(a: &Attention, out: Operand, lse: usize) {
    let d = a.dims;
    let q_blocks = d.len_q.div_ceil(BLOCK_Q);
    let tasks = d.batch * d.heads_q * q_blocks;
    if tasks == 0 {
        return;
    }
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
    let (kp, k_blocks) = (padded(BLOCK_K), d.len_kv.div_ceil(BLOCK_K));
    let (kt_len, v_len) = (e_n * kp, BLOCK_K * padded(ev_n));
    let blocks = d.batch * d.heads_kv * k_blocks;
    // Every query block of a head reads every key block, so the key and value
    // tiles are converted and laid out (K transposed) once per call, not once
    // per query block: at L = 1024 that repacking cost more than the products.
    // Every element of both buffers is written below, so reused scratch will do.
    scratch::with::<C, _>(blocks * kt_len, |kt_all| {
        scratch::with::<C, _>(blocks * v_len, |v_all| {
            let (kt_addr, v_addr) = (kt_all.as_mut_ptr() as usize, v_all.as_mut_ptr() as usize);
            for_tasks(blocks, a.threads, |n| {
                let (bh, kb) = (n / k_blocks, n % k_blocks);
                let (b, hk) = (bh / d.heads_kv, bh % d.heads_kv);
                let j0 = kb * BLOCK_K;
                let mut tile = KeyTile::<C>::new(&d);
                // SAFETY: forward's contract; block n of each buffer belongs to this task.
                unsafe {
                    tile.load::<T>(a, b, hk, j0, BLOCK_K.min(d.len_kv - j0), Layouts { k: false, v: true, vt: false });
                    std::ptr::copy_nonoverlapping(tile.kt.as_ptr(), (kt_addr as *mut C).add(n * kt_len), kt_len);
                    std::ptr::copy_nonoverlapping(tile.v.as_ptr(), (v_addr as *mut C).add(n * v_len), v_len);
                }
            });
            let (kt_all, v_all) = (&*kt_all, &*v_all);
            // SAFETY: forward's contract.
            for_tasks(tasks, a.threads, |t| unsafe { forward_block::<T, C>(a, out, lse, kt_all, v_all, t) });
        })
    });
}

/// Task `t` of [`forward_typed`]: one block of query rows of one (batch, head)
/// against the packed key/value tiles.
///
/// # Safety
/// As [`forward`]; rows of this block of `out` and `lse` belong to this task only.
unsafe fn forward_block<T: Element, C: Float>(
    a: &Attention,
    out: Operand,
    lse: usize,
    kt_all: &[C],
    v_all: &[C],
    t: usize,
) {
    let d = a.dims;
    let q_blocks = d.len_q.div_ceil(BLOCK_Q);
    let keep = Keep::new(a.dropout);
    let scale = C::from_f64c(a.scale);
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
    let (ep, evp, kp, k_blocks) = (padded(e_n), padded(ev_n), padded(BLOCK_K), d.len_kv.div_ceil(BLOCK_K));
    let (kt_len, v_len) = (e_n * kp, BLOCK_K * evp);
    let (bh, qb) = (t / q_blocks, t % q_blocks);
    let (b, h) = (bh / d.heads_q, bh % d.heads_q);
    let hk = h / d.group();
    let i0 = qb * BLOCK_Q;
    let nq = BLOCK_Q.min(d.len_q - i0);
    // Scaled query rows [nq][ep] (the A operand of S = Q K^T).
    let mut q = vec![C::ZERO; nq * ep];
    for r in 0..nq {
        let row = &mut q[r * ep..r * ep + e_n];
        // SAFETY: forward's contract.
        unsafe { load_row::<T, C>(&a.query, b, h, i0 + r, row) };
        row.iter_mut().for_each(|x| *x = *x * scale);
    }
    // Unnormalised output [nq][evp], running max and sum per row, and each row's
    // maximum including the current tile.
    let mut o = vec![C::ZERO; nq * evp];
    let (mut m, mut l) = (vec![-C::infinity(); nq], vec![C::ZERO; nq]);
    let mut m_new = vec![C::ZERO; nq];
    // Scores, then probabilities, of the current tile: [nq][kp].
    let mut s = vec![C::ZERO; nq * kp];
    let mut drop = [C::ZERO; BLOCK_K];
    let kend = key_end(a, i0, nq);
    let mut j0 = 0;
    while j0 < kend {
        let nk = BLOCK_K.min(kend - j0);
        let blk = (b * d.heads_kv + hk) * k_blocks + j0 / BLOCK_K;
        let (kt, v) = (&kt_all[blk * kt_len..(blk + 1) * kt_len], &v_all[blk * v_len..(blk + 1) * v_len]);
        gemm(nq, nk, e_n, Mat { data: &q, rs: ep, cs: 1 }, (kt, kp), (&mut s, kp), false);
        // The online softmax in passes over the tile's rows (maxima, then
        // exponentials, then sums), so that no row's exponentials wait for a
        // reduction: one row at a time ran at a fraction of the exp loop's throughput.
        for r in 0..nq {
            let srow = &mut s[r * kp..r * kp + nk];
            // SAFETY: forward's contract.
            unsafe { mask_scores::<T, C>(a, b, h, i0 + r, j0, srow) };
            let block_max = row_max(srow);
            m_new[r] = if block_max > m[r] { block_max } else { m[r] };
        }
        for r in 0..nq {
            let (srow, mr) = (&mut s[r * kp..r * kp + nk], m_new[r]);
            if mr == -C::infinity() {
                // Every key so far is masked: this tile adds nothing to the row.
                srow.fill(C::ZERO);
            } else {
                srow.iter_mut().for_each(|x| *x = (*x - mr).exp());
            }
        }
        for r in 0..nq {
            if m_new[r] == -C::infinity() {
                continue;
            }
            let srow = &mut s[r * kp..r * kp + nk];
            // The factor rescaling the row's old sum and output to the new maximum.
            let alpha = (m[r] - m_new[r]).exp();
            l[r] = l[r] * alpha + row_sum(srow);
            m[r] = m_new[r];
            if alpha != C::ONE {
                o[r * evp..(r + 1) * evp].iter_mut().for_each(|x| *x = *x * alpha);
            }
            if let Some(k) = &keep {
                let drop = &mut drop[..nk];
                k.row(((b * d.heads_q + h) * d.len_q + i0 + r) as u64 * d.len_kv as u64 + j0 as u64, drop);
                srow.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
            }
        }
        gemm(nq, ev_n, nk, Mat { data: &s, rs: kp, cs: 1 }, (v, evp), (&mut o, evp), true);
        j0 += nk;
    }
    for r in 0..nq {
        let row = (b * d.heads_q + h) * d.len_q + i0 + r;
        let (value, inv) = if l[r] > C::ZERO { (m[r] + l[r].ln(), C::ONE / l[r]) } else { (-C::infinity(), C::ZERO) };
        let orow = &mut o[r * evp..r * evp + ev_n];
        orow.iter_mut().for_each(|x| *x = *x * inv);
        // SAFETY: row `row` of lse and of out belongs to this task only.
        unsafe {
            (lse as *mut C).add(row).write(value);
            store_row::<T, C>(&out, b, h, i0 + r, orow);
        }
    }
}
