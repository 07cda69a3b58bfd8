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
/// Version of the layout this crate writes.
pub const FORMAT_VERSION: u32 = 4;
/// Oldest version it reads: version 3 is version 4 without
/// [`IndexHeader::query_shell`], version 2 also without
/// [`IndexHeader::search_defaults`] (both read as `None`).
pub const OLDEST_FORMAT_VERSION: u32 = 2;
/// Most residual sketch centres an index may hold (`u16` centre ids).
pub const MAX_SKETCH_CENTRES: usize = 1 << 16;
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

/// Most E8 blocks per copy (`8 b <= 64` projected coordinates: the search
/// engines' fixed buffers).
pub const MAX_BLOCKS: u32 = 8;

/// Widest int8 sketch, in bytes per vector (a multiple of 16; the query's
/// sketch coordinates and scales take `8 w` bytes of a GPU block's shared
/// memory).
pub const MAX_SKETCH_WIDTH: u32 = 1024;

/// Largest squared norm an L2 or inner-product vector may have (norms up to
/// `1e15`): stored-space squared distances, the builder's `f32` covariance
/// sums and the sketch then stay finite in `f32`. Cosine vectors are
/// normalised and have no such bound.
pub const MAX_SQUARED_NORM: f64 = 1e30;

/// Fewest stored dimensions: one E8 block. Data of fewer dimensions is
/// stored with zeros after its own coordinates.
pub const MIN_STORED_DIM: usize = 8;

/// Why a vector cannot enter a metric's stored space.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum VectorProblem {
    #[error("zero norm: cosine distance is undefined")]
    ZeroNorm,
    #[error("squared norm {norm2:e} is above {max:e}: squared distances would overflow f32; scale the data down", max = MAX_SQUARED_NORM)]
    TooLarge { norm2: f64 },
}

/// How each metric maps vectors into the stored space (where every metric is
/// searched as squared L2) and stored-space distances back: the one place
/// the builder and both search backends take these rules from.
impl Metric {
    /// Stored dimension for input dimension `dim`: inner product appends
    /// one, and data of fewer than [`MIN_STORED_DIM`] dimensions is padded
    /// with zeros to it (distances unchanged).
    pub fn stored_dim(self, dim: usize) -> usize {
        let own = match self {
            Metric::InnerProduct => dim + 1,
            Metric::L2 | Metric::Cosine => dim,
        };
        own.max(MIN_STORED_DIM)
    }

    /// `|x|^2`, summed in `f64`: finite for every finite `x` (an `f32` sum of
    /// squares overflows to infinity from about `1e19` per coordinate).
    pub fn squared_norm(x: &[f32]) -> f64 {
        x.iter().map(|&v| v as f64 * v as f64).sum()
    }

    /// Why a vector cannot enter the stored space of this metric, if it
    /// cannot: a zero norm (cosine), or a squared norm above
    /// [`MAX_SQUARED_NORM`] (L2 and inner product, whose stored-space squared
    /// distances would overflow `f32`). Cosine takes any finite nonzero
    /// vector: it is normalised in `f64`.
    pub fn check_norm(self, norm2: f64) -> Result<(), VectorProblem> {
        match self {
            Metric::Cosine if norm2 == 0.0 => Err(VectorProblem::ZeroNorm),
            Metric::L2 | Metric::InnerProduct if norm2 > MAX_SQUARED_NORM => {
                Err(VectorProblem::TooLarge { norm2 })
            }
            _ => Ok(()),
        }
    }

    /// Write base vector `x` into `out` (`stored_dim` values, zeros past
    /// what the metric writes): as it is (L2),
    /// divided by its norm (cosine), or with `sqrt(M^2 - |x|^2)` appended
    /// (inner product; `max_norm2` is `M^2`). `norm2` is
    /// [`Metric::squared_norm`] of `x`; [`Metric::check_norm`] decides what
    /// is refused.
    pub fn prepare_base(
        self,
        x: &[f32],
        norm2: f64,
        max_norm2: f64,
        out: &mut [f32],
    ) -> Result<(), VectorProblem> {
        self.check_norm(norm2)?;
        let own = match self {
            Metric::L2 => {
                out[..x.len()].copy_from_slice(x);
                x.len()
            }
            Metric::Cosine => {
                let inv = 1.0 / norm2.sqrt();
                out.iter_mut()
                    .zip(x)
                    .for_each(|(o, &v)| *o = (v as f64 * inv) as f32);
                x.len()
            }
            Metric::InnerProduct => {
                out[..x.len()].copy_from_slice(x);
                out[x.len()] = (max_norm2 - norm2).max(0.0).sqrt() as f32;
                x.len() + 1
            }
        };
        out[own..].fill(0.0);
        Ok(())
    }

