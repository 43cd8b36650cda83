//! Normalisation layers: batch norm, group norm and layer norm, forward and backward.
//!
//! Layout: inputs are contiguous `[n, c, s]` (`s` = product of the spatial
//! sizes). Group norm splits the `c` channels of each sample into `g` groups;
//! each group's `(c / g) * s` elements are contiguous, and the affine weight
//! and bias are per channel. Layer norm over the last `k` elements of an
//! `[m, k]` input is group norm with `n = m, c = k, s = 1, g = 1`.
//! Batch norm normalises each channel over `n * s` elements.
//!
//! Statistics (means, variances, the sums of the backward) accumulate in
//! double over independent lanes ([`crate::engine::lanes`]), so they vectorise;
//! elementwise work runs in the compute type (float32 for float32, float16 and
//! bfloat16; float64 for float64), as PyTorch's CPU kernels do. `var` is the
//! biased (population) variance in normalisation, `invstd = 1 / sqrt(var + eps)`.
//! Running variance is updated with the unbiased estimate, as PyTorch does.
//! Gradients follow from `y = (x - mean) * invstd * w + b` (Ioffe & Szegedy
//! 2015, Wu & He 2018, Ba et al. 2016).

use crate::dtype::{DType, Element};
use crate::engine::iter::{for_each_range, load, store, thread_tasks};
use crate::engine::lanes::{dot_f64, sq_dev_f64, sum_f64};
use crate::engine::math::{round_to, Float};
use crate::engine::SendPtr;
use crate::error::{Error, Result};

/// Reads `dst.len()` contiguous elements of `dt` at element offset `off`.
unsafe fn read<T: Element>(dt: DType, p: SendPtr<u8>, off: usize, dst: &mut [T]) {
    // SAFETY: caller guarantees the range lies in the tensor.
    unsafe { load(dt, p.get().add(off * dt.size()), dt.size() as isize, dst.len(), dst).expect("checked dtype") }
}

/// Writes `src` as contiguous elements of `dt` at element offset `off`.
unsafe fn write<T: Element>(dt: DType, p: SendPtr<u8>, off: usize, src: &[T]) {
    // SAFETY: caller guarantees the range lies in the tensor.
    unsafe {
        let dst = p.get().add(off * dt.size());
        if dt == T::DTYPE {
            crate::engine::convert::copy_elements(src.as_ptr(), dst as *mut T, src.len());
        } else {
            store(dt, dst, dt.size() as isize, src).expect("checked dtype");
        }
    }
}

/// Reads a whole optional parameter vector (`len` elements), or `fill` values when null.
unsafe fn param<T: Element>(dt: DType, p: SendPtr<u8>, len: usize, fill: T) -> Vec<T> {
    let mut v = vec![fill; len];
    if !p.is_null() {
        // SAFETY: caller guarantees `len` elements.
        unsafe { read(dt, p, 0, &mut v) };
    }
    v
}

/// Elements per chunk of groups in [`group_norm_backward`]: fixed, not derived
/// from the thread count, so that the chunk-wise parameter-gradient sums are
/// reproducible.
const CHUNK: usize = 16384;

/// Shape of a group/layer norm problem (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct GroupShape {
    pub n: usize,
    pub c: usize,
    pub s: usize,
    pub g: usize,
}

impl GroupShape {
    fn group_len(&self) -> usize {
        self.c / self.g * self.s
    }
}

/// The tensors of one [`group_norm`] call.
#[derive(Debug, Clone, Copy)]
pub struct GroupNormIo {
    pub x: *const u8,
    pub param_dt: DType,
    pub weight: *const u8,
    pub bias: *const u8,
    pub y: *mut u8,
    pub stat_dt: DType,
    pub mean: *mut u8,
    pub rstd: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for GroupNormIo {}

/// Group norm forward (and layer norm, see the module docs): writes `y`
/// (`[n, c, s]`, dtype `dt`) and per-group `mean` and `rstd` (`[n, g]`, dtype
/// `stat_dt`). `weight`/`bias` (`[c]`, dtype `param_dt`) may be null.
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes;
/// [`Error::InvalidLayout`] when `g` does not divide `c`.
///
/// # Safety
/// Every pointer addresses a live contiguous tensor of the shape above.
pub unsafe fn group_norm(dt: DType, sh: GroupShape, io: GroupNormIo, eps: f64, threads: usize) -> Result<()> {
    let GroupNormIo { x, param_dt, weight, bias, y, stat_dt, mean, rstd } = io;
    dt.require_float("group_norm")?;
    param_dt.require_float("group_norm")?;
    stat_dt.require_float("group_norm")?;
    if sh.g == 0 || !sh.c.is_multiple_of(sh.g) {
        return Err(Error::InvalidLayout {
            op: "group_norm",
            reason: format!("{} groups do not divide {} channels", sh.g, sh.c),
        });
    }
    let args = (
        SendPtr::from_const(x),
        param_dt,
        SendPtr::from_const(weight),
        SendPtr::from_const(bias),
        eps,
        SendPtr::new(y),
        stat_dt,
        SendPtr::new(mean),
        SendPtr::new(rstd),
    );
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => group_norm_in::<f64>(dt, sh, args, threads),
            _ => group_norm_in::<f32>(dt, sh, args, threads),
        }
    }
    Ok(())
}

