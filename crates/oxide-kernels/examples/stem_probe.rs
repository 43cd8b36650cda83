//! ResNet-18's 7x7 stride-2 stem (8x3x64x64 float32 images to 64 channels, padding
//! 3) through the forward kernel on one thread, median of 200 calls. Its im2col copies
//! 37,632 lines of 32 entries at stride 2 per call, so it shows what the strided
//! line copy costs (`columns.rs`, `gather_strides`). Run it on two trees to compare
//! them, built as the avx512 extension is built:
//!
//! ```sh
//! RUSTFLAGS="-C target-cpu=x86-64-v4 -C target-feature=-prefer-256-bit" \
//!   cargo run --release -p oxide-kernels --example stem_probe
//! ```

use oxide_kernels::dtype::DType;
use oxide_kernels::ops::nn::conv::{convolution, Conv, Spatial};
use std::time::Instant;

fn main() {
    let spatial = Spatial {
        input: &[64, 64],
        output: &[32, 32],
        kernel: &[7, 7],
        stride: &[2, 2],
        padding: &[3, 3],
        dilation: &[1, 1],
    };
    let cv = Conv::new(8, 3, 64, 1, false, spatial).expect("a valid convolution");
    let (xl, wl, yl) = cv.lens();
    let x: Vec<f32> = (0..xl).map(|i| (i % 97) as f32 / 97.0).collect();
    let w: Vec<f32> = (0..wl).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
    let mut y = vec![0f32; yl];
    let mut run = || {
        // SAFETY: x, w and y hold exactly the input, weight and output of `cv`.
        unsafe { convolution(DType::F32, &cv, x.as_ptr().cast(), w.as_ptr().cast(), None, y.as_mut_ptr().cast(), 1) }
            .expect("the forward runs");
    };
    for _ in 0..10 {
        run();
    }
    for round in 0..3 {
        let mut ts: Vec<f64> = (0..200)
            .map(|_| {
                let t = Instant::now();
                run();
                t.elapsed().as_secs_f64()
            })
            .collect();
        ts.sort_by(f64::total_cmp);
        println!("round {round}: stem forward, one thread: {:.3} ms (median of 200)", ts[100] * 1e3);
    }
    println!("checksum {}", y.iter().map(|&v| v as f64).sum::<f64>());
}