    /// Write query `q` into `out` (`stored_dim` values, zeros past what the
    /// metric writes): as it is (L2), times
    /// the inverse of its norm (cosine), or scaled to norm `M` with `0`
    /// appended (inner product, [`Metric::query_scale`]; `max_norm2` is
    /// `M^2`). `norm2` is [`Metric::squared_norm`] of `q`.
    pub fn prepare_query(
        self,
        q: &[f32],
        norm2: f64,
        max_norm2: f64,
        out: &mut [f32],
    ) -> Result<(), VectorProblem> {
        self.check_norm(norm2)?;
        let own = match self {
            Metric::L2 => {
                out[..q.len()].copy_from_slice(q);
                q.len()
            }
            Metric::InnerProduct => {
                let t = Metric::query_scale(norm2, max_norm2);
                out.iter_mut()
                    .zip(q)
                    .for_each(|(o, &v)| *o = (v as f64 * t) as f32);
                q.len()
            }
            Metric::Cosine => {
                let inv = 1.0 / norm2.sqrt();
                out.iter_mut()
                    .zip(q)
                    .for_each(|(o, &v)| *o = (v as f64 * inv) as f32);
                q.len()
            }
        };
        // Inner product's appended coordinate is 0 for a query, as is the padding.
        out[own..].fill(0.0);
        Ok(())
    }

    /// The factor `t` an inner-product query is scaled by in the stored
    /// space: `M / |q|`, which puts it on the sphere of radius `M` that holds
    /// every stored vector (1 where `q` or `M` is zero). Ranking by
    /// `|t q - x'|^2 = t^2 |q|^2 + M^2 - 2 t <q, x>` is ranking by `<q, x>`
    /// for any `t > 0`; at `|t q| = M` the query lies among the vectors of
    /// largest norm, the inner product's usual answers, instead of outside
    /// all of the data, so its lattice fragments and sketch codes are those
    /// of its answers. Where the answers' norms lie well below `M`, an index
    /// may start the first round nearer them ([`IndexHeader::query_shell`]).
    pub fn query_scale(norm2: f64, max_norm2: f64) -> f64 {
        if norm2 > 0.0 && max_norm2 > 0.0 && norm2.is_finite() {
            (max_norm2 / norm2).sqrt()
        } else {
            1.0
        }
    }

