//! The machine's limits, measured on the kernel thread team: a STREAM-style probe
//! of memory bandwidth and a fused-multiply-add peak probe. `benchmarks/ops.py`
//! prints both in the same run as the operator timings, so that "an elementwise
//! kernel reaches 90% of the bandwidth" or "GEMM reaches 85% of the peak" compares
//! a kernel with what the very same threads can reach on this host at this moment
//! (a shared VM's limits drift from run to run; a figure from a data sheet would
//! not show it).
//!
//! Both probes run one task per thread on the kernel team, as the kernels do. They are plain
//! loops, not tuned kernels: the bandwidth probe uses ordinary stores (no
//! non-temporal ones, which no PyTorch CPU kernel uses either), so it counts the
//! same bytes an `out=` elementwise op moves.

use std::time::Instant;

use crate::engine::iter::{for_each_chunk_mut, for_each_task};

/// Best bandwidth of each STREAM kernel over the timed passes, in bytes per
/// second, counted as STREAM counts them (every array element read or written
/// once: copy and scale move 8 bytes per float32 element, add and triad 12).
#[derive(Clone, Copy, Debug)]
pub struct Bandwidth {
    /// `a[i] = b[i]`
    pub copy: f64,
    /// `a[i] = s * b[i]`
    pub scale: f64,
    /// `a[i] = b[i] + c[i]`
    pub add: f64,
    /// `a[i] = b[i] + s * c[i]`
    pub triad: f64,
}

/// Runs the four STREAM kernels over float32 arrays of `numel` elements, one task
/// per thread of `threads` (as a launch's thread count), `reps` timed passes each after one untimed pass that maps the
/// pages; returns the best pass of each.
pub fn stream_bandwidth(numel: usize, reps: usize, threads: usize) -> Bandwidth {
    let numel = numel.max(1);
    let tasks = threads.max(1);
    let size = numel.div_ceil(tasks).next_multiple_of(16);
    let mut a = vec![0f32; numel];
    let b = vec![1f32; numel];
    let c = vec![2f32; numel];
    let s = 3f32;
    let mut best = [f64::INFINITY; 4];
    for pass in 0..=reps.max(1) {
        for (k, slot) in best.iter_mut().enumerate() {
            let start = Instant::now();
            for_each_chunk_mut(&mut a, size, tasks, |i, out| {
                let lo = i * size;
                let (x, y) = (&b[lo..lo + out.len()], &c[lo..lo + out.len()]);
                match k {
                    0 => out.copy_from_slice(x),
                    1 => out.iter_mut().zip(x).for_each(|(o, &x)| *o = s * x),
                    2 => out.iter_mut().zip(x.iter().zip(y)).for_each(|(o, (&x, &y))| *o = x + y),
                    _ => out.iter_mut().zip(x.iter().zip(y)).for_each(|(o, (&x, &y))| *o = x + s * y),
                }
            });
            let elapsed = start.elapsed().as_secs_f64();
            std::hint::black_box(&mut a);
            if pass > 0 {
                *slot = slot.min(elapsed);
            }
        }
    }
    let bytes = |arrays: usize| (arrays * numel * std::mem::size_of::<f32>()) as f64;
    Bandwidth {
        copy: bytes(2) / best[0],
        scale: bytes(2) / best[1],
        add: bytes(3) / best[2],
        triad: bytes(3) / best[3],
    }
}

/// Peak float32 arithmetic the team reached: floating-point operations per second
/// (an FMA counts as two) and the instruction set the probe used.
#[derive(Clone, Copy, Debug)]
pub struct FmaPeak {
    pub flops: f64,
    pub isa: &'static str,
}

