//! Normalisation layers: batch norm, group norm and layer norm, forward and backward.
//!
//! Layout: inputs are contiguous `[n, c, s]` (`s` = product of the spatial
//! sizes). Group norm splits the `c` channels of each sample into `g` groups;
//! each group's `(c / g) * s` elements are contiguous, and the affine weight
//! and bias are per channel. Layer norm over the last `k` elements of an
//! `[m, k]` input is group norm with `n = m, c = k, s = 1, g = 1`.
//! Batch norm normalises each channel over `n * s` elements.
//!
//! Statistics accumulate in double; `var` is the biased (population) variance
//! in normalisation, `invstd = 1 / sqrt(var + eps)`. Running variance is
//! updated with the unbiased estimate, as PyTorch does. Gradients follow from
//! `y = (x - mean) * invstd * w + b` (Ioffe & Szegedy 2015, Wu & He 2018,
//! Ba et al. 2016).

use rayon::prelude::*;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::iter::{load, store};

/// A raw pointer that may cross into rayon tasks; tasks write disjoint elements.
#[derive(Clone, Copy)]
struct Ptr(*mut u8);
// SAFETY: tasks touch disjoint elements (contract of the public functions).
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

impl Ptr {
    fn is_null(self) -> bool {
        self.0.is_null()
    }
}

fn check(op: &'static str, dt: DType) -> Result<()> {
    match dt {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        d => Err(Error::UnsupportedDtype { op, dtype: d }),
    }
}

/// Reads `n` contiguous elements of `dt` at element offset `off` as doubles.
unsafe fn read(dt: DType, p: Ptr, off: usize, n: usize, dst: &mut [f64]) {
    // SAFETY: caller guarantees the range lies in the tensor.
    unsafe { load(dt, p.0.add(off * dt.size()), dt.size() as isize, n, dst).expect("checked dtype") }
}

/// Writes `src` as contiguous elements of `dt` at element offset `off`.
unsafe fn write(dt: DType, p: Ptr, off: usize, src: &[f64]) {
    // SAFETY: caller guarantees the range lies in the tensor.
    unsafe { store(dt, p.0.add(off * dt.size()), dt.size() as isize, src).expect("checked dtype") }
}

/// Reads a whole optional parameter vector (`len` elements), or `fill` values when null.
unsafe fn param(dt: DType, p: Ptr, len: usize, fill: f64) -> Vec<f64> {
    let mut v = vec![fill; len];
    if !p.is_null() {
        // SAFETY: caller guarantees `len` elements.
        unsafe { read(dt, p, 0, len, &mut v) };
    }
    v
}

/// Runs `f(i)` for `i` in `0..count` over up to `threads` rayon tasks.
fn parallel(count: usize, work_per_item: usize, threads: usize, f: impl Fn(usize) + Sync + Send) {
    if threads <= 1 || count <= 1 || count * work_per_item < 32768 {
        (0..count).for_each(f);
    } else {
        (0..count).into_par_iter().with_min_len(count.div_ceil(threads)).for_each(f);
    }
}

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