    /// The metric's distance from a stored-space squared L2 distance `d` of
    /// a query prepared by [`Metric::prepare_query`]: `d` (L2),
    /// `1 - cos = d / 2` (cosine), `-<q, x> = (d - t^2 |q|^2 - M^2) / 2t`
    /// (inner product; `query_norm2 = |q|^2`, `max_norm = M`, `t` its
    /// [`Metric::query_scale`]). Infinite `d` (a missing result) stays as it
    /// is.
    pub fn user_distance(self, d: f32, query_norm2: f32, max_norm: f32) -> f32 {
        if !d.is_finite() {
            return d;
        }
        match self {
            Metric::L2 => d,
            Metric::Cosine => d * 0.5,
            Metric::InnerProduct => {
                let (n2, m2) = (query_norm2 as f64, max_norm as f64 * max_norm as f64);
                let t = Metric::query_scale(n2, m2);
                (0.5 * (d as f64 - t * t * n2 - m2) / t) as f32
            }
        }
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
    /// `f32 x K x w`: residual sketch centres in sketch coordinates
    /// ([`octex_core::sketch::centre_term`]); empty when the sketch has none.
    SketchCentres,
    /// `f32 x K`: each centre's multiplier of the sketch scales.
    SketchCentreScales,
    /// `u16 x n`: each vector's centre (empty without centres).
    SketchCentreIds,
}

impl SectionKind {
    pub const ALL: [SectionKind; 17] = [
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
        SectionKind::SketchCentres,
        SectionKind::SketchCentreScales,
        SectionKind::SketchCentreIds,
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
    /// The search point the build chose for this index (format version 3;
    /// `None` in older files and where the build chose none).
    pub search_defaults: Option<SearchDefaults>,
    /// Inner product: the norm, a share of `max_norm` in `(0, 1]`, that a
    /// query is moved to on the stored sphere for its first round (format
    /// version 4; `None` in older files and where the build keeps queries
    /// where they are). See `octex_search::shell`.
    pub query_shell: Option<f32>,
}

/// The search parameters a build chose as its index's defaults for a
/// recall@10 `target` on its own sample (the rule is
/// `octex_search::Index::choose_defaults`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchDefaults {
    pub read_depth: u32,
    pub start_points: u32,
    pub waves: u32,
    pub rerank: u32,
    /// The recall@10 target the point was chosen for.
    pub target: f32,
    /// Recall@10 of the point on the held-back sample.
    pub held_out_recall: f32,
}

impl SearchDefaults {
    /// Every count at least 1 and at most `2^22`, the recalls in `[0, 1]`.
    pub fn is_valid(&self) -> bool {
        let counts = [self.read_depth, self.start_points, self.waves, self.rerank];
        let recalls = [self.target, self.held_out_recall];
        counts.iter().all(|&c| (1..=1 << 22).contains(&c))
            && recalls.iter().all(|r| (0.0..=1.0).contains(r))
    }
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

/// The header bytes and version of a file framed as `magic (8) | version
/// (u32) | header length (u32) | header checksum (xxh3-64)` followed by the
/// header, its magic already checked: preamble length, a version in
/// `versions`, a plausible header length inside the file, the checksum.
/// `kind` names the file in messages (`""` for an index, `"living "`);
/// `origin` is the file's prefix.
pub(crate) fn framed_header<'a>(
    bytes: &'a [u8],
    versions: std::ops::RangeInclusive<u32>,
    kind: &str,
    origin: &str,
) -> Result<(&'a [u8], u32), crate::IndexError> {
    use crate::IndexError;
    let le32 =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if bytes.len() < PREAMBLE_LEN {
        return Err(IndexError::Truncated {
            where_: origin.to_string(),
            problem: format!("{} bytes, shorter than the preamble", bytes.len()),
        });
    }
    let found = le32(8);
    if !versions.contains(&found) {
        return Err(IndexError::Version {
            where_: format!("{origin}{kind}"),
            found,
            oldest: *versions.start(),
            newest: *versions.end(),
        });
    }
    let hlen = le32(12) as usize;
    if hlen > MAX_HEADER_LEN {
        return Err(IndexError::Invalid {
            where_: origin.to_string(),
            problem: format!("header length {hlen} is implausible"),
        });
    }
    if bytes.len() < PREAMBLE_LEN + hlen {
        return Err(IndexError::Truncated {
            where_: origin.to_string(),
            problem: format!(
                "header needs {} bytes, file has {}",
                PREAMBLE_LEN + hlen,
                bytes.len()
            ),
        });
    }
    let hbytes = &bytes[PREAMBLE_LEN..PREAMBLE_LEN + hlen];
    let sum = (le32(16) as u64) | ((le32(20) as u64) << 32);
    if xxhash_rust::xxh3::xxh3_64(hbytes) != sum {
        return Err(IndexError::Checksum {
            where_: origin.to_string(),
            part: format!("{kind}header"),
        });
    }
    Ok((hbytes, found))
}

pub(crate) fn align_up(v: usize) -> usize {
    v.div_ceil(SECTION_ALIGN) * SECTION_ALIGN
}

#[cfg(test)]
mod tests {
    use super::{Metric, VectorProblem};

    fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
    }

