//! # octex-index
//!
//! The OctEx index in memory and on disk, and the vector file formats.
//!
//! - [`Index`]: one file (or one buffer of the same bytes) with a versioned,
//!   checksummed header and one 64-byte-aligned section per part (copy maps,
//!   sketch, neighbour rows, key tables, ripples, rerank vectors). Loading maps
//!   the file and validates header, sizes, checksums and every stored id, so a
//!   truncated, corrupted, foreign or other-version file is an [`IndexError`],
//!   never a panic. Saving is atomic. The layout is in [`format`].
//! - [`living`]: the living index file, a built index with the user ids,
//!   removals and not yet inserted vectors of its adds and removes.
//! - [`table`]: the per-(copy, spacing) open-addressing key tables.
//! - [`vecfile`]: `fvecs`/`bvecs`/`ivecs`/`.npy` readers (memory-mapped) and
//!   writers (atomic).
//!
//! Place in the pipeline: `octex-build` produces [`IndexParts`]; `octex-search`
//! loads an [`Index`] and searches it; the GPU backend copies its sections to
//! device memory as they are. Depends on `octex-lattice` (fragment keys, copy map).

pub mod atomic;
pub mod format;
mod index;
pub mod living;
pub mod table;
pub mod vecfile;

pub use format::{
    IndexHeader, Metric, SearchDefaults, SectionKind, VectorDtype, VectorProblem, FORMAT_VERSION,
    MAX_BLOCKS, MAX_SKETCH_WIDTH, MAX_SQUARED_NORM, MIN_STORED_DIM, OLDEST_FORMAT_VERSION,
};
pub use index::{Index, IndexError, IndexParts, LoadOptions, RerankVectors, RerankView};
pub use table::{TableEntry, PAD_ID};
pub use vecfile::{Dtype, VectorFile, VectorFileError};
