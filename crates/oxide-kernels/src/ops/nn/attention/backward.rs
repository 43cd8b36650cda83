//! Attention backward: dQ, dK, dV and d(bias) from the forward's output and
//! logsumexp, recomputing the probabilities tile by tile (FlashAttention-2,
//! Algorithm 2), in one sweep per (batch, kv head) or split into dK/dV tasks
//! per key block and dQ/d(bias) tasks per query block.

use crate::dtype::Element;
use crate::engine::math::Float;
use crate::error::Result;

use super::tile::{gemm, padded, KeyTile, Layouts, Mat};
use super::{
    check, for_tasks, key_end, load_row, mask_scores, store_row, Attention, Dims, Grads, Keep, Operand, BLOCK_K,
    BLOCK_Q,
};

/// Writes rows `0..nk` of `dk` and `dv`, each given as (buffer, row stride, row
/// length), as keys `j0 .. j0 + nk` of (b, kv head `hk`) of the key and value
/// gradients that `g` asks for.
///
/// # Safety
/// As [`store_row`] for every row written.
unsafe fn store_kv_rows<T: Element, C: Float>(
    g: &Grads,
    b: usize,
    hk: usize,
    j0: usize,
    nk: usize,
    dk: (&[C], usize, usize),
    dv: (&[C], usize, usize),
) {
    for jj in 0..nk {
        for (grad, (buf, ld, len)) in [(&g.key, dk), (&g.value, dv)] {
            if let Some(op) = grad {
                // SAFETY: caller contract.
                unsafe { store_row::<T, C>(op, b, hk, j0 + jj, &buf[jj * ld..jj * ld + len]) };
            }
        }
    }
}

/// Backward pass: from `grad_out` (`[B, Hq, L, Ev]`), the forward's `out`
/// and `lse`, writes the requested [`Grads`] (strided, type `a.dtype`;
/// dK/dV/dQ/dbias are overwritten, not accumulated). The dropout source
/// must be the one the forward pass used.
///
/// Errors: as [`forward`](fn@super::forward).
///
/// # Safety
/// As [`forward`](fn@super::forward) for `a`, `out`, `grad_out` and `lse` (read only here);
/// each gradient addresses valid, mutually disjoint memory of its shape.
pub unsafe fn backward(a: &Attention, out: Operand, grad_out: Operand, lse: *const u8, grads: Grads) -> Result<()> {
    check(a)?;
    crate::with_float_dtype!(a.dtype, "scaled_dot_product_attention", |T, C| {
        // SAFETY: forwarded contract.
        unsafe { backward_typed::<T, C>(a, out, grad_out, lse as usize, grads) };
    });
    Ok(())
}

/// Where one row of a tile lies: query row `i` of (batch `b`, head `h`), against
/// the keys from `j0`.
#[derive(Clone, Copy)]
struct TileRow {
    b: usize,
    h: usize,
    i: usize,
    j0: usize,
}

