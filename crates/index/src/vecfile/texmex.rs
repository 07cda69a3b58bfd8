//! The TEXMEX formats (`fvecs`, `bvecs`, `ivecs`): each record is a
//! little-endian `i32` dimension followed by that many elements. Validation of
//! a mapped file, and the atomic writers.

use std::io::Write;
use std::path::Path;

use super::{malformed, Dtype, Layout, Result, VectorFile, VectorFileError};
use crate::atomic::write_atomically;

impl VectorFile {
    pub(super) fn scan_texmex(
        path: &Path,
        bytes: &[u8],
        dtype: Dtype,
    ) -> Result<(Layout, Dtype, usize, usize)> {
        if bytes.is_empty() {
            return Ok((Layout::Texmex, dtype, 0, 0));
        }
        if bytes.len() < 4 {
            return Err(malformed(
                path,
                format!(
                    "truncated: {} bytes, less than one record header",
                    bytes.len()
                ),
            ));
        }
        let d = i32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if d <= 0 || d > 1 << 20 {
            return Err(malformed(path, format!("record 0 declares dimension {d}")));
        }
        let dim = d as usize;
        let rec = 4 + dim * dtype.size();
        if bytes.len() % rec != 0 {
            return Err(malformed(
                path,
                format!("truncated record: {} bytes is not a multiple of the record size {rec} (dimension {dim})", bytes.len()),
            ));
        }
        let rows = bytes.len() / rec;
        for r in 0..rows {
            let h = i32::from_le_bytes(bytes[r * rec..r * rec + 4].try_into().expect("4 bytes"));
            if h != d {
                return Err(malformed(path, format!("dimension changes mid-file: record {r} declares {h}, record 0 declared {d}")));
            }
        }
        Ok((Layout::Texmex, dtype, rows, dim))
    }
}

fn write_texmex<T: Copy>(
    path: &Path,
    data: &[T],
    dim: usize,
    to_bytes: impl Fn(T, &mut Vec<u8>),
) -> Result<()> {
    if dim == 0 || data.len() % dim != 0 {
        return Err(malformed(
            path,
            format!(
                "cannot write {} values as rows of dimension {dim}",
                data.len()
            ),
        ));
    }
    write_atomically(path, |w| {
        let mut buf = Vec::with_capacity(4 + dim * 4);
        for row in data.chunks_exact(dim) {
            buf.clear();
            buf.extend_from_slice(&(dim as i32).to_le_bytes());
            row.iter().for_each(|&v| to_bytes(v, &mut buf));
            w.write_all(&buf)?;
        }
        Ok(())
    })
    .map_err(|source| VectorFileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Write `f32` rows as `.fvecs`.
pub fn write_fvecs(path: &Path, data: &[f32], dim: usize) -> Result<()> {
    write_texmex(path, data, dim, |v, b| {
        b.extend_from_slice(&v.to_le_bytes())
    })
}

/// Write `i32` rows as `.ivecs`.
pub fn write_ivecs(path: &Path, data: &[i32], dim: usize) -> Result<()> {
    write_texmex(path, data, dim, |v, b| {
        b.extend_from_slice(&v.to_le_bytes())
    })
}

/// Write `u8` rows as `.bvecs`.
pub fn write_bvecs(path: &Path, data: &[u8], dim: usize) -> Result<()> {
    write_texmex(path, data, dim, |v, b| b.push(v))
}
