//! Neural-network kernels (`csrc/aten/nn/`, `oxide_kernels::ops::nn`): softmax, NLL, norms,
//! pooling, convolution and unfold, RNN cells, embedding bags, grid sampling, attention.

use super::*;

/// Softmax (`log` = 0) or log-softmax (`log` != 0) of the contiguous
/// `[outer, dim, inner]` tensor `input` (dtype `in_dtype`) along its middle
/// dimension into `out` (dtype `out_dtype`: the same, or float32 for a half input).
///
/// # Safety
/// Both hold `outer * dim * inner` elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_softmax(device: i32, stream: i64, in_dtype: i32, input: *const c_void, out_dtype: i32, out: *mut c_void, outer: usize, dim: usize, inner: usize, log: i32, threads: i32) -> i32 {
    ffi(|| {
        let (idt, odt) = (dtype(in_dtype)?, dtype(out_dtype)?);
        launch_raw(device, stream, outer * dim * inner, &[input, out as *const c_void], || unsafe {
            oxide_kernels::ops::nn::softmax::softmax(idt, input as *const u8, odt, out as *mut u8, outer, dim, inner, log != 0, threads.max(1) as usize)
        })
    })
}

/// Backward of [`oxide_softmax`]: `grad` and `output` (dtype `dtype`) to
/// `grad_input` (dtype `gin_dtype`), all contiguous `[outer, dim, inner]`.
///
/// # Safety
/// All three hold `outer * dim * inner` elements of live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_softmax_backward(device: i32, stream: i64, dtype_code: i32, grad: *const c_void, output: *const c_void, gin_dtype: i32, grad_input: *mut c_void, outer: usize, dim: usize, inner: usize, log: i32, threads: i32) -> i32 {
    ffi(|| {
        let (dt, gdt) = (dtype(dtype_code)?, dtype(gin_dtype)?);
        launch_raw(device, stream, outer * dim * inner, &[grad, output, grad_input as *const c_void], || unsafe {
            oxide_kernels::ops::nn::softmax::softmax_backward(dt, grad as *const u8, output as *const u8, gdt, grad_input as *mut u8, outer, dim, inner, log != 0, threads.max(1) as usize)
        })
    })
}

/// `nll_loss` / `nll_loss2d` forward over log-probabilities `[n, c, s]` and
/// int64 targets `[n, s]` (contiguous); `weight` (c elements) may be null.
/// `reduction` is PyTorch's code (0 none, 1 mean, 2 sum).
///
/// # Safety
/// Pointers address the contiguous tensors described; `out` holds n*s
/// elements for reduction 0, else one; `total_weight` one.
#[no_mangle]
pub unsafe extern "C" fn oxide_nll_loss(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, reduction: i64, ignore_index: i64, input: *const c_void, target: *const i64, weight: *const c_void, out: *mut c_void, total_weight: *mut c_void) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let sh = oxide_kernels::ops::nn::nll::NllShape { n, c, s, ignore_index, reduction: oxide_kernels::ops::nn::nll::Reduction::from_code(reduction)? };
        launch_raw(device, stream, n * c * s, &[input], || unsafe {
            oxide_kernels::ops::nn::nll::nll_loss(dt, sh, input as *const u8, target, weight as *const u8, out as *mut u8, total_weight as *mut u8)
        })
    })
}

/// Backward of [`oxide_nll_loss`] into the zero-filled `grad_input` (`[n, c, s]`).
///
/// # Safety
/// As [`oxide_nll_loss`]; `grad_output` holds n*s elements for reduction 0, else one.
#[no_mangle]
pub unsafe extern "C" fn oxide_nll_loss_backward(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, reduction: i64, ignore_index: i64, grad_output: *const c_void, target: *const i64, weight: *const c_void, total_weight: *const c_void, grad_input: *mut c_void) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let sh = oxide_kernels::ops::nn::nll::NllShape { n, c, s, ignore_index, reduction: oxide_kernels::ops::nn::nll::Reduction::from_code(reduction)? };
        launch_raw(device, stream, n * c * s, &[grad_input as *const c_void], || unsafe {
            oxide_kernels::ops::nn::nll::nll_loss_backward(dt, sh, grad_output as *const u8, target, weight as *const u8, total_weight as *const u8, grad_input as *mut u8)
        })
    })
}

/// Group norm forward (layer norm is `g = 1, s = 1`): `x`, `y` contiguous
/// `[n, c, s]` of `dtype_code`; `weight`/`bias` `[c]` of `param_dtype` (may
/// be null); `mean`/`rstd` `[n, g]` of `stat_dtype`.
///
/// # Safety
/// Pointers address live device tensors of those shapes.
#[no_mangle]
pub unsafe extern "C" fn oxide_group_norm(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, g: usize, x: *const c_void, param_dtype: i32, weight: *const c_void, bias: *const c_void, eps: f64, y: *mut c_void, stat_dtype: i32, mean: *mut c_void, rstd: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt, sdt) = (dtype(dtype_code)?, dtype(param_dtype)?, dtype(stat_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::GroupShape { n, c, s, g };
        launch_raw(device, stream, n * c * s, &[x, y as *const c_void], || unsafe {
            oxide_kernels::ops::nn::norm::group_norm(dt, sh, x as _, pdt, weight as _, bias as _, eps, y as _, sdt, mean as _, rstd as _, threads.max(1) as usize)
        })
    })
}

