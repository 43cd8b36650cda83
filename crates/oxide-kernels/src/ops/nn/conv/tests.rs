//! Tests of convolution, its gradients, the batch plans and unfold/fold:
//! every case and dtype against a direct (naive) convolution.

use super::*;
use crate::dtype::DType;

/// Spatial parameters of one test case (front-padded later by `Conv::new`).
struct Case {
    batch: i64,
    cin: i64,
    cout: i64,
    groups: i64,
    input: Vec<i64>,
    kernel: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    output_padding: Vec<i64>,
    transposed: bool,
}

/// A case from its counts `(batch, cin, cout, groups)` and spatial lists.
fn case(
    (batch, cin, cout, groups): (i64, i64, i64, i64),
    input: &[i64],
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
) -> Case {
    Case {
        batch,
        cin,
        cout,
        groups,
        input: input.to_vec(),
        kernel: kernel.to_vec(),
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: dilation.to_vec(),
        output_padding: vec![0; input.len()],
        transposed: false,
    }
}

impl Case {
    fn transposed(mut self, output_padding: &[i64]) -> Case {
        self.transposed = true;
        self.output_padding = output_padding.to_vec();
        self
    }
    fn conv(&self) -> Conv {
        let output: Vec<i64> = (0..self.input.len())
            .map(|d| {
                let span = self.dilation[d] * (self.kernel[d] - 1) + 1;
                if self.transposed {
                    (self.input[d] - 1) * self.stride[d] - 2 * self.padding[d] + span + self.output_padding[d]
                } else {
                    (self.input[d] + 2 * self.padding[d] - span) / self.stride[d] + 1
                }
            })
            .collect();
        let s = Spatial {
            input: &self.input,
            output: &output,
            kernel: &self.kernel,
            stride: &self.stride,
            padding: &self.padding,
            dilation: &self.dilation,
        };
        Conv::new(self.batch, self.cin, self.cout, self.groups, self.transposed, s).unwrap()
    }
}

/// Calls `f(image_index, grid_index, weight_index)` for every product of a
/// direct convolution: conv output (grid) += weight * input (image), or for a
/// transposed one output (image) += weight * input (grid). The weight is
/// `(grid channels, image channels / groups, *kernel)` in both cases.
fn direct(cv: &Conv, mut f: impl FnMut(usize, usize, usize)) {
    let w = cv.window();
    let (ic, gc) = cv.group_channels();
    let (image_ch, grid_ch) = (ic * cv.groups, gc * cv.groups);
    for n in 0..cv.batch {
        for c in 0..grid_ch {
            let g = c / gc;
            for ci in 0..ic {
                for o in 0..w.grid_len() {
                    let op = [o / (w.grid[1] * w.grid[2]), o / w.grid[2] % w.grid[1], o % w.grid[2]];
                    for t in 0..w.taps() {
                        let tap = w.tap(t);
                        let pos: Vec<isize> =
                            (0..3).map(|d| (op[d] * w.stride[d]) as isize + w.offset(d, tap[d])).collect();
                        if (0..3).any(|d| pos[d] < 0 || pos[d] >= w.image[d] as isize) {
                            continue;
                        }
                        let ip = (pos[0] as usize * w.image[1] + pos[1] as usize) * w.image[2] + pos[2] as usize;
                        let ii = (n * image_ch + g * ic + ci) * w.image_len() + ip;
                        let gi = (n * grid_ch + c) * w.grid_len() + o;
                        f(ii, gi, (c * ic + ci) * w.taps() + t);
                    }
                }
            }
        }
    }
}

fn values(n: usize, seed: u64) -> Vec<f64> {
    // Small integers and halves: exact in every dtype's products and sums here.
    (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) >> 3) % 9) as f64 / 2.0 - 2.0).collect()
}

fn as_bytes<T: Element>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

