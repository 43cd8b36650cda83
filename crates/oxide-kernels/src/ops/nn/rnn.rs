//! Fused LSTM and GRU cells, forward and backward: what PyTorch's recurrent
//! layers call on accelerator devices (`_thnn_fused_lstm_cell`,
//! `_thnn_fused_lstm_cell_backward_impl`, `_thnn_fused_gru_cell`,
//! `_thnn_fused_gru_cell_backward`) once the gate matrix products are done.
//! Each call is one pass over the batch rows: bias, activations, state update
//! and workspace in one loop instead of a dozen elementwise kernels.
//!
//! Layout contract (that of PyTorch's CUDA fused cells, so the backward reads
//! what the forward wrote; `b` = batch, `h` = hidden size):
//! - LSTM gates `[b, 4h]` in the order input, forget, cell, output (i, f, g, o);
//!   the workspace `[b, 4h]` holds the activated gates
//!   `sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)`.
//! - GRU gates `[b, 3h]` in the order reset, update, new (r, z, n); the
//!   workspace `[b, 5h]` holds `r, z, n, hx, hn`, `hn` being the hidden
//!   new-gate pre-activation with its bias (the reset gate's gradient needs it).
//!
//! Equations (LSTM with forget gate: Hochreiter & Schmidhuber 1997, Gers et
//! al. 2000; GRU: Cho et al. 2014 with the reset gate applied after the hidden
//! product, as `torch.nn.GRU` documents):
//! - LSTM: `c' = f c + i g`, `h' = o tanh(c')`.
//! - GRU: `r = sigmoid(xr + hr)`, `z = sigmoid(xz + hz)`, `n = tanh(xn + r hn)`,
//!   `h' = n + z (h - n)`.
//!
//! Inputs ([`Mat`]) may have any row and column strides (in elements, e.g. a
//! transposed or sliced view); biases and outputs are contiguous. All operands
//! of one call share one floating dtype; float16 and bfloat16 compute in
//! float32 and round once when stored (PyTorch's opmath rule), float64 computes
//! in float64. Bias gradients are the batch sums of the gate gradients,
//! accumulated per fixed chunk of rows and combined in row order, so results do
//! not depend on the thread count.

use crate::dtype::{DType, Element};
use crate::engine::iter::{load, store, GRAIN};
use crate::engine::math::Float;
use crate::engine::SendPtr;
use crate::error::Result;

/// Gate elements per chunk of rows. Fixed, not derived from the thread count,
/// so that the chunk-wise bias-gradient sums are reproducible.
const CHUNK: usize = 8192;

/// A read-only 2-D operand: its first element and the element strides of its
/// rows and columns. A null `ptr` stands for an absent optional operand.
#[derive(Debug, Clone, Copy)]
pub struct Mat {
    pub ptr: *const u8,
    pub row_stride: isize,
    pub col_stride: isize,
}

// SAFETY: operands are only read, and live for the whole call (caller contract).
unsafe impl Send for Mat {}
// SAFETY: as for `Send` above: shared references only read the descriptor, and tasks that write through it write disjoint elements.
unsafe impl Sync for Mat {}

impl Mat {
    /// A row-major contiguous matrix of `cols` columns.
    pub fn contiguous(ptr: *const u8, cols: usize) -> Mat {
        Mat { ptr, row_stride: cols as isize, col_stride: 1 }
    }
}