type GroupArgs = (SendPtr<u8>, DType, SendPtr<u8>, SendPtr<u8>, f64, SendPtr<u8>, DType, SendPtr<u8>, SendPtr<u8>);

unsafe fn group_norm_in<F: Float + Element>(dt: DType, sh: GroupShape, args: GroupArgs, threads: usize) {
    let (x, param_dt, weight, bias, eps, y, stat_dt, mean, rstd) = args;
    let len = sh.group_len();
    let cpg = sh.c / sh.g;
    // SAFETY: c elements each when non-null (contract).
    let (w, b): (Vec<F>, Vec<F>) =
        unsafe { (param(param_dt, weight, sh.c, F::ONE), param(param_dt, bias, sh.c, F::ZERO)) };
    // A float32/float64 input is read and written in place: only float16/bfloat16
    // go through the widening buffers (the two copies were a fifth of a
    // [512, 256] float32 layer norm).
    let direct = dt == F::DTYPE;
    // Contiguous ranges of groups, one per task, so that each task allocates its buffers once.
    let groups = sh.n * sh.g;
    for_each_range(groups, thread_tasks(groups, len, threads), |first, end| {
        let (mut buf, mut out) =
            if direct { (Vec::new(), Vec::new()) } else { (vec![F::ZERO; len], vec![F::ZERO; len]) };
        for grp in first..end {
            // SAFETY: group `grp` spans elements [grp*len, (grp+1)*len) of x and y, which
            // do not overlap (y is the output); `direct` means both hold `F`.
            let (src, dst): (&[F], &mut [F]) = unsafe {
                if direct && len > 0 {
                    (
                        std::slice::from_raw_parts((x.get() as *const F).add(grp * len), len),
                        std::slice::from_raw_parts_mut((y.get() as *mut F).add(grp * len), len),
                    )
                } else {
                    read(dt, x, grp * len, &mut buf);
                    (&buf, &mut out)
                }
            };
            let m = if len == 0 { 0.0 } else { sum_f64(src) / len as f64 };
            let var = if len == 0 { 0.0 } else { sq_dev_f64(src, m) / len as f64 };
            let r = 1.0 / (var + eps).sqrt();
            let (mf, rf) = (F::from_f64(m), F::from_f64(r));
            let c0 = (grp % sh.g) * cpg;
            if sh.s == 1 {
                let (w, b) = (&w[c0..c0 + len], &b[c0..c0 + len]);
                for (((o, &v), &wj), &bj) in dst.iter_mut().zip(src).zip(w).zip(b) {
                    *o = (v - mf) * rf * wj + bj;
                }
            } else {
                for (k, (run, src)) in dst.chunks_exact_mut(sh.s).zip(src.chunks_exact(sh.s)).enumerate() {
                    let (scale, shift) = (rf * w[c0 + k], b[c0 + k]);
                    run.iter_mut().zip(src).for_each(|(o, &v)| *o = (v - mf) * scale + shift);
                }
            }
            // SAFETY: as above; mean/rstd hold n*g elements.
            unsafe {
                if !direct {
                    write(dt, y, grp * len, dst);
                }
                write(stat_dt, mean, grp, &[m]);
                write(stat_dt, rstd, grp, &[r]);
            }
        }
    });
}

/// The tensors of one [`group_norm_backward`] call (null outputs: not computed).
#[derive(Debug, Clone, Copy)]
pub struct GroupNormGrads {
    pub dy: *const u8,
    pub x: *const u8,
    pub stat_dt: DType,
    pub mean: *const u8,
    pub rstd: *const u8,
    pub param_dt: DType,
    pub weight: *const u8,
    pub dx: *mut u8,
    pub dweight: *mut u8,
    pub dbias: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for GroupNormGrads {}

/// Group norm backward. With `xhat = (x - mean) * rstd` and `d = dy * w[ch]`,
/// `dx = rstd * (d - mean(d) - xhat * mean(d * xhat))` over each group,
/// `dweight[ch] = sum(dy * xhat)`, `dbias[ch] = sum(dy)` over samples and positions.
/// Outputs that are null are not computed; `weight` may be null (ones).
///
/// Errors: as [`group_norm`].
///
/// # Safety
/// As [`group_norm`]; `dx` is `[n, c, s]`, `dweight`/`dbias` `[c]` of `param_dt`.
pub unsafe fn group_norm_backward(dt: DType, sh: GroupShape, io: GroupNormGrads, threads: usize) -> Result<()> {
    let GroupNormGrads { dy, x, stat_dt, mean, rstd, param_dt, weight, dx, dweight, dbias } = io;
    dt.require_float("group_norm_backward")?;
    param_dt.require_float("group_norm_backward")?;
    stat_dt.require_float("group_norm_backward")?;
    if sh.g == 0 || !sh.c.is_multiple_of(sh.g) {
        return Err(Error::InvalidLayout {
            op: "group_norm_backward",
            reason: format!("{} groups do not divide {} channels", sh.g, sh.c),
        });
    }
    let ins = [
        SendPtr::from_const(dy),
        SendPtr::from_const(x),
        SendPtr::from_const(mean),
        SendPtr::from_const(rstd),
        SendPtr::from_const(weight),
    ];
    let outs = [SendPtr::new(dx), SendPtr::new(dweight), SendPtr::new(dbias)];
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => group_norm_backward_in::<f64>(dt, sh, ins, stat_dt, param_dt, outs, threads),
            _ => group_norm_backward_in::<f32>(dt, sh, ins, stat_dt, param_dt, outs, threads),
        }
    }
    Ok(())
}

