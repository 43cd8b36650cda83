//! Tests of the attention kernels against a naive reference (every dtype,
//! masks, bias, GQA, dropout regenerated in backward) and of the tile GEMM.

use super::tile::{gemm, padded, row_max, row_sum, Mat};
use super::*;

/// A tiny deterministic generator for test data.
fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn contiguous(shape: [usize; 4]) -> [i64; 4] {
    [(shape[1] * shape[2] * shape[3]) as i64, (shape[2] * shape[3]) as i64, shape[3] as i64, 1]
}

/// Mask element (b, h, i, j) multiplier, from the same bit rule as the kernel.
fn mask(bits: &dyn BitSource, p: f64, n: u64) -> f64 {
    let threshold = (((1.0 - p) * 4_294_967_296.0) as u64).min(1 << 32);
    if (bits.block(n / 4)[(n % 4) as usize] as u64) < threshold {
        1.0 / (1.0 - p)
    } else {
        0.0
    }
}

struct Naive {
    out: Vec<f64>,
    lse: Vec<f64>,
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
    dbias: Vec<f64>,
}

/// The tensors [`naive`] reads, contiguous float64: query, key, value, the optional
/// bias (`[B, Hq, L, S]`) and the output gradient.
#[derive(Clone, Copy)]
struct Tensors<'a> {
    q: &'a [f64],
    k: &'a [f64],
    v: &'a [f64],
    bias: Option<&'a [f64]>,
    dout: &'a [f64],
}

/// Materialised attention and its gradients, straight from the definition.
fn naive(d: Dims, t: Tensors, causal: bool, scale: f64, drop: Option<(f64, &dyn BitSource)>) -> Naive {
    let Tensors { q, k, v, bias, dout } = t;
    let (l_n, s_n, e_n, ev_n) = (d.len_q, d.len_kv, d.dim_qk, d.dim_v);
    let g = d.heads_q / d.heads_kv;
    let mut r = Naive {
        out: vec![0.0; d.batch * d.heads_q * l_n * ev_n],
        lse: vec![0.0; d.batch * d.heads_q * l_n],
        dq: vec![0.0; q.len()],
        dk: vec![0.0; k.len()],
        dv: vec![0.0; v.len()],
        dbias: vec![0.0; d.batch * d.heads_q * l_n * s_n],
    };
    for b in 0..d.batch {
        for h in 0..d.heads_q {
            let hk = h / g;
            let qo = |i: usize, e: usize| ((b * d.heads_q + h) * l_n + i) * e_n + e;
            let ko = |j: usize, e: usize| ((b * d.heads_kv + hk) * s_n + j) * e_n + e;
            let vo = |j: usize, e: usize| ((b * d.heads_kv + hk) * s_n + j) * ev_n + e;
            let oo = |i: usize, e: usize| ((b * d.heads_q + h) * l_n + i) * ev_n + e;
            let so = |i: usize, j: usize| ((b * d.heads_q + h) * l_n + i) * s_n + j;
            for i in 0..l_n {
                let mut s: Vec<f64> = (0..s_n)
                    .map(|j| {
                        let mut x = scale * (0..e_n).map(|e| q[qo(i, e)] * k[ko(j, e)]).sum::<f64>();
                        if let Some(bias) = bias {
                            x += bias[so(i, j)];
                        }
                        if causal && j > i {
                            x = f64::NEG_INFINITY;
                        }
                        x
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    r.lse[(b * d.heads_q + h) * l_n + i] = f64::NEG_INFINITY;
                    continue;
                }
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                r.lse[(b * d.heads_q + h) * l_n + i] = m + z.ln();
                s.iter_mut().for_each(|x| *x = (*x - m).exp() / z);
                let mk: Vec<f64> =
                    (0..s_n).map(|j| drop.map_or(1.0, |(p, bits)| mask(bits, p, so(i, j) as u64))).collect();
                for e in 0..ev_n {
                    r.out[oo(i, e)] = (0..s_n).map(|j| s[j] * mk[j] * v[vo(j, e)]).sum();
                }
                // Gradients.
                let dpd: Vec<f64> =
                    (0..s_n).map(|j| (0..ev_n).map(|e| dout[oo(i, e)] * v[vo(j, e)]).sum::<f64>()).collect();
                for j in 0..s_n {
                    for e in 0..ev_n {
                        r.dv[vo(j, e)] += s[j] * mk[j] * dout[oo(i, e)];
                    }
                }
                let dp: Vec<f64> = (0..s_n).map(|j| dpd[j] * mk[j]).collect();
                let dot: f64 = (0..s_n).map(|j| s[j] * dp[j]).sum();
                for j in 0..s_n {
                    let ds = s[j] * (dp[j] - dot);
                    r.dbias[so(i, j)] = ds;
                    for e in 0..e_n {
                        r.dq[qo(i, e)] += scale * ds * k[ko(j, e)];
                        r.dk[ko(j, e)] += scale * ds * q[qo(i, e)];
                    }
                }
            }
        }
    }
    r
}

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g == w) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}[{n}]: got {g}, want {w}");
    }
}