/// Group norm backward; `dx`, `dweight`, `dbias` may each be null (not computed).
///
/// # Safety
/// As [`oxide_group_norm`]; `dy`, `dx` are `[n, c, s]`, `dweight`/`dbias` `[c]`.
#[no_mangle]
pub unsafe extern "C" fn oxide_group_norm_backward(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, g: usize, dy: *const c_void, x: *const c_void, stat_dtype: i32, mean: *const c_void, rstd: *const c_void, param_dtype: i32, weight: *const c_void, dx: *mut c_void, dweight: *mut c_void, dbias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt, sdt) = (dtype(dtype_code)?, dtype(param_dtype)?, dtype(stat_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::GroupShape { n, c, s, g };
        launch_raw(device, stream, n * c * s, &[dy, x], || unsafe {
            oxide_kernels::ops::nn::norm::group_norm_backward(dt, sh, dy as _, x as _, sdt, mean as _, rstd as _, pdt, weight as _, dx as _, dweight as _, dbias as _, threads.max(1) as usize)
        })
    })
}

/// Batch norm forward over `x` `[n, c, s]` (contiguous, `dtype_code`);
/// per-channel tensors `[c]` of `param_dtype`, each possibly null. Training
/// writes `save_mean`/`save_invstd` and updates the running statistics.
///
/// # Safety
/// Pointers address live device tensors of those shapes.
#[no_mangle]
pub unsafe extern "C" fn oxide_batch_norm(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, x: *const c_void, param_dtype: i32, weight: *const c_void, bias: *const c_void, running_mean: *mut c_void, running_var: *mut c_void, training: i32, momentum: f64, eps: f64, y: *mut c_void, save_mean: *mut c_void, save_invstd: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt) = (dtype(dtype_code)?, dtype(param_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::BatchShape { n, c, s };
        let p = oxide_kernels::ops::nn::norm::BatchParams { weight: weight as _, bias: bias as _, running_mean: running_mean as _, running_var: running_var as _ };
        launch_raw(device, stream, n * c * s, &[x, y as *const c_void], || unsafe {
            oxide_kernels::ops::nn::norm::batch_norm(dt, sh, x as _, pdt, p, training != 0, momentum, eps, y as _, save_mean as _, save_invstd as _, threads.max(1) as usize)
        })
    })
}

/// Batch norm backward; `dx`, `dweight`, `dbias` may each be null (not computed).
///
/// # Safety
/// As [`oxide_batch_norm`]; `dy`, `dx` are `[n, c, s]`.
#[no_mangle]
pub unsafe extern "C" fn oxide_batch_norm_backward(device: i32, stream: i64, dtype_code: i32, n: usize, c: usize, s: usize, dy: *const c_void, x: *const c_void, param_dtype: i32, weight: *const c_void, running_mean: *const c_void, running_var: *const c_void, save_mean: *const c_void, save_invstd: *const c_void, training: i32, eps: f64, dx: *mut c_void, dweight: *mut c_void, dbias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let (dt, pdt) = (dtype(dtype_code)?, dtype(param_dtype)?);
        let sh = oxide_kernels::ops::nn::norm::BatchShape { n, c, s };
        let p = oxide_kernels::ops::nn::norm::BatchParams { weight: weight as _, bias: std::ptr::null(), running_mean: running_mean as _, running_var: running_var as _ };
        launch_raw(device, stream, n * c * s, &[dy, x], || unsafe {
            oxide_kernels::ops::nn::norm::batch_norm_backward(dt, sh, dy as _, x as _, pdt, p, save_mean as _, save_invstd as _, training != 0, eps, dx as _, dweight as _, dbias as _, threads.max(1) as usize)
        })
    })
}

/// The windows of one pooling call: `planes` contiguous (depth, height,
/// width) volumes; per axis (index 0 depth, 1 height, 2 width) the input and
/// output extents and, unless `adaptive` is nonzero, PyTorch's kernel size,
/// stride, padding and dilation. 2-d pooling passes depth 1 with a kernel,
/// stride and dilation of 1 and no padding.
#[repr(C)]
pub struct OxidePoolGeometry {
    pub planes: i64,
    pub input: [i64; 3],
    pub output: [i64; 3],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
    pub dilation: [i64; 3],
    pub adaptive: i32,
}

/// Max pooling forward (`oxide_kernels::ops::nn::pool::max_pool`): the maxima of the
/// windows of `input` (`planes` contiguous volumes of `dtype_code`) into
/// `output` and their flat in-plane offsets into `indices` (both contiguous).
///
/// # Safety
/// `geometry` is valid; `input` holds planes x input volume elements,
/// `output` and `indices` planes x output volume, all live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_max_pool(device: i32, stream: i64, dtype_code: i32, geometry: *const OxidePoolGeometry, input: *const c_void, output: *mut c_void, indices: *mut i64, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let g = unsafe { &*geometry };
        let (dt, (planes, axes)) = (dtype(dtype_code)?, pool_axes(g)?);
        launch_raw(device, stream, planes * plane(&g.output), &[input, output as *const c_void, indices as *const c_void], || unsafe {
            oxide_kernels::ops::nn::pool::max_pool(dt, planes, &axes, input as *const u8, output as *mut u8, indices, threads.max(1) as usize)
        })
    })
}

/// Max pooling backward (`oxide_kernels::ops::nn::pool::max_pool_backward`): zeroes
/// `grad_input` (`planes` x `in_plane`, contiguous) and adds each
/// `grad_output` element (`planes` x `out_plane`) at its `indices` offset.
///
/// # Safety
/// Buffers hold the stated element counts of `dtype_code` (indices: int64) in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_max_pool_backward(device: i32, stream: i64, dtype_code: i32, planes: usize, in_plane: usize, out_plane: usize, grad_output: *const c_void, indices: *const i64, grad_input: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = [grad_output, indices as *const c_void];
        let operands: &[*const c_void] = if planes * out_plane > 0 { &ops } else { &[] };
        launch_raw(device, stream, planes * in_plane, &[&[grad_input as *const c_void], operands].concat(), || unsafe {
            oxide_kernels::ops::nn::pool::max_pool_backward(dt, planes, in_plane, out_plane, grad_output as *const u8, indices, grad_input as *mut u8, threads.max(1) as usize)
        })
    })
}

