//! Vector files: `fvecs`, `bvecs`, `ivecs` (the TEXMEX formats: each record is a
//! little-endian `i32` dimension followed by that many `f32`, `u8` or `i32`) and
//! NumPy `.npy` (C or Fortran order; `f32`, `f16`, `u8`, `i8`, `i32`).
//!
//! Files are memory-mapped, so a 10 GB file needs no 10 GB of heap: read rows or
//! chunks of rows as `f32` ([`VectorFile::read_rows_f32`]) and only they are
//! converted. Opening validates the whole structure (every record's dimension,
//! the size against the header); conversion to `f32` rejects NaN and infinities.
//! Every error names the file and the problem. Writers are atomic.
//!
//! This file holds the shared types, the format sniffing and the readers;
//! `texmex.rs` and `npy.rs` validate and write their own formats.

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

mod npy;
mod texmex;

pub use npy::{write_npy, NpyData};
pub use texmex::{write_bvecs, write_fvecs, write_ivecs};

/// Element type of a vector file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    U8,
    I8,
    I32,
}

impl Dtype {
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 => 2,
            Dtype::U8 | Dtype::I8 => 1,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::U8 => "u8",
            Dtype::I8 => "i8",
            Dtype::I32 => "i32",
        };
        f.write_str(s)
    }
}

/// What went wrong with a vector file.
#[derive(Debug, thiserror::Error)]
pub enum VectorFileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: unknown vector file extension (expected .fvecs, .bvecs, .ivecs or .npy)")]
    UnknownFormat { path: PathBuf },
    #[error("{path}: {problem}")]
    Malformed { path: PathBuf, problem: String },
    #[error("{path}: row {row}, column {col} is {value} (vectors must be finite)")]
    NotFinite {
        path: PathBuf,
        row: usize,
        col: usize,
        value: f32,
    },
    #[error("{path}: holds {found} values, but {expected} were asked for")]
    WrongDtype {
        path: PathBuf,
        found: Dtype,
        expected: &'static str,
    },
}

type Result<T> = std::result::Result<T, VectorFileError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// TEXMEX: each record carries its own 4-byte dimension.
    Texmex,
    /// `.npy`: one header, then `n x d` values from `data_offset`, rows
    /// contiguous (C order) or columns contiguous (Fortran order).
    Npy { data_offset: usize, fortran: bool },
}

/// A memory-mapped, validated vector file.
pub struct VectorFile {
    path: PathBuf,
    map: Option<Mmap>,
    layout: Layout,
    dtype: Dtype,
    rows: usize,
    dim: usize,
}

impl fmt::Debug for VectorFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "VectorFile({}, {} x {} {})",
            self.path.display(),
            self.rows,
            self.dim,
            self.dtype
        )
    }
}