/// The operands of one [`lstm_cell`] call.
#[derive(Debug, Clone, Copy)]
pub struct LstmCell {
    pub igates: Mat,
    pub hgates: Mat,
    pub cx: Mat,
    pub b_ih: *const u8,
    pub b_hh: *const u8,
    pub hy: *mut u8,
    pub cy: *mut u8,
    pub workspace: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for LstmCell {}

/// The operands of one [`lstm_cell_backward`] call.
#[derive(Debug, Clone, Copy)]
pub struct LstmCellGrads {
    pub grad_hy: Mat,
    pub grad_cy: Mat,
    pub cx: Mat,
    pub cy: Mat,
    pub workspace: Mat,
    pub grad_gates: *mut u8,
    pub grad_cx: *mut u8,
    pub grad_bias: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for LstmCellGrads {}

/// The operands of one [`gru_cell`] call.
#[derive(Debug, Clone, Copy)]
pub struct GruCell {
    pub igates: Mat,
    pub hgates: Mat,
    pub hx: Mat,
    pub b_ih: *const u8,
    pub b_hh: *const u8,
    pub hy: *mut u8,
    pub workspace: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for GruCell {}

/// The operands of one [`gru_cell_backward`] call.
#[derive(Debug, Clone, Copy)]
pub struct GruCellGrads {
    pub grad_hy: Mat,
    pub workspace: Mat,
    pub grad_input_gates: *mut u8,
    pub grad_hidden_gates: *mut u8,
    pub grad_hx: *mut u8,
    pub grad_input_bias: *mut u8,
    pub grad_hidden_bias: *mut u8,
}

// SAFETY: addresses of device memory the kernel's caller vouches for, as for
// [`crate::engine::iter::Operand`]: a launch record holding them may run on a stream worker.
unsafe impl Send for GruCellGrads {}

/// What every inner cell function needs besides its operands: the dtype of
/// all operands, the batch size, the hidden size and the threads allowed.
#[derive(Clone, Copy)]
struct Cell {
    dt: DType,
    batch: usize,
    h: usize,
    threads: usize,
}

/// Loads row `r` of `m` (dtype `dt`), `dst.len()` columns, into `dst`; zeros for a null `m`.
unsafe fn row<F: Float + Element>(dt: DType, m: Mat, r: usize, dst: &mut [F]) {
    if m.ptr.is_null() {
        dst.fill(F::ZERO);
        return;
    }
    let sz = dt.size() as isize;
    // SAFETY: the row lies inside the operand (caller contract); the dtype is checked.
    unsafe {
        let p = m.ptr.offset(r as isize * m.row_stride * sz);
        load(dt, p, m.col_stride * sz, dst.len(), dst).expect("checked dtype");
    }
}

/// Stores `src` at element `off` of the contiguous output `p` (dtype `dt`).
unsafe fn put<F: Element>(dt: DType, p: SendPtr<u8>, off: usize, src: &[F]) {
    // SAFETY: the range lies inside the output (caller contract).
    unsafe {
        let dst = p.get().add(off * dt.size());
        if dt == F::DTYPE {
            crate::engine::convert::copy_elements(src.as_ptr(), dst as *mut F, src.len());
        } else {
            store(dt, dst, dt.size() as isize, src).expect("checked dtype");
        }
    }
}

/// `a + b` of two optional contiguous `[n]` vectors (absent ones are zeros).
unsafe fn bias_sum<F: Float + Element>(dt: DType, a: *const u8, b: *const u8, n: usize) -> Vec<F> {
    let mut v = vec![F::ZERO; n];
    let mut t = vec![F::ZERO; n];
    for p in [a, b] {
        if !p.is_null() {
            // SAFETY: n elements (caller contract).
            unsafe { row(dt, Mat::contiguous(p, n), 0, &mut t) };
            v.iter_mut().zip(&t).for_each(|(x, y)| *x = *x + *y);
        }
    }
    v
}

/// Runs `f(first_row, rows)` over fixed chunks of the batch (in parallel for
/// large problems) and returns the chunks' results in row order.
fn chunks<R: Send>(batch: usize, row_elems: usize, threads: usize, f: impl Fn(usize, usize) -> R + Sync) -> Vec<R> {
    let per = (CHUNK / row_elems.max(1)).max(1);
    let count = batch.div_ceil(per);
    let run = |k: usize| f(k * per, per.min(batch - k * per));
    // Problems below a grain of gate elements run on the calling thread.
    if threads <= 1 || count <= 1 || batch * row_elems < GRAIN {
        (0..count).map(run).collect()
    } else {
        crate::engine::iter::map_in_runs(count, threads, run)
    }
}

/// Adds the chunk partials in row order into one vector and stores it (when `out` is non-null).
unsafe fn store_sum<F: Float + Element>(dt: DType, out: *mut u8, partials: &[Vec<F>], n: usize) {
    if out.is_null() {
        return;
    }
    let mut acc = vec![F::ZERO; n];
    for p in partials {
        acc.iter_mut().zip(p).for_each(|(a, b)| *a = *a + *b);
    }
    // SAFETY: n elements (caller contract).
    unsafe { put(dt, SendPtr::new(out), 0, &acc) };
}

/// LSTM cell forward. `igates`, `hgates`: `[batch, 4 hidden]` gate
/// pre-activations (input and hidden products); `cx`: `[batch, hidden]` cell
/// state; `b_ih`, `b_hh`: `[4 hidden]` contiguous biases, each possibly null.
/// Writes `hy`, `cy` (`[batch, hidden]`) and `workspace` (`[batch, 4 hidden]`
/// activated gates), all contiguous. Every operand has dtype `dt`.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// Every non-null pointer addresses a live tensor of the shape above (inputs
/// with their strides); outputs overlap no input.
pub unsafe fn lstm_cell(dt: DType, batch: usize, hidden: usize, io: LstmCell, threads: usize) -> Result<()> {
    let LstmCell { igates, hgates, cx, b_ih, b_hh, hy, cy, workspace } = io;
    dt.require_float("_thnn_fused_lstm_cell")?;
    if batch == 0 || hidden == 0 {
        return Ok(());
    }
    let cell = Cell { dt, batch, h: hidden, threads };
    let outs = [SendPtr::new(hy), SendPtr::new(cy), SendPtr::new(workspace)];
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => lstm_cell_in::<f64>(cell, [igates, hgates, cx], [b_ih, b_hh], outs),
            _ => lstm_cell_in::<f32>(cell, [igates, hgates, cx], [b_ih, b_hh], outs),
        }
    }
    Ok(())
}

unsafe fn lstm_cell_in<F: Float + Element>(
    cell: Cell,
    [igates, hgates, cx]: [Mat; 3],
    [b_ih, b_hh]: [*const u8; 2],
    [hy, cy, ws]: [SendPtr<u8>; 3],
) {
    let Cell { dt, batch, h, threads } = cell;
    // SAFETY: 4h elements each when non-null.
    let bias: Vec<F> = unsafe { bias_sum(dt, b_ih, b_hh, 4 * h) };
    chunks(batch, 4 * h, threads, |first, rows| {
        let (mut gates, mut hg) = (vec![F::ZERO; 4 * h], vec![F::ZERO; 4 * h]);
        let (mut c, mut hy_row) = (vec![F::ZERO; h], vec![F::ZERO; h]);
        for r in first..first + rows {
            // SAFETY: row r of each operand (contract); outputs: this task's rows only.
            unsafe {
                row(dt, igates, r, &mut gates);
                row(dt, hgates, r, &mut hg);
                row(dt, cx, r, &mut c);
            }
            // Iterators and slices of exactly `h` elements, not indexing into the
            // Vecs: with indexing LLVM kept these loops scalar (bounds checks,
            // and each store could alias the Vecs' pointers, so it reloaded them).
            gates.iter_mut().zip(&hg).zip(&bias).for_each(|((g, a), b)| *g = *g + *a + *b);
            let (ifg, o) = gates.split_at_mut(3 * h);
            let (i_f, g) = ifg.split_at_mut(2 * h);
            i_f.iter_mut().for_each(|v| *v = v.sigmoid());
            g.iter_mut().for_each(|v| *v = v.tanh());
            o.iter_mut().for_each(|v| *v = v.sigmoid());
            let (i, f) = i_f.split_at(h);
            let (c, hy_row) = (&mut c[..h], &mut hy_row[..h]);
            for j in 0..h {
                // c now holds c' (the new cell state).
                c[j] = f[j] * c[j] + i[j] * g[j];
                hy_row[j] = o[j] * c[j].tanh();
            }
            // SAFETY: as above.
            unsafe {
                put(dt, ws, r * 4 * h, &gates);
                put(dt, cy, r * h, c);
                put(dt, hy, r * h, hy_row);
            }
        }
    });
}

/// LSTM cell backward from the forward's `cx`, `cy` (`[batch, hidden]`) and
/// `workspace` (`[batch, 4 hidden]`) and the output gradients `grad_hy`,
/// `grad_cy` (`[batch, hidden]`, either null for zero). With `t = tanh(cy)`:
/// `dc = dh o (1 - t^2) + dcy`, `di = dc g i (1 - i)`, `df = dc cx f (1 - f)`,
/// `dg = dc i (1 - g^2)`, `do = dh t o (1 - o)`.
/// Writes `grad_gates` (`[batch, 4 hidden]`, (di, df, dg, do)), `grad_cx =
/// dc f` (`[batch, hidden]`) and, when non-null, `grad_bias` (`[4 hidden]`,
/// the batch sum of `grad_gates`), all contiguous, dtype `dt`.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// As [`lstm_cell`].
pub unsafe fn lstm_cell_backward(
    dt: DType,
    batch: usize,
    hidden: usize,
    io: LstmCellGrads,
    threads: usize,
) -> Result<()> {
    let LstmCellGrads { grad_hy, grad_cy, cx, cy, workspace, grad_gates, grad_cx, grad_bias } = io;
    dt.require_float("_thnn_fused_lstm_cell_backward_impl")?;
    if hidden == 0 {
        return Ok(());
    }
    let cell = Cell { dt, batch, h: hidden, threads };
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => lstm_cell_backward_in::<f64>(
                cell,
                [grad_hy, grad_cy, cx, cy, workspace],
                SendPtr::new(grad_gates),
                SendPtr::new(grad_cx),
                grad_bias,
            ),
            _ => lstm_cell_backward_in::<f32>(
                cell,
                [grad_hy, grad_cy, cx, cy, workspace],
                SendPtr::new(grad_gates),
                SendPtr::new(grad_cx),
                grad_bias,
            ),
        }
    }
    Ok(())
}