/// Average pooling (`oxide_kernels::ops::nn::pool::avg_pool`, or `avg_pool_backward`
/// when `backward` is nonzero): forward reads `src` (input volumes) and
/// writes `dst` (output volumes); backward reads `src` (grad_output, output
/// volumes) and writes `dst` (grad_input, input volumes). The divisor is
/// PyTorch's: adaptive windows divide by their extents, fixed ones by
/// `divisor` when `has_divisor` is nonzero, else by the window volume with
/// (`count_include_pad`) or without padding.
///
/// # Safety
/// `geometry` is valid; `src` and `dst` hold planes x the stated volumes of `dtype_code` in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_avg_pool(device: i32, stream: i64, dtype_code: i32, geometry: *const OxidePoolGeometry, count_include_pad: i32, has_divisor: i32, divisor: i64, backward: i32, src: *const c_void, dst: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let g = unsafe { &*geometry };
        let (dt, (planes, axes)) = (dtype(dtype_code)?, pool_axes(g)?);
        let div = pool_divisor(g.adaptive != 0, count_include_pad, has_divisor, divisor);
        let threads = threads.max(1) as usize;
        if backward != 0 {
            let operands: &[*const c_void] = if planes * plane(&g.output) > 0 { &[src, dst as *const c_void] } else { &[dst as *const c_void] };
            launch_raw(device, stream, planes * plane(&g.input), operands, || unsafe {
                oxide_kernels::ops::nn::pool::avg_pool_backward(dt, planes, &axes, div, src as *const u8, dst as *mut u8, threads)
            })
        } else {
            launch_raw(device, stream, planes * plane(&g.output), &[src, dst as *const c_void], || unsafe {
                oxide_kernels::ops::nn::pool::avg_pool(dt, planes, &axes, div, src as *const u8, dst as *mut u8, threads)
            })
        }
    })
}

/// One convolution (PyTorch's `ConvParams` with the operands' extents): the
/// first `ndim` (1 to 3) entries of each spatial array are used. Operands are
/// contiguous; shapes and weight layouts as `oxide_kernels::ops::nn::conv` describes.
/// `threads` is PyTorch's `at::get_num_threads()`.
#[repr(C)]
pub struct OxideConv {
    pub ndim: usize,
    pub batch: i64,
    pub in_channels: i64,
    pub out_channels: i64,
    pub groups: i64,
    pub transposed: bool,
    pub input: [i64; 3],
    pub output: [i64; 3],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
    pub dilation: [i64; 3],
    pub threads: i32,
}

/// `output = convolution(input, weight) + bias` (`bias` may be null) for
/// convolution `conv`, all operands of dtype `dtype_code`, on `stream` of `device`.
///
/// # Safety
/// `conv` points to a valid description; each operand pointer addresses the
/// contiguous live device memory of its shape; the output overlaps no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_convolution(
    device: i32,
    stream: i64,
    dtype_code: i32,
    conv: *const OxideConv,
    input: *const c_void,
    weight: *const c_void,
    bias: *const c_void,
    output: *mut c_void,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let c = unsafe { &*conv };
        let (dt, cv) = (dtype(dtype_code)?, conv_desc(c)?);
        let mut operands = vec![input, weight, output as *const c_void];
        if !bias.is_null() {
            operands.push(bias);
        }
        let work = cv.batch * cv.out_channels;
        let bias = (!bias.is_null()).then_some(bias as *const u8);
        launch_raw(device, stream, work, &operands, || unsafe {
            oxide_kernels::ops::nn::conv::convolution(dt, &cv, input as *const u8, weight as *const u8, bias, output as *mut u8, c.threads.max(1) as usize)
        })
    })
}

/// Gradients of convolution `conv` from `grad_output`: `grad_input`,
/// `grad_weight`, `grad_bias` (each null when not requested; PyTorch's
/// `output_mask`). `input` is read only for the weight gradient and `weight`
/// only for the input gradient (either may be null otherwise).
///
/// # Safety
/// As [`oxide_convolution`] for every non-null pointer; the gradients overlap
/// no operand and each other.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn oxide_convolution_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    conv: *const OxideConv,
    grad_output: *const c_void,
    input: *const c_void,
    weight: *const c_void,
    grad_input: *mut c_void,
    grad_weight: *mut c_void,
    grad_bias: *mut c_void,
) -> i32 {
    use oxide_kernels::ops::nn::conv::Grads;
    ffi(|| {
        // SAFETY: caller contract.
        let c = unsafe { &*conv };
        let (dt, cv) = (dtype(dtype_code)?, conv_desc(c)?);
        if (!grad_input.is_null() && weight.is_null()) || (!grad_weight.is_null() && input.is_null()) {
            return Err(AbiError::Invalid("convolution_backward: a requested gradient needs a missing operand".into()));
        }
        let given = |p: *mut c_void| (!p.is_null()).then_some(p as *mut u8);
        let grads = Grads { input: given(grad_input), weight: given(grad_weight), bias: given(grad_bias) };
        let mut operands = vec![grad_output];
        operands.extend([input, weight, grad_input, grad_weight, grad_bias].into_iter().filter(|p| !p.is_null()).map(|p| p as *const c_void));
        let work = cv.batch * cv.out_channels.max(cv.in_channels);
        launch_raw(device, stream, work, &operands, || unsafe {
            oxide_kernels::ops::nn::conv::convolution_backward(dt, &cv, grad_output as *const u8, input as *const u8, weight as *const u8, grads, c.threads.max(1) as usize)
        })
    })
}

// ---------------------------------------------------------------------------
// Fused recurrent cells (oxide_kernels::ops::nn::rnn), called by csrc/aten/nn/rnn.cpp.
// ---------------------------------------------------------------------------

