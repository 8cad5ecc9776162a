//! GGUF v2/v3 reader over a memory map.
//!
//! GGUF files come from the internet, so nothing read from the file is trusted: every count,
//! length, offset, alignment and size is checked against the bytes actually present before it
//! is used, and every allocation is bounded by the file size. A bad file gives a `GgufError`
//! that names the field and its byte offset.

use super::value::{MetaValue, ValueType};
use super::GgufError;
use crate::formats::GgmlType;
use memmap2::Mmap;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most 4 dimensions.
const MAX_DIMS: u32 = 4;
/// Arrays of arrays are legal GGUF; real files nest at most once. The cap keeps a hostile file
/// from driving the recursive value reader into a stack overflow.
const MAX_ARRAY_NESTING: u32 = 4;

/// One tensor's description from the header, already validated against the file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset relative to the start of the tensor-data section.
    pub offset: u64,
    /// Bytes the tensor occupies.
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        // Validated at open time not to overflow.
        self.dims.iter().product()
    }

    /// Elements per row (the contiguous dimension).
    pub fn row_len(&self) -> u64 {
        self.dims[0]
    }

    /// Number of rows: the product of all dimensions but the first.
    pub fn n_rows(&self) -> u64 {
        self.dims[1..].iter().product()
    }
}

/// An open, validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    map: Bytes,
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    /// Absolute file offset of the tensor-data section.
    pub data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io_err = |source| GgufError::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io_err)?;
        // SAFETY: the map is read-only; a file truncated by another process while mapped would
        // fault, which is the usual, accepted hazard of mmap-based model loaders.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        Self::parse(path, Bytes::Mapped(map))
    }

    /// Parses a GGUF image held in memory; `name` stands for the path in error messages.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::parse(name.into(), Bytes::Owned(bytes))
    }

    fn parse(path: PathBuf, map: Bytes) -> Result<GgufFile, GgufError> {
        let mut cur = Cursor {
            buf: &map,
            pos: 0,
            path: &path,
        };
        let magic = cur.bytes(4, "magic")?;
        if magic != MAGIC {
            return Err(cur.error_at(
                0,
                "magic",
                format!("expected \"GGUF\", found {magic:02x?}: this is not a GGUF file"),
            ));
        }
        let version = cur.u32("version")?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(cur.error_at(
                    4,
                    "version",
                    "GGUF v1 is not supported: convert the model again with a current llama.cpp",
                ))
            }
            v if v.swap_bytes() <= 3 => {
                return Err(cur.error_at(
                    4,
                    "version",
                    "big-endian GGUF files are not supported: use the little-endian file",
                ))
            }
            v => {
                return Err(cur.error_at(
                    4,
                    "version",
                    format!("unknown GGUF version {v} (supported: 2 and 3)"),
                ))
            }
        }
        let tensor_count_at = cur.pos;
        let tensor_count = cur.u64("tensor_count")?;
        let kv_count_at = cur.pos;
        let kv_count = cur.u64("metadata_kv_count")?;

        // Each metadata pair takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor
        // info at least 8 + 4 + 8 + 4 + 8. Counts larger than the file could hold are lies.
        cur.check_count(kv_count, 13, kv_count_at, "metadata_kv_count")?;
        let mut metadata = Vec::with_capacity(kv_count as usize);
        let mut meta_index = HashMap::with_capacity(kv_count as usize);
        for i in 0..kv_count {
            let key_at = cur.pos;
            let key = cur.string(&format!("metadata[{i}].key"))?;
            let tag_at = cur.pos;
            let tag = cur.u32(&format!("metadata[{key}].type"))?;
            let vt = ValueType::from_tag(tag).ok_or_else(|| {
                cur.error_at(
                    tag_at,
                    &format!("metadata[{key}].type"),
                    format!("unknown value type {tag}"),
                )
            })?;
            let value = cur.value(vt, &format!("metadata[{key}]"), 0)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(cur.error_at(
                    key_at,
                    &format!("metadata[{i}].key"),
                    format!("duplicate key {key:?}"),
                ));
            }
            metadata.push((key, value));
        }

        let alignment = match meta_index.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => {
                let a = metadata[i].1.as_u64().unwrap_or(0);
                if a == 0 || !a.is_power_of_two() || a > 1 << 20 {
                    return Err(GgufError::Malformed {
                        path: path.clone(),
                        field: "general.alignment".into(),
                        offset: None,
                        detail: format!(
                            "{} is not a power of two between 1 and 1 MiB",
                            metadata[i].1
                        ),
                    });
                }
                a
            }
        };

        cur.check_count(tensor_count, 32, tensor_count_at, "tensor_count")?;
        let mut infos = Vec::with_capacity(tensor_count as usize);
        for i in 0..tensor_count {
            infos.push(cur.tensor_info(i)?);
        }

        let data_offset = align_up(cur.pos as u64, alignment)
            .ok_or_else(|| cur.error_at(cur.pos, "tensor data", "offset overflows".to_string()))?;
        let file_len = map.len() as u64;
        if data_offset > file_len && !infos.is_empty() {
            return Err(cur.error_at(
                cur.pos,
                "tensor data",
                format!(
                    "tensor data would start at byte {data_offset} but the file has only {file_len} bytes (truncated file?)"
                ),
            ));
        }
        let data_len = file_len.saturating_sub(data_offset);

        let mut tensors = Vec::with_capacity(infos.len());
        let mut tensor_index = HashMap::with_capacity(infos.len());
        for (info, info_at) in infos {
            let field = format!("tensor {:?}", info.name);
            if info.offset % alignment != 0 {
                return Err(cur.error_at(
                    info_at,
                    &field,
                    format!(
                        "data offset {} is not a multiple of the alignment {alignment}",
                        info.offset
                    ),
                ));
            }
            let end = info.offset.checked_add(info.size);
            if end.map_or(true, |e| e > data_len) {
                return Err(cur.error_at(
                    info_at,
                    &field,
                    format!(
                        "data [{}, +{}) runs past the end of the file (data section is {data_len} bytes; truncated file?)",
                        info.offset, info.size
                    ),
                ));
            }
            if tensor_index
                .insert(info.name.clone(), tensors.len())
                .is_some()
            {
                return Err(cur.error_at(info_at, &field, "duplicate tensor name".to_string()));
            }
            tensors.push(info);
        }
        check_no_overlap(&path, &tensors)?;

        Ok(GgufFile {
            path,
            map,
            version,
            metadata,
            meta_index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file_size(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn missing(&self, key: &str, want: &str) -> GgufError {
        let detail = match self.get(key) {
            None => format!("missing (expected {want})"),
            Some(v) => format!("has value {v}, expected {want}"),
        };
        GgufError::Malformed {
            path: self.path.clone(),
            field: key.to_string(),
            offset: None,
            detail,
        }
    }

    /// A required string value.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.get(key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| self.missing(key, "a string"))
    }

    /// A required non-negative integer of any integer type.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.get(key)
            .and_then(|v| v.as_u64())
            .ok_or_else(|| self.missing(key, "a non-negative integer"))
    }

    /// A required number (float or integer).
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.get(key)
            .and_then(|v| v.as_f64())
            .ok_or_else(|| self.missing(key, "a number"))
    }

    /// A required array.
    pub fn get_array(&self, key: &str) -> Result<&[MetaValue], GgufError> {
        self.get(key)
            .and_then(|v| v.as_array())
            .ok_or_else(|| self.missing(key, "an array"))
    }

    /// A required array of strings, borrowed.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.get_array(key)?
            .iter()
            .map(|v| v.as_str())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.missing(key, "an array of strings"))
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of a tensor (bounds were validated at open time).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.map[start..start + info.size as usize]
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }
}