/// Group norm forward (and layer norm, see the module docs): writes `y`
/// (`[n, c, s]`, dtype `dt`) and per-group `mean` and `rstd` (`[n, g]`, dtype
/// `stat_dt`). `weight`/`bias` (`[c]`, dtype `param_dt`) may be null.
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes;
/// [`Error::InvalidLayout`] when `g` does not divide `c`.
///
/// # Safety
/// Every pointer addresses a live contiguous tensor of the shape above.
#[allow(clippy::too_many_arguments)]
pub unsafe fn group_norm(dt: DType, sh: GroupShape, x: *const u8, param_dt: DType, weight: *const u8, bias: *const u8, eps: f64, y: *mut u8, stat_dt: DType, mean: *mut u8, rstd: *mut u8, threads: usize) -> Result<()> {
    check("group_norm", dt)?;
    check("group_norm", param_dt)?;
    check("group_norm", stat_dt)?;
    if sh.g == 0 || sh.c % sh.g != 0 {
        return Err(Error::InvalidLayout { op: "group_norm", reason: format!("{} groups do not divide {} channels", sh.g, sh.c) });
    }
    let len = sh.group_len();
    let (x, y, mean, rstd) = (Ptr(x as *mut u8), Ptr(y), Ptr(mean), Ptr(rstd));
    // SAFETY: c elements each when non-null (contract).
    let (w, b) = unsafe { (param(param_dt, Ptr(weight as *mut u8), sh.c, 1.0), param(param_dt, Ptr(bias as *mut u8), sh.c, 0.0)) };
    let cpg = sh.c / sh.g;
    parallel(sh.n * sh.g, len, threads, |grp| {
        let (x, y, mean, rstd) = (x, y, mean, rstd);
        let mut buf = vec![0.0; len];
        // SAFETY: group `grp` spans elements [grp*len, (grp+1)*len) of x and y.
        unsafe { read(dt, x, grp * len, len, &mut buf) };
        let m = if len == 0 { 0.0 } else { buf.iter().sum::<f64>() / len as f64 };
        let var = if len == 0 { 0.0 } else { buf.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / len as f64 };
        let r = 1.0 / (var + eps).sqrt();
        let c0 = (grp % sh.g) * cpg;
        for (j, v) in buf.iter_mut().enumerate() {
            let ch = c0 + j / sh.s;
            *v = (*v - m) * r * w[ch] + b[ch];
        }
        // SAFETY: as above; mean/rstd hold n*g elements.
        unsafe {
            write(dt, y, grp * len, &buf);
            write(stat_dt, mean, grp, &[m]);
            write(stat_dt, rstd, grp, &[r]);
        }
    });
    Ok(())
}

/// Group norm backward. With `xhat = (x - mean) * rstd` and `d = dy * w[ch]`,
/// `dx = rstd * (d - mean(d) - xhat * mean(d * xhat))` over each group,
/// `dweight[ch] = sum(dy * xhat)`, `dbias[ch] = sum(dy)` over samples and positions.
/// Outputs that are null are not computed; `weight` may be null (ones).
///
/// Errors: as [`group_norm`].
///
/// # Safety
/// As [`group_norm`]; `dx` is `[n, c, s]`, `dweight`/`dbias` `[c]` of `param_dt`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn group_norm_backward(dt: DType, sh: GroupShape, dy: *const u8, x: *const u8, stat_dt: DType, mean: *const u8, rstd: *const u8, param_dt: DType, weight: *const u8, dx: *mut u8, dweight: *mut u8, dbias: *mut u8, threads: usize) -> Result<()> {
    check("group_norm_backward", dt)?;
    check("group_norm_backward", param_dt)?;
    check("group_norm_backward", stat_dt)?;
    if sh.g == 0 || sh.c % sh.g != 0 {
        return Err(Error::InvalidLayout { op: "group_norm_backward", reason: format!("{} groups do not divide {} channels", sh.g, sh.c) });
    }
    let len = sh.group_len();
    let cpg = sh.c / sh.g;
    let (dy, x, dx) = (Ptr(dy as *mut u8), Ptr(x as *mut u8), Ptr(dx));
    // SAFETY: contract: parameter vectors hold c elements, statistics n*g.
    let (w, means, rstds) = unsafe {
        (param(param_dt, Ptr(weight as *mut u8), sh.c, 1.0), param(stat_dt, Ptr(mean as *mut u8), sh.n * sh.g, 0.0), param(stat_dt, Ptr(rstd as *mut u8), sh.n * sh.g, 0.0))
    };
    let want_params = !dweight.is_null() || !dbias.is_null();
    // Per-group partial parameter gradients, combined in group order so results do not depend on threads.
    let partial: Vec<(Vec<f64>, Vec<f64>)> = {
        let run = |grp: usize| -> (Vec<f64>, Vec<f64>) {
            let (dy, x, dx) = (dy, x, dx);
            let mut g = vec![0.0; len];
            let mut v = vec![0.0; len];
            // SAFETY: group `grp` spans [grp*len, (grp+1)*len) of dy, x, dx.
            unsafe {
                read(dt, dy, grp * len, len, &mut g);
                read(dt, x, grp * len, len, &mut v);
            }
            let (m, r) = (means[grp], rstds[grp]);
            let c0 = (grp % sh.g) * cpg;
            v.iter_mut().for_each(|e| *e = (*e - m) * r);
            let (mut dwl, mut dbl) = (vec![0.0; if want_params { cpg } else { 0 }], vec![0.0; if want_params { cpg } else { 0 }]);
            if want_params {
                for j in 0..len {
                    dwl[j / sh.s] += g[j] * v[j];
                    dbl[j / sh.s] += g[j];
                }
            }
            if !dx.is_null() && len > 0 {
                let d: Vec<f64> = (0..len).map(|j| g[j] * w[c0 + j / sh.s]).collect();
                let a = d.iter().sum::<f64>() / len as f64;
                let bsum = d.iter().zip(&v).map(|(p, q)| p * q).sum::<f64>() / len as f64;
                let out: Vec<f64> = (0..len).map(|j| r * (d[j] - a - v[j] * bsum)).collect();
                // SAFETY: as above.
                unsafe { write(dt, dx, grp * len, &out) };
            }
            (dwl, dbl)
        };
        let count = sh.n * sh.g;
        if threads <= 1 || count * len < 32768 {
            (0..count).map(run).collect()
        } else {
            (0..count).into_par_iter().with_min_len(count.div_ceil(threads)).map(run).collect()
        }
    };
    if want_params {
        let (mut dw, mut db) = (vec![0.0; sh.c], vec![0.0; sh.c]);
        for (grp, (dwl, dbl)) in partial.iter().enumerate() {
            let c0 = (grp % sh.g) * cpg;
            for k in 0..cpg {
                dw[c0 + k] += dwl[k];
                db[c0 + k] += dbl[k];
            }
        }
        // SAFETY: c elements each when non-null.
        unsafe {
            if !dweight.is_null() {
                write(param_dt, Ptr(dweight), 0, &dw);
            }
            if !dbias.is_null() {
                write(param_dt, Ptr(dbias), 0, &db);
            }
        }
    }
    Ok(())
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

