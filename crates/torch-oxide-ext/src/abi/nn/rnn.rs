//! Fused LSTM and GRU cells, forward and backward (`oxide_kernels::ops::nn::rnn`), called by `csrc/aten/nn/rnn.cpp`.

use super::*;

/// A 2-d operand of `[rows, cols]` as the cell kernels read it (any strides); absent: a null matrix.
fn cell_mat(
    op: &'static str,
    o: &Option<Operand>,
    rows: usize,
    cols: usize,
) -> Result<oxide_kernels::ops::nn::rnn::Mat, AbiError> {
    use oxide_kernels::ops::nn::rnn::Mat;
    match o {
        None => Ok(Mat { ptr: std::ptr::null(), row_stride: 0, col_stride: 0 }),
        Some(o) => {
            o.sizes_are(op, &[rows as i64, cols as i64])?;
            Ok(Mat { ptr: o.src(), row_stride: o.strides[0] as isize, col_stride: o.strides[1] as isize })
        }
    }
}

/// `[batch, hidden]` of a 2-d state operand.
fn cell_dims(op: &'static str, state: &Operand) -> Result<(usize, usize), AbiError> {
    rank_is(op, state, 2)?;
    let e = state.extents();
    Ok((e[0], e[1]))
}

/// Refuses a cell whose operands differ in dtype (the kernels read one dtype throughout).
fn cell_dtype(op: &'static str, ops: &[&Option<Operand>]) -> Result<DType, AbiError> {
    let given: Vec<&Operand> = ops.iter().filter_map(|o| o.as_ref()).collect();
    common_dtype(op, &given)
}

/// `_thnn_fused_lstm_cell`: gate pre-activations `igates`, `hgates`
/// (`[batch, 4 hidden]`, any strides), cell state `cx` (`[batch, hidden]`, any
/// strides), optional biases `b_ih`, `b_hh` (`[4 hidden]` contiguous) to
/// contiguous `hy`, `cy` (`[batch, hidden]`) and `workspace` (`[batch, 4
/// hidden]`); one dtype throughout.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell(
    on: OxideLaunch,
    hy: OxideTensor,
    cy: OxideTensor,
    workspace: OxideTensor,
    igates: OxideTensor,
    hgates: OxideTensor,
    cx: OxideTensor,
    b_ih: OxideTensor,
    b_hh: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::nn::rnn::LstmCell;
    const OP: &str = "_thnn_fused_lstm_cell";
    ffi(|| {
        // SAFETY: the function's contract.
        let all = unsafe { operands(OP, [&hy, &cy, &workspace, &igates, &hgates, &cx, &b_ih, &b_hh]) }?;
        let [hy, cy, workspace, igates, hgates, cx, b_ih, b_hh] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (hy_o, cy_o, ws_o) =
            (hy.clone().ok_or_else(missing)?, cy.clone().ok_or_else(missing)?, workspace.clone().ok_or_else(missing)?);
        if igates.is_none() || hgates.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, cx.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &hy_o, batch * hidden)?;
        flat(OP, &cy_o, batch * hidden)?;
        flat(OP, &ws_o, batch * 4 * hidden)?;
        flat_opt(OP, b_ih, 4 * hidden)?;
        flat_opt(OP, b_hh, 4 * hidden)?;
        let io = LstmCell {
            igates: cell_mat(OP, igates, batch, 4 * hidden)?,
            hgates: cell_mat(OP, hgates, batch, 4 * hidden)?,
            cx: cell_mat(OP, cx, batch, hidden)?,
            b_ih: src_or_null(b_ih),
            b_hh: src_or_null(b_hh),
            hy: hy_o.dst(),
            cy: cy_o.dst(),
            workspace: ws_o.dst(),
        };
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::lstm_cell(dt, batch, hidden, io, on.threads()) }
        })
    })
}

/// `_thnn_fused_lstm_cell_backward_impl`: from `grad_hy`, `grad_cy` (either
/// optional: zero; any strides), the forward's `cx`, `cy` (`[batch, hidden]`)
/// and `workspace` (`[batch, 4 hidden]`), to contiguous `grad_gates` (`[batch,
/// 4 hidden]`), `grad_cx` (`[batch, hidden]`) and the optional `grad_bias` (`[4 hidden]`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_lstm_cell_backward(
    on: OxideLaunch,
    grad_gates: OxideTensor,
    grad_cx: OxideTensor,
    grad_bias: OxideTensor,
    grad_hy: OxideTensor,
    grad_cy: OxideTensor,
    cx: OxideTensor,
    cy: OxideTensor,
    workspace: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::nn::rnn::LstmCellGrads;
    const OP: &str = "_thnn_fused_lstm_cell_backward_impl";
    ffi(|| {
        // SAFETY: the function's contract.
        let all =
            unsafe { operands(OP, [&grad_gates, &grad_cx, &grad_bias, &grad_hy, &grad_cy, &cx, &cy, &workspace]) }?;
        let [grad_gates, grad_cx, grad_bias, grad_hy, grad_cy, cx, cy, workspace] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (gg, gcx) = (grad_gates.clone().ok_or_else(missing)?, grad_cx.clone().ok_or_else(missing)?);
        if cy.is_none() || workspace.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, cx.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &gg, batch * 4 * hidden)?;
        flat(OP, &gcx, batch * hidden)?;
        flat_opt(OP, grad_bias, 4 * hidden)?;
        let io = LstmCellGrads {
            grad_hy: cell_mat(OP, grad_hy, batch, hidden)?,
            grad_cy: cell_mat(OP, grad_cy, batch, hidden)?,
            cx: cell_mat(OP, cx, batch, hidden)?,
            cy: cell_mat(OP, cy, batch, hidden)?,
            workspace: cell_mat(OP, workspace, batch, 4 * hidden)?,
            grad_gates: gg.dst(),
            grad_cx: gcx.dst(),
            grad_bias: dst_or_null(grad_bias),
        };
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::lstm_cell_backward(dt, batch, hidden, io, on.threads()) }
        })
    })
}

