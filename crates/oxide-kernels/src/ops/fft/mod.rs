//! Discrete Fourier transforms: the three primitives every `torch.fft` function
//! reduces to (`_fft_c2c`, `_fft_r2c`, `_fft_c2r`), over strided operands, with
//! rustfft's plans (cached per length, direction and precision) for the 1-d
//! transforms. The glue is `csrc/aten/fft/`, the ABI `abi/fft.rs`.

pub mod plan;
pub mod spectral;