unsafe fn lstm_cell_backward_in<F: Float + Element>(
    cell: Cell,
    ins: [Mat; 5],
    gg: SendPtr<u8>,
    gcx: SendPtr<u8>,
    gbias: *mut u8,
) {
    let Cell { dt, batch, h, threads } = cell;
    let [grad_hy, grad_cy, cx, cy, workspace] = ins;
    let want_bias = !gbias.is_null();
    let partials = chunks(batch, 4 * h, threads, |first, rows| {
        let mut sum = vec![F::ZERO; if want_bias { 4 * h } else { 0 }];
        let (mut dh, mut dcy, mut c, mut t) = (vec![F::ZERO; h], vec![F::ZERO; h], vec![F::ZERO; h], vec![F::ZERO; h]);
        let (mut w, mut out) = (vec![F::ZERO; 4 * h], vec![F::ZERO; 4 * h]);
        let one = F::ONE;
        for r in first..first + rows {
            // SAFETY: row r of each operand (contract); outputs: this task's rows only.
            unsafe {
                row(dt, grad_hy, r, &mut dh);
                row(dt, grad_cy, r, &mut dcy);
                row(dt, cx, r, &mut c);
                row(dt, cy, r, &mut t);
                row(dt, workspace, r, &mut w);
            }
            t.iter_mut().for_each(|v| *v = v.tanh());
            let (i, rest) = w.split_at(h);
            let (f, rest) = rest.split_at(h);
            let (g, o) = rest.split_at(h);
            let (di, rest) = out.split_at_mut(h);
            let (df, rest) = rest.split_at_mut(h);
            let (dg, d_o) = rest.split_at_mut(h);
            // Slices of exactly `h` elements so that the loop has no bounds checks.
            let (o, d_o, dh, dcy, c, t) = (&o[..h], &mut d_o[..h], &dh[..h], &mut dcy[..h], &c[..h], &t[..h]);
            for j in 0..h {
                let dc = dh[j] * o[j] * (one - t[j] * t[j]) + dcy[j];
                di[j] = dc * g[j] * i[j] * (one - i[j]);
                df[j] = dc * c[j] * f[j] * (one - f[j]);
                dg[j] = dc * i[j] * (one - g[j] * g[j]);
                d_o[j] = dh[j] * t[j] * o[j] * (one - o[j]);
                // dcy is not needed after this element: reuse it for grad_cx.
                dcy[j] = dc * f[j];
            }
            if want_bias {
                sum.iter_mut().zip(&out).for_each(|(s, v)| *s = *s + *v);
            }
            // SAFETY: as above.
            unsafe {
                put(dt, gg, r * 4 * h, &out);
                put(dt, gcx, r * h, dcy);
            }
        }
        sum
    });
    // SAFETY: 4h elements when non-null (contract).
    unsafe { store_sum(dt, gbias, &partials, 4 * h) };
}