/// A read-only 2-D operand of the recurrent-cell kernels: first element and
/// element strides of rows and columns. `data` null: an absent optional operand.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OxideMat {
    pub data: *const c_void,
    pub row_stride: i64,
    pub col_stride: i64,
}

impl OxideMat {
    fn mat(self) -> oxide_kernels::ops::nn::rnn::Mat {
        oxide_kernels::ops::nn::rnn::Mat { ptr: self.data as *const u8, row_stride: self.row_stride as isize, col_stride: self.col_stride as isize }
    }
}

/// `_thnn_fused_lstm_cell`: gate pre-activations `igates`, `hgates`
/// (`[batch, 4 hidden]`), cell state `cx` (`[batch, hidden]`), biases `b_ih`,
/// `b_hh` (`[4 hidden]` contiguous, each may be null) to contiguous `hy`, `cy`
/// (`[batch, hidden]`) and `workspace` (`[batch, 4 hidden]`); one dtype throughout.
///
/// # Safety
/// Every non-null pointer addresses live device memory of the shape described.
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, igates: OxideMat, hgates: OxideMat, cx: OxideMat, b_ih: *const c_void, b_hh: *const c_void, hy: *mut c_void, cy: *mut c_void, workspace: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[igates.data, hgates.data, cx.data, b_ih, b_hh, hy as *const c_void, cy as *const c_void, workspace as *const c_void]);
        launch_raw(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::lstm_cell(dt, batch, hidden, igates.mat(), hgates.mat(), cx.mat(), b_ih as _, b_hh as _, hy as _, cy as _, workspace as _, threads.max(1) as usize)
        })
    })
}

/// `_thnn_fused_lstm_cell_backward_impl`: from `grad_hy`, `grad_cy` (either
/// may have null data: zero), the forward's `cx`, `cy` and `workspace`, to
/// contiguous `grad_gates` (`[batch, 4 hidden]`), `grad_cx` (`[batch, hidden]`)
/// and `grad_bias` (`[4 hidden]`, null: not computed).
///
/// # Safety
/// As [`oxide_lstm_cell`].
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell_backward(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, grad_hy: OxideMat, grad_cy: OxideMat, cx: OxideMat, cy: OxideMat, workspace: OxideMat, grad_gates: *mut c_void, grad_cx: *mut c_void, grad_bias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[grad_hy.data, grad_cy.data, cx.data, cy.data, workspace.data, grad_gates as *const c_void, grad_cx as *const c_void, grad_bias as *const c_void]);
        launch_raw(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::lstm_cell_backward(dt, batch, hidden, grad_hy.mat(), grad_cy.mat(), cx.mat(), cy.mat(), workspace.mat(), grad_gates as _, grad_cx as _, grad_bias as _, threads.max(1) as usize)
        })
    })
}

/// `_thnn_fused_gru_cell`: gate pre-activations `igates`, `hgates`
/// (`[batch, 3 hidden]`), hidden state `hx` (`[batch, hidden]`), biases (`[3
/// hidden]` contiguous, each may be null) to contiguous `hy` (`[batch,
/// hidden]`) and `workspace` (`[batch, 5 hidden]`).
///
/// # Safety
/// As [`oxide_lstm_cell`].
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, igates: OxideMat, hgates: OxideMat, hx: OxideMat, b_ih: *const c_void, b_hh: *const c_void, hy: *mut c_void, workspace: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[igates.data, hgates.data, hx.data, b_ih, b_hh, hy as *const c_void, workspace as *const c_void]);
        launch_raw(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::gru_cell(dt, batch, hidden, igates.mat(), hgates.mat(), hx.mat(), b_ih as _, b_hh as _, hy as _, workspace as _, threads.max(1) as usize)
        })
    })
}

/// `_thnn_fused_gru_cell_backward`: from `grad_hy` (`[batch, hidden]`) and
/// the forward's `workspace` to contiguous `grad_input_gates`,
/// `grad_hidden_gates` (`[batch, 3 hidden]`), `grad_hx` (`[batch, hidden]`)
/// and the bias gradients (`[3 hidden]`, null: not computed).
///
/// # Safety
/// As [`oxide_lstm_cell`].
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell_backward(device: i32, stream: i64, dtype_code: i32, batch: usize, hidden: usize, grad_hy: OxideMat, workspace: OxideMat, grad_input_gates: *mut c_void, grad_hidden_gates: *mut c_void, grad_hx: *mut c_void, grad_input_bias: *mut c_void, grad_hidden_bias: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        let dt = dtype(dtype_code)?;
        let ops = present(&[grad_hy.data, workspace.data, grad_input_gates as *const c_void, grad_hidden_gates as *const c_void, grad_hx as *const c_void, grad_input_bias as *const c_void, grad_hidden_bias as *const c_void]);
        launch_raw(device, stream, batch * hidden, &ops, || unsafe {
            oxide_kernels::ops::nn::rnn::gru_cell_backward(dt, batch, hidden, grad_hy.mat(), workspace.mat(), grad_input_gates as _, grad_hidden_gates as _, grad_hx as _, grad_input_bias as _, grad_hidden_bias as _, threads.max(1) as usize)
        })
    })
}

// ---- fold/unfold, embedding bags, grid sampling ----

/// One `im2col` / `col2im` call over 2-d images (`oxide_kernels::ops::nn::conv::Unfold`):
/// `batch` images of `channels` planes of `image` (height, width); kernel,
/// stride, padding and dilation per (height, width).
#[repr(C)]
pub struct OxideUnfold {
    pub batch: i64,
    pub channels: i64,
    pub image: [i64; 2],
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
}

