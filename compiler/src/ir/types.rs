//! Scalar and vector types of the IR.

use std::fmt;

/// A scalar type. Integer signedness matters: it picks signed vs unsigned division, shifts,
/// comparisons and conversions in codegen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    Bool,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    F16,
    F32,
}

impl Scalar {
    /// Width in bits (bool counts as 32, as it has no storage representation).
    pub fn bits(self) -> u32 {
        match self {
            Scalar::I8 | Scalar::U8 => 8,
            Scalar::I16 | Scalar::U16 | Scalar::F16 => 16,
            Scalar::Bool | Scalar::I32 | Scalar::U32 | Scalar::F32 => 32,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F16 | Scalar::F32)
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            Scalar::I8 | Scalar::U8 | Scalar::I16 | Scalar::U16 | Scalar::I32 | Scalar::U32
        )
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Scalar::I8 | Scalar::I16 | Scalar::I32)
    }
}

/// A scalar or a vector of 2, 3 or 4 lanes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Type {
    pub scalar: Scalar,
    pub lanes: u8,
}

impl Type {
    pub const BOOL: Type = Type::scalar(Scalar::Bool);
    pub const I8: Type = Type::scalar(Scalar::I8);
    pub const U8: Type = Type::scalar(Scalar::U8);
    pub const I16: Type = Type::scalar(Scalar::I16);
    pub const U16: Type = Type::scalar(Scalar::U16);
    pub const I32: Type = Type::scalar(Scalar::I32);
    pub const U32: Type = Type::scalar(Scalar::U32);
    pub const F16: Type = Type::scalar(Scalar::F16);
    pub const F32: Type = Type::scalar(Scalar::F32);

    pub const fn scalar(scalar: Scalar) -> Type {
        Type { scalar, lanes: 1 }
    }

    /// A vector type; `lanes` 1 gives the scalar itself.
    pub fn vec(scalar: Scalar, lanes: u32) -> Type {
        assert!(
            (1..=4).contains(&lanes),
            "vector of {lanes} lanes is not supported (1..=4)"
        );
        Type {
            scalar,
            lanes: lanes as u8,
        }
    }

    pub fn is_vector(self) -> bool {
        self.lanes > 1
    }

    pub fn lanes(self) -> u32 {
        u32::from(self.lanes)
    }

    /// The same lane count with another scalar.
    pub fn with_scalar(self, scalar: Scalar) -> Type {
        Type {
            scalar,
            lanes: self.lanes,
        }
    }

    /// The element scalar as a type.
    pub fn element(self) -> Type {
        Type::scalar(self.scalar)
    }

    /// Size in bytes in a buffer (vec3 is not used in buffers; it would be padded).
    pub fn size_bytes(self) -> u32 {
        self.scalar.bits() / 8 * self.lanes()
    }
}

impl fmt::Debug for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.scalar {
            Scalar::Bool => "bool",
            Scalar::I8 => "i8",
            Scalar::U8 => "u8",
            Scalar::I16 => "i16",
            Scalar::U16 => "u16",
            Scalar::I32 => "i32",
            Scalar::U32 => "u32",
            Scalar::F16 => "f16",
            Scalar::F32 => "f32",
        };
        if self.lanes == 1 {
            write!(f, "{s}")
        } else {
            write!(f, "vec{}<{s}>", self.lanes)
        }
    }
}