/// GRU cell forward. `igates`, `hgates`: `[batch, 3 hidden]` gate
/// pre-activations (input and hidden products); `hx`: `[batch, hidden]`;
/// `b_ih`, `b_hh`: `[3 hidden]` contiguous biases, each possibly null. Writes
/// `hy` (`[batch, hidden]`) and `workspace` (`[batch, 5 hidden]`: r, z, n, hx,
/// hn), contiguous, dtype `dt` like every operand.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// As [`lstm_cell`].
pub unsafe fn gru_cell(dt: DType, batch: usize, hidden: usize, io: GruCell, threads: usize) -> Result<()> {
    let GruCell { igates, hgates, hx, b_ih, b_hh, hy, workspace } = io;
    dt.require_float("_thnn_fused_gru_cell")?;
    if batch == 0 || hidden == 0 {
        return Ok(());
    }
    let cell = Cell { dt, batch, h: hidden, threads };
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => {
                gru_cell_in::<f64>(cell, [igates, hgates, hx], [b_ih, b_hh], SendPtr::new(hy), SendPtr::new(workspace))
            }
            _ => {
                gru_cell_in::<f32>(cell, [igates, hgates, hx], [b_ih, b_hh], SendPtr::new(hy), SendPtr::new(workspace))
            }
        }
    }
    Ok(())
}

unsafe fn gru_cell_in<F: Float + Element>(
    cell: Cell,
    ins: [Mat; 3],
    biases: [*const u8; 2],
    hy: SendPtr<u8>,
    ws: SendPtr<u8>,
) {
    let Cell { dt, batch, h, threads } = cell;
    let [igates, hgates, hx] = ins;
    // SAFETY: 3h elements each when non-null.
    let (bi, bh): (Vec<F>, Vec<F>) =
        unsafe { (bias_sum(dt, biases[0], std::ptr::null(), 3 * h), bias_sum(dt, biases[1], std::ptr::null(), 3 * h)) };
    chunks(batch, 3 * h, threads, |first, rows| {
        let (mut ig, mut hg) = (vec![F::ZERO; 3 * h], vec![F::ZERO; 3 * h]);
        let (mut w, mut hy_row) = (vec![F::ZERO; 5 * h], vec![F::ZERO; h]);
        for r in first..first + rows {
            // SAFETY: row r of each operand (contract); outputs: this task's rows only.
            unsafe {
                row(dt, igates, r, &mut ig);
                row(dt, hgates, r, &mut hg);
                row(dt, hx, r, &mut w[3 * h..4 * h]);
            }
            ig.iter_mut().zip(&bi).for_each(|(g, b)| *g = *g + *b);
            hg.iter_mut().zip(&bh).for_each(|(g, b)| *g = *g + *b);
            let (rs, rest) = w.split_at_mut(h);
            let (zs, rest) = rest.split_at_mut(h);
            let (ns, rest) = rest.split_at_mut(h);
            let (hxs, hns) = rest.split_at_mut(h);
            // Slices of exactly `h` elements so that the loop has no bounds checks.
            let (ir, iz, inn) = (&ig[..h], &ig[h..2 * h], &ig[2 * h..3 * h]);
            let (hr, hz, hnn) = (&hg[..h], &hg[h..2 * h], &hg[2 * h..3 * h]);
            let (hns, hy_row) = (&mut hns[..h], &mut hy_row[..h]);
            for j in 0..h {
                let rg = (ir[j] + hr[j]).sigmoid();
                let zg = (iz[j] + hz[j]).sigmoid();
                let hn = hnn[j];
                let n = (inn[j] + rg * hn).tanh();
                rs[j] = rg;
                zs[j] = zg;
                ns[j] = n;
                hns[j] = hn;
                hy_row[j] = n + zg * (hxs[j] - n);
            }
            // SAFETY: as above.
            unsafe {
                put(dt, ws, r * 5 * h, &w);
                put(dt, hy, r * h, hy_row);
            }
        }
    });
}