unsafe fn group_norm_backward_in<F: Float + Element>(
    dt: DType,
    sh: GroupShape,
    ins: [SendPtr<u8>; 5],
    stat_dt: DType,
    param_dt: DType,
    outs: [SendPtr<u8>; 3],
    threads: usize,
) {
    let [dy, x, mean, rstd, weight] = ins;
    let [dx, dweight, dbias] = outs;
    let len = sh.group_len();
    let cpg = sh.c / sh.g;
    // SAFETY: contract: parameter vectors hold c elements, statistics n*g.
    let (w, means, rstds): (Vec<F>, Vec<f64>, Vec<f64>) =
        // SAFETY: contract: parameter vectors hold c elements, statistics n*g.
        unsafe { (param(param_dt, weight, sh.c, F::ONE), param(stat_dt, mean, sh.n * sh.g, 0.0), param(stat_dt, rstd, sh.n * sh.g, 0.0)) };
    let want_params = !dweight.is_null() || !dbias.is_null();
    let count = sh.n * sh.g;
    let per = (CHUNK / len.max(1)).max(1);
    let chunks = count.div_ceil(per);
    // A float32/float64 input is read and its gradient written in place, as in the forward.
    let direct = dt == F::DTYPE;
    // Per-chunk parameter gradients over all channels, combined in chunk order.
    let run = |k: usize| -> (Vec<f64>, Vec<f64>) {
        let np = if want_params { sh.c } else { 0 };
        let (mut dw, mut db) = (vec![0.0; np], vec![0.0; np]);
        let staged = if direct && sh.s == 1 { 0 } else { len };
        let (mut g, mut v, mut d) = (vec![F::ZERO; staged], vec![F::ZERO; len], vec![F::ZERO; len]);
        let mut xs_buf = vec![F::ZERO; if direct || sh.s != 1 { 0 } else { len }];
        let mut out_buf = vec![F::ZERO; if direct || sh.s != 1 { 0 } else { len }];
        for grp in k * per..((k + 1) * per).min(count) {
            let (mf, rf) = (F::from_f64(means[grp]), F::from_f64(rstds[grp]));
            let c0 = (grp % sh.g) * cpg;
            if sh.s == 1 {
                if len == 0 {
                    continue; // nothing to read (an empty tensor's pointer may be null)
                }
                // One weight per element: see `row_backward`.
                // SAFETY: group `grp` spans [grp*len, (grp+1)*len) of dy, x and dx; `direct`
                // means they hold `F`, and dx (an output) overlaps neither input.
                let (gs, xs, out): (&[F], &[F], Option<&mut [F]>) = unsafe {
                    if direct {
                        (
                            std::slice::from_raw_parts((dy.get() as *const F).add(grp * len), len),
                            std::slice::from_raw_parts((x.get() as *const F).add(grp * len), len),
                            (!dx.is_null())
                                .then(|| std::slice::from_raw_parts_mut((dx.get() as *mut F).add(grp * len), len)),
                        )
                    } else {
                        read(dt, dy, grp * len, &mut g);
                        read(dt, x, grp * len, &mut xs_buf);
                        (&g, &xs_buf, (!dx.is_null()).then_some(&mut out_buf[..]))
                    }
                };
                let params = want_params.then(|| (&mut dw[c0..c0 + len], &mut db[c0..c0 + len]));
                row_backward(gs, xs, &w[c0..c0 + len], (mf, rf), params, out, &mut v, &mut d);
                if !direct && !dx.is_null() {
                    // SAFETY: as above.
                    unsafe { write(dt, dx, grp * len, &out_buf) };
                }
                continue;
            }
            // SAFETY: group `grp` spans [grp*len, (grp+1)*len) of dy, x, dx.
            unsafe {
                read(dt, dy, grp * len, &mut g);
                read(dt, x, grp * len, &mut v);
            }
            v.iter_mut().for_each(|e| *e = (*e - mf) * rf);
            if want_params {
                for (kc, (gr, vr)) in g.chunks_exact(sh.s).zip(v.chunks_exact(sh.s)).enumerate() {
                    dw[c0 + kc] += dot_f64(gr, vr);
                    db[c0 + kc] += sum_f64(gr);
                }
            }
            if !dx.is_null() && len > 0 {
                for (kc, (dr, gr)) in d.chunks_exact_mut(sh.s).zip(g.chunks_exact(sh.s)).enumerate() {
                    let wk = w[c0 + kc];
                    dr.iter_mut().zip(gr).for_each(|(o, &e)| *o = e * wk);
                }
                let a = F::from_f64(sum_f64(&d) / len as f64);
                let bsum = F::from_f64(dot_f64(&d, &v) / len as f64);
                for (o, &vj) in d.iter_mut().zip(&v) {
                    *o = rf * (*o - a - vj * bsum);
                }
                // SAFETY: as above.
                unsafe { write(dt, dx, grp * len, &d) };
            }
        }
        (dw, db)
    };
    let partial: Vec<(Vec<f64>, Vec<f64>)> = if threads <= 1 || chunks <= 1 || count * len < 32768 {
        (0..chunks).map(run).collect()
    } else {
        crate::engine::iter::map_in_runs(chunks, threads, run)
    };
    if want_params {
        let (mut dw, mut db) = (vec![0.0; sh.c], vec![0.0; sh.c]);
        for (pw, pb) in &partial {
            dw.iter_mut().zip(pw).for_each(|(a, b)| *a += b);
            db.iter_mut().zip(pb).for_each(|(a, b)| *a += b);
        }
        // SAFETY: c elements each when non-null.
        unsafe {
            if !dweight.is_null() {
                write(param_dt, dweight, 0, &dw);
            }
            if !dbias.is_null() {
                write(param_dt, dbias, 0, &db);
            }
        }
    }
}

