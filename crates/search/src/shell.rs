//! The inner-product query shell. A caller's inner-product query is stored
//! as `[q M/|q|, 0]` on the sphere of radius `M` that holds every stored
//! vector, but a vector of norm `|x|` sits at height `sqrt(M^2 - |x|^2)`:
//! where the answers' norms are well below `M`, the query lies off their part
//! of the sphere and its first round finds no fragment. An index whose build
//! chose a shell `r` ([`octex_index::IndexHeader::query_shell`]) starts the
//! first round from `[q rM/|q|, M sqrt(1 - r^2)]` instead: its projections
//! are `r z + offset` of the query's own ([`octex_lattice::CopyMap::shell_offset`]).
//! The sketch ranking, the waves and the rerank keep the query itself. Both
//! backends read [`QueryShell`]: the CPU moves the projections of the
//! queries [`QueryShell::moves`] names, the GPU folds the same into its
//! projection matrices and shifts and so moves every batch (its
//! stored-space batches are the build's row passes, which run before a
//! build chooses a shell).

use octex_index::{Index, Metric};
use octex_lattice::CopyMap;

/// How an index's first round moves its inner-product queries.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryShell {
    /// The factor of the query's projections, `r`.
    pub alpha: f32,
    /// Added to the projections after the factor (`width` values).
    pub offset: Vec<f32>,
    /// The appended coordinate (the stored dimension's `input_dim`).
    pub coord: usize,
}

impl QueryShell {
    /// The shell of `index` projected by `map`; `None` without one.
    pub fn of(index: &Index, map: &CopyMap) -> Option<Self> {
        let h = index.header();
        let r = h.query_shell?;
        if h.metric != Metric::InnerProduct {
            return None;
        }
        let beta = h.max_norm * (1.0 - r * r).max(0.0).sqrt();
        let coord = h.input_dim as usize;
        Some(Self {
            alpha: r,
            offset: map.shell_offset(coord, r, beta),
            coord,
        })
    }

    /// Whether the shell moves a stored-space query: a caller's query has
    /// 0 appended; a stored vector searched for its neighbours has its own
    /// height.
    pub fn moves(&self, stored_query: &[f32]) -> bool {
        stored_query.get(self.coord) == Some(&0.0)
    }

    /// The moved projections of one query (`width` values), in place.
    pub fn apply(&self, z: &mut [f32]) {
        for (v, o) in z.iter_mut().zip(&self.offset) {
            *v = self.alpha * *v + o;
        }
    }

    /// [`QueryShell::apply`] to each query of a batch (`z`: `width` per
    /// query, `stored`: `sdim` per query) that the shell moves.
    pub fn apply_batch(&self, stored: &[f32], sdim: usize, z: &mut [f32]) {
        let width = self.offset.len();
        for (zq, q) in z.chunks_exact_mut(width).zip(stored.chunks_exact(sdim)) {
            if self.moves(q) {
                self.apply(zq);
            }
        }
    }
}