/// `im2col` (`fold` zero: `src` images -> `dst` columns) or `col2im` (`fold`
/// nonzero: `src` columns -> `dst` images), `oxide_kernels::ops::nn::conv::unfold` /
/// `fold`; both operands contiguous, of `dtype_code`, `elements` the larger
/// operand's element count (0: nothing to do).
///
/// # Safety
/// `geometry` is valid; `src` and `dst` address the contiguous elements of their shapes in live device memory.
#[no_mangle]
pub unsafe extern "C" fn oxide_unfold(device: i32, stream: i64, dtype_code: i32, geometry: *const OxideUnfold, fold: i32, elements: usize, src: *const c_void, dst: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let (dt, u) = (dtype(dtype_code)?, unfold_desc(unsafe { &*geometry })?);
        launch_raw(device, stream, elements, &[src, dst as *const c_void], || unsafe {
            let threads = threads.max(1) as usize;
            if fold != 0 {
                oxide_kernels::ops::nn::conv::fold(dt, &u, src as *const u8, dst as *mut u8, threads)
            } else {
                oxide_kernels::ops::nn::conv::unfold(dt, &u, src as *const u8, dst as *mut u8, threads)
            }
        })
    })
}

/// The bags of an embedding bag call as the ABI passes them: `n` int64
/// `indices`, `num_offsets` int64 `offsets`, into a `(num_weights, dim)` weight.
#[repr(C)]
pub struct OxideBags {
    pub indices: *const i64,
    pub n: usize,
    pub offsets: *const i64,
    pub num_offsets: usize,
    pub include_last_offset: bool,
    pub num_weights: usize,
    pub dim: usize,
    /// Weight row whose indices are skipped; negative: none.
    pub padding_idx: i64,
    /// PyTorch's mode code: 0 sum, 1 mean, 2 max.
    pub mode: i64,
}

/// `_embedding_bag` forward (`oxide_kernels::ops::nn::embedding::embedding_bag`): the
/// bags of `weight` (contiguous, `dtype_code`) into `output` `(num_bags, dim)`,
/// `offset2bag` `(n)`, `bag_size` `(num_bags)` and, in max mode, `max_indices`
/// `(num_bags, dim)` (all contiguous, int64 but the output). `per_sample_weights`
/// (`n`, the weight's dtype) may be null. Invalid offsets or indices are
/// reported with CPU PyTorch's messages.
///
/// # Safety
/// `bags` is valid and its arrays live device memory of the stated lengths; every other non-null pointer
/// addresses the contiguous device elements of its shape; outputs overlap nothing.
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag(
    device: i32,
    stream: i64,
    dtype_code: i32,
    bags: *const OxideBags,
    weight: *const c_void,
    per_sample_weights: *const c_void,
    output: *mut c_void,
    offset2bag: *mut i64,
    bag_size: *mut i64,
    max_indices: *mut i64,
    threads: i32,
) -> i32 {
    use oxide_kernels::ops::nn::embedding::{embedding_bag, BagOutputs, Bags, Mode};
    ffi(|| {
        // SAFETY: caller contract.
        let b = unsafe { &*bags };
        let (dt, mode) = (dtype(dtype_code)?, Mode::from_code(b.mode)?);
        let mut operands = vec![];
        if b.n > 0 {
            operands.extend([b.indices as *const c_void, offset2bag as *const c_void]);
            if b.num_weights * b.dim > 0 {
                operands.push(weight);
            }
            if !per_sample_weights.is_null() {
                operands.push(per_sample_weights);
            }
        }
        if b.num_offsets > 0 {
            operands.push(b.offsets as *const c_void);
        }
        let nb = b.num_offsets.saturating_sub(usize::from(b.include_last_offset));
        if nb > 0 {
            operands.push(bag_size as *const c_void);
            if b.dim > 0 {
                operands.push(output as *const c_void);
                if mode == Mode::Max {
                    operands.push(max_indices as *const c_void);
                }
            }
        }
        launch_raw(device, stream, 1, &operands, || unsafe {
            let bags = Bags { indices: index_slice(b.indices, b.n), offsets: index_slice(b.offsets, b.num_offsets), include_last_offset: b.include_last_offset, num_weights: b.num_weights, dim: b.dim, padding_idx: b.padding_idx };
            let out = BagOutputs { output: output as *mut u8, offset2bag, bag_size, max_indices };
            let psw = (!per_sample_weights.is_null()).then_some(per_sample_weights as *const u8);
            embedding_bag(dt, &bags, mode, weight as *const u8, psw, out, threads.max(1) as usize)
        })
    })
}

/// `_embedding_bag_dense_backward` (`oxide_kernels::ops::nn::embedding::embedding_bag_backward`):
/// `grad` `(num_bags, dim)` into `grad_weight` `(num_weights, dim)` (overwritten),
/// from the forward's `offset2bag` (`n`), `bag_size` (`num_bags`) and, in max
/// mode, `max_indices` (`num_bags * dim`; may be null otherwise). `bags.offsets` is not read.
///
/// # Safety
/// As [`oxide_embedding_bag`].
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    bags: *const OxideBags,
    num_bags: usize,
    grad: *const c_void,
    offset2bag: *const i64,
    bag_size: *const i64,
    max_indices: *const i64,
    scale_grad_by_freq: bool,
    per_sample_weights: *const c_void,
    grad_weight: *mut c_void,
    threads: i32,
) -> i32 {
    use oxide_kernels::ops::nn::embedding::{embedding_bag_backward, BagGrad, Mode};
    ffi(|| {
        // SAFETY: caller contract.
        let b = unsafe { &*bags };
        let (dt, mode) = (dtype(dtype_code)?, Mode::from_code(b.mode)?);
        let mut operands = vec![grad_weight as *const c_void];
        if b.n > 0 {
            operands.extend([b.indices as *const c_void, offset2bag as *const c_void]);
            if !per_sample_weights.is_null() {
                operands.push(per_sample_weights);
            }
        }
        if num_bags > 0 {
            operands.push(bag_size as *const c_void);
            if b.dim > 0 {
                operands.push(grad);
                if mode == Mode::Max {
                    operands.push(max_indices as *const c_void);
                }
            }
        }
        launch_raw(device, stream, b.num_weights * b.dim, &operands, || unsafe {
            let max = (mode == Mode::Max && !max_indices.is_null()).then(|| index_slice(max_indices, num_bags * b.dim));
            let g = BagGrad {
                indices: index_slice(b.indices, b.n),
                offset2bag: index_slice(offset2bag, b.n),
                bag_size: index_slice(bag_size, num_bags),
                max_indices: max,
                num_weights: b.num_weights,
                dim: b.dim,
                scale_grad_by_freq,
                padding_idx: b.padding_idx,
            };
            let psw = (!per_sample_weights.is_null()).then_some(per_sample_weights as *const u8);
            embedding_bag_backward(dt, &g, mode, grad as *const u8, psw, grad_weight as *mut u8, threads.max(1) as usize)
        })
    })
}