/// `_thnn_fused_gru_cell`: gate pre-activations `igates`, `hgates` (`[batch,
/// 3 hidden]`, any strides), hidden state `hx` (`[batch, hidden]`, any
/// strides), optional biases (`[3 hidden]` contiguous) to contiguous `hy`
/// (`[batch, hidden]`) and `workspace` (`[batch, 5 hidden]`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell(
    on: OxideLaunch,
    hy: OxideTensor,
    workspace: OxideTensor,
    igates: OxideTensor,
    hgates: OxideTensor,
    hx: OxideTensor,
    b_ih: OxideTensor,
    b_hh: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::nn::rnn::GruCell;
    const OP: &str = "_thnn_fused_gru_cell";
    ffi(|| {
        // SAFETY: the function's contract.
        let all = unsafe { operands(OP, [&hy, &workspace, &igates, &hgates, &hx, &b_ih, &b_hh]) }?;
        let [hy, workspace, igates, hgates, hx, b_ih, b_hh] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (hy_o, ws_o) = (hy.clone().ok_or_else(missing)?, workspace.clone().ok_or_else(missing)?);
        if igates.is_none() || hgates.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, hx.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &hy_o, batch * hidden)?;
        flat(OP, &ws_o, batch * 5 * hidden)?;
        flat_opt(OP, b_ih, 3 * hidden)?;
        flat_opt(OP, b_hh, 3 * hidden)?;
        let io = GruCell {
            igates: cell_mat(OP, igates, batch, 3 * hidden)?,
            hgates: cell_mat(OP, hgates, batch, 3 * hidden)?,
            hx: cell_mat(OP, hx, batch, hidden)?,
            b_ih: src_or_null(b_ih),
            b_hh: src_or_null(b_hh),
            hy: hy_o.dst(),
            workspace: ws_o.dst(),
        };
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::gru_cell(dt, batch, hidden, io, on.threads()) }
        })
    })
}

/// `_thnn_fused_gru_cell_backward`: from `grad_hy` (`[batch, hidden]`, any
/// strides) and the forward's `workspace` (`[batch, 5 hidden]`) to contiguous
/// `grad_input_gates`, `grad_hidden_gates` (`[batch, 3 hidden]`), `grad_hx`
/// (`[batch, hidden]`) and the optional bias gradients (`[3 hidden]`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]).
#[no_mangle]
pub unsafe extern "C" fn oxide_gru_cell_backward(
    on: OxideLaunch,
    grad_input_gates: OxideTensor,
    grad_hidden_gates: OxideTensor,
    grad_hx: OxideTensor,
    grad_input_bias: OxideTensor,
    grad_hidden_bias: OxideTensor,
    grad_hy: OxideTensor,
    workspace: OxideTensor,
) -> i32 {
    use oxide_kernels::ops::nn::rnn::GruCellGrads;
    const OP: &str = "_thnn_fused_gru_cell_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let all = unsafe {
            operands(
                OP,
                [
                    &grad_input_gates,
                    &grad_hidden_gates,
                    &grad_hx,
                    &grad_input_bias,
                    &grad_hidden_bias,
                    &grad_hy,
                    &workspace,
                ],
            )
        }?;
        let [gi, gh, ghx, gib, ghb, grad_hy, workspace] = &all;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (gi_o, gh_o, ghx_o) =
            (gi.clone().ok_or_else(missing)?, gh.clone().ok_or_else(missing)?, ghx.clone().ok_or_else(missing)?);
        if workspace.is_none() {
            return Err(missing());
        }
        let (batch, hidden) = cell_dims(OP, grad_hy.as_ref().ok_or_else(missing)?)?;
        let dt = cell_dtype(OP, &all.iter().collect::<Vec<_>>())?;
        flat(OP, &gi_o, batch * 3 * hidden)?;
        flat(OP, &gh_o, batch * 3 * hidden)?;
        flat(OP, &ghx_o, batch * hidden)?;
        flat_opt(OP, gib, 3 * hidden)?;
        flat_opt(OP, ghb, 3 * hidden)?;
        let io = GruCellGrads {
            grad_hy: cell_mat(OP, grad_hy, batch, hidden)?,
            workspace: cell_mat(OP, workspace, batch, 5 * hidden)?,
            grad_input_gates: gi_o.dst(),
            grad_hidden_gates: gh_o.dst(),
            grad_hx: ghx_o.dst(),
            grad_input_bias: dst_or_null(gib),
            grad_hidden_bias: dst_or_null(ghb),
        };
        launch(&on, move || {
            // SAFETY: every operand was decoded and checked to have the sizes the cell implies
            // (the matrices are read through their own strides, the rest is contiguous).
            unsafe { oxide_kernels::ops::nn::rnn::gru_cell_backward(dt, batch, hidden, io, on.threads()) }
        })
    })
}
