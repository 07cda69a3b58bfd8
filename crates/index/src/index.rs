//! [`Index`]: an index in memory, built or loaded, and its validation.

use std::ops::Range;
use std::path::{Path, PathBuf};

use half::f16;
use memmap2::Mmap;
use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

use crate::atomic::write_atomically;
use crate::format::*;
use crate::table::{TableEntry, PAD_ID};

/// Why an index could not be loaded or assembled.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}not an octex index (bad magic)")]
    NotAnIndex(String),
    #[error("{where_}index format version {found}; this build of octex reads version {supported} only: rebuild the index")]
    Version {
        where_: String,
        found: u32,
        supported: u32,
    },
    #[error("{where_}truncated: {problem}")]
    Truncated { where_: String, problem: String },
    #[error("{where_}checksum mismatch in {part}: the file is corrupted")]
    Checksum { where_: String, part: String },
    #[error("{where_}invalid index: {problem}")]
    Invalid { where_: String, problem: String },
}

/// The arrays of an index, owned, as a builder produces them.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexParts {
    /// Header fields; `sections` is filled in by [`Index::from_parts`].
    pub header: IndexHeader,
    pub mean: Vec<f32>,
    pub basis: Vec<f32>,
    pub basis_bias: Vec<f32>,
    pub rotation: Vec<f32>,
    pub shifts: Vec<f32>,
    pub spacings: Vec<f32>,
    pub sketch_scales: Vec<f32>,
    pub sketch: Vec<i8>,
    pub rows: Vec<u32>,
    pub tables: Vec<TableEntry>,
    pub table_keys: Vec<u64>,
    pub table_slots: Vec<u32>,
    pub ripples: Vec<u32>,
    pub vectors: RerankVectors,
}

/// Vectors for the exact rerank.
#[derive(Clone, Debug, PartialEq)]
pub enum RerankVectors {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

/// A borrowed view of the rerank vectors.
#[derive(Clone, Copy, Debug)]
pub enum RerankView<'a> {
    F16(&'a [f16]),
    F32(&'a [f32]),
}

enum Storage {
    /// `u64` words so the base is 8-byte aligned; `len` bytes are used.
    Owned(Vec<u64>, usize),
    Mapped(Mmap),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Owned(words, len) => &bytemuck::cast_slice(words)[..*len],
            Storage::Mapped(m) => m,
        }
    }
}

/// An index: header plus typed views of its sections.
pub struct Index {
    storage: Storage,
    header: IndexHeader,
    ranges: [Range<usize>; SectionKind::ALL.len()],
    origin: String,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Index({}n={}, dim={}, copies={}, {})",
            self.origin,
            self.header.n,
            self.header.input_dim,
            self.header.copies,
            self.header.metric
        )
    }
}

/// Options of [`Index::load_with`].
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Verify every section's checksum (reads the whole file once).
    pub verify_checksums: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            verify_checksums: true,
        }
    }
}

/// Bytes per parallel copy job when an index is assembled in memory.
const COPY_CHUNK: usize = 16 << 20;

fn section_bytes(parts: &IndexParts, kind: SectionKind) -> &[u8] {
    use SectionKind::*;
    match kind {
        Mean => bytemuck::cast_slice(&parts.mean),
        Basis => bytemuck::cast_slice(&parts.basis),
        BasisBias => bytemuck::cast_slice(&parts.basis_bias),
        Rotation => bytemuck::cast_slice(&parts.rotation),
        Shifts => bytemuck::cast_slice(&parts.shifts),
        Spacings => bytemuck::cast_slice(&parts.spacings),
        SketchScales => bytemuck::cast_slice(&parts.sketch_scales),
        Sketch => bytemuck::cast_slice(&parts.sketch),
        Rows => bytemuck::cast_slice(&parts.rows),
        Tables => bytemuck::cast_slice(&parts.tables),
        TableKeys => bytemuck::cast_slice(&parts.table_keys),
        TableSlots => bytemuck::cast_slice(&parts.table_slots),
        Ripples => bytemuck::cast_slice(&parts.ripples),
        Vectors => match &parts.vectors {
            RerankVectors::F16(v) => bytemuck::cast_slice(v),
            RerankVectors::F32(v) => bytemuck::cast_slice(v),
        },
    }
}