/// A test operand stored as float64 or float32.
enum Buf {
    F64(Vec<f64>),
    F32(Vec<f32>),
}

impl Buf {
    fn new(v: &[f64], dtype: DType) -> Buf {
        match dtype {
            DType::F32 => Buf::F32(v.iter().map(|&x| x as f32).collect()),
            _ => Buf::F64(v.to_vec()),
        }
    }
    fn op(&mut self, strides: [i64; 4]) -> Operand {
        let ptr = match self {
            Buf::F64(v) => v.as_mut_ptr() as *mut u8,
            Buf::F32(v) => v.as_mut_ptr() as *mut u8,
        };
        Operand { ptr, strides }
    }
    fn get(&self) -> Vec<f64> {
        match self {
            Buf::F64(v) => v.clone(),
            Buf::F32(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
}

fn run(d: Dims, causal: bool, with_bias: bool, drop_p: f64, transposed_q: bool, threads: usize) {
    run_typed(d, causal, with_bias, drop_p, transposed_q, threads, DType::F64);
}

/// Forward and backward of `dtype` (float64 or float32) against [`naive`] in float64.
fn run_typed(d: Dims, causal: bool, with_bias: bool, drop_p: f64, transposed_q: bool, threads: usize, dtype: DType) {
    let (l_n, s_n, e_n, ev_n) = (d.len_q, d.len_kv, d.dim_qk, d.dim_v);
    // float32 rounds inputs and accumulates over up to a few hundred keys.
    let (tol_out, tol_grad) = if dtype == DType::F32 { (2e-5, 1e-4) } else { (1e-10, 1e-9) };
    let round = |v: Vec<f64>| Buf::new(&v, dtype).get();
    let q = round(data(d.batch * d.heads_q * l_n * e_n, 1));
    let k = round(data(d.batch * d.heads_kv * s_n * e_n, 2));
    let v = round(data(d.batch * d.heads_kv * s_n * ev_n, 3));
    let dout = round(data(d.batch * d.heads_q * l_n * ev_n, 4));
    let mut bias = round(data(d.batch * d.heads_q * l_n * s_n, 5));
    if with_bias {
        // A few fully masked rows and scattered -inf.
        for (n, x) in bias.iter_mut().enumerate() {
            if n % 7 == 3 || (n / s_n) % 5 == 2 {
                *x = f64::NEG_INFINITY;
            }
        }
    }
    let engine = |i: u64| -> [u32; 4] {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        let mut w = [0u32; 4];
        for y in &mut w {
            x ^= x >> 31;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 29;
            *y = x as u32;
        }
        w
    };
    let drop = (drop_p > 0.0).then_some((drop_p, &engine as &dyn BitSource));
    let scale = 0.7;
    let want = naive(
        d,
        Tensors { q: &q, k: &k, v: &v, bias: with_bias.then_some(&bias[..]), dout: &dout },
        causal,
        scale,
        drop,
    );

    // The query as a transposed [B, L, Hq, E] buffer when asked.
    let (qbuf, q_strides) = if transposed_q {
        let mut t = vec![0.0; q.len()];
        for b in 0..d.batch {
            for h in 0..d.heads_q {
                for i in 0..l_n {
                    for e in 0..e_n {
                        t[((b * l_n + i) * d.heads_q + h) * e_n + e] = q[((b * d.heads_q + h) * l_n + i) * e_n + e];
                    }
                }
            }
        }
        (t, [(l_n * d.heads_q * e_n) as i64, e_n as i64, (d.heads_q * e_n) as i64, 1])
    } else {
        (q.clone(), contiguous([d.batch, d.heads_q, l_n, e_n]))
    };
    let mut qbuf = Buf::new(&qbuf, dtype);
    let (mut kb, mut vb, mut biasb, mut doutb) =
        (Buf::new(&k, dtype), Buf::new(&v, dtype), Buf::new(&bias, dtype), Buf::new(&dout, dtype));
    let a = Attention {
        dims: d,
        dtype,
        query: qbuf.op(q_strides),
        key: kb.op(contiguous([d.batch, d.heads_kv, s_n, e_n])),
        value: vb.op(contiguous([d.batch, d.heads_kv, s_n, ev_n])),
        bias: with_bias.then(|| biasb.op(contiguous([d.batch, d.heads_q, l_n, s_n]))),
        causal,
        scale,
        dropout: drop.map(|(p, bits)| Dropout { p, bits }),
        threads,
    };
    let nan = |n: usize| Buf::new(&vec![f64::NAN; n], dtype);
    let mut out = nan(want.out.len());
    let mut lse = nan(want.lse.len());
    let out_op = out.op(contiguous([d.batch, d.heads_q, l_n, ev_n]));
    // SAFETY: the pointers address live local buffers sized for the call.
    unsafe { forward(&a, out_op, lse.op([0; 4]).ptr) }.unwrap();
    close("out", &out.get(), &want.out, tol_out);
    close("lse", &lse.get(), &want.lse, tol_out);

    let (mut dq, mut dk, mut dv, mut db) = (nan(q.len()), nan(k.len()), nan(v.len()), nan(want.dbias.len()));
    let grads = Grads {
        query: Some(dq.op(contiguous([d.batch, d.heads_q, l_n, e_n]))),
        key: Some(dk.op(contiguous([d.batch, d.heads_kv, s_n, e_n]))),
        value: Some(dv.op(contiguous([d.batch, d.heads_kv, s_n, ev_n]))),
        bias: with_bias.then(|| db.op(contiguous([d.batch, d.heads_q, l_n, s_n]))),
    };
    let dout_op = doutb.op(contiguous([d.batch, d.heads_q, l_n, ev_n]));
    // SAFETY: the pointers address live local buffers sized for the call.
    unsafe { backward(&a, out_op, dout_op, lse.op([0; 4]).ptr, grads) }.unwrap();
    close("dq", &dq.get(), &want.dq, tol_grad);
    close("dk", &dk.get(), &want.dk, tol_grad);
    close("dv", &dv.get(), &want.dv, tol_grad);
    if with_bias {
        close("dbias", &db.get(), &want.dbias, tol_grad);
    }
}

fn dims(
    batch: usize,
    heads_q: usize,
    heads_kv: usize,
    len_q: usize,
    len_kv: usize,
    dim_qk: usize,
    dim_v: usize,
) -> Dims {
    Dims { batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v }
}

#[test]
fn matches_naive_plain_and_odd_sizes() {
    run(dims(2, 2, 2, 5, 7, 3, 4), false, false, 0.0, false, 1);
    run(dims(1, 2, 2, 70, 130, 5, 6), false, false, 0.0, false, 4);
}

#[test]
fn matches_naive_causal_both_aspect_ratios() {
    run(dims(1, 2, 2, 131, 67, 4, 3), true, false, 0.0, false, 4);
    run(dims(1, 1, 1, 67, 131, 4, 3), true, false, 0.0, false, 1);
}

#[test]
fn matches_naive_bias_with_masked_rows() {
    run(dims(2, 2, 1, 33, 65, 8, 5), false, true, 0.0, false, 4);
    run(dims(1, 2, 2, 70, 70, 8, 8), true, true, 0.0, true, 4);
    // One (b, kv head) pass with causally skipped tiles, keys outnumbering queries.
    run(dims(1, 2, 2, 67, 131, 8, 8), true, true, 0.0, false, 1);
}

#[test]
fn matches_naive_gqa_transposed_query() {
    run(dims(2, 6, 2, 9, 11, 4, 4), false, false, 0.0, true, 4);
}

#[test]
fn matches_naive_dropout() {
    run(dims(2, 4, 2, 70, 66, 4, 5), false, false, 0.3, false, 4);
    run(dims(1, 2, 2, 20, 20, 4, 5), true, true, 0.5, false, 1);
}

#[test]
fn float32_tiles_match_naive() {
    // Feature sizes that are and are not multiples of the micro-kernel's width,
    // several key blocks with a short last one, both causal aspect ratios.
    run_typed(dims(1, 2, 2, 130, 200, 64, 64), true, false, 0.0, false, 4, DType::F32);
    run_typed(dims(2, 4, 2, 200, 70, 40, 33), true, true, 0.0, true, 4, DType::F32);
    run_typed(dims(1, 2, 1, 97, 129, 64, 16), false, false, 0.2, false, 1, DType::F32);
}

#[test]
fn gemm_matches_naive_with_tails_and_transposed_a() {
    for &(m, n, k) in &[(1, 1, 1), (5, 7, 3), (64, 64, 64), (67, 33, 65), (4, 32, 0), (9, 70, 2)] {
        let np = padded(n);
        let a = data(m * k, 7);
        // The same matrix stored transposed ([k][m]), read with swapped strides.
        let at: Vec<f64> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
        let mut b = vec![0.0; k * np + 1];
        let bd = data(k * n, 8);
        for kk in 0..k {
            b[kk * np..kk * np + n].copy_from_slice(&bd[kk * n..(kk + 1) * n]);
        }
        let c0 = data(m * np, 9);
        for accumulate in [false, true] {
            for transposed in [false, true] {
                let am =
                    if transposed { Mat { data: &at[..], rs: 1, cs: m } } else { Mat { data: &a[..], rs: k, cs: 1 } };
                let mut c = c0.clone();
                gemm(m, n, k, am, (&b, np), (&mut c, np), accumulate);
                for r in 0..m {
                    for j in 0..n {
                        let want = if accumulate { c0[r * np + j] } else { 0.0 }
                            + (0..k).map(|kk| a[r * k + kk] * bd[kk * n + j]).sum::<f64>();
                        let got = c[r * np + j];
                        assert!(
                            (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                            "m={m} n={n} k={k} ({r},{j}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn row_reductions_cover_the_tail() {
    let x: Vec<f64> = (0..37).map(|n| ((n * 7) % 37) as f64 - 3.0).collect();
    assert_eq!(row_max(&x), 33.0);
    assert_eq!(row_sum(&x), x.iter().sum::<f64>());
    assert_eq!(row_max::<f64>(&[]), f64::NEG_INFINITY);
}

#[test]
fn half_types_accumulate_in_float() {
    let d = dims(1, 1, 1, 3, 200, 4, 2);
    // Identical keys: uniform attention, the output is the mean of the values.
    let mut q = vec![half::f16::from_f32(0.5); 12];
    let mut k = vec![half::f16::from_f32(0.25); 800];
    let mut v: Vec<half::f16> =
        (0..400).map(|n| half::f16::from_f32(if n % 2 == 0 { 1.0 } else { 1.0 / 3.0 })).collect();
    let mut out = vec![half::f16::ZERO; 6];
    let mut lse = vec![0f32; 3];
    let o = |p: *mut half::f16, s: [i64; 4]| Operand { ptr: p as *mut u8, strides: s };
    let a = Attention {
        dims: d,
        dtype: DType::F16,
        query: o(q.as_mut_ptr(), [12, 12, 4, 1]),
        key: o(k.as_mut_ptr(), [800, 800, 4, 1]),
        value: o(v.as_mut_ptr(), [400, 400, 2, 1]),
        bias: None,
        causal: false,
        scale: 1.0,
        dropout: None,
        threads: 1,
    };
    // SAFETY: the pointers address live local buffers sized for the call.
    unsafe { forward(&a, o(out.as_mut_ptr(), [6, 6, 2, 1]), lse.as_mut_ptr() as *mut u8) }.unwrap();
    for r in 0..3 {
        assert_eq!(out[2 * r].to_f32(), 1.0);
        assert!((out[2 * r + 1].to_f32() - 1.0 / 3.0).abs() < 1e-3);
        assert!((lse[r] - (0.5 + 200f32.ln())).abs() < 1e-5);
    }
}

#[test]
fn rejects_bad_heads_and_dtypes() {
    let a = |heads_kv, dtype| Attention {
        dims: dims(1, 3, heads_kv, 1, 1, 1, 1),
        dtype,
        query: Operand { ptr: std::ptr::null_mut(), strides: [0; 4] },
        key: Operand { ptr: std::ptr::null_mut(), strides: [0; 4] },
        value: Operand { ptr: std::ptr::null_mut(), strides: [0; 4] },
        bias: None,
        causal: false,
        scale: 1.0,
        dropout: None,
        threads: 1,
    };
    let out = Operand { ptr: std::ptr::null_mut(), strides: [0; 4] };
    // SAFETY: the pointers address live local buffers sized for the call.
    let r = unsafe { forward(&a(2, DType::F32), out, std::ptr::null_mut()) };
    assert!(matches!(r, Err(Error::InvalidValue { .. })));
    // SAFETY: the pointers address live local buffers sized for the call.
    let r = unsafe { forward(&a(3, DType::I32), out, std::ptr::null_mut()) };
    assert!(matches!(r, Err(Error::UnsupportedDtype { .. })));
}
