//! In-place elementwise cost, one thread: `a += alpha * b` (float32) through
//! `map` (the aliased block staged in a copy), through `map_in_place` with
//! `in_place_chunks`, and as a plain slice loop (the floor), at sizes from L2 to
//! beyond the last-level cache. The figures in `engine::iter::in_place_chunks`'s
//! documentation come from this probe; build it as the avx512 extension is built:
//!
//! ```sh
//! RUSTFLAGS="-C target-cpu=x86-64-v4 -C target-feature=-prefer-256-bit" \
//!   cargo run --release -p oxide-kernels --example alias_probe
//! ```

use oxide_kernels::dtype::DType;
use oxide_kernels::engine::iter::{in_place_chunks, map, map_in_place, Operand, TensorIter};
use std::time::Instant;

/// Median seconds of `reps` calls of `f` after one warm-up call.
fn time(label: &str, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut ts: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    let m = ts[reps / 2];
    println!("  {label:28} {:9.1} us", m * 1e6);
    m
}

fn main() {
    for n in [65536usize, 589824, 2359296, 10_000_000] {
        let mut a = vec![1.0f32; n];
        let mut b = vec![1.0f32; n];
        let alpha = -1e-3f32;
        let (ap, bp) = (a.as_mut_ptr() as *mut u8, b.as_mut_ptr() as *mut u8);
        let shape = [n as i64];
        let iter = || {
            let operand = |ptr| (Operand { ptr, dtype: DType::F32 }, &[4i64][..]);
            TensorIter::new("probe", &shape, vec![operand(ap), operand(ap), operand(bp)], 1, 1).unwrap()
        };
        let reps = if n > 3_000_000 { 21 } else { 201 };
        println!("n = {n}");
        let staged = time("map (staged copy)", reps, || {
            // SAFETY: `a` and `b` hold n float32 each; the output is exactly input 0.
            unsafe {
                map::<f32, f32, 2>(&iter(), |o, [x, y], len| {
                    for i in 0..len {
                        *o.add(i) = *x.add(i) + alpha * *y.add(i);
                    }
                })
            }
            .unwrap();
        });
        let chunked = time("map_in_place (chunks)", reps, || {
            // SAFETY: as above.
            unsafe {
                map_in_place::<f32, f32, 2>(&iter(), true, |o, ins, len, aliased| {
                    assert!(aliased, "the probe's output is its first input");
                    in_place_chunks(o, ins, len, |x: [f32; 2]| x[0] + alpha * x[1]);
                })
            }
            .unwrap();
        });
        let slice = time("slice loop", reps, || {
            a.iter_mut().zip(&b).for_each(|(x, &y)| *x += alpha * y);
            std::hint::black_box(&mut a);
        });
        println!("  map_in_place / map {:.2}, slice loop / map {:.2}", chunked / staged, slice / staged);
    }
}
