//! NumPy `.npy` files (format 1.0-3.0; C or Fortran order; `f32`, `f16`,
//! `u8`, `i8`, `i32`): header parsing and validation of a mapped file, and
//! the atomic writer.

use std::io::Write;
use std::path::Path;

use super::{malformed, Dtype, Layout, Result, VectorFile, VectorFileError};
use crate::atomic::write_atomically;

impl Dtype {
    pub(super) fn npy_descr(self) -> &'static str {
        match self {
            Dtype::F32 => "<f4",
            Dtype::F16 => "<f2",
            Dtype::U8 => "|u1",
            Dtype::I8 => "|i1",
            Dtype::I32 => "<i4",
        }
    }
}

impl VectorFile {
    pub(super) fn scan_npy(path: &Path, bytes: &[u8]) -> Result<(Layout, Dtype, usize, usize)> {
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err(malformed(path, "not an .npy file (bad magic)"));
        }
        let major = bytes[6];
        let (hlen, hstart) = match major {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 => {
                if bytes.len() < 12 {
                    return Err(malformed(path, "truncated .npy header"));
                }
                (
                    u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize,
                    12,
                )
            }
            v => return Err(malformed(path, format!("unsupported .npy version {v}"))),
        };
        let data_offset = hstart + hlen;
        if bytes.len() < data_offset {
            return Err(malformed(path, "truncated .npy header"));
        }
        let header = std::str::from_utf8(&bytes[hstart..data_offset])
            .map_err(|_| malformed(path, "npy header is not text"))?;
        let field = |name: &str| -> Option<&str> {
            let at = header.find(&format!("'{name}'"))?;
            let rest = &header[at + name.len() + 2..];
            let colon = rest.find(':')?;
            Some(rest[colon + 1..].trim_start())
        };
        let descr = field("descr").ok_or_else(|| malformed(path, "npy header has no 'descr'"))?;
        let descr = descr.trim_start_matches('\'');
        let descr = &descr[..descr.find('\'').unwrap_or(descr.len())];
        let dtype = match descr {
            "<f4" => Dtype::F32,
            "<f2" => Dtype::F16,
            "|u1" | "<u1" => Dtype::U8,
            "|i1" | "<i1" => Dtype::I8,
            "<i4" => Dtype::I32,
            other => {
                return Err(malformed(
                    path,
                    format!("unsupported dtype '{other}' (supported: <f4, <f2, |u1, |i1, <i4)"),
                ))
            }
        };
        let fortran = field("fortran_order")
            .ok_or_else(|| malformed(path, "npy header has no 'fortran_order'"))?;
        let fortran = fortran.starts_with("True");
        let shape = field("shape").ok_or_else(|| malformed(path, "npy header has no 'shape'"))?;
        let close = shape
            .find(')')
            .ok_or_else(|| malformed(path, "bad 'shape'"))?;
        let dims: Vec<usize> = shape[1..close]
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<usize>()
                    .map_err(|_| malformed(path, format!("bad shape entry '{s}'")))
            })
            .collect::<Result<_>>()?;
        let (rows, dim) = match dims.as_slice() {
            [n] => (*n, 1),
            [n, d] => (*n, *d),
            other => {
                return Err(malformed(
                    path,
                    format!("expected a 1-d or 2-d array, found shape {other:?}"),
                ))
            }
        };
        let need = rows
            .checked_mul(dim)
            .and_then(|v| v.checked_mul(dtype.size()))
            .ok_or_else(|| malformed(path, "shape overflows"))?;
        let have = bytes.len() - data_offset;
        if have < need {
            return Err(malformed(path, format!("truncated: header promises {need} data bytes ({rows} x {dim} {dtype}), file holds {have}")));
        }
        if have > need {
            return Err(malformed(
                path,
                format!(
                    "{} trailing bytes after {rows} x {dim} {dtype}",
                    have - need
                ),
            ));
        }
        Ok((
            Layout::Npy {
                data_offset,
                fortran,
            },
            dtype,
            rows,
            dim,
        ))
    }
}

/// Typed data for [`write_npy`].
pub enum NpyData<'a> {
    F32(&'a [f32]),
    F16(&'a [half::f16]),
    U8(&'a [u8]),
    I8(&'a [i8]),
    I32(&'a [i32]),
}

/// Write a 2-d C-order `.npy` (format 1.0).
pub fn write_npy(path: &Path, data: NpyData<'_>, dim: usize) -> Result<()> {
    let (dtype, len, bytes): (Dtype, usize, &[u8]) = match data {
        NpyData::F32(d) => (Dtype::F32, d.len(), bytemuck::cast_slice(d)),
        NpyData::F16(d) => (Dtype::F16, d.len(), bytemuck::cast_slice(d)),
        NpyData::U8(d) => (Dtype::U8, d.len(), d),
        NpyData::I8(d) => (Dtype::I8, d.len(), bytemuck::cast_slice(d)),
        NpyData::I32(d) => (Dtype::I32, d.len(), bytemuck::cast_slice(d)),
    };
    if dim == 0 || len % dim != 0 {
        return Err(malformed(
            path,
            format!("cannot write {len} values as rows of dimension {dim}"),
        ));
    }
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({}, {}), }}",
        dtype.npy_descr(),
        len / dim,
        dim
    );
    // Pad so that magic + version + length + header + newline is a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    write_atomically(path, |w| {
        w.write_all(b"\x93NUMPY\x01\x00")?;
        w.write_all(&(header.len() as u16).to_le_bytes())?;
        w.write_all(header.as_bytes())?;
        w.write_all(bytes)
    })
    .map_err(|source| VectorFileError::Io {
        path: path.to_path_buf(),
        source,
    })
}