/// Forward and all three gradients of `c` in dtype `T` against the direct loops.
fn check<T: Element>(c: &Case, threads: usize, tol: f64) {
    let cv = c.conv();
    let (xl, wl, yl) = cv.lens();
    // The reference sees the values as `T` holds them (integers truncate the halves).
    let held = |v: Vec<f64>| -> Vec<f64> { v.into_iter().map(|x| T::from_f64(x).to_f64()).collect() };
    let (x, w, b, gy) =
        (held(values(xl, 1)), held(values(wl, 2)), held(values(cv.out_channels, 3)), held(values(yl, 4)));
    // Reference in f64.
    let mut y = vec![0.0; yl];
    let (mut gx, mut gw) = (vec![0.0; xl], vec![0.0; wl]);
    direct(&cv, |ii, gi, wi| {
        if cv.transposed {
            y[ii] += w[wi] * x[gi];
            gx[gi] += w[wi] * gy[ii];
            gw[wi] += gy[ii] * x[gi];
        } else {
            y[gi] += w[wi] * x[ii];
            gx[ii] += w[wi] * gy[gi];
            gw[wi] += gy[gi] * x[ii];
        }
    });
    let plane = yl / (cv.batch * cv.out_channels).max(1);
    for (k, v) in y.iter_mut().enumerate() {
        *v += b[k / plane % cv.out_channels];
    }
    let gb: Vec<f64> = (0..cv.out_channels)
        .map(|co| {
            (0..cv.batch)
                .flat_map(|n| (0..plane).map(move |p| (n, p)))
                .map(|(n, p)| gy[(n * cv.out_channels + co) * plane + p])
                .sum()
        })
        .collect();

    let (xt, wt, bt, gyt) = (as_bytes::<T>(&x), as_bytes::<T>(&w), as_bytes::<T>(&b), as_bytes::<T>(&gy));
    let mut yt = as_bytes::<T>(&vec![f64::NAN; yl]);
    let (mut gxt, mut gwt, mut gbt) = (
        as_bytes::<T>(&vec![f64::NAN; xl]),
        as_bytes::<T>(&vec![f64::NAN; wl]),
        as_bytes::<T>(&vec![f64::NAN; cv.out_channels]),
    );
    let p = |v: &Vec<T>| v.as_ptr() as *const u8;
    // SAFETY: the pointers address live local buffers sized for the call.
    unsafe {
        convolution(T::DTYPE, &cv, p(&xt), p(&wt), Some(p(&bt)), yt.as_mut_ptr() as *mut u8, threads).unwrap();
        let grads = Grads {
            input: Some(gxt.as_mut_ptr() as *mut u8),
            weight: Some(gwt.as_mut_ptr() as *mut u8),
            bias: Some(gbt.as_mut_ptr() as *mut u8),
        };
        convolution_backward(T::DTYPE, &cv, p(&gyt), p(&xt), p(&wt), grads, threads).unwrap();
    }
    for (name, got, want) in
        [("output", &yt, &y), ("grad_input", &gxt, &gx), ("grad_weight", &gwt, &gw), ("grad_bias", &gbt, &gb)]
    {
        for (k, (g, w)) in got.iter().zip(want.iter()).enumerate() {
            let g = g.to_f64();
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "{name}[{k}] = {g}, want {w} ({:?} {cv:?})", T::DTYPE);
        }
    }
}

