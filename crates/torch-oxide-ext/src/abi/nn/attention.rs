//! Scaled dot-product attention, forward and backward (`oxide_kernels::ops::nn::attention`).

use super::*;

/// The scalars of one attention call: the causal flag (top-left aligned), the
/// resolved `scale`, the dropout probability (0: none) with its Philox state.
/// Extents come from the operands: query `[B, Hq, L, E]`, key `[B, Hkv, S,
/// E]`, value `[B, Hkv, S, Ev]` (`Hkv` dividing `Hq`), any strides.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OxideAttention {
    pub causal: bool,
    pub scale: f64,
    pub dropout_p: f64,
    pub philox: OxidePhilox,
}

/// The extents of an attention call, checked across query, key and value.
fn attention_dims(
    op: &'static str,
    q: &Operand,
    k: &Operand,
    v: &Operand,
) -> Result<oxide_kernels::ops::nn::attention::Dims, AbiError> {
    for o in [q, k, v] {
        rank_is(op, o, 4)?;
    }
    let (qe, ke, ve) = (q.extents(), k.extents(), v.extents());
    let (batch, heads_q, len_q, dim_qk) = (qe[0], qe[1], qe[2], qe[3]);
    let (heads_kv, len_kv, dim_v) = (ke[1], ke[2], ve[3]);
    let consistent = ke[0] == batch
        && ve[0] == batch
        && ve[1] == heads_kv
        && ke[3] == dim_qk
        && ve[2] == len_kv
        && heads_kv > 0
        && heads_q % heads_kv == 0;
    if !consistent {
        return Err(AbiError::Invalid(format!(
            "{op}: query {:?}, key {:?} and value {:?} do not match",
            q.sizes, k.sizes, v.sizes
        )));
    }
    Ok(oxide_kernels::ops::nn::attention::Dims { batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v })
}

/// A decoded 4-d operand as the attention kernels take it.
fn attention_operand(o: &Operand) -> oxide_kernels::ops::nn::attention::Operand {
    oxide_kernels::ops::nn::attention::Operand {
        ptr: o.data as *mut u8,
        strides: [o.strides[0], o.strides[1], o.strides[2], o.strides[3]],
    }
}