/// `_embedding_bag_per_sample_weights_backward`
/// (`oxide_kernels::ops::nn::embedding::per_sample_weights_backward`): `out[i]` (`n`, the
/// weight's dtype) is the dot product of `grad[offset2bag[i]]` and `weight[indices[i]]`.
/// `bags.offsets` is not read.
///
/// # Safety
/// As [`oxide_embedding_bag`].
#[no_mangle]
pub unsafe extern "C" fn oxide_embedding_bag_per_sample_weights_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    bags: *const OxideBags,
    num_bags: usize,
    grad: *const c_void,
    weight: *const c_void,
    offset2bag: *const i64,
    out: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let b = unsafe { &*bags };
        let dt = dtype(dtype_code)?;
        let mut operands = vec![];
        if b.n > 0 {
            operands.extend([b.indices as *const c_void, offset2bag as *const c_void, out as *const c_void]);
            if b.dim > 0 {
                operands.push(weight);
                if num_bags > 0 {
                    operands.push(grad);
                }
            }
        }
        launch_raw(device, stream, 1, &operands, || unsafe {
            oxide_kernels::ops::nn::embedding::per_sample_weights_backward(
                dt,
                index_slice(b.indices, b.n),
                index_slice(offset2bag, b.n),
                num_bags,
                b.num_weights,
                b.dim,
                b.padding_idx,
                grad as *const u8,
                weight as *const u8,
                out as *mut u8,
                threads.max(1) as usize,
            )
        })
    })
}

/// One 2-d grid sampling (`oxide_kernels::ops::nn::grid_sample::GridSample`): extents,
/// PyTorch's interpolation (0 bilinear, 1 nearest, 2 bicubic) and padding
/// (0 zeros, 1 border, 2 reflection) codes, `align_corners`.
#[repr(C)]
pub struct OxideGridSample {
    pub batch: i64,
    pub channels: i64,
    pub input: [i64; 2],
    pub output: [i64; 2],
    pub interpolation: i64,
    pub padding: i64,
    pub align_corners: bool,
}

/// `grid_sampler_2d` (`oxide_kernels::ops::nn::grid_sample::grid_sample_2d`): contiguous
/// input `(N, C, H, W)`, grid `(N, H_out, W_out, 2)`, output `(N, C, H_out, W_out)`, all of `dtype_code`.
///
/// # Safety
/// `geometry` is valid; each pointer addresses the contiguous device elements of its shape.
#[no_mangle]
pub unsafe extern "C" fn oxide_grid_sample_2d(device: i32, stream: i64, dtype_code: i32, geometry: *const OxideGridSample, input: *const c_void, grid: *const c_void, output: *mut c_void, threads: i32) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let (gs, work) = grid_sample_desc(unsafe { &*geometry })?;
        let dt = dtype(dtype_code)?;
        let operands: &[*const c_void] = if gs.channels * gs.input[0] * gs.input[1] == 0 { &[grid] } else { &[input, grid, output as *const c_void] };
        launch_raw(device, stream, work, operands, || unsafe {
            oxide_kernels::ops::nn::grid_sample::grid_sample_2d(dt, &gs, input as *const u8, grid as *const u8, output as *mut u8, threads.max(1) as usize)
        })
    })
}

/// `grid_sampler_2d_backward` (`oxide_kernels::ops::nn::grid_sample::grid_sample_2d_backward`):
/// `grad_input` (may be null: not requested) and `grad_grid`, overwritten, from
/// `grad_output`; layouts as [`oxide_grid_sample_2d`].
///
/// # Safety
/// As [`oxide_grid_sample_2d`]; the gradients overlap no operand and each other.
#[no_mangle]
pub unsafe extern "C" fn oxide_grid_sample_2d_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    geometry: *const OxideGridSample,
    grad_output: *const c_void,
    input: *const c_void,
    grid: *const c_void,
    grad_input: *mut c_void,
    grad_grid: *mut c_void,
    threads: i32,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let (gs, work) = grid_sample_desc(unsafe { &*geometry })?;
        let dt = dtype(dtype_code)?;
        let mut operands = vec![grid, grad_grid as *const c_void];
        if gs.channels * gs.input[0] * gs.input[1] > 0 {
            operands.extend([grad_output, input]);
            if !grad_input.is_null() {
                operands.push(grad_input as *const c_void);
            }
        }
        let gi = (!grad_input.is_null()).then_some(grad_input as *mut u8);
        launch_raw(device, stream, work, &operands, || unsafe {
            oxide_kernels::ops::nn::grid_sample::grid_sample_2d_backward(dt, &gs, grad_output as *const u8, input as *const u8, grid as *const u8, gi, grad_grid as *mut u8, threads.max(1) as usize)
        })
    })
}

// ---- scaled dot-product attention (oxide_kernels::ops::nn::attention) ----