fn cases() -> Vec<Case> {
    vec![
        case((2, 3, 4, 1), &[7], &[3], &[1], &[1], &[1]),
        case((2, 4, 6, 2), &[9], &[2], &[2], &[0], &[2]),
        case((3, 2, 3, 1), &[5, 6], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        case((2, 4, 4, 4), &[6, 5], &[3, 2], &[2, 1], &[1, 0], &[1, 2]),
        case((2, 6, 4, 2), &[4, 5, 6], &[2, 3, 2], &[1, 2, 1], &[1, 0, 1], &[2, 1, 1]),
        case((3, 5, 3, 1), &[4, 4], &[1, 1], &[1, 1], &[0, 0], &[1, 1]),
        case((1, 2, 2, 1), &[3, 3], &[1, 1], &[2, 2], &[1, 1], &[1, 1]),
        case((2, 3, 4, 1), &[2, 3], &[3, 3], &[1, 1], &[2, 2], &[1, 1]),
        case((2, 3, 4, 1), &[5], &[3], &[2], &[1], &[1]).transposed(&[1]),
        case((2, 4, 6, 2), &[4, 3], &[3, 2], &[2, 3], &[1, 0], &[1, 2]).transposed(&[1, 2]),
        case((2, 4, 4, 4), &[3, 3], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).transposed(&[0, 0]),
        case((2, 2, 4, 2), &[2, 3, 2], &[2, 2, 3], &[2, 1, 1], &[0, 1, 1], &[1, 1, 2]).transposed(&[1, 0, 0]),
        case((3, 3, 2, 1), &[4, 4], &[1, 1], &[1, 1], &[0, 0], &[1, 1]).transposed(&[0, 0]),
        case((2, 3, 2, 1), &[3], &[1], &[1], &[0], &[3]).transposed(&[2]),
        // "Same"-size windows (Window::flat): dilated, wider than the image, strided outer dimension.
        case((2, 3, 2, 1), &[6, 7], &[3, 3], &[1, 1], &[2, 2], &[2, 2]),
        case((2, 2, 2, 1), &[3, 3], &[5, 5], &[1, 1], &[2, 2], &[1, 1]),
        case((2, 2, 3, 1), &[5, 4, 5], &[3, 3, 3], &[2, 1, 1], &[1, 1, 1], &[1, 1, 1]),
        case((2, 2, 3, 1), &[3, 4, 5], &[3, 3, 3], &[2, 1, 1], &[1, 1, 1], &[1, 1, 1]).transposed(&[0, 0, 0]),
        // Strided lines of MIN_SHUFFLED entries or more: stride 3 with padding; stride 2
        // whose last entry reads the image's last column (a whole stride would pass it).
        case((2, 3, 4, 1), &[5, 60], &[3, 3], &[1, 3], &[1, 1], &[1, 1]),
        case((2, 3, 4, 1), &[4, 33], &[1, 1], &[1, 2], &[0, 0], &[1, 1]),
    ]
}

#[test]
fn every_case_and_dtype_matches_direct_convolution() {
    for c in cases() {
        for threads in [1, 2] {
            check::<f64>(&c, threads, 1e-12);
            check::<f32>(&c, threads, 1e-5);
            check::<half::f16>(&c, threads, 2e-3);
            check::<half::bf16>(&c, threads, 1e-2);
            check::<i64>(&c, threads, 0.0);
            check::<i32>(&c, threads, 0.0);
        }
    }
}

#[test]
fn large_cases_take_the_parallel_paths() {
    // Large enough to split im2col/col2im over channels; and many small samples to split the batch.
    check::<f32>(&case((2, 16, 32, 1), &[24, 24], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2, 1e-5);
    check::<f32>(&case((2, 32, 16, 1), &[12, 12], &[3, 3], &[2, 2], &[1, 1], &[1, 1]).transposed(&[1, 1]), 2, 1e-5);
    check::<f64>(&case((9, 8, 8, 8), &[10, 10], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2, 1e-12);
    check::<f64>(&case((7, 4, 4, 2), &[6], &[3], &[1], &[1], &[1]).transposed(&[0]), 2, 1e-12);
    // Chunks of samples sharing one GEMM (`Plan`): 32x32 outputs give chunks of two,
    // so three samples leave a last chunk of one; 48x48 outputs give one sample per GEMM.
    for threads in [1, 2] {
        check::<f32>(&case((3, 2, 3, 1), &[32, 32], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), threads, 1e-5);
        // 8x8 maps, 144 column rows: the forward's cache-sized chunks of four samples
        // (FORWARD_CACHE_COLUMNS), nine samples leaving a last chunk of one.
        check::<f32>(&case((9, 16, 8, 1), &[8, 8], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), threads, 1e-4);
        check::<f32>(
            &case((3, 4, 2, 2), &[16, 16], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).transposed(&[1, 1]),
            threads,
            1e-5,
        );
        check::<f32>(&case((2, 1, 2, 1), &[48, 48], &[1, 1], &[1, 1], &[0, 0], &[1, 1]), threads, 1e-5);
        check::<f32>(
            &case((3, 2, 2, 1), &[48, 48], &[1, 1], &[1, 1], &[0, 0], &[1, 1]).transposed(&[0, 0]),
            threads,
            1e-5,
        );
    }
}

#[test]
fn samples_too_large_for_the_cache_go_in_column_blocks() {
    // Each case has over BLOCK_ELEMENTS column elements per sample, so the forward
    // and input gradient (and, in 2-d, in blocks of MIN_DEPTH_COLUMNS, the weight
    // gradient) take it in blocks whose edges fall inside
    // an output row (2-d: 759 and 779 positions for rows of 37 and 38) or, in 3-d,
    // inside a slab (390 positions for slabs of 156).
    let flat = case((2, 16, 8, 1), &[41, 37], &[3, 3], &[1, 1], &[1, 1], &[1, 1]);
    let strided = case((1, 16, 4, 1), &[41, 75], &[3, 3], &[1, 2], &[1, 1], &[1, 1]);
    let volume = case((1, 8, 4, 1), &[5, 12, 13], &[3, 3, 3], &[1, 1, 1], &[1, 1, 1], &[1, 1, 1]);
    for c in [&flat, &strided, &volume] {
        let w = c.conv().window();
        let bc = block_columns(c.cin as usize * w.taps(), w.grid_len()).expect("blocked");
        assert!(
            bc < w.grid_len()
                && !bc.is_multiple_of(w.grid[1] * w.grid[2])
                && (w.grid[0] > 1 || !bc.is_multiple_of(w.grid[2])),
            "{bc}"
        );
        for threads in [1, 2] {
            check::<f32>(c, threads, 1e-4);
            check::<f64>(c, threads, 1e-12);
        }
    }
    check::<half::bf16>(&flat, 2, 1e-2);
}

#[test]
fn plans_batch_small_maps_and_cap_the_column_buffer() {
    let plan = |c: Case, threads| Plan::new(&c.conv(), threads, false);
    // 2x2 outputs: every sample of the batch in one GEMM.
    let p = plan(case((8, 512, 512, 1), &[2, 2], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2);
    assert_eq!((p.chunk, p.tasks), (8, 1));
    // Large maps: one sample per GEMM.
    assert_eq!(plan(case((4, 8, 8, 1), &[64, 64], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2).chunk, 1);
    // A 4608 x 2048 column matrix per chunk would pass the budget: fewer samples share it.
    let p = plan(case((64, 512, 512, 1), &[4, 4], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2);
    assert!(p.chunk * 4608 * 16 <= COLUMNS_BUDGET && p.chunk >= 1, "{p:?}");
    // Tiny products: samples split over the threads.
    let p = plan(case((8, 1, 4, 1), &[8, 8], &[3, 3], &[1, 1], &[1, 1], &[1, 1]), 2);
    assert_eq!((p.tasks, p.per_task, p.inner), (2, 4, 1));
    // The forward of the digits CNN's second conv: 144 x 64 column elements per
    // sample fit FORWARD_CACHE_COLUMNS three times; 256 columns take four samples.
    let digits = case((64, 16, 32, 1), &[8, 8], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).conv();
    assert_eq!(Plan::new(&digits, 2, false).chunk, 32);
    assert_eq!(Plan::new(&digits, 2, true).chunk, 4);
    // A sample whose columns pass BLOCK_ELEMENTS: one sample per chunk both ways,
    // taken in four blocks of 256 grid positions (576 column rows).
    let big = case((8, 64, 64, 1), &[32, 32], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).conv();
    assert_eq!((Plan::new(&big, 2, true).chunk, Plan::new(&big, 2, false).chunk), (1, 1));
    assert_eq!(block_columns(576, 1024), Some(256));
    // Too few grid positions to cut (ResNet's late stages): batched as before.
    assert_eq!(block_columns(4608, 16), None);
    assert_eq!(
        Plan::new(&case((8, 512, 512, 1), &[4, 4], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).conv(), 2, true).chunk,
        8
    );
}

#[test]
fn only_requested_gradients_are_written() {
    let cv = case((2, 2, 2, 1), &[4], &[3], &[1], &[1], &[1]).conv();
    let (xl, wl, yl) = cv.lens();
    let (gy, w) = (vec![1.0f32; yl], vec![1.0f32; wl]);
    let mut gx = vec![f32::NAN; xl];
    let grads = Grads { input: Some(gx.as_mut_ptr() as *mut u8), weight: None, bias: None };
    // The input is not read for the input gradient: a null pointer is fine.
    // SAFETY: the pointers address live local buffers sized for the call.
    unsafe {
        convolution_backward(
            DType::F32,
            &cv,
            gy.as_ptr() as *const u8,
            std::ptr::null(),
            w.as_ptr() as *const u8,
            grads,
            1,
        )
        .unwrap()
    };
    assert_eq!(&gx[..4], &[4.0, 6.0, 6.0, 4.0]);
}

#[test]
fn bad_descriptions_and_dtypes_are_errors() {
    let s = |input: &'static [i64], output: &'static [i64]| Spatial {
        input,
        output,
        kernel: &[3],
        stride: &[1],
        padding: &[0],
        dilation: &[1],
    };
    assert!(Conv::new(1, 4, 4, 3, false, s(&[5], &[3])).is_err()); // groups divide neither
    assert!(Conv::new(1, 4, 4, 1, false, s(&[5], &[4])).is_err()); // wrong output extent
    assert!(Conv::new(1, 4, 4, 1, false, s(&[2], &[0])).is_err()); // kernel larger than the input
    assert!(Conv::new(1, 4, 4, 1, true, s(&[4], &[5])).is_err()); // transposed output too small
    assert!(Conv::new(1, 4, 4, 0, false, s(&[5], &[3])).is_err());
    let cv = Conv::new(1, 1, 1, 1, false, s(&[5], &[3])).unwrap();
    let x = [false; 5];
    let mut y = [false; 3];
    // SAFETY: the pointers address live local buffers sized for the call.
    let err = unsafe {
        convolution(
            DType::Bool,
            &cv,
            x.as_ptr() as *const u8,
            x.as_ptr() as *const u8,
            None,
            y.as_mut_ptr() as *mut u8,
            1,
        )
    };
    assert!(matches!(err, Err(Error::UnsupportedDtype { op: "convolution", dtype: DType::Bool })));
}

#[test]
fn empty_batch_and_channels() {
    let c = Case { batch: 0, ..case((1, 2, 2, 1), &[4], &[3], &[1], &[1], &[1]) };
    check::<f32>(&c, 2, 0.0);
    check::<f32>(&case((2, 2, 0, 1), &[4], &[3], &[1], &[1], &[1]), 2, 0.0);
}

#[test]
fn unfold_matches_direct_indexing_and_fold_is_its_adjoint() {
    for (batch, channels, image, kernel, stride, padding, dilation) in [
        (2usize, 3usize, [5usize, 6usize], [2usize, 3usize], [1usize, 2usize], [1usize, 0usize], [1usize, 1usize]),
        (1, 2, [7, 4], [3, 2], [2, 1], [2, 1], [2, 1]),
        (5, 1, [3, 3], [1, 1], [1, 1], [0, 0], [1, 1]),
        (2, 2, [4, 5], [3, 3], [1, 1], [1, 1], [1, 1]),
    ] {
        let u = Unfold { batch, channels, image, kernel, stride, padding, dilation };
        let w = u.window("im2col").unwrap();
        let (il, cl) = u.lens(&w);
        let (gh, gw) = (w.grid[1], w.grid[2]);
        let x = values(il, 1);
        for threads in [1, 4] {
            let mut cols = vec![f64::NAN; cl];
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { unfold(DType::F64, &u, x.as_ptr() as *const u8, cols.as_mut_ptr() as *mut u8, threads) }.unwrap();
            for n in 0..batch {
                for c in 0..channels {
                    for (t, (ki, kj)) in (0..kernel[0]).flat_map(|a| (0..kernel[1]).map(move |b| (a, b))).enumerate() {
                        for oh in 0..gh {
                            for ow in 0..gw {
                                let ih = (oh * stride[0] + ki * dilation[0]) as isize - padding[0] as isize;
                                let iw = (ow * stride[1] + kj * dilation[1]) as isize - padding[1] as isize;
                                let inside = ih >= 0 && iw >= 0 && (ih as usize) < image[0] && (iw as usize) < image[1];
                                let want = if inside {
                                    x[((n * channels + c) * image[0] + ih as usize) * image[1] + iw as usize]
                                } else {
                                    0.0
                                };
                                let row = c * kernel[0] * kernel[1] + t;
                                assert_eq!(
                                    cols[((n * channels * kernel[0] * kernel[1]) + row) * gh * gw + oh * gw + ow],
                                    want
                                );
                            }
                        }
                    }
                }
            }
            // <fold(y), x> == <y, unfold(x)>.
            let y = values(cl, 2);
            let mut img = vec![f64::NAN; il];
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe { fold(DType::F64, &u, y.as_ptr() as *const u8, img.as_mut_ptr() as *mut u8, threads) }.unwrap();
            let lhs: f64 = img.iter().zip(&x).map(|(a, b)| a * b).sum();
            let rhs: f64 = y.iter().zip(&cols).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-9 * (1.0 + lhs.abs()));
        }
    }
    let u = Unfold {
        batch: 1,
        channels: 1,
        image: [2, 2],
        kernel: [3, 3],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
    };
    // SAFETY: the pointers address live local buffers sized for the call.
    let r = unsafe { unfold(DType::F32, &u, std::ptr::null(), std::ptr::null_mut(), 1) };
    assert!(matches!(r, Err(Error::InvalidLayout { .. })));
    let u = Unfold { image: [4, 4], ..u };
    // SAFETY: the pointers address live local buffers sized for the call.
    let r = unsafe { fold(DType::Bool, &u, std::ptr::null(), std::ptr::null_mut(), 1) };
    assert!(matches!(r, Err(Error::UnsupportedDtype { .. })));
}

#[test]
fn mec_lowering_matches_direct_convolution() {
    // Each case takes the MEC lowering (`mec`) for its forward; those with unit
    // strides, `padding <= dilation * (kernel - 1)` and 32 output channels per group
    // also for the input gradient (the flipped convolution). The weight gradient is
    // im2col's.
    let unit = [
        // ResNet's 3x3 "same" layer, a non-square map.
        case((3, 32, 32, 1), &[12, 11], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        // Two groups of 32 channels.
        case((2, 64, 64, 2), &[12, 12], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        // Dilated, unequal paddings (the flipped convolution pads 3 and 0).
        case((1, 32, 33, 1), &[13, 11], &[3, 3], &[1, 1], &[1, 2], &[2, 1]),
        // A 5x5 window: the halo is four rows.
        case((2, 32, 32, 1), &[12, 12], &[5, 5], &[1, 1], &[2, 2], &[1, 1]),
    ];
    // Input gradient through im2col: too few output channels (also: bands of three
    // output rows, 3, 3 and 2, for 273-wide rows; one-row bands for 700-wide ones); a
    // width stride of 2 with a 3x2 dilated window.
    let others = [
        case((2, 32, 8, 1), &[12, 11], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        case((1, 32, 2, 1), &[8, 273], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        case((1, 32, 1, 1), &[3, 700], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        case((2, 32, 32, 1), &[16, 17], &[3, 2], &[1, 2], &[2, 1], &[2, 3]),
    ];
    let band = |c: &Case| mec::Mec::new(&c.conv()).map(|m| m.band());
    assert_eq!((band(&others[1]), band(&others[2]), band(&unit[0])), (Some(3), Some(1), Some(12)));
    for (k, c) in unit.iter().chain(&others).enumerate() {
        let cv = c.conv();
        assert!(mec::Mec::new(&cv).is_some(), "{cv:?} takes the lowering");
        let flipped = mec::Mec::flipped(&cv).as_ref().and_then(mec::Mec::new);
        assert_eq!(flipped.is_some(), k < unit.len(), "{cv:?}");
        for threads in [1, 2] {
            check::<f64>(c, threads, 1e-12);
            check::<f32>(c, threads, 1e-5);
        }
    }
    for c in &unit[..2] {
        for threads in [1, 2] {
            check::<half::f16>(c, threads, 2e-3);
            check::<half::bf16>(c, threads, 1e-2);
            check::<i32>(c, threads, 0.0);
        }
    }
    // Too few channels or positions, a strided height, a transposed convolution: im2col.
    for c in [
        case((2, 16, 8, 1), &[16, 16], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        case((2, 32, 8, 1), &[8, 8], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
        case((2, 32, 8, 1), &[16, 16], &[3, 3], &[2, 1], &[1, 1], &[1, 1]),
        case((2, 32, 8, 1), &[16, 16], &[3, 3], &[1, 1], &[1, 1], &[1, 1]).transposed(&[0, 0]),
    ] {
        assert!(mec::Mec::new(&c.conv()).is_none(), "{:?}", c.conv());
    }
}
