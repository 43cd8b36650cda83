//! oxide-kernels: loops over raw device memory for torch-oxide.
//!
//! Kernels receive what a loop needs and nothing else: data pointers, a
//! [`DType`], the shape and per-operand strides (in elements). Broadcasting,
//! type promotion and output allocation are decided before a kernel is
//! called (by PyTorch's meta functions in the glue), so nothing here knows
//! PyTorch.

/// Runs `$body` with `$T` bound to the unsigned integer type of `$size` bytes
/// (1, 2, 4, 8, 16): kernels that only move bytes are written once for all dtypes.
/// Any other size returns [`Error::InvalidLayout`] naming `$op`.
macro_rules! with_element_bits {
    ($size:expr, $op:expr, |$T:ident| $body:expr) => {
        match $size {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            16 => {
                type $T = u128;
                $body
            }
            n => return Err($crate::error::Error::InvalidLayout { op: $op, reason: format!("element size {n}") }),
        }
    };
}

pub mod dtype;
pub mod engine;
pub mod error;
pub mod float8;
pub mod ops;

/// The CPU capability this build was compiled for, in PyTorch's terms
/// (`torch.backends.cpu.get_cpu_capability()`): `"avx512"` (x86-64-v4), `"avx2"`
/// (x86-64-v3) or `"default"` (the x86-64-v2 baseline). The package ships one
/// build of the extension per capability and loads the best one the CPU runs
/// (`python/torch_oxide/_capability.py`); this names the one that was loaded.
pub const CPU_CAPABILITY: &str = if cfg!(all(
    target_feature = "avx512f",
    target_feature = "avx512bw",
    target_feature = "avx512cd",
    target_feature = "avx512dq",
    target_feature = "avx512vl"
)) {
    "avx512"
} else if cfg!(all(target_feature = "avx2", target_feature = "fma", target_feature = "bmi2", target_feature = "f16c")) {
    "avx2"
} else {
    "default"
};

pub use dtype::{DType, Element};
pub use engine::layout::Layout;
pub use error::{Error, Result};
pub use half;