/// The backward of one row whose elements each have their own weight (layer norm,
/// and group norm without spatial extent): with `xhat = (x - mean) * rstd` and
/// `d = dy * w`, adds `dy * xhat` and `dy` into `params` (`dweight`, `dbias`) and writes
/// `dx = rstd * (d - mean(d) - xhat * mean(d * xhat))` into `dx`. The row is read where
/// it lies; `xhat` and `d` go to the scratch rows `v` and `d` (each loop a plain zip that
/// LLVM vectorises, the sums over [`crate::engine::lanes`]).
#[allow(clippy::too_many_arguments)]
#[inline]
fn row_backward<F: Float + Element>(
    g: &[F],
    x: &[F],
    w: &[F],
    (mf, rf): (F, F),
    params: Option<(&mut [f64], &mut [f64])>,
    dx: Option<&mut [F]>,
    v: &mut [F],
    d: &mut [F],
) {
    let len = g.len();
    let (x, w, v, d) = (&x[..len], &w[..len], &mut v[..len], &mut d[..len]);
    for (o, &xj) in v.iter_mut().zip(x) {
        *o = (xj - mf) * rf;
    }
    if let Some((dw, db)) = params {
        for (((pw, pb), &gj), &vj) in dw[..len].iter_mut().zip(&mut db[..len]).zip(g).zip(v.iter()) {
            *pw += (gj * vj).to_f64();
            *pb += gj.to_f64();
        }
    }
    let Some(dx) = dx else { return };
    for ((o, &gj), &wj) in d.iter_mut().zip(g).zip(w) {
        *o = gj * wj;
    }
    let a = F::from_f64(sum_f64(d) / len as f64);
    let b = F::from_f64(dot_f64(d, v) / len as f64);
    for ((o, &dj), &vj) in dx[..len].iter_mut().zip(d.iter()).zip(v.iter()) {
        *o = rf * (dj - a - vj * b);
    }
}

/// Batch norm shape: input `[n, c, s]` contiguous, statistics per channel.
#[derive(Debug, Clone, Copy)]
pub struct BatchShape {
    pub n: usize,
    pub c: usize,
    pub s: usize,
}

