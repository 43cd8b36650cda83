//! Neural-network kernels (`csrc/aten/nn/`, `oxide_kernels::ops::nn`): softmax, NLL, margin, norms,
//! pooling, convolution and unfold, RNN cells, embedding bags, grid sampling, attention.
//!
//! Every entry point decodes its operands once ([`operands`] / [`required`]), checks
//! what its kernel assumes (dtypes, contiguity, element counts and sizes the
//! kernel derives its loops from) and only then launches the kernel.

use super::*;

use oxide_kernels::DType;

pub mod attention;
pub mod conv;
pub mod embedding;
pub mod grid_sample;
pub mod margin;
pub mod nll;
pub mod norm;
pub mod pool;
pub mod rnn;
pub mod softmax;

// ---- operand decoding and checks shared by the family ----

/// Refuses `o` unless it is contiguous with `numel` elements (a kernel reading a flat buffer).
fn flat(op: &'static str, o: &Operand, numel: usize) -> Result<(), AbiError> {
    o.contiguous(op)?;
    o.numel_is(op, numel)?;
    Ok(())
}

/// [`flat`] for an optional operand.
fn flat_opt(op: &'static str, o: &Option<Operand>, numel: usize) -> Result<(), AbiError> {
    o.as_ref().map_or(Ok(()), |o| flat(op, o, numel))
}

/// The dtype the present operands among `ops` share; `fallback` when none is present.
fn optional_dtype(op: &'static str, ops: &[&Option<Operand>], fallback: DType) -> Result<DType, AbiError> {
    let given: Vec<&Operand> = ops.iter().filter_map(|o| o.as_ref()).collect();
    if given.is_empty() {
        return Ok(fallback);
    }
    common_dtype(op, &given)
}

/// The first element of an optional operand the kernel reads (null when absent).
fn src_or_null(o: &Option<Operand>) -> *const u8 {
    o.as_ref().map_or(std::ptr::null(), |o| o.src())
}

/// The first element of an optional operand the kernel writes (null when absent).
fn dst_or_null(o: &Option<Operand>) -> *mut u8 {
    o.as_ref().map_or(std::ptr::null_mut(), |o| o.dst())
}

/// A non-negative `i64` scalar or extent as `usize`.
fn size(op: &'static str, what: &str, v: i64) -> Result<usize, AbiError> {
    usize::try_from(v).map_err(|_| AbiError::Invalid(format!("{op}: negative {what} {v}")))
}

/// Refuses an operand whose rank is not `ndim`.
fn rank_is(op: &'static str, o: &Operand, ndim: usize) -> Result<(), AbiError> {
    if o.sizes.len() != ndim {
        return Err(AbiError::Invalid(format!("{op}: expected a {ndim}-d operand, got sizes {:?}", o.sizes)));
    }
    Ok(())
}