/// GRU cell backward from the output gradient `grad_hy` (`[batch, hidden]`)
/// and the forward's `workspace` (`[batch, 5 hidden]`). With
/// `dn = dh (1 - z) (1 - n^2)`, `dz = dh (hx - n) z (1 - z)`,
/// `dr = dn hn r (1 - r)`: writes `grad_input_gates = (dr, dz, dn)` and
/// `grad_hidden_gates = (dr, dz, dn r)` (`[batch, 3 hidden]`), `grad_hx = dh z`
/// (`[batch, hidden]`) and, when non-null, the bias gradients
/// `grad_input_bias` / `grad_hidden_bias` (`[3 hidden]`, batch sums of the gate
/// gradients); contiguous, dtype `dt`.
///
/// Errors: [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype) for non-floating dtypes.
///
/// # Safety
/// As [`lstm_cell`].
pub unsafe fn gru_cell_backward(
    dt: DType,
    batch: usize,
    hidden: usize,
    io: GruCellGrads,
    threads: usize,
) -> Result<()> {
    let GruCellGrads {
        grad_hy,
        workspace,
        grad_input_gates,
        grad_hidden_gates,
        grad_hx,
        grad_input_bias,
        grad_hidden_bias,
    } = io;
    dt.require_float("_thnn_fused_gru_cell_backward")?;
    if hidden == 0 {
        return Ok(());
    }
    let outs = [SendPtr::new(grad_input_gates), SendPtr::new(grad_hidden_gates), SendPtr::new(grad_hx)];
    let cell = Cell { dt, batch, h: hidden, threads };
    // SAFETY: forwarded contract.
    unsafe {
        match dt {
            DType::F64 => {
                gru_cell_backward_in::<f64>(cell, grad_hy, workspace, outs, [grad_input_bias, grad_hidden_bias])
            }
            _ => gru_cell_backward_in::<f32>(cell, grad_hy, workspace, outs, [grad_input_bias, grad_hidden_bias]),
        }
    }
    Ok(())
}

