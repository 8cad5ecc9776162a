//! De-duplicated SPIR-V types and constants.
//!
//! SPIR-V forbids duplicate non-aggregate type declarations, and duplicate constants waste ids,
//! so every type and constant goes through these tables. Layout decorations (ArrayStride,
//! Block, Offset) are attached once, when the decorated type is first created; types used in
//! Workgroup/Function storage never carry them.

use std::collections::HashMap;

use rspirv::dr::{Builder, Operand};
use rspirv::spirv::{Decoration, StorageClass, Word};

use crate::ir::{Scalar, Type};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Void,
    Value(Type),
    Pointer(StorageClass, Word),
    /// Runtime array with an ArrayStride, wrapped in a Block struct (a storage buffer).
    BufferBlock(Type),
    /// Sized array without layout (workgroup memory).
    Array(Word, u32),
    /// The push-constant Block struct of 32-bit members.
    PushBlock(Vec<Type>),
    Function(Word),
}

#[derive(Default)]
pub struct TypeTable {
    types: HashMap<Key, Word>,
    consts: HashMap<(Type, u32), Word>,
}

impl TypeTable {
    pub fn void(&mut self, b: &mut Builder) -> Word {
        *self.types.entry(Key::Void).or_insert_with(|| b.type_void())
    }

    pub fn value(&mut self, b: &mut Builder, ty: Type) -> Word {
        if let Some(&w) = self.types.get(&Key::Value(ty)) {
            return w;
        }
        let w = if ty.is_vector() {
            let elem = self.value(b, ty.element());
            b.type_vector(elem, ty.lanes())
        } else {
            match ty.scalar {
                Scalar::Bool => b.type_bool(),
                Scalar::F16 => b.type_float(16, None),
                Scalar::F32 => b.type_float(32, None),
                s => b.type_int(s.bits(), s.is_signed() as u32),
            }
        };
        self.types.insert(Key::Value(ty), w);
        w
    }

    pub fn pointer(&mut self, b: &mut Builder, class: StorageClass, pointee: Word) -> Word {
        *self
            .types
            .entry(Key::Pointer(class, pointee))
            .or_insert_with(|| b.type_pointer(None, class, pointee))
    }

    /// `struct { elem data[]; }` decorated Block, member offset 0, array stride = element size.
    pub fn buffer_block(&mut self, b: &mut Builder, elem: Type) -> Word {
        if let Some(&w) = self.types.get(&Key::BufferBlock(elem)) {
            return w;
        }
        let e = self.value(b, elem);
        // Allocated directly (not through rspirv's dedup) so that the decorated array is ours.
        let arr = b.id();
        b.module_mut()
            .types_global_values
            .push(rspirv::dr::Instruction::new(
                rspirv::spirv::Op::TypeRuntimeArray,
                None,
                Some(arr),
                vec![Operand::IdRef(e)],
            ));
        b.decorate(
            arr,
            Decoration::ArrayStride,
            [Operand::LiteralBit32(elem.size_bytes())],
        );
        let st_id = b.id();
        let st = b.type_struct_id(Some(st_id), [arr]);
        b.decorate(st, Decoration::Block, []);
        b.member_decorate(st, 0, Decoration::Offset, [Operand::LiteralBit32(0)]);
        self.types.insert(Key::BufferBlock(elem), st);
        st
    }

    pub fn array(&mut self, b: &mut Builder, elem: Type, len: u32) -> Word {
        let e = self.value(b, elem);
        if let Some(&w) = self.types.get(&Key::Array(e, len)) {
            return w;
        }
        let n = self.constant(b, Type::U32, len);
        let w = b.type_array(e, n);
        self.types.insert(Key::Array(e, len), w);
        w
    }

    pub fn push_block(&mut self, b: &mut Builder, members: &[Type]) -> Word {
        let key = Key::PushBlock(members.to_vec());
        if let Some(&w) = self.types.get(&key) {
            return w;
        }
        let ids: Vec<Word> = members.iter().map(|&t| self.value(b, t)).collect();
        let st_id = b.id();
        let st = b.type_struct_id(Some(st_id), ids);
        b.decorate(st, Decoration::Block, []);
        for i in 0..members.len() as u32 {
            b.member_decorate(st, i, Decoration::Offset, [Operand::LiteralBit32(4 * i)]);
        }
        self.types.insert(key, st);
        st
    }

    pub fn function(&mut self, b: &mut Builder, ret: Word) -> Word {
        *self
            .types
            .entry(Key::Function(ret))
            .or_insert_with(|| b.type_function(ret, []))
    }

    /// A constant of `ty` whose every lane has the scalar bit pattern `bits`.
    pub fn constant(&mut self, b: &mut Builder, ty: Type, bits: u32) -> Word {
        if let Some(&w) = self.consts.get(&(ty, bits)) {
            return w;
        }
        let t = self.value(b, ty);
        let w = if ty.is_vector() {
            let lane = self.constant(b, ty.element(), bits);
            b.constant_composite(t, vec![lane; ty.lanes() as usize])
        } else if ty.scalar == Scalar::Bool {
            if bits != 0 {
                b.constant_true(t)
            } else {
                b.constant_false(t)
            }
        } else {
            // Literals narrower than 32 bits are sign-extended for signed types (SPIR-V 2.2.1).
            let width = ty.scalar.bits();
            let literal = if ty.scalar.is_signed() && width < 32 {
                (((bits << (32 - width)) as i32) >> (32 - width)) as u32
            } else {
                bits
            };
            b.constant_bit32(t, literal)
        };
        self.consts.insert((ty, bits), w);
        w
    }
}