/// Runs `iters` rounds of independent multiply-adds in each of `threads` threads at once
/// (enough independent accumulators to cover the FMA latency on two ports), with
/// the widest vector instructions the CPU has (detected at run time, whatever the
/// build's capability), `reps` times; returns the best.
pub fn fma_peak(iters: usize, reps: usize, threads: usize) -> FmaPeak {
    let tasks = threads.max(1);
    let (kernel, isa) = fma_kernel();
    let mut best = f64::INFINITY;
    for pass in 0..=reps.max(1) {
        let start = Instant::now();
        for_each_task(tasks, |_| {
            std::hint::black_box(kernel(iters));
        });
        let elapsed = start.elapsed().as_secs_f64();
        if pass > 0 {
            best = best.min(elapsed);
        }
    }
    FmaPeak { flops: kernel_flops(isa, iters) * tasks as f64 / best, isa }
}

/// Accumulators times lanes times two operations, per round, for each kernel.
fn kernel_flops(isa: &str, iters: usize) -> f64 {
    let per_round = match isa {
        "avx512f" => FMA_ACC_512 * 16 * 2,
        "avx2+fma" => FMA_ACC_256 * 8 * 2,
        _ => FMA_ACC_SCALAR * 2,
    };
    (per_round * iters) as f64
}

const FMA_ACC_512: usize = 16;
const FMA_ACC_256: usize = 12;
const FMA_ACC_SCALAR: usize = 32;

type FmaKernel = fn(usize) -> f32;

fn fma_kernel() -> (FmaKernel, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return (fma_avx512_checked, "avx512f");
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return (fma_avx2_checked, "avx2+fma");
        }
    }
    (fma_portable, "portable mul+add")
}

/// Whatever the build targets: 32 scalar accumulators the compiler may vectorise.
fn fma_portable(iters: usize) -> f32 {
    let mut acc = [1f32; FMA_ACC_SCALAR];
    let (a, b) = (std::hint::black_box(0.999_999f32), std::hint::black_box(1e-7f32));
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = *r * a + b;
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
fn fma_avx512_checked(iters: usize) -> f32 {
    // SAFETY: chosen by `fma_kernel` only after `is_x86_feature_detected!("avx512f")`.
    unsafe { fma_avx512(iters) }
}

#[cfg(target_arch = "x86_64")]
fn fma_avx2_checked(iters: usize) -> f32 {
    // SAFETY: chosen by `fma_kernel` only after detecting avx2 and fma.
    unsafe { fma_avx2(iters) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_avx512(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(1.0); FMA_ACC_512];
    let a = _mm512_set1_ps(std::hint::black_box(0.999_999));
    let b = _mm512_set1_ps(std::hint::black_box(1e-7));
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = _mm512_fmadd_ps(*r, a, b);
        }
    }
    acc.iter().map(|&r| _mm512_reduce_add_ps(r)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_avx2(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(1.0); FMA_ACC_256];
    let a = _mm256_set1_ps(std::hint::black_box(0.999_999));
    let b = _mm256_set1_ps(std::hint::black_box(1e-7));
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = _mm256_fmadd_ps(*r, a, b);
        }
    }
    let mut lanes = [0f32; 8];
    acc.iter()
        .map(|&r| {
            // SAFETY: `lanes` holds 8 floats, one unaligned 256-bit store.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), r) };
            lanes.iter().sum::<f32>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_positive_and_finite() {
        let bw = stream_bandwidth(1 << 16, 2, 2);
        for v in [bw.copy, bw.scale, bw.add, bw.triad] {
            assert!(v.is_finite() && v > 0.0, "{bw:?}");
        }
    }

    #[test]
    fn fma_peak_counts_every_accumulator() {
        let (kernel, isa) = fma_kernel();
        // 0.999999 * x + 1e-7 from 1.0 stays within (0.99, 1.0]: every accumulator ran.
        let sum = kernel(1000);
        let accs = kernel_flops(isa, 1) / 2.0;
        assert!(sum > 0.99 * accs as f32 && sum <= accs as f32, "{sum} for {accs} accumulators");
        let peak = fma_peak(1000, 1, 2);
        assert!(peak.flops.is_finite() && peak.flops > 0.0, "{peak:?}");
    }
}