/// Pointers of the per-channel tensors (`[c]`, dtype `param_dt`); any may be null.
#[derive(Debug, Clone, Copy)]
pub struct BatchParams {
    pub weight: *const u8,
    pub bias: *const u8,
    pub running_mean: *mut u8,
    pub running_var: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for BatchParams {}

/// Gathers channel `ch` (`n * s` values) of an `[n, c, s]` tensor.
unsafe fn channel<T: Element>(dt: DType, p: SendPtr<u8>, sh: BatchShape, ch: usize, dst: &mut [T]) {
    for i in 0..sh.n {
        // SAFETY: caller: the tensor is [n, c, s].
        unsafe { read(dt, p, (i * sh.c + ch) * sh.s, &mut dst[i * sh.s..(i + 1) * sh.s]) };
    }
}

/// Scatters channel `ch` of an `[n, c, s]` tensor.
unsafe fn set_channel<T: Element>(dt: DType, p: SendPtr<u8>, sh: BatchShape, ch: usize, src: &[T]) {
    for i in 0..sh.n {
        // SAFETY: caller: the tensor is [n, c, s].
        unsafe { write(dt, p, (i * sh.c + ch) * sh.s, &src[i * sh.s..(i + 1) * sh.s]) };
    }
}

/// The input, mode and outputs of one [`batch_norm`] call.
#[derive(Debug, Clone, Copy)]
pub struct BatchNormIo {
    pub x: *const u8,
    pub training: bool,
    pub momentum: f64,
    pub eps: f64,
    pub y: *mut u8,
    pub save_mean: *mut u8,
    pub save_invstd: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for BatchNormIo {}

/// Batch norm forward. Training: per channel, normalise with the batch
/// statistics, store `save_mean` and `save_invstd` (`[c]`, dtype
/// `param_dt`), and update non-null running statistics with `momentum`.
/// Evaluation: normalise with the running statistics (`save_*` untouched).
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes.
///
/// # Safety
/// `x`, `y` are `[n, c, s]` of `dt`; every non-null per-channel pointer holds `c` elements of `param_dt`.
pub unsafe fn batch_norm(
    dt: DType,
    sh: BatchShape,
    param_dt: DType,
    p: BatchParams,
    io: BatchNormIo,
    threads: usize,
) -> Result<()> {
    let BatchNormIo { x, training, momentum, eps, y, save_mean, save_invstd } = io;
    dt.require_float("batch_norm")?;
    param_dt.require_float("batch_norm")?;
    let hyper = (training, momentum, eps);
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => batch_norm_in::<f64>(
                (dt, param_dt),
                sh,
                SendPtr::from_const(x),
                p,
                hyper,
                [SendPtr::new(y), SendPtr::new(save_mean), SendPtr::new(save_invstd)],
                threads,
            ),
            _ => batch_norm_in::<f32>(
                (dt, param_dt),
                sh,
                SendPtr::from_const(x),
                p,
                hyper,
                [SendPtr::new(y), SendPtr::new(save_mean), SendPtr::new(save_invstd)],
                threads,
            ),
        }
    }
    Ok(())
}

/// `(dt, param_dt)`: the dtypes of the data and of the parameter vectors.
unsafe fn batch_norm_in<F: Float + Element>(
    (dt, param_dt): (DType, DType),
    sh: BatchShape,
    x: SendPtr<u8>,
    p: BatchParams,
    hyper: (bool, f64, f64),
    outs: [SendPtr<u8>; 3],
    threads: usize,
) {
    let (training, momentum, eps) = hyper;
    let [y, sm_p, si_p] = outs;
    let count = sh.n * sh.s;
    let (rm_p, rv_p) = (SendPtr::new(p.running_mean), SendPtr::new(p.running_var));
    // SAFETY: contract: c elements each when non-null.
    let (w, b, rm, rv): (Vec<F>, Vec<F>, Vec<f64>, Vec<f64>) = unsafe {
        (
            param(param_dt, SendPtr::from_const(p.weight), sh.c, F::ONE),
            param(param_dt, SendPtr::from_const(p.bias), sh.c, F::ZERO),
            param(param_dt, rm_p, sh.c, 0.0),
            param(param_dt, rv_p, sh.c, 1.0),
        )
    };
    for_each_range(sh.c, thread_tasks(sh.c, count, threads), |first, end| {
        let mut v = vec![F::ZERO; count];
        for ch in first..end {
            // SAFETY: channel ch of [n, c, s]; each task owns its channels' elements and parameter slots.
            unsafe {
                channel(dt, x, sh, ch, &mut v);
                let (m, invstd) = if training {
                    let m = if count == 0 { f64::NAN } else { sum_f64(&v) / count as f64 };
                    let var = if count == 0 { f64::NAN } else { sq_dev_f64(&v, m) / count as f64 };
                    if !rm_p.is_null() {
                        write(param_dt, rm_p, ch, &[(1.0 - momentum) * rm[ch] + momentum * m]);
                    }
                    if !rv_p.is_null() {
                        let unbiased = if count > 1 { var * count as f64 / (count - 1) as f64 } else { f64::INFINITY };
                        write(param_dt, rv_p, ch, &[(1.0 - momentum) * rv[ch] + momentum * unbiased]);
                    }
                    let invstd = 1.0 / (var + eps).sqrt();
                    write(param_dt, sm_p, ch, &[m]);
                    write(param_dt, si_p, ch, &[invstd]);
                    // Normalised with the statistics as stored: with half parameters CPU
                    // rounds them to the half type first, which moves outputs by an ulp or two.
                    (round_to(param_dt, m), round_to(param_dt, invstd))
                } else {
                    (rm[ch], 1.0 / (rv[ch] + eps).sqrt())
                };
                let (mf, scale, shift) = (F::from_f64(m), F::from_f64(invstd) * w[ch], b[ch]);
                v.iter_mut().for_each(|e| *e = (*e - mf) * scale + shift);
                set_channel(dt, y, sh, ch, &v);
            }
        }
    });
}