/// A 4-d strided tensor operand: data pointer (null = absent) and element
/// strides (batch, head, row, column); stride 0 on broadcast dims.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OxideStrided4 {
    pub data: *mut c_void,
    pub strides: [i64; 4],
}

/// One attention call: extents (`batch`, query heads `heads_q`, key/value
/// heads `heads_kv` dividing `heads_q`, query rows `len_q`, keys `len_kv`,
/// query/key features `dim_qk`, value features `dim_v`), the query `[B,
/// Hq, L, E]`, key `[B, Hkv, S, E]` and value `[B, Hkv, S, Ev]` operands, an
/// optional additive `bias` broadcast to `[B, Hq, L, S]` (null data: none),
/// the causal flag (top-left aligned), the resolved `scale`, the dropout
/// probability (0: none) with its Philox state, and PyTorch's thread count.
#[repr(C)]
pub struct OxideAttention {
    pub batch: i64,
    pub heads_q: i64,
    pub heads_kv: i64,
    pub len_q: i64,
    pub len_kv: i64,
    pub dim_qk: i64,
    pub dim_v: i64,
    pub query: OxideStrided4,
    pub key: OxideStrided4,
    pub value: OxideStrided4,
    pub bias: OxideStrided4,
    pub causal: bool,
    pub scale: f64,
    pub dropout_p: f64,
    pub philox: OxidePhilox,
    pub threads: i32,
}

/// Philox blocks the dropout mask of `attention` consumes (the generator
/// offset must advance by this much; see `oxide_kernels::ops::nn::attention`).
///
/// # Safety
/// `attention` and `out` are valid pointers.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_dropout_blocks(attention: *const OxideAttention, out: *mut u64) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let a = unsafe { &*attention };
        put(out, oxide_kernels::ops::nn::attention::dropout_blocks(&attention_dims(a)?))
    })
}

/// Fused attention forward (`oxide_kernels::ops::nn::attention::forward`): writes
/// `out` (`[B, Hq, L, Ev]`, strided, dtype `dtype_code`) and `logsumexp`
/// (`[B, Hq, L]` contiguous; float64 for float64 inputs, else float32).
///
/// # Safety
/// Every element the shapes and strides address lies in live device memory;
/// outputs overlap no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_forward(device: i32, stream: i64, dtype_code: i32, attention: *const OxideAttention, out: OxideStrided4, logsumexp: *mut c_void) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let a = unsafe { &*attention };
        let mut operands: Vec<*const c_void> = vec![a.query.data, a.key.data, a.value.data, out.data, logsumexp as *const c_void];
        operands.push(a.bias.data);
        // Empty operands may have no storage; only the non-null ones are checked.
        operands.retain(|p| !p.is_null());
        let work = (a.batch * a.heads_q * a.len_q).max(0) as usize;
        with_attention(a, dtype_code, |att| {
            // SAFETY: caller contract.
            launch_raw(device, stream, work, &operands, || unsafe { oxide_kernels::ops::nn::attention::forward(att, attention_operand(&out), logsumexp as *mut u8) })
        })
    })
}

/// Fused attention backward (`oxide_kernels::ops::nn::attention::backward`) from the
/// forward's `out` and `logsumexp`: writes each gradient whose data is
/// non-null (`grad_bias` is the full `[B, Hq, L, S]` gradient; the caller
/// reduces it to the bias's shape). Dropout must use the forward's Philox state.
///
/// # Safety
/// As [`oxide_attention_forward`]; the gradients overlap each other and no input.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn oxide_attention_backward(
    device: i32,
    stream: i64,
    dtype_code: i32,
    attention: *const OxideAttention,
    out: OxideStrided4,
    grad_out: OxideStrided4,
    logsumexp: *const c_void,
    grad_query: OxideStrided4,
    grad_key: OxideStrided4,
    grad_value: OxideStrided4,
    grad_bias: OxideStrided4,
) -> i32 {
    ffi(|| {
        // SAFETY: caller contract.
        let a = unsafe { &*attention };
        let mut operands: Vec<*const c_void> = vec![a.query.data, a.key.data, a.value.data, out.data, grad_out.data, logsumexp];
        operands.extend([a.bias.data, grad_query.data, grad_key.data, grad_value.data, grad_bias.data].map(|p| p as *const c_void));
        // Absent gradients and empty operands are null; only the others are checked.
        operands.retain(|p| !p.is_null());
        let grads = oxide_kernels::ops::nn::attention::Grads { query: given4(&grad_query), key: given4(&grad_key), value: given4(&grad_value), bias: given4(&grad_bias) };
        let work = (a.batch * a.heads_q * a.len_q).max(0) as usize;
        with_attention(a, dtype_code, |att| {
            // SAFETY: caller contract.
            launch_raw(device, stream, work, &operands, || unsafe {
                oxide_kernels::ops::nn::attention::backward(att, attention_operand(&out), attention_operand(&grad_out), logsumexp as *const u8, grads)
            })
        })
    })
}

/// The kernel crate's view of a geometry: plane count and the three axes.
fn pool_axes(g: &OxidePoolGeometry) -> Result<(usize, [oxide_kernels::ops::nn::pool::Axis; 3]), AbiError> {
    use oxide_kernels::ops::nn::pool::{Axis, Window};
    let size = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("pooling: negative {what} {v}")));
    let mut axes = [Axis::unit(); 3];
    for (k, a) in axes.iter_mut().enumerate() {
        let window = if g.adaptive != 0 {
            Window::Adaptive
        } else {
            Window::Fixed { kernel: size("kernel size", g.kernel[k])?, stride: size("stride", g.stride[k])?, padding: size("padding", g.padding[k])?, dilation: size("dilation", g.dilation[k])? }
        };
        *a = Axis { input: size("input size", g.input[k])?, output: size("output size", g.output[k])?, window };
    }
    Ok((size("plane count", g.planes)?, axes))
}