/// Turns one row of a tile (`at`, against keys `j0 .. j0 + s.len()`) from
/// scores into what the gradient products read, given the row's `(lse, delta)`:
/// `s` (scaled `q . k`) becomes the probabilities after dropout (what
/// multiplied V in the forward pass) and `dp` (`dO . v`) becomes dS, the
/// gradient of the pre-softmax scores (also the bias gradient), recomputing
/// `P = exp(s - lse)` (FlashAttention-2, Algorithm 2).
///
/// # Safety
/// The bias operand of `a`, if any, is readable at these elements.
#[inline]
unsafe fn grad_row<T: Element, C: Float>(
    a: &Attention,
    keep: &Option<Keep>,
    at: TileRow,
    (lse, delta): (C, C),
    s: &mut [C],
    dp: &mut [C],
    drop: &mut [C],
) {
    let TileRow { b, h, i, j0 } = at;
    if lse == -C::infinity() {
        // A fully masked row contributes nothing (its forward output was 0).
        s.fill(C::ZERO);
        dp.fill(C::ZERO);
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { mask_scores::<T, C>(a, b, h, i, j0, s) };
    s.iter_mut().for_each(|x| *x = (*x - lse).exp());
    if let Some(k) = keep {
        let d = &a.dims;
        let drop = &mut drop[..s.len()];
        k.row(((b * d.heads_q + h) * d.len_q + i) as u64 * d.len_kv as u64 + j0 as u64, drop);
        // Through dropout: dP_softmax = dP_dropped * mask / (1 - p); then
        // dS = P * (dP - delta) with P the probabilities before dropout.
        dp.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
        dp.iter_mut().zip(s.iter()).for_each(|(x, &y)| *x = y * (*x - delta));
        s.iter_mut().zip(drop.iter()).for_each(|(x, &y)| *x = *x * y);
    } else {
        dp.iter_mut().zip(s.iter()).for_each(|(x, &y)| *x = y * (*x - delta));
    }
}

/// Query-side rows of one block `i0 .. i0 + nq` of (b, h) for the backward
/// products: scaled queries `[BLOCK_Q][padded(E)]`, dO `[BLOCK_Q][padded(Ev)]`
/// (zero padding: both are B operands of dK / dV), and per row (lse, delta).
struct QueryRows<C> {
    q: Vec<C>,
    dout: Vec<C>,
    stats: Vec<(C, C)>,
}

unsafe fn backward_typed<T: Element, C: Float>(a: &Attention, out: Operand, grad_out: Operand, lse: usize, g: Grads) {
    let d = a.dims;
    let (e_n, ev_n) = (d.dim_qk, d.dim_v);
    let (ep, evp, kp) = (padded(e_n), padded(ev_n), padded(BLOCK_K));
    let rows = d.batch * d.heads_q * d.len_q;
    if rows == 0 {
        // No query rows: dQ/dbias are empty; dK/dV receive nothing.
        // SAFETY: (b, hk, j, e) ranges over the key/value gradients' shape (`backward`'s contract).
        for_kv(&d, |b, hk, j| unsafe {
            if let Some(gk) = &g.key {
                (0..e_n).for_each(|e| gk.store::<T, C>(b, hk, j, e, C::ZERO));
            }
            if let Some(gv) = &g.value {
                (0..ev_n).for_each(|e| gv.store::<T, C>(b, hk, j, e, C::ZERO));
            }
        });
        return;
    }
    let keep = Keep::new(a.dropout);
    let scale = C::from_f64c(a.scale);
    // delta_i = sum_e dO_ie O_ie = sum_j P_ij dP_ij (FlashAttention-2, Algorithm 2, line 4).
    let mut delta = vec![C::ZERO; rows];
    {
        let delta_addr = delta.as_mut_ptr() as usize;
        for_tasks(rows.div_ceil(BLOCK_Q), a.threads, |t| {
            let (mut go, mut o) = (vec![C::ZERO; ev_n], vec![C::ZERO; ev_n]);
            for r in t * BLOCK_Q..((t + 1) * BLOCK_Q).min(rows) {
                let (bh, i) = (r / d.len_q, r % d.len_q);
                let (b, h) = (bh / d.heads_q, bh % d.heads_q);
                // SAFETY: backward's contract.
                unsafe {
                    load_row::<T, C>(&grad_out, b, h, i, &mut go);
                    load_row::<T, C>(&out, b, h, i, &mut o);
                }
                let acc = go.iter().zip(&o).fold(C::ZERO, |s, (&x, &y)| s + x * y);
                // SAFETY: element r belongs to this task.
                unsafe { (delta_addr as *mut C).add(r).write(acc) };
            }
        });
    }
    // SAFETY: element r belongs to this task.
    let lse_at = |r: usize| unsafe { (lse as *const C).add(r).read() };
    let new_rows =
        || QueryRows { q: vec![C::ZERO; BLOCK_Q * ep], dout: vec![C::ZERO; BLOCK_Q * evp], stats: Vec::new() };
    // Loads the query-side rows i0 .. i0 + nq of (b, h).
    let load_rows = |b: usize, h: usize, i0: usize, nq: usize, qr: &mut QueryRows<C>| {
        qr.stats.clear();
        for r in 0..nq {
            let q = &mut qr.q[r * ep..r * ep + e_n];
            // SAFETY: backward's contract.
            unsafe {
                load_row::<T, C>(&a.query, b, h, i0 + r, q);
                load_row::<T, C>(&grad_out, b, h, i0 + r, &mut qr.dout[r * evp..r * evp + ev_n]);
            }
            q.iter_mut().for_each(|x| *x = *x * scale);
            let row = (b * d.heads_q + h) * d.len_q + i0 + r;
            qr.stats.push((lse_at(row), delta[row]));
        }
    };
    // P (after dropout) and dS of one [nq][nk] tile, row stride kp:
    // S = Q K^T and dP = dO V^T as tile products, then the row-wise softmax gradient.
    let tile_grads = |b: usize,
                      h: usize,
                      i0: usize,
                      nq: usize,
                      j0: usize,
                      nk: usize,
                      qr: &QueryRows<C>,
                      tile: &KeyTile<C>,
                      p: &mut [C],
                      ds: &mut [C],
                      drop: &mut [C]| {
        gemm(nq, nk, e_n, Mat { data: &qr.q, rs: ep, cs: 1 }, (&tile.kt, kp), (p, kp), false);
        gemm(nq, nk, ev_n, Mat { data: &qr.dout, rs: evp, cs: 1 }, (&tile.vt, kp), (ds, kp), false);
        for r in 0..nq {
            let (pr, dsr) = (&mut p[r * kp..r * kp + nk], &mut ds[r * kp..r * kp + nk]);
            // SAFETY: backward's contract.
            unsafe { grad_row::<T, C>(a, &keep, TileRow { b, h, i: i0 + r, j0 }, qr.stats[r], pr, dsr, drop) };
        }
    };

    let want_kv = g.key.is_some() || g.value.is_some();
    let want_q = g.query.is_some() || g.bias.is_some();
    // One pass per (b, kv head) computes each tile's P and dS once for all
    // four gradients, where the two passes below recompute them (7 tile
    // products instead of 5, and the exponentials twice) in exchange for
    // finer tasks. Take it when both sides are wanted and the (b, kv head)
    // tasks, all of equal work, still spread evenly over the threads. Both
    // schedules sum in the same order, so the results are the same.
    let kv_tasks = d.batch * d.heads_kv;
    let threads = a.threads.max(1);
    if want_kv && want_q && (kv_tasks.is_multiple_of(threads) || kv_tasks >= 4 * threads) {
        let group = d.group();
        let (q_blocks, k_blocks) = (d.len_q.div_ceil(BLOCK_Q), d.len_kv.div_ceil(BLOCK_K));
        for_tasks(kv_tasks, a.threads, |t| {
            let (b, hk) = (t / d.heads_kv, t % d.heads_kv);
            let heads = hk * group..(hk + 1) * group;
            // Block qb of the group's head h at (h - heads.start) * q_blocks + qb.
            let mut rows = Vec::with_capacity(group * q_blocks);
            for h in heads.clone() {
                for qb in 0..q_blocks {
                    let i0 = qb * BLOCK_Q;
                    let mut qr = new_rows();
                    load_rows(b, h, i0, BLOCK_Q.min(d.len_q - i0), &mut qr);
                    rows.push(qr);
                }
            }
            // dQ of the group's heads, block-major like `rows`.
            let mut dq = vec![C::ZERO; if g.query.is_some() { group * q_blocks * BLOCK_Q * ep } else { 0 }];
            let mut tile = KeyTile::<C>::new(&d);
            let (mut p, mut ds, mut drop) =
                (vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_K]);
            let (mut dk, mut dv) = (vec![C::ZERO; BLOCK_K * ep], vec![C::ZERO; BLOCK_K * evp]);
            for kb in 0..k_blocks {
                let j0 = kb * BLOCK_K;
                let nk = BLOCK_K.min(d.len_kv - j0);
                // SAFETY: backward's contract.
                unsafe { tile.load::<T>(a, b, hk, j0, nk, Layouts { k: g.query.is_some(), v: false, vt: true }) };
                dk.fill(C::ZERO);
                dv.fill(C::ZERO);
                // Causal: query blocks before this one see none of these keys.
                let first_block = if a.causal { j0 / BLOCK_Q } else { 0 };
                for (hl, h) in heads.clone().enumerate() {
                    for qb in 0..q_blocks {
                        let i0 = qb * BLOCK_Q;
                        let nq = BLOCK_Q.min(d.len_q - i0);
                        if qb < first_block {
                            if let Some(gb) = &g.bias {
                                for r in 0..nq {
                                    // SAFETY: tile (qb, kb) of (b, h) of the bias gradient belongs to this task.
                                    (j0..j0 + nk).for_each(|j| unsafe { gb.store::<T, C>(b, h, i0 + r, j, C::ZERO) });
                                }
                            }
                            continue;
                        }
                        let qr = &rows[hl * q_blocks + qb];
                        tile_grads(b, h, i0, nq, j0, nk, qr, &tile, &mut p, &mut ds, &mut drop);
                        if let Some(gb) = &g.bias {
                            for r in 0..nq {
                                // SAFETY: as above.
                                (0..nk)
                                    .for_each(|jj| unsafe { gb.store::<T, C>(b, h, i0 + r, j0 + jj, ds[r * kp + jj]) });
                            }
                        }
                        // dV += P^T dO and dK += dS^T (scale Q): the tiles read transposed.
                        gemm(nk, ev_n, nq, Mat { data: &p, rs: 1, cs: kp }, (&qr.dout, evp), (&mut dv, evp), true);
                        gemm(nk, e_n, nq, Mat { data: &ds, rs: 1, cs: kp }, (&qr.q, ep), (&mut dk, ep), true);
                        if g.query.is_some() {
                            let at = (hl * q_blocks + qb) * BLOCK_Q * ep;
                            gemm(
                                nq,
                                e_n,
                                nk,
                                Mat { data: &ds, rs: kp, cs: 1 },
                                (&tile.k, ep),
                                (&mut dq[at..], ep),
                                true,
                            );
                        }
                    }
                }
                // SAFETY: keys j0 .. j0 + nk of (b, hk) belong to this task.
                unsafe { store_kv_rows::<T, C>(&g, b, hk, j0, nk, (&dk, ep, e_n), (&dv, evp, ev_n)) };
            }
            if let Some(gq) = &g.query {
                for (hl, h) in heads.enumerate() {
                    for i in 0..d.len_q {
                        let at = (hl * q_blocks + i / BLOCK_Q) * BLOCK_Q * ep + (i % BLOCK_Q) * ep;
                        let row = &mut dq[at..at + e_n];
                        row.iter_mut().for_each(|x| *x = *x * scale);
                        // SAFETY: the rows of the group's heads of (b) belong to this task.
                        unsafe { store_row::<T, C>(gq, b, h, i, row) };
                    }
                }
            }
        });
        return;
    }

    // dK and dV: one task per (b, kv head, key block), summing over the group's heads.
    if want_kv {
        let k_blocks = d.len_kv.div_ceil(BLOCK_K);
        for_tasks(d.batch * d.heads_kv * k_blocks, a.threads, |t| {
            let (bh, kb) = (t / k_blocks, t % k_blocks);
            let (b, hk) = (bh / d.heads_kv, bh % d.heads_kv);
            let j0 = kb * BLOCK_K;
            let nk = BLOCK_K.min(d.len_kv - j0);
            let mut tile = KeyTile::<C>::new(&d);
            // SAFETY: backward's contract.
            unsafe { tile.load::<T>(a, b, hk, j0, nk, Layouts { k: false, v: false, vt: true }) };
            let mut dk = vec![C::ZERO; nk * ep];
            let mut dv = vec![C::ZERO; nk * evp];
            let mut qr = new_rows();
            let (mut p, mut ds, mut drop) =
                (vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_Q * kp], vec![C::ZERO; BLOCK_K]);
            // Causal: query rows before j0 see none of these keys.
            let first_block = if a.causal { j0 / BLOCK_Q } else { 0 };
            for h in hk * d.group()..(hk + 1) * d.group() {
                for qb in first_block..d.len_q.div_ceil(BLOCK_Q) {
                    let i0 = qb * BLOCK_Q;
                    let nq = BLOCK_Q.min(d.len_q - i0);
                    load_rows(b, h, i0, nq, &mut qr);
                    tile_grads(b, h, i0, nq, j0, nk, &qr, &tile, &mut p, &mut ds, &mut drop);
                    // dV += P^T dO and dK += dS^T (scale Q): the tiles read transposed.
                    gemm(nk, ev_n, nq, Mat { data: &p, rs: 1, cs: kp }, (&qr.dout, evp), (&mut dv, evp), true);
                    gemm(nk, e_n, nq, Mat { data: &ds, rs: 1, cs: kp }, (&qr.q, ep), (&mut dk, ep), true);
                }
            }
            // SAFETY: keys j0 .. j0 + nk of (b, hk) belong to this task.
            unsafe { store_kv_rows::<T, C>(&g, b, hk, j0, nk, (&dk, ep, e_n), (&dv, evp, ev_n)) };
        });
    }

    // dQ and d(bias): one task per (b, head, query block).
    if want_q {
        let q_blocks = d.len_q.div_ceil(BLOCK_Q);
        for_tasks(d.batch * d.heads_q * q_blocks, a.threads, |t| {
            let (bh, qb) = (t / q_blocks, t % q_blocks);
            let (b, h) = (bh / d.heads_q, bh % d.heads_q);
            let hk = h / d.group();
            let i0 = qb * BLOCK_Q;
            let nq = BLOCK_Q.min(d.len_q - i0);
            let mut qr = new_rows();
            load_rows(b, h, i0, nq, &mut qr);
            let mut dq = vec![C::ZERO; nq * ep];
            let (mut p, mut ds, mut drop) = (vec![C::ZERO; nq * kp], vec![C::ZERO; nq * kp], vec![C::ZERO; BLOCK_K]);
            let mut tile = KeyTile::<C>::new(&d);
            let kend = key_end(a, i0, nq);
            let mut j0 = 0;
            while j0 < kend {
                let nk = BLOCK_K.min(kend - j0);
                // SAFETY: backward's contract.
                unsafe { tile.load::<T>(a, b, hk, j0, nk, Layouts { k: true, v: false, vt: true }) };
                tile_grads(b, h, i0, nq, j0, nk, &qr, &tile, &mut p, &mut ds, &mut drop);
                if let Some(gb) = &g.bias {
                    for r in 0..nq {
                        // SAFETY: row i0 + r of (b, h) of the bias gradient belongs to this task.
                        (0..nk).for_each(|jj| unsafe { gb.store::<T, C>(b, h, i0 + r, j0 + jj, ds[r * kp + jj]) });
                    }
                }
                gemm(nq, e_n, nk, Mat { data: &ds, rs: kp, cs: 1 }, (&tile.k, ep), (&mut dq, ep), true);
                j0 += nk;
            }
            // SAFETY: rows i0 .. i0 + nq of (b, h) belong to this task.
            unsafe {
                if let Some(gb) = &g.bias {
                    // Keys past the causal limit are masked: zero gradient.
                    for r in 0..nq {
                        (kend..d.len_kv).for_each(|j| gb.store::<T, C>(b, h, i0 + r, j, C::ZERO));
                    }
                }
                if let Some(gq) = &g.query {
                    for r in 0..nq {
                        let row = &mut dq[r * ep..r * ep + e_n];
                        row.iter_mut().for_each(|x| *x = *x * scale);
                        store_row::<T, C>(gq, b, h, i0 + r, row);
                    }
                }
            }
        });
    }
}
/// Calls `f(b, hk, j)` for every key row (serially; only used for empty query sets).
fn for_kv(d: &Dims, mut f: impl FnMut(usize, usize, usize)) {
    for b in 0..d.batch {
        for hk in 0..d.heads_kv {
            for j in 0..d.len_kv {
                f(b, hk, j);
            }
        }
    }
}