impl Index {
    /// Assemble the parts into the file layout in memory and validate them.
    pub fn from_parts(parts: IndexParts) -> Result<Self, IndexError> {
        let mut header = parts.header.clone();
        header.vector_dtype = match parts.vectors {
            RerankVectors::F16(_) => VectorDtype::F16,
            RerankVectors::F32(_) => VectorDtype::F32,
        };
        // Offsets depend on the header length, which depends on the offsets'
        // encoded sizes: iterate until stable (twice in practice).
        header.sections = SectionKind::ALL
            .iter()
            .map(|&kind| SectionEntry {
                kind,
                offset: 0,
                len: 0,
                checksum: 0,
            })
            .collect();
        // Checksums do not depend on the offsets: hash every section once, in parallel.
        let checksums: Vec<u64> = SectionKind::ALL
            .par_iter()
            .map(|&kind| xxh3_64(section_bytes(&parts, kind)))
            .collect();
        let mut header_bytes;
        loop {
            header_bytes =
                bincode::serde::encode_to_vec(&header, bincode_config()).map_err(|e| {
                    IndexError::Invalid {
                        where_: String::new(),
                        problem: format!("header does not encode: {e}"),
                    }
                })?;
            let mut off = align_up(PREAMBLE_LEN + header_bytes.len());
            let mut changed = false;
            for (entry, &checksum) in header.sections.iter_mut().zip(&checksums) {
                let b = section_bytes(&parts, entry.kind);
                let new = SectionEntry {
                    kind: entry.kind,
                    offset: off as u64,
                    len: b.len() as u64,
                    checksum,
                };
                changed |= new != *entry;
                *entry = new;
                off = align_up(off + b.len());
            }
            if !changed {
                break;
            }
        }
        let total = header
            .sections
            .last()
            .map_or(0, |s| (s.offset + s.len) as usize);
        let mut words = vec![0u64; total.div_ceil(8)];
        {
            let buf: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut words)[..total];
            buf[..8].copy_from_slice(MAGIC);
            buf[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
            buf[12..16].copy_from_slice(&(header_bytes.len() as u32).to_le_bytes());
            buf[16..24].copy_from_slice(&xxh3_64(&header_bytes).to_le_bytes());
            buf[24..24 + header_bytes.len()].copy_from_slice(&header_bytes);
            // Sections in parallel, each in chunks (a large copy is page-fault bound).
            let mut at = 24 + header_bytes.len();
            let (_, mut rest) = buf.split_at_mut(at);
            let mut jobs: Vec<(&mut [u8], &[u8])> = Vec::new();
            for entry in &header.sections {
                let b = section_bytes(&parts, entry.kind);
                let (_, r) = std::mem::take(&mut rest).split_at_mut(entry.offset as usize - at);
                let (dst, r) = r.split_at_mut(b.len());
                rest = r;
                at = entry.offset as usize + b.len();
                jobs.extend(dst.chunks_mut(COPY_CHUNK).zip(b.chunks(COPY_CHUNK)));
            }
            jobs.into_par_iter().for_each(|(d, s)| d.copy_from_slice(s));
        }
        drop(parts);
        // Checksums were just computed from these bytes: skip re-hashing.
        Self::validate(
            Storage::Owned(words, total),
            String::new(),
            LoadOptions {
                verify_checksums: false,
            },
        )
    }