unsafe fn gru_cell_backward_in<F: Float + Element>(
    cell: Cell,
    grad_hy: Mat,
    workspace: Mat,
    outs: [SendPtr<u8>; 3],
    gbias: [*mut u8; 2],
) {
    let Cell { dt, batch, h, threads } = cell;
    let [gi_out, gh_out, ghx_out] = outs;
    let want_bias = !gbias[0].is_null() || !gbias[1].is_null();
    let partials = chunks(batch, 5 * h, threads, |first, rows| {
        let nb = if want_bias { 3 * h } else { 0 };
        let (mut si, mut sh) = (vec![F::ZERO; nb], vec![F::ZERO; nb]);
        let (mut dh, mut w) = (vec![F::ZERO; h], vec![F::ZERO; 5 * h]);
        let (mut gi, mut gh) = (vec![F::ZERO; 3 * h], vec![F::ZERO; 3 * h]);
        let one = F::ONE;
        for r in first..first + rows {
            // SAFETY: row r of each operand (contract); outputs: this task's rows only.
            unsafe {
                row(dt, grad_hy, r, &mut dh);
                row(dt, workspace, r, &mut w);
            }
            let (rs, rest) = w.split_at(h);
            let (zs, rest) = rest.split_at(h);
            let (ns, rest) = rest.split_at(h);
            let (hxs, hns) = rest.split_at(h);
            // Slices of exactly `h` elements so that the loop has no bounds checks.
            let (gi_r, rest) = gi.split_at_mut(h);
            let (gi_z, gi_n) = rest.split_at_mut(h);
            let (gh_r, rest) = gh.split_at_mut(h);
            let (gh_z, gh_n) = rest.split_at_mut(h);
            let (gi_n, gh_n, hns, dh) = (&mut gi_n[..h], &mut gh_n[..h], &hns[..h], &mut dh[..h]);
            for j in 0..h {
                let (rg, zg, n) = (rs[j], zs[j], ns[j]);
                let dn = dh[j] * (one - zg) * (one - n * n);
                let dz = dh[j] * (hxs[j] - n) * zg * (one - zg);
                let dr = dn * hns[j] * rg * (one - rg);
                gi_r[j] = dr;
                gi_z[j] = dz;
                gi_n[j] = dn;
                gh_r[j] = dr;
                gh_z[j] = dz;
                gh_n[j] = dn * rg;
                // dh[j] is not needed after this element: reuse it for grad_hx.
                dh[j] = dh[j] * zg;
            }
            if want_bias {
                si.iter_mut().zip(&gi).for_each(|(s, v)| *s = *s + *v);
                sh.iter_mut().zip(&gh).for_each(|(s, v)| *s = *s + *v);
            }
            // SAFETY: as above.
            unsafe {
                put(dt, gi_out, r * 3 * h, &gi);
                put(dt, gh_out, r * 3 * h, &gh);
                put(dt, ghx_out, r * h, dh);
            }
        }
        (si, sh)
    });
    let (pi, ph): (Vec<Vec<F>>, Vec<Vec<F>>) = partials.into_iter().unzip();
    // SAFETY: 3h elements each when non-null (contract).
    unsafe {
        store_sum(dt, gbias[0], &pi, 3 * h);
        store_sum(dt, gbias[1], &ph, 3 * h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    fn vals(n: usize, seed: f64) -> Vec<f64> {
        (0..n).map(|k| ((k as f64 + 1.0) * seed).sin() * 1.5).collect()
    }

    fn m(v: &[f64], cols: usize) -> Mat {
        Mat::contiguous(v.as_ptr() as *const u8, cols)
    }

    /// Naive LSTM forward in double: (hy, cy, workspace).
    fn lstm_ref(
        b: usize,
        h: usize,
        ig: &[f64],
        hg: &[f64],
        cx: &[f64],
        bias: &[f64],
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (mut hy, mut cy, mut ws) = (vec![0.0; b * h], vec![0.0; b * h], vec![0.0; b * 4 * h]);
        for r in 0..b {
            for j in 0..h {
                let g = |q: usize| ig[r * 4 * h + q * h + j] + hg[r * 4 * h + q * h + j] + bias[q * h + j];
                let (i, f, gg, o) = (sig(g(0)), sig(g(1)), g(2).tanh(), sig(g(3)));
                let c = f * cx[r * h + j] + i * gg;
                cy[r * h + j] = c;
                hy[r * h + j] = o * c.tanh();
                for (q, v) in [i, f, gg, o].into_iter().enumerate() {
                    ws[r * 4 * h + q * h + j] = v;
                }
            }
        }
        (hy, cy, ws)
    }

    fn close(a: &[f64], b: &[f64], tol: f64) {
        assert_eq!(a.len(), b.len());
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "element {k}: {x} vs {y}");
        }
    }

    #[test]
    fn lstm_forward_matches_reference_with_strided_inputs_and_no_bias() {
        let (b, h) = (3, 5);
        let ig = vals(b * 4 * h, 0.37);
        // hgates stored transposed ([4h, b] memory): column stride b, row stride 1.
        let hg = vals(b * 4 * h, 0.91);
        let hg_t: Vec<f64> =
            (0..4 * h).flat_map(|k| (0..b).map(move |r| (r, k))).map(|(r, k)| hg[r * 4 * h + k]).collect();
        let cx = vals(b * h, 1.3);
        let b_ih = vals(4 * h, 0.13);
        let b_hh = vals(4 * h, 0.71);
        for with_bias in [true, false] {
            let bias: Vec<f64> =
                if with_bias { b_ih.iter().zip(&b_hh).map(|(a, c)| a + c).collect() } else { vec![0.0; 4 * h] };
            let (want_hy, want_cy, want_ws) = lstm_ref(b, h, &ig, &hg, &cx, &bias);
            let (mut hy, mut cy, mut ws) = (vec![0.0; b * h], vec![0.0; b * h], vec![0.0; b * 4 * h]);
            let hgm = Mat { ptr: hg_t.as_ptr() as *const u8, row_stride: 1, col_stride: b as isize };
            let (pi, ph) = if with_bias {
                (b_ih.as_ptr() as *const u8, b_hh.as_ptr() as *const u8)
            } else {
                (std::ptr::null(), std::ptr::null())
            };
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                lstm_cell(
                    DType::F64,
                    b,
                    h,
                    LstmCell {
                        igates: m(&ig, 4 * h),
                        hgates: hgm,
                        cx: m(&cx, h),
                        b_ih: pi,
                        b_hh: ph,
                        hy: hy.as_mut_ptr() as _,
                        cy: cy.as_mut_ptr() as _,
                        workspace: ws.as_mut_ptr() as _,
                    },
                    2,
                )
            }
            .unwrap();
            close(&hy, &want_hy, 1e-12);
            close(&cy, &want_cy, 1e-12);
            close(&ws, &want_ws, 1e-12);
        }
    }

    #[test]
    fn lstm_backward_matches_finite_differences() {
        let (b, h) = (2, 3);
        let ig = vals(b * 4 * h, 0.53);
        let hg = vec![0.0; b * 4 * h];
        let cx = vals(b * h, 0.29);
        let (rh, rc) = (vals(b * h, 1.7), vals(b * h, 2.3));
        // loss = sum(hy * rh + cy * rc)
        let loss = |ig: &[f64], cx: &[f64]| {
            let (hy, cy, _) = lstm_ref(b, h, ig, &hg, cx, &vec![0.0; 4 * h]);
            hy.iter().zip(&rh).map(|(a, c)| a * c).sum::<f64>() + cy.iter().zip(&rc).map(|(a, c)| a * c).sum::<f64>()
        };
        let (_, cy, ws) = lstm_ref(b, h, &ig, &hg, &cx, &vec![0.0; 4 * h]);
        let (mut gg, mut gcx, mut gb) = (vec![0.0; b * 4 * h], vec![0.0; b * h], vec![0.0; 4 * h]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            lstm_cell_backward(
                DType::F64,
                b,
                h,
                LstmCellGrads {
                    grad_hy: m(&rh, h),
                    grad_cy: m(&rc, h),
                    cx: m(&cx, h),
                    cy: m(&cy, h),
                    workspace: m(&ws, 4 * h),
                    grad_gates: gg.as_mut_ptr() as _,
                    grad_cx: gcx.as_mut_ptr() as _,
                    grad_bias: gb.as_mut_ptr() as _,
                },
                1,
            )
            .unwrap();
        }
        for k in 0..b * 4 * h {
            let (mut p, mut q) = (ig.clone(), ig.clone());
            p[k] += 1e-6;
            q[k] -= 1e-6;
            let fd = (loss(&p, &cx) - loss(&q, &cx)) / 2e-6;
            assert!((fd - gg[k]).abs() < 1e-6, "grad_gates[{k}]: {fd} vs {}", gg[k]);
        }
        for k in 0..b * h {
            let (mut p, mut q) = (cx.clone(), cx.clone());
            p[k] += 1e-6;
            q[k] -= 1e-6;
            let fd = (loss(&ig, &p) - loss(&ig, &q)) / 2e-6;
            assert!((fd - gcx[k]).abs() < 1e-6, "grad_cx[{k}]: {fd} vs {}", gcx[k]);
        }
        let want_gb: Vec<f64> = (0..4 * h).map(|k| gg[k] + gg[4 * h + k]).collect();
        close(&gb, &want_gb, 1e-14);
        // Only grad_hy given: grad_cy counts as zero.
        let (mut gg2, mut gcx2) = (vec![0.0; b * 4 * h], vec![0.0; b * h]);
        let none = Mat::contiguous(std::ptr::null(), h);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            lstm_cell_backward(
                DType::F64,
                b,
                h,
                LstmCellGrads {
                    grad_hy: m(&rh, h),
                    grad_cy: none,
                    cx: m(&cx, h),
                    cy: m(&cy, h),
                    workspace: m(&ws, 4 * h),
                    grad_gates: gg2.as_mut_ptr() as _,
                    grad_cx: gcx2.as_mut_ptr() as _,
                    grad_bias: std::ptr::null_mut(),
                },
                1,
            )
            .unwrap();
        }
        let zeros = vec![0.0; b * h];
        let mut gg3 = vec![0.0; b * 4 * h];
        let mut gcx3 = vec![0.0; b * h];
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            lstm_cell_backward(
                DType::F64,
                b,
                h,
                LstmCellGrads {
                    grad_hy: m(&rh, h),
                    grad_cy: m(&zeros, h),
                    cx: m(&cx, h),
                    cy: m(&cy, h),
                    workspace: m(&ws, 4 * h),
                    grad_gates: gg3.as_mut_ptr() as _,
                    grad_cx: gcx3.as_mut_ptr() as _,
                    grad_bias: std::ptr::null_mut(),
                },
                1,
            )
            .unwrap();
        }
        assert_eq!(gg2, gg3);
        assert_eq!(gcx2, gcx3);
    }

    /// Naive GRU forward in double: (hy, workspace).
    fn gru_ref(b: usize, h: usize, ig: &[f64], hg: &[f64], hx: &[f64], bi: &[f64], bh: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (mut hy, mut ws) = (vec![0.0; b * h], vec![0.0; b * 5 * h]);
        for r in 0..b {
            for j in 0..h {
                let x = |q: usize| ig[r * 3 * h + q * h + j] + bi[q * h + j];
                let y = |q: usize| hg[r * 3 * h + q * h + j] + bh[q * h + j];
                let rg = sig(x(0) + y(0));
                let zg = sig(x(1) + y(1));
                let n = (x(2) + rg * y(2)).tanh();
                let hv = hx[r * h + j];
                hy[r * h + j] = (1.0 - zg) * n + zg * hv;
                for (q, v) in [rg, zg, n, hv, y(2)].into_iter().enumerate() {
                    ws[r * 5 * h + q * h + j] = v;
                }
            }
        }
        (hy, ws)
    }

    #[test]
    fn gru_forward_and_backward_match_reference_and_finite_differences() {
        let (b, h) = (3, 4);
        let ig = vals(b * 3 * h, 0.41);
        let hg = vals(b * 3 * h, 0.77);
        let hx = vals(b * h, 1.1);
        let (bi, bh) = (vals(3 * h, 0.23), vals(3 * h, 0.59));
        let (want_hy, want_ws) = gru_ref(b, h, &ig, &hg, &hx, &bi, &bh);
        let (mut hy, mut ws) = (vec![0.0; b * h], vec![0.0; b * 5 * h]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            gru_cell(
                DType::F64,
                b,
                h,
                GruCell {
                    igates: m(&ig, 3 * h),
                    hgates: m(&hg, 3 * h),
                    hx: m(&hx, h),
                    b_ih: bi.as_ptr() as _,
                    b_hh: bh.as_ptr() as _,
                    hy: hy.as_mut_ptr() as _,
                    workspace: ws.as_mut_ptr() as _,
                },
                1,
            )
        }
        .unwrap();
        close(&hy, &want_hy, 1e-12);
        close(&ws, &want_ws, 1e-12);

        let rg = vals(b * h, 1.9);
        let loss = |ig: &[f64], hg: &[f64], hx: &[f64]| {
            gru_ref(b, h, ig, hg, hx, &bi, &bh).0.iter().zip(&rg).map(|(a, c)| a * c).sum::<f64>()
        };
        let (mut gi, mut gh, mut ghx) = (vec![0.0; b * 3 * h], vec![0.0; b * 3 * h], vec![0.0; b * h]);
        let (mut gbi, mut gbh) = (vec![0.0; 3 * h], vec![0.0; 3 * h]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            gru_cell_backward(
                DType::F64,
                b,
                h,
                GruCellGrads {
                    grad_hy: m(&rg, h),
                    workspace: m(&ws, 5 * h),
                    grad_input_gates: gi.as_mut_ptr() as _,
                    grad_hidden_gates: gh.as_mut_ptr() as _,
                    grad_hx: ghx.as_mut_ptr() as _,
                    grad_input_bias: gbi.as_mut_ptr() as _,
                    grad_hidden_bias: gbh.as_mut_ptr() as _,
                },
                2,
            )
            .unwrap();
        }
        let fd = |which: usize, k: usize| {
            let mut args = [ig.clone(), hg.clone(), hx.clone()];
            args[which][k] += 1e-6;
            let p = loss(&args[0], &args[1], &args[2]);
            args[which][k] -= 2e-6;
            (p - loss(&args[0], &args[1], &args[2])) / 2e-6
        };
        for k in 0..b * 3 * h {
            assert!((fd(0, k) - gi[k]).abs() < 1e-6, "grad_input_gates[{k}]");
            assert!((fd(1, k) - gh[k]).abs() < 1e-6, "grad_hidden_gates[{k}]");
        }
        for (k, &g) in ghx.iter().enumerate() {
            assert!((fd(2, k) - g).abs() < 1e-6, "grad_hx[{k}]");
        }
        let colsum = |g: &[f64]| -> Vec<f64> { (0..3 * h).map(|k| (0..b).map(|r| g[r * 3 * h + k]).sum()).collect() };
        close(&gbi, &colsum(&gi), 1e-14);
        close(&gbh, &colsum(&gh), 1e-14);
    }

    #[test]
    fn half_and_float_cells_compute_in_float32_and_large_batches_split_deterministically() {
        // A batch large enough to run in chunks on several tasks: bias sums must equal the one-thread run.
        let (b, h) = (64, 160);
        let ig: Vec<f32> = vals(b * 3 * h, 0.31).iter().map(|&v| v as f32).collect();
        let hg: Vec<f32> = vals(b * 3 * h, 0.67).iter().map(|&v| v as f32).collect();
        let hx: Vec<f32> = vals(b * h, 0.17).iter().map(|&v| v as f32).collect();
        let mf = |v: &[f32], c: usize| Mat::contiguous(v.as_ptr() as *const u8, c);
        let run = |threads: usize| {
            let (mut hy, mut ws) = (vec![0f32; b * h], vec![0f32; b * 5 * h]);
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                gru_cell(
                    DType::F32,
                    b,
                    h,
                    GruCell {
                        igates: mf(&ig, 3 * h),
                        hgates: mf(&hg, 3 * h),
                        hx: mf(&hx, h),
                        b_ih: std::ptr::null(),
                        b_hh: std::ptr::null(),
                        hy: hy.as_mut_ptr() as _,
                        workspace: ws.as_mut_ptr() as _,
                    },
                    threads,
                )
            }
            .unwrap();
            let (mut gi, mut gh, mut ghx) = (vec![0f32; b * 3 * h], vec![0f32; b * 3 * h], vec![0f32; b * h]);
            let (mut gbi, mut gbh) = (vec![0f32; 3 * h], vec![0f32; 3 * h]);
            // SAFETY: the pointers address live local buffers sized for the call.
            unsafe {
                gru_cell_backward(
                    DType::F32,
                    b,
                    h,
                    GruCellGrads {
                        grad_hy: mf(&hx, h),
                        workspace: mf(&ws, 5 * h),
                        grad_input_gates: gi.as_mut_ptr() as _,
                        grad_hidden_gates: gh.as_mut_ptr() as _,
                        grad_hx: ghx.as_mut_ptr() as _,
                        grad_input_bias: gbi.as_mut_ptr() as _,
                        grad_hidden_bias: gbh.as_mut_ptr() as _,
                    },
                    threads,
                )
            }
            .unwrap();
            (hy, gbi, gbh)
        };
        let (hy1, gbi1, gbh1) = run(1);
        let (hy4, gbi4, gbh4) = run(4);
        assert_eq!((hy1.clone(), gbi1), (hy4, gbi4));
        assert_eq!(gbh1, gbh4);
        let ig64: Vec<f64> = ig.iter().map(|&v| v as f64).collect();
        let hg64: Vec<f64> = hg.iter().map(|&v| v as f64).collect();
        let hx64: Vec<f64> = hx.iter().map(|&v| v as f64).collect();
        let (want, _) = gru_ref(b, h, &ig64, &hg64, &hx64, &vec![0.0; 3 * h], &vec![0.0; 3 * h]);
        close(&hy1.iter().map(|&v| v as f64).collect::<Vec<_>>(), &want, 1e-6);

        // bfloat16 LSTM: inputs rounded to bf16, result within bf16 rounding of the double reference.
        use half::bf16;
        let (b, h) = (2, 8);
        let ig: Vec<bf16> = vals(b * 4 * h, 0.45).iter().map(|&v| bf16::from_f64(v)).collect();
        let cx: Vec<bf16> = vals(b * h, 0.85).iter().map(|&v| bf16::from_f64(v)).collect();
        let zeros = vec![bf16::ZERO; b * 4 * h];
        let mb = |v: &[bf16], c: usize| Mat::contiguous(v.as_ptr() as *const u8, c);
        let (mut hy, mut cy, mut ws) = (vec![bf16::ZERO; b * h], vec![bf16::ZERO; b * h], vec![bf16::ZERO; b * 4 * h]);
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            lstm_cell(
                DType::BF16,
                b,
                h,
                LstmCell {
                    igates: mb(&ig, 4 * h),
                    hgates: mb(&zeros, 4 * h),
                    cx: mb(&cx, h),
                    b_ih: std::ptr::null(),
                    b_hh: std::ptr::null(),
                    hy: hy.as_mut_ptr() as _,
                    cy: cy.as_mut_ptr() as _,
                    workspace: ws.as_mut_ptr() as _,
                },
                1,
            )
        }
        .unwrap();
        let up = |v: &[bf16]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
        let (want_hy, want_cy, _) = lstm_ref(b, h, &up(&ig), &vec![0.0; b * 4 * h], &up(&cx), &vec![0.0; 4 * h]);
        close(&up(&hy), &want_hy, 1e-2);
        close(&up(&cy), &want_cy, 1e-2);
    }

    #[test]
    fn integer_dtypes_are_rejected() {
        // SAFETY: the pointers address live local buffers sized for the call.
        let e = unsafe {
            gru_cell(
                DType::I32,
                1,
                1,
                GruCell {
                    igates: Mat::contiguous(std::ptr::null(), 3),
                    hgates: Mat::contiguous(std::ptr::null(), 3),
                    hx: Mat::contiguous(std::ptr::null(), 1),
                    b_ih: std::ptr::null(),
                    b_hh: std::ptr::null(),
                    hy: std::ptr::null_mut(),
                    workspace: std::ptr::null_mut(),
                },
                1,
            )
        };
        assert!(matches!(e, Err(Error::UnsupportedDtype { .. })));
    }
}