    /// The stored-space squared L2 distance converts back to each metric's
    /// own distance, and zero norms are refused where cosine needs a norm.
    #[test]
    fn stored_space_distances_convert_to_each_metric() {
        let x = [3.0f32, -1.0, 2.0];
        let q = [0.5f32, 2.0, -1.5];
        let (xn, qn) = (Metric::squared_norm(&x), Metric::squared_norm(&q));
        let dot: f32 = x.iter().zip(&q).map(|(a, b)| a * b).sum();
        for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
            let sd = metric.stored_dim(3);
            let max2 = 2.0 * xn; // any M^2 >= |x|^2
            let (mut xs, mut qs) = (vec![0f32; sd], vec![0f32; sd]);
            metric.prepare_base(&x, xn, max2, &mut xs).unwrap();
            metric.prepare_query(&q, qn, max2, &mut qs).unwrap();
            let got = metric.user_distance(sq_dist(&xs, &qs), qn as f32, max2.sqrt() as f32);
            if metric == Metric::InnerProduct {
                // Scaled onto the stored vectors' sphere of radius M.
                let stored_norm2 = Metric::squared_norm(&qs);
                assert!(
                    (stored_norm2 - max2).abs() < 1e-4 * max2,
                    "{stored_norm2} vs {max2}"
                );
            }
            let want = match metric {
                Metric::L2 => sq_dist(&x, &q),
                Metric::Cosine => 1.0 - dot / (xn.sqrt() * qn.sqrt()) as f32,
                Metric::InnerProduct => -dot,
            };
            assert!((got - want).abs() < 1e-4, "{metric}: {got} vs {want}");
            assert_eq!(
                metric.user_distance(f32::INFINITY, qn as f32, 1.0),
                f32::INFINITY
            );
        }
        let mut out = [0f32; 3];
        assert_eq!(
            Metric::Cosine.prepare_query(&[0.0; 3], 0.0, 1.0, &mut out),
            Err(VectorProblem::ZeroNorm)
        );
        assert_eq!(
            Metric::Cosine.prepare_base(&[0.0; 3], 0.0, 0.0, &mut out),
            Err(VectorProblem::ZeroNorm)
        );
        // A zero inner-product query is not scaled: every distance is 0.
        let mut zs = [1f32; 4];
        Metric::InnerProduct
            .prepare_query(&[0.0; 3], 0.0, 4.0, &mut zs)
            .unwrap();
        assert_eq!(zs, [0.0; 4]);
        assert_eq!(Metric::InnerProduct.user_distance(4.0, 0.0, 2.0), 0.0);
    }

    /// Data of fewer than eight dimensions is stored padded with zeros to
    /// one E8 block, whatever the buffer held, so distances do not change;
    /// wider data keeps its own dimension.
    #[test]
    fn low_dimensional_data_is_padded_to_one_block() {
        for (metric, own) in [
            (Metric::L2, 2),
            (Metric::Cosine, 2),
            (Metric::InnerProduct, 3),
        ] {
            assert_eq!(metric.stored_dim(2), super::MIN_STORED_DIM);
            assert_eq!(metric.stored_dim(64), 64 + own - 2);
            let x = [3.0f32, -4.0];
            let n2 = Metric::squared_norm(&x);
            let (mut xs, mut qs) = (vec![7.0f32; 8], vec![-7.0f32; 8]);
            metric.prepare_base(&x, n2, 2.0 * n2, &mut xs).unwrap();
            metric.prepare_query(&x, n2, 2.0 * n2, &mut qs).unwrap();
            assert!(xs[own..].iter().all(|&v| v == 0.0), "{metric}: {xs:?}");
            assert!(qs[2..].iter().all(|&v| v == 0.0), "{metric}: {qs:?}");
        }
    }

    /// Huge and tiny finite vectors: cosine normalises them in f64 (no
    /// overflow to infinity, no underflow to a false zero norm); L2 and inner
    /// product refuse squared norms whose distances would overflow f32.
    #[test]
    fn huge_and_tiny_norms_are_exact_or_refused() {
        let mut out = [0f32; 3];
        for scale in [1e-30f32, 1e30, 5e37] {
            let q = [3.0 * scale, 0.0, -4.0 * scale];
            let n2 = Metric::squared_norm(&q);
            assert!(n2.is_finite() && n2 > 0.0, "{scale}");
            Metric::Cosine.prepare_query(&q, n2, 1.0, &mut out).unwrap();
            assert!(
                (out[0] - 0.6).abs() < 1e-6 && (out[2] + 0.8).abs() < 1e-6,
                "{out:?}"
            );
        }
        let big = [1e20f32, 0.0, 0.0];
        let n2 = Metric::squared_norm(&big);
        for m in [Metric::L2, Metric::InnerProduct] {
            let mut o = vec![0f32; m.stored_dim(3)];
            assert!(matches!(
                m.prepare_query(&big, n2, 1.0, &mut o),
                Err(VectorProblem::TooLarge { .. })
            ));
        }
        let fine = [1e14f32, 0.0, 0.0];
        Metric::L2
            .prepare_query(&fine, Metric::squared_norm(&fine), 1.0, &mut out)
            .unwrap();
    }
}