/// The dtype logsumexp is kept in: float64 for float64 inputs, else float32.
fn lse_dtype(dt: DType) -> DType {
    if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Philox blocks the dropout mask of an attention over `query`, `key` and
/// `value` consumes (the generator offset must advance by this much; see
/// `oxide_kernels::ops::nn::attention`).
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `out` is a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_dropout_blocks(
    query: OxideTensor,
    key: OxideTensor,
    value: OxideTensor,
    out: *mut u64,
) -> i32 {
    const OP: &str = "scaled_dot_product_attention";
    ffi(|| {
        // SAFETY: the function's contract.
        let [q, k, v] = unsafe { required(OP, [&query, &key, &value]) }?;
        put(out, oxide_kernels::ops::nn::attention::dropout_blocks(&attention_dims(OP, &q, &k, &v)?))
    })
}

/// Checks the attention over `q`, `k`, `v` and the optional `bias`
/// (`[B, Hq, L, S]`, any strides; stride 0 on broadcast dims): every operand's
/// sizes and dtype. Returns the extents and the dtype.
fn check_attention(
    op: &'static str,
    [q, k, v]: [&Operand; 3],
    bias: &Option<Operand>,
) -> Result<(oxide_kernels::ops::nn::attention::Dims, DType), AbiError> {
    let dims = attention_dims(op, q, k, v)?;
    let dt = common_dtype(op, &[q, k, v])?;
    if let Some(b) = bias {
        b.sizes_are(op, &[dims.batch, dims.heads_q, dims.len_q, dims.len_kv].map(|e| e as i64))?;
        b.dtype_is(op, dt)?;
    }
    Ok((dims, dt))
}

/// Runs `f` with the kernel's description of an attention checked by
/// [`check_attention`] (dropout bits from the Philox state of `a`). Called
/// inside the launch record, which owns the operands and the scalars.
fn with_attention<T>(
    a: OxideAttention,
    (dims, dtype): (oxide_kernels::ops::nn::attention::Dims, DType),
    [q, k, v]: [&Operand; 3],
    bias: &Option<Operand>,
    threads: usize,
    f: impl FnOnce(&oxide_kernels::ops::nn::attention::Attention) -> T,
) -> T {
    use oxide_kernels::ops::nn::attention::{Attention, Dropout};
    let bits = philox(&a.philox);
    let att = Attention {
        dims,
        dtype,
        query: attention_operand(q),
        key: attention_operand(k),
        value: attention_operand(v),
        bias: bias.as_ref().map(attention_operand),
        causal: a.causal,
        scale: a.scale,
        dropout: (a.dropout_p > 0.0).then_some(Dropout { p: a.dropout_p, bits: &bits }),
        threads,
    };
    f(&att)
}

/// Fused attention forward (`oxide_kernels::ops::nn::attention::forward`):
/// writes `out` (`[B, Hq, L, Ev]`, any strides, the inputs' dtype) and
/// `logsumexp` (`[B, Hq, L]` contiguous; float64 for float64 inputs, else
/// float32) from `query`, `key`, `value` and the optional `bias`.
///
/// # Safety
/// `attention` is valid; each [`OxideTensor`] describes live memory (see
/// [`operands`]); outputs overlap no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_forward(
    on: OxideLaunch,
    out: OxideTensor,
    logsumexp: OxideTensor,
    query: OxideTensor,
    key: OxideTensor,
    value: OxideTensor,
    bias: OxideTensor,
    attention: *const OxideAttention,
) -> i32 {
    const OP: &str = "scaled_dot_product_attention";
    ffi(|| {
        // SAFETY: the function's contract.
        let [out, lse, q, k, v, bias] = unsafe { operands(OP, [&out, &logsumexp, &query, &key, &value, &bias]) }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (out, lse, q, k, v) = (
            out.ok_or_else(missing)?,
            lse.ok_or_else(missing)?,
            q.ok_or_else(missing)?,
            k.ok_or_else(missing)?,
            v.ok_or_else(missing)?,
        );
        // SAFETY: the function's contract.
        let a = *unsafe { attention.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        let checked = check_attention(OP, [&q, &k, &v], &bias)?;
        let (d, dt) = checked;
        out.sizes_are(OP, &[d.batch, d.heads_q, d.len_q, d.dim_v].map(|e| e as i64))?;
        out.dtype_is(OP, dt)?;
        lse.dtype_is(OP, lse_dtype(dt))?;
        flat(OP, &lse, d.batch * d.heads_q * d.len_q)?;
        launch(&on, move || {
            with_attention(a, checked, [&q, &k, &v], &bias, on.threads(), |att| {
                // SAFETY: every operand was decoded and checked to have the sizes `att.dims` implies;
                // the kernel addresses them through their own strides.
                unsafe { oxide_kernels::ops::nn::attention::forward(att, attention_operand(&out), lse.dst()) }
            })
        })
    })
}

/// Fused attention backward (`oxide_kernels::ops::nn::attention::backward`)
/// from the forward's `out` and `logsumexp` and `grad_out` (`out`'s sizes):
/// writes each gradient that is present (`grad_bias` is the full `[B, Hq, L,
/// S]` gradient; the caller reduces it to the bias's shape). Dropout must use
/// the forward's Philox state.
///
/// # Safety
/// As [`oxide_attention_forward`]; the gradients overlap each other and no input.
#[no_mangle]
pub unsafe extern "C" fn oxide_attention_backward(
    on: OxideLaunch,
    grad_query: OxideTensor,
    grad_key: OxideTensor,
    grad_value: OxideTensor,
    grad_bias: OxideTensor,
    grad_out: OxideTensor,
    out: OxideTensor,
    logsumexp: OxideTensor,
    query: OxideTensor,
    key: OxideTensor,
    value: OxideTensor,
    bias: OxideTensor,
    attention: *const OxideAttention,
) -> i32 {
    use oxide_kernels::ops::nn::attention::Grads;
    const OP: &str = "scaled_dot_product_attention_backward";
    ffi(|| {
        // SAFETY: the function's contract.
        let [gq, gk, gv, gb, grad_out, out, lse, q, k, v, bias] = unsafe {
            operands(
                OP,
                [
                    &grad_query,
                    &grad_key,
                    &grad_value,
                    &grad_bias,
                    &grad_out,
                    &out,
                    &logsumexp,
                    &query,
                    &key,
                    &value,
                    &bias,
                ],
            )
        }?;
        let missing = || AbiError::Invalid(format!("{OP}: a required operand is missing (null data)"));
        let (grad_out, out, lse, q, k, v) = (
            grad_out.ok_or_else(missing)?,
            out.ok_or_else(missing)?,
            lse.ok_or_else(missing)?,
            q.ok_or_else(missing)?,
            k.ok_or_else(missing)?,
            v.ok_or_else(missing)?,
        );
        // SAFETY: the function's contract.
        let a = *unsafe { attention.as_ref() }.ok_or_else(|| AbiError::Invalid(format!("{OP}: null description")))?;
        let checked = check_attention(OP, [&q, &k, &v], &bias)?;
        let (d, dt) = checked;
        let out_sizes = [d.batch, d.heads_q, d.len_q, d.dim_v].map(|e| e as i64);
        for o in [&out, &grad_out] {
            o.sizes_are(OP, &out_sizes)?;
            o.dtype_is(OP, dt)?;
        }
        lse.dtype_is(OP, lse_dtype(dt))?;
        flat(OP, &lse, d.batch * d.heads_q * d.len_q)?;
        let bias_sizes = [d.batch, d.heads_q, d.len_q, d.len_kv].map(|e| e as i64);
        for (g, sizes) in [(&gq, &q.sizes[..]), (&gk, &k.sizes[..]), (&gv, &v.sizes[..]), (&gb, &bias_sizes[..])] {
            if let Some(g) = g {
                g.sizes_are(OP, sizes)?;
                g.dtype_is(OP, dt)?;
            }
        }
        launch(&on, move || {
            let op4 = |o: &Option<Operand>| o.as_ref().map(attention_operand);
            let grads = Grads { query: op4(&gq), key: op4(&gk), value: op4(&gv), bias: op4(&gb) };
            with_attention(a, checked, [&q, &k, &v], &bias, on.threads(), |att| {
                // SAFETY: every operand was decoded and checked to have the sizes `att.dims` implies;
                // the kernel addresses them through their own strides.
                unsafe {
                    oxide_kernels::ops::nn::attention::backward(
                        att,
                        attention_operand(&out),
                        attention_operand(&grad_out),
                        lse.src(),
                        grads,
                    )
                }
            })
        })
    })
}
