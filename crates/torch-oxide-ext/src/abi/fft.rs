//! Discrete Fourier transforms (`csrc/aten/fft/`, `oxide_kernels::ops::fft`):
//! PyTorch's `_fft_c2c`, `_fft_r2c` and `_fft_c2r`, over strided operands.
//!
//! Each entry point decodes its operands and the transform's dimensions at the
//! call, checks the sizes and dtypes the kernel derives its loops from, and
//! launches the kernel with the dimensions copied into the record.

use super::*;

use oxide_kernels::ops::fft::spectral::{self, Norm};
use oxide_kernels::DType;

/// The transform of an FFT entry point: the dimensions it runs over and
/// PyTorch's normalization code.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OxideFftDims {
    /// `ndims` dimension indices of the operands, non-negative, distinct, at
    /// least one. For r2c and c2r the last is the halved dimension.
    pub dims: *const i64,
    pub ndims: usize,
    /// `fft_norm_mode`: 0 unscaled, 1 by 1/sqrt(N), 2 by 1/N (N: the product of
    /// the full signal's transformed sizes).
    pub normalization: i64,
}

/// The dimensions of `t` for operands of `ndim` dimensions, and its normalization.
///
/// # Safety
/// `t.dims` points to `t.ndims` readable values (or `t.ndims` is 0).
unsafe fn decode_dims(op: &'static str, t: &OxideFftDims, ndim: usize) -> Result<(Vec<usize>, Norm), AbiError> {
    // SAFETY: the caller's contract.
    let raw = unsafe { dims(t.dims, t.ndims) };
    let mut out = Vec::with_capacity(raw.len());
    for &d in raw {
        match usize::try_from(d) {
            Ok(d) if d < ndim && !out.contains(&d) => out.push(d),
            _ => {
                return Err(AbiError::Invalid(format!("{op}: dimensions {raw:?} of a {ndim}-d tensor")));
            }
        }
    }
    if out.is_empty() {
        return Err(AbiError::Invalid(format!("{op}: no dimension to transform")));
    }
    Ok((out, Norm::from_code(op, t.normalization)?))
}

/// Refuses an output whose elements are not distinct: the lines of a pass are
/// written by several threads at once, and a later pass reads back what an
/// earlier one wrote. Sufficient test: with the dimensions ordered by stride,
/// each stride passes the extent of the ones inside it (true of every tensor
/// PyTorch allocates, whatever its dimension order).
fn distinct_elements(op: &'static str, o: &Operand) -> Result<(), AbiError> {
    if o.numel <= 1 {
        return Ok(());
    }
    let mut dims: Vec<(i64, i64)> = o.sizes.iter().zip(o.strides.iter()).map(|(&n, &s)| (s, n)).collect();
    dims.retain(|&(_, n)| n > 1);
    dims.sort_unstable();
    let mut extent = 0i64;
    for &(s, n) in &dims {
        if s <= extent {
            return Err(AbiError::Invalid(format!(
                "{op}: the output (sizes {:?}, strides {:?}) has overlapping elements",
                o.sizes, o.strides
            )));
        }
        extent += s * (n - 1);
    }
    Ok(())
}

/// The complex dtype of a real one's precision (for the checks of the other operand).
fn complex_of(dt: DType) -> Option<DType> {
    match dt {
        DType::F32 => Some(DType::C64),
        DType::F64 => Some(DType::C128),
        _ => None,
    }
}

/// `_fft_c2c`: `output` = the transform of `input` over `t`'s dimensions,
/// forward (`e^{-2 pi i jk/n}`) or backward; both complex64 or both complex128,
/// of the same sizes, any strides.
///
/// # Safety
/// Each [`OxideTensor`] describes live memory (see [`operands`]); `t.dims`
/// holds `t.ndims` values; `output` overlaps no input element.
#[no_mangle]
pub unsafe extern "C" fn oxide_fft_c2c(
    on: OxideLaunch,
    output: OxideTensor,
    input: OxideTensor,
    t: OxideFftDims,
    forward: bool,
) -> i32 {
    const OP: &str = "_fft_c2c";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input] = unsafe { required(OP, [&output, &input]) }?;
        same_sizes(OP, &[&output, &input])?;
        let dt = common_dtype(OP, &[&output, &input])?;
        // SAFETY: the function's contract.
        let (dims, norm) = unsafe { decode_dims(OP, &t, input.sizes.len()) }?;
        distinct_elements(OP, &output)?;
        let (sizes, is, os) = (input.extents(), input.istrides(), output.istrides());
        launch(&on, move || {
            // SAFETY: both operands were decoded with `sizes` and their strides; the
            // output's elements are distinct and, per the contract, not the input's.
            unsafe {
                spectral::c2c(dt, &sizes, input.src(), &is, output.dst(), &os, &dims, norm, forward, on.threads())
            }
        })
    })
}

