//! A streaming GGUF v3 writer: the header and tensor infos are written first (sizes are known
//! from shapes and types), then tensor data is produced one tensor at a time, so writing a
//! multi-gigabyte model needs memory for one tensor only.

use super::value::MetaValue;
use crate::formats::GgmlType;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

const ALIGNMENT: u64 = 32;

/// Name, shape (ggml order: `dims[0]` contiguous) and type of a tensor to write.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
}

impl TensorSpec {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of the tensor's data, or an error when the row is not whole blocks.
    pub fn byte_size(&self) -> io::Result<u64> {
        let row = self.ggml_type.row_bytes(self.dims[0]).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tensor {}: row length {} is not a multiple of the {} block size",
                    self.name, self.dims[0], self.ggml_type
                ),
            )
        })?;
        Ok(row * self.dims[1..].iter().product::<u64>())
    }
}

#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorSpec>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a metadata key, replacing an earlier value of the same key.
    pub fn set(&mut self, key: &str, value: MetaValue) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
    }

    pub fn add_tensor(&mut self, spec: TensorSpec) {
        self.tensors.push(spec);
    }

    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// Writes the file. `data(i, spec)` returns the bytes of tensor `i`, which must be exactly
    /// `spec.byte_size()` long. The file appears at `path` only when complete (written to a
    /// temporary name, then renamed), so an interrupted run leaves no half-written model.
    pub fn write<F>(&self, path: &Path, mut data: F) -> io::Result<()>
    where
        F: FnMut(usize, &TensorSpec) -> io::Result<Vec<u8>>,
    {
        let tmp = path.with_extension("gguf.partial");
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        let result = self.write_to(&mut out, &mut data).and_then(|()| {
            out.flush()?;
            out.get_ref().sync_all()
        });
        drop(out);
        match result {
            Ok(()) => std::fs::rename(&tmp, path),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    fn write_to<W: Write, F>(&self, out: &mut W, data: &mut F) -> io::Result<()>
    where
        F: FnMut(usize, &TensorSpec) -> io::Result<Vec<u8>>,
    {
        let mut header = Vec::new();
        header.extend_from_slice(b"GGUF");
        header.extend_from_slice(&3u32.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut header, key);
            header.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            write_value(&mut header, value);
        }
        let mut offset = 0u64;
        let mut sizes = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let size = t.byte_size()?;
            write_string(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            sizes.push(size);
            offset = align(offset + size);
        }
        header.resize(align(header.len() as u64) as usize, 0);
        out.write_all(&header)?;
        for (i, t) in self.tensors.iter().enumerate() {
            let bytes = data(i, t)?;
            if bytes.len() as u64 != sizes[i] {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "tensor {}: produced {} bytes, expected {}",
                        t.name,
                        bytes.len(),
                        sizes[i]
                    ),
                ));
            }
            out.write_all(&bytes)?;
            if i + 1 < self.tensors.len() {
                let padding = align(sizes[i]) - sizes[i];
                out.write_all(&vec![0u8; padding as usize])?;
            }
        }
        Ok(())
    }
}

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGNMENT) * ALIGNMENT
}

fn write_string(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn write_value(buf: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => buf.push(*x),
        MetaValue::I8(x) => buf.push(*x as u8),
        MetaValue::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => buf.push(*x as u8),
        MetaValue::String(s) => write_string(buf, s),
        MetaValue::Array(et, items) => {
            buf.extend_from_slice(&(*et as u32).to_le_bytes());
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(buf, item);
            }
        }
    }
}
