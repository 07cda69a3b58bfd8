//! The fallback seeds of a search: which vectors they are
//! ([`entry_points`]) and how far out a query must start for its first round
//! to be followed by them ([`far_seed_distance`], the `far` of
//! [`octex_core::layout::visits_seeds`]). Read by the CPU engine and, through
//! it, by the GPU's device index.

use octex_core::layout::FAR_FACTOR;
use octex_core::sketch::row_norm;
use octex_index::{Index, Metric, RerankView, PAD_ID};
use rayon::prelude::*;

use crate::engine::Engine;

/// Fewest and most fallback entry points ([`seed_count`]).
pub const MIN_SEEDS: usize = 256;
pub const MAX_SEEDS: usize = 1024;

/// Fallback entry points of an index of `n` vectors: `2 sqrt(n)` within
/// [`MIN_SEEDS`]..=[`MAX_SEEDS`]. A query far from the data starts from the
/// seeds nearest it by sketch, and more seeds start it nearer; the cap keeps
/// the GPU's first-round buffer within its wave buffer (docs/RESULTS.md,
/// "Decisions").
pub fn seed_count(n: usize) -> usize {
    let grown = (2.0 * (n as f64).sqrt()).ceil() as usize;
    grown.clamp(MIN_SEEDS, MAX_SEEDS)
}

/// Fallback entry points, [`seed_count`] of them: with a residual sketch, the
/// member of each sketch centre nearest to it (its residual code the
/// smallest), then ids spread uniformly over the index (a multiplicative-hash
/// stride, so no id order of the data aligns with it) up to the limit.
/// Decision: a query far from all data (an outlier, or an inner-product query
/// on the part of the stored sphere that only the largest vectors reach) can
/// find no stored fragment in any copy; without seeds its waves would have no start points and
/// it would return nothing. Seeds in every cluster reach the parts of the data
/// the neighbour graph does not join, small clusters included (docs/RESULTS.md,
/// "Decisions"). Costs nothing for queries whose
/// first round finds at least `S` ids.
pub fn entry_points(index: &Index) -> Vec<u32> {
    let n = index.len() as u64;
    let count = seed_count(index.len());
    let mut seeds = centre_members(index);
    let uniform = (count as u64).saturating_sub(seeds.len() as u64);
    seeds.extend((0..uniform).map(|i| ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) % n) as u32));
    seeds.truncate(count);
    seeds.sort_unstable();
    seeds.dedup();
    seeds
}

/// Of each residual sketch centre, the member whose residual code has the
/// least norm (ties: the smaller id); none without a residual sketch.
fn centre_members(index: &Index) -> Vec<u32> {
    let centres = index.sketch_centre_scales().len();
    if centres == 0 {
        return Vec::new();
    }
    let w = index.header().sketch_width as usize;
    let scales = index.sketch_scales();
    let norms: Vec<f32> = index
        .sketch()
        .par_chunks(w.max(1))
        .map(|row| row_norm(row, scales))
        .collect();
    let mut best = vec![(f32::INFINITY, u32::MAX); centres];
    for (id, (&c, &norm)) in index.sketch_centre_ids().iter().zip(&norms).enumerate() {
        let b = &mut best[c as usize];
        if norm < b.0 || b.1 == u32::MAX {
            *b = (norm, id as u32);
        }
    }
    best.into_iter()
        .map(|b| b.1)
        .filter(|&id| id != u32::MAX)
        .collect()
}

/// Vectors whose nearest-neighbour distance [`far_seed_distance`] samples.
const FAR_SAMPLE: usize = 1024;

/// [`FAR_FACTOR`] times the data's typical nearest-neighbour distance: the
/// median, over up to [`FAR_SAMPLE`] vectors spread over the index, of the
/// exact squared distance to the nearest entry of each one's row, zeros
/// (duplicates) left out. Infinite where no vector has a neighbour, and for
/// inner product: its queries' appended coordinate is 0 (`Metric::query_scale`)
/// where most stored vectors' is not, so a query's distance to its nearest
/// vector is not comparable with the distances between stored vectors.
pub fn far_seed_distance(index: &Index, engine: &Engine) -> f32 {
    let n = index.len();
    let lt = engine.row_len;
    let rows = index.rows();
    if n < 2 || lt == 0 || rows.len() < n * lt || index.metric() == Metric::InnerProduct {
        return f32::INFINITY;
    }
    let picks = n.min(FAR_SAMPLE);
    let mut nearest: Vec<f32> = (0..picks)
        .into_par_iter()
        .filter_map(|i| {
            let id = (i * n / picks) as u32;
            let mut q = vec![0f32; index.stored_dim()];
            stored_vector(index, id as usize, &mut q);
            rows[id as usize * lt..(id as usize + 1) * lt]
                .iter()
                .filter(|&&j| j != PAD_ID && j != id)
                .map(|&j| engine.exact_distance(index, &q, j))
                .filter(|d| *d > 0.0)
                .min_by(f32::total_cmp)
        })
        .collect();
    if nearest.is_empty() {
        return f32::INFINITY;
    }
    let mid = nearest.len() / 2;
    let (_, median, _) = nearest.select_nth_unstable_by(mid, f32::total_cmp);
    FAR_FACTOR * *median
}

/// Stored vector `id` (`out`: the stored dimension) as f32.
pub(crate) fn stored_vector(index: &Index, id: usize, out: &mut [f32]) {
    let sdim = index.stored_dim();
    match index.vectors() {
        RerankView::F16(v) => out
            .iter_mut()
            .zip(&v[id * sdim..(id + 1) * sdim])
            .for_each(|(o, x)| *o = x.to_f32()),
        RerankView::F32(v) => out.copy_from_slice(&v[id * sdim..(id + 1) * sdim]),
    }
}