/// `_fft_r2c`: `output` (complex) = the forward transform of the real `input`
/// over `t`'s dimensions; `output` has `input`'s sizes except along the last
/// of them, where it has `n / 2 + 1` values when `onesided` (all `n`
/// otherwise). float32 in, complex64 out, or float64 and complex128.
///
/// # Safety
/// As for [`oxide_fft_c2c`].
#[no_mangle]
pub unsafe extern "C" fn oxide_fft_r2c(
    on: OxideLaunch,
    output: OxideTensor,
    input: OxideTensor,
    t: OxideFftDims,
    onesided: bool,
) -> i32 {
    const OP: &str = "_fft_r2c";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input] = unsafe { required(OP, [&output, &input]) }?;
        // SAFETY: the function's contract.
        let (dims, norm) = unsafe { decode_dims(OP, &t, input.sizes.len()) }?;
        let last = dims[dims.len() - 1];
        let mut expected = input.sizes.to_vec();
        if onesided {
            expected[last] = expected[last] / 2 + 1;
        }
        output.sizes_are(OP, &expected)?;
        if output.numel > 0 && input.sizes[last] == 0 {
            return Err(AbiError::Invalid(format!(
                "{OP}: cannot transform a signal of 0 elements along dimension {last}"
            )));
        }
        // Another input dtype is the kernel's to refuse (UnsupportedDtype, at the call).
        if let Some(c) = complex_of(input.dtype) {
            output.dtype_is(OP, c)?;
        }
        distinct_elements(OP, &output)?;
        let dt = input.dtype;
        let (sizes, is, os) = (input.extents(), input.istrides(), output.istrides());
        launch(&on, move || {
            // SAFETY: the operands were decoded, and the output checked to have the sizes
            // the kernel derives from `sizes` and `onesided`; its elements are distinct.
            unsafe {
                spectral::r2c(dt, &sizes, input.src(), &is, output.dst(), &os, &dims, norm, onesided, on.threads())
            }
        })
    })
}

/// `_fft_c2r`: `output` (real) = the backward transform over `t`'s dimensions
/// of the Hermitian signal whose first `n / 2 + 1` values along the last of
/// them `input` holds, `n` being `output`'s size there (`input` may hold more
/// along it; they are not read). Along the other dimensions the sizes are
/// equal. complex64 in, float32 out, or complex128 and float64.
///
/// # Safety
/// As for [`oxide_fft_c2c`].
#[no_mangle]
pub unsafe extern "C" fn oxide_fft_c2r(
    on: OxideLaunch,
    output: OxideTensor,
    input: OxideTensor,
    t: OxideFftDims,
) -> i32 {
    const OP: &str = "_fft_c2r";
    ffi(|| {
        // SAFETY: the function's contract.
        let [output, input] = unsafe { required(OP, [&output, &input]) }?;
        // SAFETY: the function's contract.
        let (dims, norm) = unsafe { decode_dims(OP, &t, output.sizes.len()) }?;
        let last = dims[dims.len() - 1];
        let n = output.sizes[last];
        let fits = input.sizes.len() == output.sizes.len()
            && input.sizes.iter().zip(output.sizes.iter()).enumerate().all(|(d, (&i, &o))| {
                if d == last {
                    i > n / 2 || output.numel == 0
                } else {
                    i == o
                }
            });
        if !fits {
            return Err(AbiError::Invalid(format!(
                "{OP}: input of sizes {:?} for an output of sizes {:?} (at least {} values along dimension {last})",
                input.sizes,
                output.sizes,
                n / 2 + 1
            )));
        }
        if let Some(c) = complex_of(output.dtype) {
            input.dtype_is(OP, c)?;
        }
        distinct_elements(OP, &output)?;
        let dt = input.dtype;
        let (sizes, is, os) = (output.extents(), input.istrides(), output.istrides());
        launch(&on, move || {
            // SAFETY: the input holds at least `n / 2 + 1` values along `last` and the
            // output's sizes elsewhere (checked above); the output's elements are distinct.
            unsafe { spectral::c2r(dt, &sizes, input.src(), &is, output.dst(), &os, &dims, norm, on.threads()) }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operand(sizes: &[i64], strides: &[i64]) -> Operand {
        Operand {
            data: std::ptr::null_mut(),
            dtype: DType::C64,
            sizes: Dims::copy_of(sizes),
            strides: Dims::copy_of(strides),
            numel: sizes.iter().product::<i64>() as usize,
            access: OXIDE_ACCESS_WRITE,
        }
    }

    #[test]
    fn outputs_with_overlapping_elements_are_refused() {
        assert!(distinct_elements("t", &operand(&[3, 4], &[4, 1])).is_ok());
        assert!(distinct_elements("t", &operand(&[3, 4], &[1, 3])).is_ok());
        assert!(distinct_elements("t", &operand(&[3, 4, 2], &[1, 6, 3])).is_ok());
        assert!(distinct_elements("t", &operand(&[3, 1, 4], &[4, 0, 1])).is_ok());
        assert!(distinct_elements("t", &operand(&[3, 4], &[0, 1])).is_err());
        assert!(distinct_elements("t", &operand(&[3, 4], &[2, 1])).is_err());
    }

    #[test]
    fn dimensions_are_checked() {
        let ok = [0i64, 2];
        let t = OxideFftDims { dims: ok.as_ptr(), ndims: 2, normalization: 1 };
        // SAFETY: `t.dims` holds 2 values.
        let (d, n) = unsafe { decode_dims("t", &t, 3) }.unwrap();
        assert_eq!((d, n), (vec![0, 2], Norm::ByRootN));
        for bad in [&[0i64, 0][..], &[3], &[-1], &[]] {
            let t = OxideFftDims { dims: bad.as_ptr(), ndims: bad.len(), normalization: 0 };
            // SAFETY: `t.dims` holds `ndims` values.
            assert!(unsafe { decode_dims("t", &t, 3) }.is_err(), "{bad:?}");
        }
        let t = OxideFftDims { dims: ok.as_ptr(), ndims: 2, normalization: 7 };
        // SAFETY: as above.
        assert!(unsafe { decode_dims("t", &t, 3) }.is_err());
    }
}
