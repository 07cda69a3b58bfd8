//! [`Index`]: an index in memory, built or loaded; its validation on load is
//! `validate.rs`.

mod validate;

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
    #[error("{0}a living index file (user ids, removals or vectors not yet inserted): load it with LiveIndex::load (Python octex.load, C octex_load)")]
    LivingFile(String),
    #[error("{where_}index format version {found}; this build of octex reads versions {oldest} to {newest}: rebuild the index with it")]
    Version {
        where_: String,
        found: u32,
        oldest: u32,
        newest: u32,
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
    /// Residual sketch centres (`K x w`), their scale multipliers (`K`) and
    /// each vector's centre (`n`); all empty for a plain sketch.
    pub sketch_centres: Vec<f32>,
    pub sketch_centre_scales: Vec<f32>,
    pub sketch_centre_ids: Vec<u16>,
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
    /// A 64-byte-aligned range of a mapped file (a living file's index).
    MappedPart(Mmap, Range<usize>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Owned(words, len) => &bytemuck::cast_slice(words)[..*len],
            Storage::Mapped(m) => m,
            Storage::MappedPart(m, r) => &m[r.clone()],
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
        SketchCentres => bytemuck::cast_slice(&parts.sketch_centres),
        SketchCentreScales => bytemuck::cast_slice(&parts.sketch_centre_scales),
        SketchCentreIds => bytemuck::cast_slice(&parts.sketch_centre_ids),
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

    /// The index image at `range` of a mapped file, validated as a file of
    /// its own (`range` starts at a multiple of 64 bytes).
    pub(crate) fn from_mapped_part(
        map: Mmap,
        range: Range<usize>,
        origin: String,
        opts: LoadOptions,
    ) -> Result<Self, IndexError> {
        debug_assert_eq!(range.start % SECTION_ALIGN, 0);
        Self::validate(Storage::MappedPart(map, range), origin, opts)
    }

    /// Validate an index held in memory (a file's bytes, copied): what
    /// [`Index::load_with`] does without the file (network transfers, fuzzing).
    pub fn from_bytes(bytes: &[u8], opts: LoadOptions) -> Result<Self, IndexError> {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Self::validate(Storage::Owned(words, bytes.len()), String::new(), opts)
    }

    /// Owned copies of every section, to edit and assemble again with
    /// [`Index::from_parts`] (which validates the result).
    pub fn to_parts(&self) -> IndexParts {
        IndexParts {
            header: self.header.clone(),
            mean: self.mean().to_vec(),
            basis: self.basis().to_vec(),
            basis_bias: self.basis_bias().to_vec(),
            rotation: self.rotation().to_vec(),
            shifts: self.shifts().to_vec(),
            spacings: self.spacings().to_vec(),
            sketch_scales: self.sketch_scales().to_vec(),
            sketch: self.sketch().to_vec(),
            sketch_centres: self.sketch_centres().to_vec(),
            sketch_centre_scales: self.sketch_centre_scales().to_vec(),
            sketch_centre_ids: self.sketch_centre_ids().to_vec(),
            rows: self.rows().to_vec(),
            tables: self.tables().to_vec(),
            table_keys: self.table_keys().to_vec(),
            table_slots: self.table_slots().to_vec(),
            ripples: self.ripples().to_vec(),
            vectors: match self.vectors() {
                RerankView::F16(v) => RerankVectors::F16(v.to_vec()),
                RerankView::F32(v) => RerankVectors::F32(v.to_vec()),
            },
        }
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

    /// This index with the header's search defaults set ([`SearchDefaults`])
    /// ([`Index::with_header`]).
    pub fn with_search_defaults(
        self,
        defaults: Option<SearchDefaults>,
    ) -> Result<Self, IndexError> {
        let mut header = self.header.clone();
        header.search_defaults = defaults;
        self.with_header(header)
    }

    /// This index with the header's query shell set
    /// ([`IndexHeader::query_shell`]) ([`Index::with_header`]).
    pub fn with_query_shell(self, shell: Option<f32>) -> Result<Self, IndexError> {
        let mut header = self.header.clone();
        header.query_shell = shell;
        self.with_header(header)
    }

    /// This index with `header` (the same sections). The header is
    /// rewritten in place where it still fits before the first section (the
    /// rest of the gap zeroed), else the index is assembled again; either
    /// way the result is validated as a load would validate it, and it is of
    /// version [`FORMAT_VERSION`].
    fn with_header(self, header: IndexHeader) -> Result<Self, IndexError> {
        let hbytes = bincode::serde::encode_to_vec(&header, bincode_config()).map_err(|e| {
            IndexError::Invalid {
                where_: self.origin.clone(),
                problem: format!("header does not encode: {e}"),
            }
        })?;
        let first = self
            .header
            .sections
            .first()
            .map_or(0, |s| s.offset as usize);
        match self.storage {
            Storage::Owned(mut words, len) if PREAMBLE_LEN + hbytes.len() <= first => {
                let buf: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut words)[..len];
                buf[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
                buf[12..16].copy_from_slice(&(hbytes.len() as u32).to_le_bytes());
                buf[16..24].copy_from_slice(&xxh3_64(&hbytes).to_le_bytes());
                buf[PREAMBLE_LEN..PREAMBLE_LEN + hbytes.len()].copy_from_slice(&hbytes);
                buf[PREAMBLE_LEN + hbytes.len()..first].fill(0);
                let opts = LoadOptions {
                    verify_checksums: false,
                };
                Self::validate(Storage::Owned(words, len), self.origin, opts)
            }
            _ => {
                let mut parts = self.to_parts();
                parts.header = header;
                Self::from_parts(parts)
            }
        }
    }

    /// The raw bytes of the whole index (the file's contents).
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
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
    /// Dimension of the stored vectors: [`Metric::stored_dim`] of the
    /// input dimension (inner product appends one).
    pub fn stored_dim(&self) -> usize {
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
    /// Residual sketch centres, `K x w` (empty for a plain sketch).
    pub fn sketch_centres(&self) -> &[f32] {
        self.section(SectionKind::SketchCentres)
    }
    /// Each centre's multiplier of the sketch scales, `K`.
    pub fn sketch_centre_scales(&self) -> &[f32] {
        self.section(SectionKind::SketchCentreScales)
    }
    /// Each vector's centre, `n` (empty for a plain sketch).
    pub fn sketch_centre_ids(&self) -> &[u16] {
        self.section(SectionKind::SketchCentreIds)
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

    /// Tell the OS how a mapped index will be read: every section but the
    /// rerank vectors is read ahead now (read per wave, it should stay in
    /// memory); with `vectors_on_disk`, the rerank vectors are marked as read
    /// at random, so a fault reads the page of one vector and not a readahead
    /// window that would push the per-wave sections out of a memory smaller
    /// than the file. Nothing for an index in owned memory.
    pub fn advise_memory(&self, vectors_on_disk: bool) -> std::io::Result<()> {
        let (map, base) = match &self.storage {
            Storage::Mapped(m) => (m, 0),
            Storage::MappedPart(m, r) => (m, r.start),
            Storage::Owned(..) => return Ok(()),
        };
        for (kind, range) in SectionKind::ALL.iter().zip(&self.ranges) {
            if range.is_empty() {
                continue;
            }
            let advice = match (kind, vectors_on_disk) {
                (SectionKind::Vectors, true) => memmap2::Advice::Random,
                (SectionKind::Vectors, false) => continue,
                _ => memmap2::Advice::WillNeed,
            };
            map.advise_range(advice, base + range.start, range.len())?;
        }
        Ok(())
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
            dim: self.stored_dim(),
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