/// The inputs, mode and gradients of one [`batch_norm_backward`] call (null gradients: not computed).
#[derive(Debug, Clone, Copy)]
pub struct BatchNormGrads {
    pub dy: *const u8,
    pub x: *const u8,
    pub save_mean: *const u8,
    pub save_invstd: *const u8,
    pub training: bool,
    pub eps: f64,
    pub dx: *mut u8,
    pub dweight: *mut u8,
    pub dbias: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for BatchNormGrads {}

/// Batch norm backward. Training uses the saved batch statistics:
/// `dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))`; evaluation
/// uses the running ones: `dx = dy * w * invstd`. In both,
/// `dweight = sum(dy * xhat)`, `dbias = sum(dy)`. Null outputs are skipped.
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes.
///
/// # Safety
/// As [`batch_norm`]; `dy`, `dx` are `[n, c, s]` of `dt`; `save_mean`/`save_invstd`
/// hold `c` elements when `training`.
pub unsafe fn batch_norm_backward(
    dt: DType,
    sh: BatchShape,
    param_dt: DType,
    p: BatchParams,
    io: BatchNormGrads,
    threads: usize,
) -> Result<()> {
    let BatchNormGrads { dy, x, save_mean, save_invstd, training, eps, dx, dweight, dbias } = io;
    dt.require_float("batch_norm_backward")?;
    param_dt.require_float("batch_norm_backward")?;
    let ins = [
        SendPtr::from_const(dy),
        SendPtr::from_const(x),
        SendPtr::from_const(save_mean),
        SendPtr::from_const(save_invstd),
    ];
    let outs = [SendPtr::new(dx), SendPtr::new(dweight), SendPtr::new(dbias)];
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => batch_norm_backward_in::<f64>((dt, param_dt), sh, ins, p, (training, eps), outs, threads),
            _ => batch_norm_backward_in::<f32>((dt, param_dt), sh, ins, p, (training, eps), outs, threads),
        }
    }
    Ok(())
}