fn malformed(path: &Path, problem: impl Into<String>) -> VectorFileError {
    VectorFileError::Malformed {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

impl VectorFile {
    /// Open and validate; the format comes from the extension.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let io_err = |source| VectorFileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len() as usize;
        // SAFETY: the map is read-only and private to this process; the file is not
        // expected to change while open (documented), and every access below is
        // bounds-checked against the length validated here.
        let map = if len == 0 {
            None
        } else {
            Some(unsafe { Mmap::map(&file) }.map_err(io_err)?)
        };
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let (layout, dtype, rows, dim) = match ext.as_str() {
            "fvecs" => Self::scan_texmex(path, bytes, Dtype::F32)?,
            "bvecs" => Self::scan_texmex(path, bytes, Dtype::U8)?,
            "ivecs" => Self::scan_texmex(path, bytes, Dtype::I32)?,
            "npy" => Self::scan_npy(path, bytes)?,
            _ => {
                return Err(VectorFileError::UnknownFormat {
                    path: path.to_path_buf(),
                })
            }
        };
        Ok(Self {
            path: path.to_path_buf(),
            map,
            layout,
            dtype,
            rows,
            dim,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Raw bytes of row `r` (without the TEXMEX dimension word); a Fortran-order
    /// row is gathered into `scratch`.
    fn row_bytes<'a>(&'a self, r: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        let es = self.dtype.size();
        let w = self.dim * es;
        match self.layout {
            Layout::Texmex => {
                let start = r * (4 + w) + 4;
                &self.bytes()[start..start + w]
            }
            Layout::Npy {
                data_offset,
                fortran: false,
            } => &self.bytes()[data_offset + r * w..data_offset + (r + 1) * w],
            Layout::Npy {
                data_offset,
                fortran: true,
            } => {
                scratch.clear();
                let b = self.bytes();
                for c in 0..self.dim {
                    let at = data_offset + (c * self.rows + r) * es;
                    scratch.extend_from_slice(&b[at..at + es]);
                }
                scratch
            }
        }
    }

    /// Rows `start..start+count` as `f32`, row-major, appended to `out`; NaN or
    /// infinite values are an error naming the row.
    pub fn read_rows_f32(&self, start: usize, count: usize, out: &mut Vec<f32>) -> Result<()> {
        if self.dtype == Dtype::I32 {
            return Err(VectorFileError::WrongDtype {
                path: self.path.clone(),
                found: self.dtype,
                expected: "vectors (f32, f16, u8 or i8)",
            });
        }
        let end = start
            .checked_add(count)
            .filter(|&e| e <= self.rows)
            .ok_or_else(|| {
                malformed(
                    &self.path,
                    format!(
                        "rows {start}..{} asked, file has {}",
                        start + count,
                        self.rows
                    ),
                )
            })?;
        out.reserve(count * self.dim);
        if let Layout::Npy {
            data_offset,
            fortran: true,
        } = self.layout
        {
            return self.read_fortran_f32(data_offset, start, end, out);
        }
        let mut scratch = Vec::new();
        for r in start..end {
            let b = self.row_bytes(r, &mut scratch);
            let before = out.len();
            out.extend(
                b.chunks_exact(self.dtype.size())
                    .map(|v| element_f32(self.dtype, v)),
            );
            if let Some(col) = out[before..].iter().position(|v| !v.is_finite()) {
                let value = out[before + col];
                out.truncate(before);
                return Err(VectorFileError::NotFinite {
                    path: self.path.clone(),
                    row: r,
                    col,
                    value,
                });
            }
        }
        Ok(())
    }

    /// Fortran order: read column by column (sequential in the file), scatter
    /// into rows.
    fn read_fortran_f32(
        &self,
        data_offset: usize,
        start: usize,
        end: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let base = out.len();
        let count = end - start;
        out.resize(base + count * self.dim, 0.0);
        let es = self.dtype.size();
        let b = self.bytes();
        for c in 0..self.dim {
            let col = &b[data_offset + (c * self.rows + start) * es
                ..data_offset + (c * self.rows + end) * es];
            for (i, v) in col.chunks_exact(es).enumerate() {
                out[base + i * self.dim + c] = element_f32(self.dtype, v);
            }
        }
        if let Some(i) = out[base..].iter().position(|v| !v.is_finite()) {
            let value = out[base + i];
            out.truncate(base);
            return Err(VectorFileError::NotFinite {
                path: self.path.clone(),
                row: start + i / self.dim,
                col: i % self.dim,
                value,
            });
        }
        Ok(())
    }

    /// All rows as `f32` (heap: rows x dim x 4 bytes).
    pub fn read_all_f32(&self) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        self.read_rows_f32(0, self.rows, &mut v)?;
        Ok(v)
    }

    /// All rows of an integer file (`ivecs`, `.npy` of i32) as `i32`.
    pub fn read_all_i32(&self) -> Result<Vec<i32>> {
        if self.dtype != Dtype::I32 {
            return Err(VectorFileError::WrongDtype {
                path: self.path.clone(),
                found: self.dtype,
                expected: "i32 ids",
            });
        }
        let mut out = Vec::with_capacity(self.rows * self.dim);
        let mut scratch = Vec::new();
        for r in 0..self.rows {
            out.extend(
                self.row_bytes(r, &mut scratch)
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes"))),
            );
        }
        Ok(out)
    }
}

/// One little-endian element of a vector file as `f32` (`bytes` holds exactly
/// one element; i32 files are rejected before any conversion).
#[inline]
fn element_f32(dtype: Dtype, bytes: &[u8]) -> f32 {
    match dtype {
        Dtype::F32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        Dtype::F16 => half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f32(),
        Dtype::U8 => bytes[0] as f32,
        Dtype::I8 => bytes[0] as i8 as f32,
        Dtype::I32 => unreachable!("i32 files are rejected before conversion to f32"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<f32> = (0..60).map(|i| i as f32 * 0.5 - 3.0).collect();
        let p = dir.path().join("a.fvecs");
        write_fvecs(&p, &data, 6).unwrap();
        let f = VectorFile::open(&p).unwrap();
        assert_eq!((f.rows(), f.dim(), f.dtype()), (10, 6, Dtype::F32));
        assert_eq!(f.read_all_f32().unwrap(), data);
        let mut part = Vec::new();
        f.read_rows_f32(3, 2, &mut part).unwrap();
        assert_eq!(part, data[18..30]);

        let ids: Vec<i32> = (0..40).collect();
        let p = dir.path().join("a.ivecs");
        write_ivecs(&p, &ids, 4).unwrap();
        assert_eq!(VectorFile::open(&p).unwrap().read_all_i32().unwrap(), ids);

        let bytes: Vec<u8> = (0..=255).collect();
        let p = dir.path().join("a.bvecs");
        write_bvecs(&p, &bytes, 16).unwrap();
        let f = VectorFile::open(&p).unwrap();
        assert_eq!(
            f.read_all_f32().unwrap(),
            bytes.iter().map(|&b| b as f32).collect::<Vec<_>>()
        );

        for (name, d) in [
            ("f32.npy", NpyData::F32(&data)),
            ("i8.npy", NpyData::I8(&[-3i8, 4, 5, -128, 127, 0])),
            ("u8.npy", NpyData::U8(&[1u8, 2, 3, 250, 0, 9])),
        ] {
            let p = dir.path().join(name);
            write_npy(&p, d, 6).unwrap();
            let f = VectorFile::open(&p).unwrap();
            assert_eq!(f.dim(), 6);
        }
        let h: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
        let p = dir.path().join("f16.npy");
        write_npy(&p, NpyData::F16(&h), 6).unwrap();
        assert_eq!(VectorFile::open(&p).unwrap().read_all_f32().unwrap(), data);
        let p = dir.path().join("i32.npy");
        write_npy(&p, NpyData::I32(&ids), 4).unwrap();
        assert_eq!(VectorFile::open(&p).unwrap().read_all_i32().unwrap(), ids);
    }

    #[test]
    fn reads_fortran_order_npy() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.npy");
        // 2 x 3 array [[1,2,3],[4,5,6]] stored column by column.
        let mut header = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }".to_string();
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        for v in [1f32, 4.0, 2.0, 5.0, 3.0, 6.0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        std::fs::write(&p, &b).unwrap();
        let f = VectorFile::open(&p).unwrap();
        assert_eq!(
            f.read_all_f32().unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        let mut second = Vec::new();
        f.read_rows_f32(1, 1, &mut second).unwrap();
        assert_eq!(second, vec![4.0, 5.0, 6.0]);
    }

    #[test]
    fn bad_files_give_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.fvecs");
        write_fvecs(&p, &[1.0; 12], 4).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.truncate(bytes.len() - 3);
        std::fs::write(&p, &bytes).unwrap();
        let e = VectorFile::open(&p).unwrap_err().to_string();
        assert!(e.contains("t.fvecs") && e.contains("truncated"), "{e}");

        // dimension change mid-file: two records of dim 2, then one of dim 1 padded
        let mut b = Vec::new();
        for d in [2i32, 2] {
            b.extend_from_slice(&d.to_le_bytes());
            b.extend_from_slice(&[0u8; 8]);
        }
        b.extend_from_slice(&3i32.to_le_bytes());
        b.extend_from_slice(&[0u8; 8]);
        std::fs::write(&p, &b).unwrap();
        let e = VectorFile::open(&p).unwrap_err().to_string();
        assert!(e.contains("dimension changes mid-file"), "{e}");

        write_fvecs(&p, &[1.0, f32::NAN, 2.0, 3.0], 2).unwrap();
        let e = VectorFile::open(&p)
            .unwrap()
            .read_all_f32()
            .unwrap_err()
            .to_string();
        assert!(e.contains("row 0, column 1") && e.contains("NaN"), "{e}");
        write_fvecs(&p, &[1.0, 0.0, f32::INFINITY, 3.0], 2).unwrap();
        let e = VectorFile::open(&p)
            .unwrap()
            .read_all_f32()
            .unwrap_err()
            .to_string();
        assert!(e.contains("row 1, column 0") && e.contains("inf"), "{e}");

        let p = dir.path().join("w.npy");
        std::fs::write(&p, b"\x93NUMPY\x01\x00\x40\x00{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1), }          \n").unwrap();
        let e = VectorFile::open(&p).unwrap_err().to_string();
        assert!(e.contains("unsupported dtype '<f8'"), "{e}");
        let p2 = dir.path().join("t.npy");
        write_npy(&p2, NpyData::F32(&[1.0; 8]), 4).unwrap();
        let mut b = std::fs::read(&p2).unwrap();
        b.truncate(b.len() - 4);
        std::fs::write(&p2, &b).unwrap();
        let e = VectorFile::open(&p2).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        let e = VectorFile::open(dir.path().join("x.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.txt"), "{e}");
        let p3 = dir.path().join("ids.ivecs");
        write_ivecs(&p3, &[1, 2], 2).unwrap();
        assert!(matches!(
            VectorFile::open(&p3).unwrap().read_all_f32(),
            Err(VectorFileError::WrongDtype { .. })
        ));
    }
}