/// Gathers channel `ch` (`n * s` values) of an `[n, c, s]` tensor.
unsafe fn channel(dt: DType, p: Ptr, sh: BatchShape, ch: usize, dst: &mut [f64]) {
    for i in 0..sh.n {
        // SAFETY: caller: the tensor is [n, c, s].
        unsafe { read(dt, p, (i * sh.c + ch) * sh.s, sh.s, &mut dst[i * sh.s..(i + 1) * sh.s]) };
    }
}

/// Scatters channel `ch` of an `[n, c, s]` tensor.
unsafe fn set_channel(dt: DType, p: Ptr, sh: BatchShape, ch: usize, src: &[f64]) {
    for i in 0..sh.n {
        // SAFETY: caller: the tensor is [n, c, s].
        unsafe { write(dt, p, (i * sh.c + ch) * sh.s, &src[i * sh.s..(i + 1) * sh.s]) };
    }
}

/// Batch norm forward. Training: per channel, normalise with the batch
/// statistics, store `save_mean` and `save_invstd` (`[c]`, dtype
/// `param_dt`), and update non-null running statistics with `momentum`.
/// Evaluation: normalise with the running statistics (`save_*` untouched).
///
/// Errors: [`Error::UnsupportedDtype`] for non-floating dtypes.
///
/// # Safety
/// `x`, `y` are `[n, c, s]` of `dt`; every non-null per-channel pointer holds `c` elements of `param_dt`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn batch_norm(dt: DType, sh: BatchShape, x: *const u8, param_dt: DType, p: BatchParams, training: bool, momentum: f64, eps: f64, y: *mut u8, save_mean: *mut u8, save_invstd: *mut u8, threads: usize) -> Result<()> {
    check("batch_norm", dt)?;
    check("batch_norm", param_dt)?;
    let count = sh.n * sh.s;
    let (x, y) = (Ptr(x as *mut u8), Ptr(y));
    let (rm_p, rv_p, sm_p, si_p) = (Ptr(p.running_mean), Ptr(p.running_var), Ptr(save_mean), Ptr(save_invstd));
    // SAFETY: contract: c elements each when non-null.
    let (w, b, rm, rv) = unsafe {
        (
            param(param_dt, Ptr(p.weight as *mut u8), sh.c, 1.0),
            param(param_dt, Ptr(p.bias as *mut u8), sh.c, 0.0),
            param(param_dt, rm_p, sh.c, 0.0),
            param(param_dt, rv_p, sh.c, 1.0),
        )
    };
    parallel(sh.c, count, threads, |ch| {
        let (x, y, rm_p, rv_p, sm_p, si_p) = (x, y, rm_p, rv_p, sm_p, si_p);
        let mut v = vec![0.0; count];
        // SAFETY: channel ch of [n, c, s]; each task owns its channel's elements and parameter slots.
        unsafe {
            channel(dt, x, sh, ch, &mut v);
            let (m, invstd) = if training {
                let m = if count == 0 { f64::NAN } else { v.iter().sum::<f64>() / count as f64 };
                let var = if count == 0 { f64::NAN } else { v.iter().map(|e| (e - m) * (e - m)).sum::<f64>() / count as f64 };
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
                (m, invstd)
            } else {
                (rm[ch], 1.0 / (rv[ch] + eps).sqrt())
            };
            v.iter_mut().for_each(|e| *e = (*e - m) * invstd * w[ch] + b[ch]);
            set_channel(dt, y, sh, ch, &v);
        }
    });
    Ok(())
}

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
#[allow(clippy::too_many_arguments)]
pub unsafe fn batch_norm_backward(dt: DType, sh: BatchShape, dy: *const u8, x: *const u8, param_dt: DType, p: BatchParams, save_mean: *const u8, save_invstd: *const u8, training: bool, eps: f64, dx: *mut u8, dweight: *mut u8, dbias: *mut u8, threads: usize) -> Result<()> {
    check("batch_norm_backward", dt)?;
    check("batch_norm_backward", param_dt)?;
    let count = sh.n * sh.s;
    let (dy, x, dx) = (Ptr(dy as *mut u8), Ptr(x as *mut u8), Ptr(dx));
    let (dw_p, db_p) = (Ptr(dweight), Ptr(dbias));
    // SAFETY: contract: c elements each when non-null.
    let (w, mean, invstd) = unsafe {
        let w = param(param_dt, Ptr(p.weight as *mut u8), sh.c, 1.0);
        if training {
            (w, param(param_dt, Ptr(save_mean as *mut u8), sh.c, 0.0), param(param_dt, Ptr(save_invstd as *mut u8), sh.c, 1.0))
        } else {
            let rv = param(param_dt, Ptr(p.running_var), sh.c, 1.0);
            (w, param(param_dt, Ptr(p.running_mean), sh.c, 0.0), rv.iter().map(|v| 1.0 / (v + eps).sqrt()).collect())
        }
    };
    parallel(sh.c, count, threads, |ch| {
        let (dy, x, dx, dw_p, db_p) = (dy, x, dx, dw_p, db_p);
        let mut g = vec![0.0; count];
        let mut v = vec![0.0; count];
        // SAFETY: channel ch; each task owns its channel's elements and parameter slots.
        unsafe {
            channel(dt, dy, sh, ch, &mut g);
            channel(dt, x, sh, ch, &mut v);
            v.iter_mut().for_each(|e| *e = (*e - mean[ch]) * invstd[ch]);
            let sum_g: f64 = g.iter().sum();
            let sum_gx: f64 = g.iter().zip(&v).map(|(a, b)| a * b).sum();
            if !dx.is_null() {
                let k = w[ch] * invstd[ch];
                let out: Vec<f64> = if training && count > 0 {
                    let (mg, mgx) = (sum_g / count as f64, sum_gx / count as f64);
                    g.iter().zip(&v).map(|(a, b)| k * (a - mg - b * mgx)).collect()
                } else {
                    g.iter().map(|a| k * a).collect()
                };
                set_channel(dt, dx, sh, ch, &out);
            }
            if !dw_p.is_null() {
                write(param_dt, dw_p, ch, &[sum_gx]);
            }
            if !db_p.is_null() {
                write(param_dt, db_p, ch, &[sum_g]);
            }
        }
    });
    Ok(())
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
        unsafe { group_norm(DType::F64, sh, p(&x), DType::F64, p(&w), p(&b), 1e-5, y.as_mut_ptr() as _, DType::F64, mean.as_mut_ptr() as _, rstd.as_mut_ptr() as _, 2) }.unwrap();
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

    /// Finite-difference check of every gradient of `sum(y * r)` for a fixed `r`.
    #[test]
    fn group_norm_backward_matches_finite_differences() {
        let sh = GroupShape { n: 2, c: 2, s: 3, g: 1 };
        let x: Vec<f64> = (0..12).map(|k| (k as f64 * 0.61).sin()).collect();
        let w = [1.3, -0.7];
        let b = [0.1, 0.2];
        let r: Vec<f64> = (0..12).map(|k| (k as f64 * 1.7).cos()).collect();
        let f = |x: &[f64], w: &[f64]| -> f64 {
            let mut y = vec![0.0; 12];
            let (mut m, mut s) = (vec![0.0; 2], vec![0.0; 2]);
            unsafe { group_norm(DType::F64, sh, p(x), DType::F64, p(w), p(&b), 1e-5, y.as_mut_ptr() as _, DType::F64, m.as_mut_ptr() as _, s.as_mut_ptr() as _, 1) }.unwrap();
            y.iter().zip(&r).map(|(a, b)| a * b).sum()
        };
        let mut y = vec![0.0; 12];
        let (mut m, mut s) = (vec![0.0; 2], vec![0.0; 2]);
        let (mut dx, mut dw, mut db) = (vec![0.0; 12], vec![0.0; 2], vec![0.0; 2]);
        unsafe {
            group_norm(DType::F64, sh, p(&x), DType::F64, p(&w), p(&b), 1e-5, y.as_mut_ptr() as _, DType::F64, m.as_mut_ptr() as _, s.as_mut_ptr() as _, 1).unwrap();
            group_norm_backward(DType::F64, sh, p(&r), p(&x), DType::F64, p(&m), p(&s), DType::F64, p(&w), dx.as_mut_ptr() as _, dw.as_mut_ptr() as _, db.as_mut_ptr() as _, 1).unwrap();
        }
        for k in 0..12 {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[k] += 1e-6;
            xm[k] -= 1e-6;
            let fd = (f(&xp, &w) - f(&xm, &w)) / 2e-6;
            assert!((fd - dx[k]).abs() < 1e-5, "dx[{k}]: {fd} vs {}", dx[k]);
        }
        for k in 0..2 {
            let (mut wp, mut wm) = (w.to_vec(), w.to_vec());
            wp[k] += 1e-6;
            wm[k] -= 1e-6;
            let fd = (f(&x, &wp) - f(&x, &wm)) / 2e-6;
            assert!((fd - dw[k]).abs() < 1e-5, "dw[{k}]: {fd} vs {}", dw[k]);
        }
        let want_db: Vec<f64> = (0..2).map(|c| (0..2).flat_map(|i| (0..3).map(move |j| (i * 2 + c) * 3 + j)).map(|k| r[k]).sum()).collect();
        assert!((db[0] - want_db[0]).abs() < 1e-12 && (db[1] - want_db[1]).abs() < 1e-12);
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
            let prm = BatchParams { weight: p(&w), bias: p(&b), running_mean: rm.as_mut_ptr() as _, running_var: rv.as_mut_ptr() as _ };
            unsafe { batch_norm(DType::F64, sh, p(x), DType::F64, prm, true, 0.1, 1e-5, y.as_mut_ptr() as _, sm.as_mut_ptr() as _, si.as_mut_ptr() as _, 2) }.unwrap();
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
        let prm = BatchParams { weight: p(&w), bias: p(&b), running_mean: std::ptr::null_mut(), running_var: std::ptr::null_mut() };
        unsafe { batch_norm_backward(DType::F64, sh, p(&r), p(&x), DType::F64, prm, p(&sm), p(&si), true, 1e-5, dx.as_mut_ptr() as _, dw.as_mut_ptr() as _, db.as_mut_ptr() as _, 1) }.unwrap();
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
