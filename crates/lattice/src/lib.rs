//! # octex-lattice
//!
//! The geometry under the OctEx index, in pure Rust with no GPU code:
//!
//! - [`e8`]: nearest point of the lattices D8 and E8 (Conway & Sloane), for
//!   `f32` and `f64`, with one fixed tie rule;
//! - [`key`]: fragment keys, a 64-bit hash of the exact (doubled, integer)
//!   lattice coordinates of the `b` E8 points a vector rounds to, plus an
//!   independent 64-bit check word that tells two fragments with the same key
//!   apart;
//! - [`copymap`]: the *copy map* of an index: `C` random orthonormal projections
//!   drawn from the top principal subspace, a uniform shift per copy and the
//!   spacings, with batched projection of many vectors;
//! - [`decoder`]: [`CopyMap::decode`] with AVX2 where the CPU has it, the
//!   decoder the search's first round and the builder's fragments call.
//!
//! Place in the pipeline: `octex-build` fits the mean and principal basis and
//! asks this crate for the copies; `octex-index` stores them; `octex-search` and
//! the GPU kernels project queries and decode their fragments exactly the same way.
//! Depends on nothing GPU-related. [`e8`] and [`key`] live in the `no_std`
//! crate `octex-core`, which the nvptx kernels compile too, and are
//! re-exported here.

pub mod copymap;
pub mod decoder;
pub use octex_core::{e8, key};
mod rng;

pub use copymap::{CopyMap, CopyMapParams, BLOCK_DIM};
pub use e8::{decode_d8, decode_e8, LatticeFloat};
pub use key::{fragment_key, FragmentKey, EMPTY_KEY};
pub use rng::GaussianRng;