/// The file's bytes: memory-mapped from disk, or owned (tests, in-memory images).
enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    Some(x.checked_add(a - 1)? / a * a)
}

fn check_no_overlap(path: &Path, tensors: &[TensorInfo]) -> Result<(), GgufError> {
    let mut spans: Vec<(u64, u64, &str)> = tensors
        .iter()
        .filter(|t| t.size > 0)
        .map(|t| (t.offset, t.offset + t.size, t.name.as_str()))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(GgufError::Malformed {
                path: path.to_path_buf(),
                field: format!("tensor {:?}", w[1].2),
                offset: None,
                detail: format!("its data overlaps tensor {:?}", w[0].2),
            });
        }
    }
    Ok(())
}

/// A bounds-checked little-endian reader over the mapped file.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn error_at(&self, offset: usize, field: &str, detail: impl Into<String>) -> GgufError {
        GgufError::Malformed {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            offset: Some(offset as u64),
            detail: detail.into(),
        }
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// Rejects a count of items that cannot fit in the bytes left, before anything is
    /// allocated for it.
    fn check_count(
        &self,
        count: u64,
        min_item: u64,
        at: usize,
        field: &str,
    ) -> Result<(), GgufError> {
        if count
            .checked_mul(min_item)
            .map_or(true, |b| b > self.remaining())
        {
            return Err(self.error_at(
                at,
                field,
                format!(
                    "count {count} cannot fit in the {} bytes left in the file (corrupt or truncated file)",
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }

    fn bytes(&mut self, n: u64, field: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.error_at(
                self.pos,
                field,
                format!(
                    "needs {n} bytes but only {} are left (truncated file?)",
                    self.remaining()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], GgufError> {
        let b = self.bytes(N as u64, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn u32(&mut self, field: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn string(&mut self, field: &str) -> Result<String, GgufError> {
        let at = self.pos;
        let len = self.u64(field)?;
        if len > self.remaining() {
            return Err(self.error_at(
                at,
                field,
                format!(
                    "string length {len} exceeds the {} bytes left in the file (corrupt or truncated file)",
                    self.remaining()
                ),
            ));
        }
        let bytes = self.bytes(len, field)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| self.error_at(at, field, format!("string is not valid UTF-8: {e}")))
    }

    fn value(&mut self, vt: ValueType, field: &str, depth: u32) -> Result<MetaValue, GgufError> {
        Ok(match vt {
            ValueType::U8 => MetaValue::U8(self.array::<1>(field)?[0]),
            ValueType::I8 => MetaValue::I8(self.array::<1>(field)?[0] as i8),
            ValueType::U16 => MetaValue::U16(u16::from_le_bytes(self.array(field)?)),
            ValueType::I16 => MetaValue::I16(i16::from_le_bytes(self.array(field)?)),
            ValueType::U32 => MetaValue::U32(self.u32(field)?),
            ValueType::I32 => MetaValue::I32(i32::from_le_bytes(self.array(field)?)),
            ValueType::F32 => MetaValue::F32(f32::from_le_bytes(self.array(field)?)),
            ValueType::U64 => MetaValue::U64(self.u64(field)?),
            ValueType::I64 => MetaValue::I64(i64::from_le_bytes(self.array(field)?)),
            ValueType::F64 => MetaValue::F64(f64::from_le_bytes(self.array(field)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>(field)?[0] {
                    0 => MetaValue::Bool(false),
                    1 => MetaValue::Bool(true),
                    b => {
                        return Err(self.error_at(
                            at,
                            field,
                            format!("bool byte is {b}, not 0 or 1"),
                        ))
                    }
                }
            }
            ValueType::String => MetaValue::String(self.string(field)?),
            ValueType::Array => {
                let at = self.pos;
                if depth >= MAX_ARRAY_NESTING {
                    return Err(self.error_at(at, field, "arrays nested too deeply"));
                }
                let tag = self.u32(field)?;
                let et = ValueType::from_tag(tag).ok_or_else(|| {
                    self.error_at(at, field, format!("unknown array element type {tag}"))
                })?;
                let count_at = self.pos;
                let count = self.u64(field)?;
                self.check_count(count, et.min_encoded_size(), count_at, field)?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(et, field, depth + 1)?);
                }
                MetaValue::Array(et, items)
            }
        })
    }

    /// Reads one tensor info and validates everything that does not need the data section.
    fn tensor_info(&mut self, i: u64) -> Result<(TensorInfo, usize), GgufError> {
        let at = self.pos;
        let name = self.string(&format!("tensor_infos[{i}].name"))?;
        let field = format!("tensor {name:?}");
        let dims_at = self.pos;
        let n_dims = self.u32(&format!("{field}.n_dims"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(self.error_at(
                dims_at,
                &format!("{field}.n_dims"),
                format!("{n_dims} dimensions (ggml supports 1 to {MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut n_elements: u64 = 1;
        for d in 0..n_dims {
            let ne_at = self.pos;
            let ne = self.u64(&format!("{field}.dims[{d}]"))?;
            n_elements = n_elements.checked_mul(ne).ok_or_else(|| {
                self.error_at(ne_at, &format!("{field}.dims"), "element count overflows")
            })?;
            dims.push(ne);
        }
        if n_elements >= 1 << 48 {
            return Err(self.error_at(
                dims_at,
                &format!("{field}.dims"),
                format!("{n_elements} elements is not a plausible tensor"),
            ));
        }
        let type_at = self.pos;
        let type_id = self.u32(&format!("{field}.type"))?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
            self.error_at(
                type_at,
                &format!("{field}.type"),
                format!(
                    "unknown or unsupported ggml type id {type_id}: rocky reads {}",
                    GgmlType::ALL.map(|t| t.name()).join(", ")
                ),
            )
        })?;
        let row_bytes = ggml_type.row_bytes(dims[0]).ok_or_else(|| {
            self.error_at(
                dims_at,
                &format!("{field}.dims[0]"),
                format!(
                    "row length {} is not a multiple of the {} block size {}",
                    dims[0],
                    ggml_type,
                    ggml_type.block_size()
                ),
            )
        })?;
        let n_rows: u64 = dims[1..].iter().product();
        let size = row_bytes.checked_mul(n_rows).ok_or_else(|| {
            self.error_at(dims_at, &format!("{field}.dims"), "byte size overflows")
        })?;
        let offset = self.u64(&format!("{field}.offset"))?;
        Ok((
            TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                size,
            },
            at,
        ))
    }
}