/// `(dt, param_dt)`: the dtypes of the data and of the parameter vectors.
unsafe fn batch_norm_backward_in<F: Float + Element>(
    (dt, param_dt): (DType, DType),
    sh: BatchShape,
    ins: [SendPtr<u8>; 4],
    p: BatchParams,
    hyper: (bool, f64),
    outs: [SendPtr<u8>; 3],
    threads: usize,
) {
    let [dy, x, save_mean, save_invstd] = ins;
    let [dx, dw_p, db_p] = outs;
    let (training, eps) = hyper;
    let count = sh.n * sh.s;
    // SAFETY: contract: c elements each when non-null.
    let (w, mean, invstd): (Vec<F>, Vec<f64>, Vec<f64>) = unsafe {
        let w = param(param_dt, SendPtr::from_const(p.weight), sh.c, F::ONE);
        if training {
            (w, param(param_dt, save_mean, sh.c, 0.0), param(param_dt, save_invstd, sh.c, 1.0))
        } else {
            let rv: Vec<f64> = param(param_dt, SendPtr::new(p.running_var), sh.c, 1.0);
            (
                w,
                param(param_dt, SendPtr::new(p.running_mean), sh.c, 0.0),
                rv.iter().map(|v| 1.0 / (v + eps).sqrt()).collect(),
            )
        }
    };
    for_each_range(sh.c, thread_tasks(sh.c, count, threads), |first, end| {
        let mut g = vec![F::ZERO; count];
        let mut v = vec![F::ZERO; count];
        for ch in first..end {
            // SAFETY: channel ch; each task owns its channels' elements and parameter slots.
            unsafe {
                channel(dt, dy, sh, ch, &mut g);
                channel(dt, x, sh, ch, &mut v);
                let (mf, rf) = (F::from_f64(mean[ch]), F::from_f64(invstd[ch]));
                v.iter_mut().for_each(|e| *e = (*e - mf) * rf);
                let sum_g = sum_f64(&g);
                let sum_gx = dot_f64(&g, &v);
                if !dx.is_null() {
                    let k = w[ch] * rf;
                    if training && count > 0 {
                        let (mg, mgx) = (F::from_f64(sum_g / count as f64), F::from_f64(sum_gx / count as f64));
                        g.iter_mut().zip(&v).for_each(|(a, &b)| *a = k * (*a - mg - b * mgx));
                    } else {
                        g.iter_mut().for_each(|a| *a = k * *a);
                    }
                    set_channel(dt, dx, sh, ch, &g);
                }
                if !dw_p.is_null() {
                    write(param_dt, dw_p, ch, &[sum_gx]);
                }
                if !db_p.is_null() {
                    write(param_dt, db_p, ch, &[sum_g]);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[f64]) -> *const u8 {
        v.as_ptr() as *const u8
    }

    #[test]
    fn group_norm_normalises_each_group_and_applies_the_affine() {
        let sh = GroupShape { n: 2, c: 4, s: 3, g: 2 };
        let x: Vec<f64> = (0..24).map(|k| ((k * 7 % 11) as f64) * 0.5 - 2.0).collect();
        let w = [1.0, 2.0, 0.5, -1.0];
        let b = [0.0, 1.0, -1.0, 0.25];
        let mut y = vec![0.0; 24];
        let (mut mean, mut rstd) = (vec![0.0; 4], vec![0.0; 4]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            group_norm(
                DType::F64,
                sh,
                GroupNormIo {
                    x: p(&x),
                    param_dt: DType::F64,
                    weight: p(&w),
                    bias: p(&b),
                    y: y.as_mut_ptr() as _,
                    stat_dt: DType::F64,
                    mean: mean.as_mut_ptr() as _,
                    rstd: rstd.as_mut_ptr() as _,
                },
                1e-5,
                2,
            )
        }
        .unwrap();
        for grp in 0..4 {
            let xs = &x[grp * 6..grp * 6 + 6];
            let m: f64 = xs.iter().sum::<f64>() / 6.0;
            let var: f64 = xs.iter().map(|v| (v - m).powi(2)).sum::<f64>() / 6.0;
            assert!((mean[grp] - m).abs() < 1e-12 && (rstd[grp] - 1.0 / (var + 1e-5).sqrt()).abs() < 1e-9);
            for j in 0..6 {
                let ch = (grp % 2) * 2 + j / 3;
                let want = (xs[j] - m) * rstd[grp] * w[ch] + b[ch];
                assert!((y[grp * 6 + j] - want).abs() < 1e-12);
            }
        }
    }

    /// Finite-difference check of every gradient of `sum(y * r)` for a fixed `r`: group
    /// norm with spatial extent, layer norm (rows longer than the fused pass's lanes, with
    /// a tail) and group norm without spatial extent.
    #[test]
    fn group_norm_backward_matches_finite_differences() {
        for sh in [
            GroupShape { n: 2, c: 2, s: 3, g: 1 },
            GroupShape { n: 3, c: 37, s: 1, g: 1 },
            GroupShape { n: 2, c: 40, s: 1, g: 2 },
        ] {
            check_backward(sh);
        }
    }

    fn check_backward(sh: GroupShape) {
        let (total, stats) = (sh.n * sh.c * sh.s, sh.n * sh.g);
        let x: Vec<f64> = (0..total).map(|k| (k as f64 * 0.61).sin()).collect();
        let w: Vec<f64> = (0..sh.c).map(|k| 1.3 - 0.37 * k as f64).collect();
        let b: Vec<f64> = (0..sh.c).map(|k| 0.1 * k as f64).collect();
        let r: Vec<f64> = (0..total).map(|k| (k as f64 * 1.7).cos()).collect();
        let f = |x: &[f64], w: &[f64]| -> f64 {
            let mut y = vec![0.0; total];
            let (mut m, mut s) = (vec![0.0; stats], vec![0.0; stats]);
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                group_norm(
                    DType::F64,
                    sh,
                    GroupNormIo {
                        x: p(x),
                        param_dt: DType::F64,
                        weight: p(w),
                        bias: p(&b),
                        y: y.as_mut_ptr() as _,
                        stat_dt: DType::F64,
                        mean: m.as_mut_ptr() as _,
                        rstd: s.as_mut_ptr() as _,
                    },
                    1e-5,
                    1,
                )
            }
            .unwrap();
            y.iter().zip(&r).map(|(a, b)| a * b).sum()
        };
        let mut y = vec![0.0; total];
        let (mut m, mut s) = (vec![0.0; stats], vec![0.0; stats]);
        let (mut dx, mut dw, mut db) = (vec![0.0; total], vec![0.0; sh.c], vec![0.0; sh.c]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            group_norm(
                DType::F64,
                sh,
                GroupNormIo {
                    x: p(&x),
                    param_dt: DType::F64,
                    weight: p(&w),
                    bias: p(&b),
                    y: y.as_mut_ptr() as _,
                    stat_dt: DType::F64,
                    mean: m.as_mut_ptr() as _,
                    rstd: s.as_mut_ptr() as _,
                },
                1e-5,
                1,
            )
            .unwrap();
            group_norm_backward(
                DType::F64,
                sh,
                GroupNormGrads {
                    dy: p(&r),
                    x: p(&x),
                    stat_dt: DType::F64,
                    mean: p(&m),
                    rstd: p(&s),
                    param_dt: DType::F64,
                    weight: p(&w),
                    dx: dx.as_mut_ptr() as _,
                    dweight: dw.as_mut_ptr() as _,
                    dbias: db.as_mut_ptr() as _,
                },
                1,
            )
            .unwrap();
        }
        for k in 0..total {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[k] += 1e-6;
            xm[k] -= 1e-6;
            let fd = (f(&xp, &w) - f(&xm, &w)) / 2e-6;
            assert!((fd - dx[k]).abs() < 1e-5, "{sh:?} dx[{k}]: {fd} vs {}", dx[k]);
        }
        for k in 0..sh.c {
            let (mut wp, mut wm) = (w.to_vec(), w.to_vec());
            wp[k] += 1e-6;
            wm[k] -= 1e-6;
            let fd = (f(&x, &wp) - f(&x, &wm)) / 2e-6;
            assert!((fd - dw[k]).abs() < 1e-5, "{sh:?} dw[{k}]: {fd} vs {}", dw[k]);
        }
        for (ch, &got) in db.iter().enumerate() {
            let want: f64 =
                (0..sh.n).flat_map(|i| (0..sh.s).map(move |j| (i * sh.c + ch) * sh.s + j)).map(|k| r[k]).sum();
            assert!((got - want).abs() < 1e-12, "{sh:?} db[{ch}]: {got} vs {want}");
        }
    }

    #[test]
    fn batch_norm_training_updates_running_stats_and_backward_matches_finite_differences() {
        let sh = BatchShape { n: 3, c: 2, s: 2 };
        let x: Vec<f64> = (0..12).map(|k| (k as f64 * 0.83).sin() * 2.0).collect();
        let w = [0.9, 1.4];
        let b = [0.0, -0.5];
        let r: Vec<f64> = (0..12).map(|k| (k as f64 * 0.37).cos()).collect();
        let run = |x: &[f64], rm: &mut [f64], rv: &mut [f64]| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
            let mut y = vec![0.0; 12];
            let (mut sm, mut si) = (vec![0.0; 2], vec![0.0; 2]);
            let prm = BatchParams {
                weight: p(&w),
                bias: p(&b),
                running_mean: rm.as_mut_ptr() as _,
                running_var: rv.as_mut_ptr() as _,
            };
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                batch_norm(
                    DType::F64,
                    sh,
                    DType::F64,
                    prm,
                    BatchNormIo {
                        x: p(x),
                        training: true,
                        momentum: 0.1,
                        eps: 1e-5,
                        y: y.as_mut_ptr() as _,
                        save_mean: sm.as_mut_ptr() as _,
                        save_invstd: si.as_mut_ptr() as _,
                    },
                    2,
                )
            }
            .unwrap();
            (y, sm, si)
        };
        let (mut rm, mut rv) = (vec![0.0; 2], vec![1.0; 2]);
        let (_, sm, si) = run(&x, &mut rm, &mut rv);
        let ch0: Vec<f64> = [0, 1, 4, 5, 8, 9].iter().map(|&k| x[k]).collect();
        let m0 = ch0.iter().sum::<f64>() / 6.0;
        let v0 = ch0.iter().map(|v| (v - m0).powi(2)).sum::<f64>() / 6.0;
        assert!((sm[0] - m0).abs() < 1e-12 && (rm[0] - 0.1 * m0).abs() < 1e-12);
        assert!((rv[0] - (0.9 + 0.1 * v0 * 6.0 / 5.0)).abs() < 1e-12);
        let mut dx = vec![0.0; 12];
        let (mut dw, mut db) = (vec![0.0; 2], vec![0.0; 2]);
        let prm = BatchParams {
            weight: p(&w),
            bias: p(&b),
            running_mean: std::ptr::null_mut(),
            running_var: std::ptr::null_mut(),
        };
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            batch_norm_backward(
                DType::F64,
                sh,
                DType::F64,
                prm,
                BatchNormGrads {
                    dy: p(&r),
                    x: p(&x),
                    save_mean: p(&sm),
                    save_invstd: p(&si),
                    training: true,
                    eps: 1e-5,
                    dx: dx.as_mut_ptr() as _,
                    dweight: dw.as_mut_ptr() as _,
                    dbias: db.as_mut_ptr() as _,
                },
                1,
            )
        }
        .unwrap();
        let f = |x: &[f64]| -> f64 {
            let (mut a, mut c) = (vec![0.0; 2], vec![1.0; 2]);
            run(x, &mut a, &mut c).0.iter().zip(&r).map(|(a, b)| a * b).sum()
        };
        for k in 0..12 {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[k] += 1e-6;
            xm[k] -= 1e-6;
            let fd = (f(&xp) - f(&xm)) / 2e-6;
            assert!((fd - dx[k]).abs() < 1e-5, "dx[{k}]: {fd} vs {}", dx[k]);
        }
    }
}