fn plane(extents: &[i64; 3]) -> usize {
    extents.iter().map(|&e| e.max(0) as usize).product()
}

fn pool_divisor(adaptive: bool, count_include_pad: i32, has_divisor: i32, divisor: i64) -> oxide_kernels::ops::nn::pool::Divisor {
    use oxide_kernels::ops::nn::pool::Divisor;
    if adaptive {
        Divisor::Adaptive
    } else if has_divisor != 0 {
        Divisor::Override(divisor)
    } else {
        Divisor::Window { count_include_pad: count_include_pad != 0 }
    }
}

fn conv_desc(c: &OxideConv) -> Result<oxide_kernels::ops::nn::conv::Conv, AbiError> {
    use oxide_kernels::ops::nn::conv::{Conv, Spatial, MAX_SPATIAL};
    if c.ndim == 0 || c.ndim > MAX_SPATIAL {
        return Err(AbiError::Invalid(format!("convolution over {} spatial dimensions (1 to {MAX_SPATIAL} supported)", c.ndim)));
    }
    let s = |a: &[i64; 3]| -> Vec<i64> { a[..c.ndim].to_vec() };
    let (input, output, kernel, stride, padding, dilation) = (s(&c.input), s(&c.output), s(&c.kernel), s(&c.stride), s(&c.padding), s(&c.dilation));
    let spatial = Spatial { input: &input, output: &output, kernel: &kernel, stride: &stride, padding: &padding, dilation: &dilation };
    Ok(Conv::new(c.batch, c.in_channels, c.out_channels, c.groups, c.transposed, spatial)?)
}

/// The non-null pointers among `ptrs`, for the device check of [`launch`].
fn present(ptrs: &[*const c_void]) -> Vec<*const c_void> {
    ptrs.iter().copied().filter(|p| !p.is_null()).collect()
}

fn unfold_desc(u: &OxideUnfold) -> Result<oxide_kernels::ops::nn::conv::Unfold, AbiError> {
    let n = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("im2col/col2im: negative {what} {v}")));
    let pair = |what: &str, a: [i64; 2]| -> Result<[usize; 2], AbiError> { Ok([n(what, a[0])?, n(what, a[1])?]) };
    Ok(oxide_kernels::ops::nn::conv::Unfold {
        batch: n("batch", u.batch)?,
        channels: n("channels", u.channels)?,
        image: pair("image extent", u.image)?,
        kernel: pair("kernel size", u.kernel)?,
        stride: pair("stride", u.stride)?,
        padding: pair("padding", u.padding)?,
        dilation: pair("dilation", u.dilation)?,
    })
}

/// A possibly empty int64 device array as a slice.
///
/// # Safety
/// `p` addresses `n` live int64 values when `n > 0`.
unsafe fn index_slice<'a>(p: *const i64, n: usize) -> &'a [i64] {
    if n == 0 {
        &[]
    } else {
        // SAFETY: caller contract.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

fn grid_sample_desc(g: &OxideGridSample) -> Result<(oxide_kernels::ops::nn::grid_sample::GridSample, usize), AbiError> {
    use oxide_kernels::ops::nn::grid_sample::GridSample;
    let n = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("grid_sampler_2d: negative {what} {v}")));
    let (interpolation, padding) = GridSample::modes(g.interpolation, g.padding)?;
    let gs = GridSample {
        batch: n("batch", g.batch)?,
        channels: n("channels", g.channels)?,
        input: [n("height", g.input[0])?, n("width", g.input[1])?],
        output: [n("height", g.output[0])?, n("width", g.output[1])?],
        interpolation,
        padding,
        align_corners: g.align_corners,
    };
    // Work happens when there are output positions; the input is read only when it is not empty.
    let work = gs.batch * gs.output[0] * gs.output[1];
    Ok((gs, work))
}

fn attention_dims(a: &OxideAttention) -> Result<oxide_kernels::ops::nn::attention::Dims, AbiError> {
    let n = |what: &str, v: i64| usize::try_from(v).map_err(|_| AbiError::Invalid(format!("scaled_dot_product_attention: negative {what} {v}")));
    Ok(oxide_kernels::ops::nn::attention::Dims {
        batch: n("batch", a.batch)?,
        heads_q: n("query heads", a.heads_q)?,
        heads_kv: n("key/value heads", a.heads_kv)?,
        len_q: n("query length", a.len_q)?,
        len_kv: n("key length", a.len_kv)?,
        dim_qk: n("query/key size", a.dim_qk)?,
        dim_v: n("value size", a.dim_v)?,
    })
}

fn attention_operand(s: &OxideStrided4) -> oxide_kernels::ops::nn::attention::Operand {
    oxide_kernels::ops::nn::attention::Operand { ptr: s.data as *mut u8, strides: s.strides }
}

fn given4(s: &OxideStrided4) -> Option<oxide_kernels::ops::nn::attention::Operand> {
    (!s.data.is_null()).then(|| attention_operand(s))
}

/// Runs `f` with the kernel's description of `a` (dropout bits borrowed from its Philox state).
fn with_attention<T>(a: &OxideAttention, dtype_code: i32, f: impl FnOnce(&oxide_kernels::ops::nn::attention::Attention) -> Result<T, AbiError>) -> Result<T, AbiError> {
    use oxide_kernels::ops::nn::attention::{Attention, Dropout};
    let bits = philox(&a.philox);
    let att = Attention {
        dims: attention_dims(a)?,
        dtype: dtype(dtype_code)?,
        query: attention_operand(&a.query),
        key: attention_operand(&a.key),
        value: attention_operand(&a.value),
        bias: given4(&a.bias),
        causal: a.causal,
        scale: a.scale,
        dropout: (a.dropout_p > 0.0).then_some(Dropout { p: a.dropout_p, bits: &bits }),
        threads: a.threads.max(1) as usize,
    };
    f(&att)
}
