//! Element types. The discriminants are the ABI's dtype codes; they equal
//! `c10::ScalarType`'s values so the glue converts by cast (and checks that
//! with `static_assert`s).

use crate::error::{Error, Result};

/// An element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DType {
    U8 = 0,
    I8 = 1,
    I16 = 2,
    I32 = 3,
    I64 = 4,
    F16 = 5,
    F32 = 6,
    F64 = 7,
    C32 = 8,
    C64 = 9,
    C128 = 10,
    Bool = 11,
    BF16 = 15,
}

impl DType {
    /// All dtypes the ABI defines.
    pub const ALL: [DType; 13] = [
        DType::U8, DType::I8, DType::I16, DType::I32, DType::I64, DType::F16, DType::F32,
        DType::F64, DType::C32, DType::C64, DType::C128, DType::Bool, DType::BF16,
    ];

    /// The dtype with ABI code `code`.
    ///
    /// Errors: [`Error::UnknownDtype`].
    pub fn from_code(code: i32) -> Result<DType> {
        DType::ALL.into_iter().find(|d| *d as i32 == code).ok_or(Error::UnknownDtype { code })
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 | DType::C32 => 4,
            DType::I64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// PyTorch's name for the dtype.
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C32 => "complex32",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::Bool => "bool",
            DType::BF16 => "bfloat16",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d as i32).unwrap(), d);
        }
        assert_eq!(DType::from_code(12), Err(Error::UnknownDtype { code: 12 }));
        assert_eq!(DType::C128.size(), 16);
        assert_eq!(DType::BF16.to_string(), "bfloat16");
    }
}
