//! The on-disk (and in-memory) layout of an index.
//!
//! ```text
//! offset 0   magic  "OCTEXIDX"                      8 bytes
//!        8   format version (u32 LE)                [`FORMAT_VERSION`]
//!       12   header length (u32 LE)
//!       16   header checksum (xxh3-64 of the header bytes, u64 LE)
//!       24   header: bincode (standard config) of [`IndexHeader`]
//!   then     sections, each starting at a multiple of 64 bytes, in
//!            [`SectionKind`] order; every section has an xxh3-64 checksum in
//!            the header. The file ends at the end of the last section.
//! ```
//!
//! The same bytes are the in-memory index: a build assembles them in one
//! 64-byte-aligned buffer, a load maps the file, and both go through the same
//! validation. A GPU backend can copy each section to device memory as is (flat
//! arrays, ids as `u32`, fixed-stride ripples and rows).

use serde::{Deserialize, Serialize};

/// First bytes of every index file.
pub const MAGIC: &[u8; 8] = b"OCTEXIDX";
/// Version of the layout this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Alignment of every section.
pub const SECTION_ALIGN: usize = 64;
/// Bytes before the header.
pub const PREAMBLE_LEN: usize = 24;
/// Largest header accepted (guards allocation on a corrupted length).
pub const MAX_HEADER_LEN: usize = 1 << 20;

/// Distance the index answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Metric {
    /// Squared Euclidean distance.
    L2,
    /// Cosine: vectors and queries are L2-normalised, then L2 is searched;
    /// reported distances are `1 - cos`.
    Cosine,
    /// Maximum inner product, reduced to L2 by appending `sqrt(M^2 - |x|^2)` to
    /// every base vector (`M` the largest base norm) and `0` to every query;
    /// reported distances are `-<q, x>` (smaller is better, as for the others).
    InnerProduct,
}

impl std::str::FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "euclidean" => Ok(Metric::L2),
            "cosine" | "angular" => Ok(Metric::Cosine),
            "ip" | "inner-product" | "dot" => Ok(Metric::InnerProduct),
            other => Err(format!(
                "unknown metric '{other}' (expected l2, cosine or ip)"
            )),
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Metric::L2 => "l2",
            Metric::Cosine => "cosine",
            Metric::InnerProduct => "ip",
        })
    }
}

/// Precision of the vectors kept for the exact rerank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VectorDtype {
    F16,
    F32,
}

/// The parts of an index, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum SectionKind {
    /// `f32 x dim`: data mean.
    Mean = 0,
    /// `f32 x dim x m`: principal directions, row-major.
    Basis,
    /// `f32 x m`: `mean^T Basis`.
    BasisBias,
    /// `f32 x m_c x (C*8b)`: all copies' rotations, row-major, divided by sigma.
    Rotation,
    /// `f32 x (C*8b)`: shifts in lattice units.
    Shifts,
    /// `f32 x L`: spacings in units of sigma, ascending.
    Spacings,
    /// `f32 x w`: one scale per sketch coordinate (the first `w` principal
    /// coordinates; those beyond `m` are zero).
    SketchScales,
    /// `i8 x n x w`: the sketch rows.
    Sketch,
    /// `u32 x n x Lt`: neighbour rows, padded with `PAD_ID`.
    Rows,
    /// `TableEntry x (C*L)`: where each (copy, spacing) key table lives.
    Tables,
    /// `u64 x slots`: keys of all tables.
    TableKeys,
    /// `u32 x slots`: fragment ordinal per slot.
    TableSlots,
    /// `u32 x fragments x l`: fragment ripples, padded with `PAD_ID`.
    Ripples,
    /// `f16|f32 x n x dim`: vectors for the exact rerank.
    Vectors,
}

impl SectionKind {
    pub const ALL: [SectionKind; 14] = [
        SectionKind::Mean,
        SectionKind::Basis,
        SectionKind::BasisBias,
        SectionKind::Rotation,
        SectionKind::Shifts,
        SectionKind::Spacings,
        SectionKind::SketchScales,
        SectionKind::Sketch,
        SectionKind::Rows,
        SectionKind::Tables,
        SectionKind::TableKeys,
        SectionKind::TableSlots,
        SectionKind::Ripples,
        SectionKind::Vectors,
    ];
}

/// One section's place and checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionEntry {
    pub kind: SectionKind,
    pub offset: u64,
    pub len: u64,
    pub checksum: u64,
}

/// Everything about an index but its arrays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexHeader {
    /// `CARGO_PKG_VERSION` of the crate that wrote it.
    pub crate_version: String,
    pub metric: Metric,
    /// Vectors in the index.
    pub n: u64,
    /// Dimension of the vectors users pass in.
    pub input_dim: u32,
    /// Dimension stored (`input_dim + 1` for inner product).
    pub dim: u32,
    /// Principal directions kept, `m` (<= dim).
    pub basis_dim: u32,
    /// Leading principal directions the copies draw from, `m_c` (<= m).
    pub rotation_dim: u32,
    /// Copies `C`.
    pub copies: u32,
    /// E8 blocks per copy `b`.
    pub blocks: u32,
    /// Spacings `L`.
    pub spacings: u32,
    /// Ripple length `l`.
    pub list_len: u32,
    /// Smallest fragment that gets a stored ripple.
    pub min_fragment: u32,
    /// Sketch width `w`.
    pub sketch_width: u32,
    /// Neighbour row length `Lt`.
    pub row_len: u32,
    pub vector_dtype: VectorDtype,
    /// Largest base norm `M` (inner product only; 0 otherwise).
    pub max_norm: f32,
    pub seed: u64,
    /// The build parameters as JSON, for the record.
    pub build_params: String,
    pub sections: Vec<SectionEntry>,
}

impl IndexHeader {
    pub fn section(&self, kind: SectionKind) -> Option<&SectionEntry> {
        self.sections.iter().find(|s| s.kind == kind)
    }

    /// Width of the projection of all copies.
    pub fn width(&self) -> usize {
        self.copies as usize * 8 * self.blocks as usize
    }
}

pub(crate) fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_HEADER_LEN>()
}

pub(crate) fn align_up(v: usize) -> usize {
    v.div_ceil(SECTION_ALIGN) * SECTION_ALIGN
}