    /// Load and fully validate an index file (memory-mapped).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, IndexError> {
        Self::load_with(path, LoadOptions::default())
    }

    /// [`Index::load`] with options.
    pub fn load_with(path: impl AsRef<Path>, opts: LoadOptions) -> Result<Self, IndexError> {
        let path = path.as_ref();
        let io = |source| IndexError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: read-only private map. Index files are written by rename, so the
        // file behind a path is never modified in place by octex; every section is
        // validated (bounds, checksums, ids) before any typed view is handed out.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::validate(Storage::Mapped(map), format!("{}: ", path.display()), opts)
    }

    /// Write the index atomically (temporary file, fsync, rename).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), IndexError> {
        let path = path.as_ref();
        write_atomically(path, |w| std::io::Write::write_all(w, self.storage.bytes())).map_err(
            |source| IndexError::Io {
                path: path.to_path_buf(),
                source,
            },
        )
    }

    /// The raw bytes of the whole index (the file's contents).
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    fn validate(storage: Storage, origin: String, opts: LoadOptions) -> Result<Self, IndexError> {
        let w = || origin.clone();
        let bytes = storage.bytes();
        let truncated = |problem: String| IndexError::Truncated {
            where_: w(),
            problem,
        };
        let invalid = |problem: String| IndexError::Invalid {
            where_: w(),
            problem,
        };
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            if bytes.len() < 8 && MAGIC.starts_with(bytes) {
                return Err(truncated(format!("{} bytes", bytes.len())));
            }
            return Err(IndexError::NotAnIndex(w()));
        }
        if bytes.len() < PREAMBLE_LEN {
            return Err(truncated(format!(
                "{} bytes, shorter than the preamble",
                bytes.len()
            )));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(IndexError::Version {
                where_: w(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let hlen = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
        if hlen > MAX_HEADER_LEN {
            return Err(invalid(format!("header length {hlen} is implausible")));
        }
        if bytes.len() < PREAMBLE_LEN + hlen {
            return Err(truncated(format!(
                "header needs {} bytes, file has {}",
                PREAMBLE_LEN + hlen,
                bytes.len()
            )));
        }
        let hsum = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
        let hbytes = &bytes[PREAMBLE_LEN..PREAMBLE_LEN + hlen];
        if xxh3_64(hbytes) != hsum {
            return Err(IndexError::Checksum {
                where_: w(),
                part: "header".into(),
            });
        }
        let (header, _): (IndexHeader, usize) =
            bincode::serde::decode_from_slice(hbytes, bincode_config())
                .map_err(|e| invalid(format!("header does not decode: {e}")))?;

        // Sections: present once each, in order, aligned, inside the file.
        if header.sections.len() != SectionKind::ALL.len() {
            return Err(invalid(format!(
                "{} sections, expected {}",
                header.sections.len(),
                SectionKind::ALL.len()
            )));
        }
        let mut ranges: [Range<usize>; SectionKind::ALL.len()] = Default::default();
        let mut prev_end = PREAMBLE_LEN + hlen;
        for (i, (entry, kind)) in header.sections.iter().zip(SectionKind::ALL).enumerate() {
            if entry.kind != kind {
                return Err(invalid(format!(
                    "section {i} is {:?}, expected {kind:?}",
                    entry.kind
                )));
            }
            let start = entry.offset as usize;
            let end = start
                .checked_add(entry.len as usize)
                .ok_or_else(|| invalid(format!("{kind:?} overflows")))?;
            if start % SECTION_ALIGN != 0 || start < prev_end {
                return Err(invalid(format!("{kind:?} at offset {start} is misplaced")));
            }
            if end > bytes.len() {
                return Err(truncated(format!(
                    "{kind:?} ends at byte {end}, file has {}",
                    bytes.len()
                )));
            }
            if opts.verify_checksums && xxh3_64(&bytes[start..end]) != entry.checksum {
                return Err(IndexError::Checksum {
                    where_: w(),
                    part: format!("{kind:?}"),
                });
            }
            ranges[i] = start..end;
            prev_end = end;
        }

        // Sizes implied by the header.
        let h = &header;
        let n = h.n as usize;
        let dim = h.dim as usize;
        let width = h.width();
        let sw = h.sketch_width as usize;
        let m = h.basis_dim as usize;
        let mc = h.rotation_dim as usize;
        if m == 0 || m > dim || mc < 8 * h.blocks as usize || mc > m {
            return Err(invalid(format!("basis of {m} and rotation of {mc} directions do not fit dimension {dim} and {} blocks", h.blocks)));
        }
        if n == 0
            || dim == 0
            || h.copies == 0
            || h.blocks == 0
            || h.spacings == 0
            || h.list_len == 0
            || sw == 0
            || h.row_len == 0
        {
            return Err(invalid("a count in the header is zero".into()));
        }
        if n >= PAD_ID as usize {
            return Err(invalid(format!("{n} vectors exceed the u32 id space")));
        }
        let vsize = match h.vector_dtype {
            VectorDtype::F16 => 2,
            VectorDtype::F32 => 4,
        };
        let tables_n = h.copies as usize * h.spacings as usize;
        let expect =
            |kind: SectionKind, elems: Option<usize>, esize: usize| -> Result<usize, IndexError> {
                let len = ranges[kind as usize].len();
                match elems {
                    Some(e) if e.checked_mul(esize) == Some(len) => Ok(e),
                    Some(e) => Err(invalid(format!(
                        "{kind:?} holds {len} bytes, expected {}",
                        e.saturating_mul(esize)
                    ))),
                    None if len % esize == 0 => Ok(len / esize),
                    None => Err(invalid(format!(
                        "{kind:?} holds {len} bytes, not a multiple of {esize}"
                    ))),
                }
            };
        use SectionKind::*;
        expect(Mean, Some(dim), 4)?;
        expect(Basis, dim.checked_mul(m), 4)?;
        expect(BasisBias, Some(m), 4)?;
        expect(Rotation, mc.checked_mul(width), 4)?;
        expect(Shifts, Some(width), 4)?;
        expect(Spacings, Some(h.spacings as usize), 4)?;
        expect(SketchScales, Some(sw), 4)?;
        expect(Sketch, n.checked_mul(sw), 1)?;
        expect(Rows, n.checked_mul(h.row_len as usize), 4)?;
        expect(Tables, Some(tables_n), std::mem::size_of::<TableEntry>())?;
        let slots = expect(TableKeys, None, 8)?;
        expect(TableSlots, Some(slots), 4)?;
        let ripple_ids = expect(Ripples, None, 4)?;
        if ripple_ids % h.list_len as usize != 0 {
            return Err(invalid("ripples are not whole lists".into()));
        }
        let fragments = ripple_ids / h.list_len as usize;
        expect(Vectors, n.checked_mul(dim), vsize)?;

        let index = Self {
            storage,
            header,
            ranges,
            origin,
        };
        // Values every search trusts: finite floats, ids in range, tables in bounds.
        let finite = |kind: SectionKind, v: &[f32]| -> Result<(), IndexError> {
            if v.iter().all(|x| x.is_finite()) {
                Ok(())
            } else {
                Err(index.invalid(format!("{kind:?} holds a non-finite value")))
            }
        };
        finite(Mean, index.mean())?;
        finite(Basis, index.basis())?;
        finite(BasisBias, index.basis_bias())?;
        finite(Rotation, index.rotation())?;
        finite(Shifts, index.shifts())?;
        finite(SketchScales, index.sketch_scales())?;
        if !index.spacings().windows(2).all(|p| p[0] < p[1])
            || index
                .spacings()
                .iter()
                .any(|&s| !(s > 0.0 && s.is_finite()))
        {
            return Err(index.invalid("spacings must be positive and ascending".into()));
        }
        let ids_ok = |v: &[u32]| {
            v.par_chunks(1 << 20)
                .all(|c| c.iter().all(|&id| (id as usize) < n || id == PAD_ID))
        };
        if !ids_ok(index.rows()) {
            return Err(index.invalid("a neighbour row holds an id out of range".into()));
        }
        if !ids_ok(index.ripples()) {
            return Err(index.invalid("a ripple holds an id out of range".into()));
        }
        for (t, e) in index.tables().iter().enumerate() {
            let cap = e.capacity as usize;
            let ok = (cap == 0 || cap.is_power_of_two())
                && (e.slot_offset as usize)
                    .checked_add(cap)
                    .is_some_and(|end| end <= slots)
                && (e.ripple_base as usize)
                    .checked_add(e.fragments as usize)
                    .is_some_and(|end| end <= fragments)
                && (e.fragments as usize) * 2 <= cap;
            if !ok {
                return Err(index.invalid(format!("key table {t} is out of bounds")));
            }
            let ids = &index.table_slots()[e.slot_offset as usize..e.slot_offset as usize + cap];
            if ids
                .iter()
                .any(|&s| s != u32::MAX && s as u64 >= e.fragments)
            {
                return Err(index.invalid(format!("key table {t} names a fragment out of range")));
            }
        }
        Ok(index)
    }

    fn invalid(&self, problem: String) -> IndexError {
        IndexError::Invalid {
            where_: self.origin.clone(),
            problem,
        }
    }

    fn section<T: bytemuck::Pod>(&self, kind: SectionKind) -> &[T] {
        // Sections are 64-byte aligned in a buffer whose base is 8-byte (owned) or
        // page (mapped) aligned, and their lengths were validated as whole elements.
        bytemuck::cast_slice(&self.storage.bytes()[self.ranges[kind as usize].clone()])
    }

    pub fn header(&self) -> &IndexHeader {
        &self.header
    }
    /// Vectors in the index.
    pub fn len(&self) -> usize {
        self.header.n as usize
    }
    pub fn is_empty(&self) -> bool {
        self.header.n == 0
    }
    /// Dimension of the vectors users pass in.
    pub fn input_dim(&self) -> usize {
        self.header.input_dim as usize
    }
    /// Dimension stored.
    pub fn dim(&self) -> usize {
        self.header.dim as usize
    }
    pub fn metric(&self) -> Metric {
        self.header.metric
    }
    pub fn mean(&self) -> &[f32] {
        self.section(SectionKind::Mean)
    }
    pub fn basis(&self) -> &[f32] {
        self.section(SectionKind::Basis)
    }
    pub fn basis_bias(&self) -> &[f32] {
        self.section(SectionKind::BasisBias)
    }
    pub fn rotation(&self) -> &[f32] {
        self.section(SectionKind::Rotation)
    }
    pub fn shifts(&self) -> &[f32] {
        self.section(SectionKind::Shifts)
    }
    pub fn spacings(&self) -> &[f32] {
        self.section(SectionKind::Spacings)
    }
    pub fn sketch_scales(&self) -> &[f32] {
        self.section(SectionKind::SketchScales)
    }
    pub fn sketch(&self) -> &[i8] {
        self.section(SectionKind::Sketch)
    }
    pub fn rows(&self) -> &[u32] {
        self.section(SectionKind::Rows)
    }
    pub fn tables(&self) -> &[TableEntry] {
        self.section(SectionKind::Tables)
    }
    pub fn table_keys(&self) -> &[u64] {
        self.section(SectionKind::TableKeys)
    }
    pub fn table_slots(&self) -> &[u32] {
        self.section(SectionKind::TableSlots)
    }
    pub fn ripples(&self) -> &[u32] {
        self.section(SectionKind::Ripples)
    }
    pub fn vectors(&self) -> RerankView<'_> {
        match self.header.vector_dtype {
            VectorDtype::F16 => RerankView::F16(self.section(SectionKind::Vectors)),
            VectorDtype::F32 => RerankView::F32(self.section(SectionKind::Vectors)),
        }
    }

    /// The ripple (`list_len` ids, padded with `PAD_ID`) of the fragment with
    /// `key` in copy `copy` at spacing index `spacing`, if stored.
    #[inline]
    pub fn ripple(&self, copy: usize, spacing: usize, key: u64) -> Option<&[u32]> {
        let e = &self.tables()[copy * self.header.spacings as usize + spacing];
        let so = e.slot_offset as usize;
        let cap = e.capacity as usize;
        let ord = crate::table::lookup(
            &self.table_keys()[so..so + cap],
            &self.table_slots()[so..so + cap],
            key,
        )?;
        let l = self.header.list_len as usize;
        let start = (e.ripple_base as usize + ord as usize) * l;
        Some(&self.ripples()[start..start + l])
    }

    /// Bytes of each part, for size reports.
    pub fn section_sizes(&self) -> Vec<(SectionKind, u64)> {
        self.header
            .sections
            .iter()
            .map(|s| (s.kind, s.len))
            .collect()
    }

    /// Rebuild the copy map (basis, rotations, shifts, spacings) for projecting
    /// queries.
    pub fn copy_map(&self) -> octex_lattice::CopyMap {
        octex_lattice::CopyMap {
            dim: self.dim(),
            copies: self.header.copies as usize,
            blocks: self.header.blocks as usize,
            basis: self.basis().to_vec(),
            basis_dim: self.header.basis_dim as usize,
            basis_bias: self.basis_bias().to_vec(),
            rotation: self.rotation().to_vec(),
            shifts: self.shifts().to_vec(),
            spacings: self.spacings().to_vec(),
        }
    }
}
