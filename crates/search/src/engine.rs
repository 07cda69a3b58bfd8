//! The CPU wave search of one query (the paper's Algorithm 1), with reusable
//! per-thread scratch so that the hot loop allocates nothing.
//!
//! 1. First round: per copy, the finest spacing whose fragment of the query is
//!    stored; the first `r` ids of its ripple. The union, de-duplicated, is ranked
//!    by sketch distance.
//! 2. `W` waves: the `S` best entries not yet expanded read their neighbour rows;
//!    new ids are ranked by sketch distance.
//! 3. Rerank: the `R` best by sketch get exact distances; the top `k` are returned.
//!
//! With [`SearchParams::wave_rerank`](crate::SearchParams) (the paper's mode
//! when the vectors are resident) the exact rerank runs after the first round
//! and after every wave: the `R` best entries by sketch that have no exact
//! distance yet get one, and the start points are the best unexpanded entries
//! by exact distance (topped up by sketch order when fewer than `S` are left).
//! The answer is the top `k` of every entry reranked on the way.
//!
//! Only the best `M = max(R, S*W, S)` entries by sketch distance are kept: the
//! start points of wave `w` are among the best `S*(w+1)` (at most `S*w` entries
//! above them were expanded), and the rerank takes the best `R`, so keeping `M` is
//! exact, not a heuristic.

use octex_core::layout::visits_seeds;
use octex_core::sketch::{
    centre_estimate, centre_term, estimate, residual_row_norm, row_norm, QueryScale,
};
use octex_index::{Index, RerankView, PAD_ID};
use octex_lattice::CopyMap;
use rayon::prelude::*;

use crate::filter::IdFilter;
use crate::plan::SearchPlan;
use crate::simd::{prefetch, prefetch_at, ExactF16Fn, ExactF32Fn, SketchFn};
use crate::visited::VisitedSet;
use octex_lattice::decoder::DecodeFn;

#[derive(Clone, Copy, Debug)]
struct Cand {
    d: f32,
    id: u32,
    expanded: bool,
    /// It has an exact distance (per-wave rerank); its expansion is then
    /// tracked in the exact list.
    exact: bool,
}

/// An entry with its exact distance (per-wave rerank).
#[derive(Clone, Copy, Debug)]
struct Ranked {
    d: f32,
    id: u32,
    expanded: bool,
}

/// Work counters of a search (summed over queries).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SearchStats {
    pub queries: u64,
    /// Ripple entries read in the first round (before de-duplication).
    pub first_round_entries: u64,
    /// (query, copy) pairs with no stored fragment at any spacing.
    pub copies_without_fragment: u64,
    /// Sketch distances computed.
    pub sketch_distances: u64,
    /// Exact distances computed.
    pub exact_distances: u64,
    /// First-round hits per spacing index (which spacing answered a copy).
    pub spacing_hits: [u64; 8],
    /// Queries whose first round found fewer than `S` ids and took the fallback
    /// entry points.
    pub seeded_queries: u64,
    /// Filtered queries answered by an exact scan of the allowed ids.
    pub scanned_queries: u64,
    /// Waves past `W` that filtered queries ran to fill their answer lists.
    pub extra_waves: u64,
}

impl SearchStats {
    pub fn add(&mut self, o: &SearchStats) {
        self.queries += o.queries;
        self.first_round_entries += o.first_round_entries;
        self.copies_without_fragment += o.copies_without_fragment;
        self.sketch_distances += o.sketch_distances;
        self.exact_distances += o.exact_distances;
        self.seeded_queries += o.seeded_queries;
        self.scanned_queries += o.scanned_queries;
        self.extra_waves += o.extra_waves;
        for (a, b) in self.spacing_hits.iter_mut().zip(o.spacing_hits) {
            *a += b;
        }
    }
}

/// What the engine derives from an index once, at load.
pub(crate) struct Engine {
    pub map: CopyMap,
    pub kernel: SketchFn,
    pub exact_f32: ExactF32Fn,
    pub exact_f16: ExactF16Fn,
    /// Sketch width (int8 coordinates per row).
    pub sketch_width: usize,
    /// Each vector's sketch row norm ([`octex_core::sketch::row_norm`]),
    /// computed once at load; the GPU backend uploads this same table.
    pub sketch_norms: Vec<f32>,
    /// Residual sketch centres (0: a plain sketch).
    pub sketch_centre_count: usize,
    pub row_len: usize,
    pub list_len: usize,
    /// Fallback entry points (see [`crate::seeds::entry_points`]).
    pub seeds: Vec<u32>,
    /// [`visits_seeds`]'s `far`: see [`crate::seeds::far_seed_distance`].
    pub far_seeds: f32,
    /// Where inner-product queries start their first round
    /// ([`crate::shell`]).
    pub query_shell: Option<crate::shell::QueryShell>,
    /// The first round's decoder ([`octex_lattice::decoder`]).
    pub decode: DecodeFn,
}

/// A filter as one query's search reads it ([`Engine::search_projected`]).
#[derive(Clone, Copy)]
pub(crate) struct Filtered<'a> {
    pub ids: &'a IdFilter,
    /// Most waves the search may run to fill its answer list.
    pub max_waves: usize,
}

/// One query's sketch code ([`octex_core::sketch`]).
#[derive(Clone, Copy)]
pub(crate) struct SketchQuery<'a> {
    pub codes: &'a [i16],
    pub scale: QueryScale,
    /// With a residual sketch, the query's first `w` principal coordinates
    /// (for [`centre_term`]); empty otherwise.
    pub coords: &'a [f32],
}

/// The sketch codes of a batch of queries ([`Engine::sketch_queries`]).
#[derive(Default)]
pub(crate) struct SketchQueries {
    codes: Vec<i16>,
    scales: Vec<QueryScale>,
    coords: Vec<f32>,
}

impl SketchQueries {
    /// Query `i`'s code, width `w`.
    pub fn get(&self, i: usize, w: usize) -> SketchQuery<'_> {
        let c = if self.coords.is_empty() { 0 } else { w };
        SketchQuery {
            codes: &self.codes[i * w..(i + 1) * w],
            scale: self.scales[i],
            coords: &self.coords[i * c..(i + 1) * c],
        }
    }
}

/// Every row's sketch norm, in parallel: [`row_norm`], or with a residual
/// sketch [`residual_row_norm`].
pub fn sketch_norms(index: &Index) -> Vec<f32> {
    let w = index.header().sketch_width as usize;
    let scales = index.sketch_scales();
    let (centres, steps) = (index.sketch_centres(), index.sketch_centre_scales());
    let rows = index.sketch().par_chunks(w.max(1));
    if steps.is_empty() {
        return rows.map(|row| row_norm(row, scales)).collect();
    }
    rows.zip(index.sketch_centre_ids())
        .map(|(row, &c)| {
            let c = c as usize;
            residual_row_norm(row, scales, &centres[c * w..(c + 1) * w], steps[c])
        })
        .collect()
}

/// Sketch rows prefetched ahead of the one being ranked.
const PREFETCH_AHEAD: usize = 32;
/// Rerank vectors prefetched ahead of the exact distance being computed
/// (pays for vectors of several cache lines at `R` >= 64).
const RERANK_PREFETCH_AHEAD: usize = 4;

/// The ids of `list` up to its first `PAD_ID` (ripples and rows are padded
/// at their ends).
#[inline]
fn stored(list: &[u32]) -> &[u32] {
    &list[..list
        .iter()
        .position(|&id| id == PAD_ID)
        .unwrap_or(list.len())]
}

/// The sketch distance a candidate must be under to enter `best` (sorted,
/// at most `m` entries): its last entry's once full, as [`merge_into`]
/// keeps. A filtered search ranks every candidate (its answer list keeps
/// allowed ones beyond `best`).
#[inline]
fn merge_bound(best: &[Cand], m: usize, filtered: bool) -> f32 {
    match best.last() {
        Some(last) if best.len() == m && !filtered => last.d,
        _ => f32::INFINITY,
    }
}

/// Merge `cand` into `best` (sorted by distance), keeping `m` entries;
/// `cand` is consumed, `merged` is scratch.
fn merge_into(best: &mut Vec<Cand>, cand: &mut Vec<Cand>, merged: &mut Vec<Cand>, m: usize) {
    if best.len() == m {
        let worst = best[m - 1].d;
        cand.retain(|c| c.d < worst);
    }
    if cand.len() > m {
        cand.select_nth_unstable_by(m, |a, b| a.d.total_cmp(&b.d));
        cand.truncate(m);
    }
    cand.sort_unstable_by(|a, b| a.d.total_cmp(&b.d));
    merged.clear();
    let (mut i, mut j) = (0, 0);
    while merged.len() < m && (i < best.len() || j < cand.len()) {
        let take_best = j == cand.len() || (i < best.len() && best[i].d <= cand[j].d);
        if take_best {
            merged.push(best[i]);
            i += 1;
        } else {
            merged.push(cand[j]);
            j += 1;
        }
    }
    std::mem::swap(best, merged);
}

/// The first `out_ids.len()` of `exact` (sorted) as ids and distances,
/// padded with `PAD_ID` / infinity.
fn write_answer(exact: &[(f32, u32)], out_ids: &mut [u32], out_d: &mut [f32]) {
    for (t, (id, d)) in out_ids.iter_mut().zip(out_d.iter_mut()).enumerate() {
        (*d, *id) = exact.get(t).copied().unwrap_or((f32::INFINITY, PAD_ID));
    }
}

/// Per-thread reusable buffers.
pub(crate) struct Scratch {
    visited: VisitedSet,
    fresh: Vec<u32>,
    cand: Vec<Cand>,
    best: Vec<Cand>,
    merged: Vec<Cand>,
    starts: Vec<u32>,
    exact: Vec<(f32, u32)>,
    ranked: Vec<Ranked>,
    ranked_new: Vec<Ranked>,
    /// A filtered search's answer list: the best allowed entries by sketch
    /// ([`crate::filter`]), and a round's allowed candidates.
    answer: Vec<Cand>,
    allowed: Vec<Cand>,
    coords: [i32; 64],
    /// First round: copies still looking for a stored fragment, their keys, and
    /// the ripple offsets found.
    pending: Vec<u32>,
    still: Vec<u32>,
    qkeys: Vec<u64>,
    hits: Vec<u32>,
    /// The current query's residual sketch terms and steps per centre
    /// ([`centre_estimate`]), NaN until first needed.
    centre_terms: Vec<(f32, f32)>,
    pub stats: SearchStats,
}

impl Scratch {
    /// Buffers for searches of `plan`'s shape over `n` vectors (they grow if
    /// a later plan reads more).
    pub fn new(engine: &Engine, plan: &SearchPlan, n: usize) -> Self {
        let max_entries = plan.max_entries;
        Self {
            visited: VisitedSet::new(n, max_entries),
            fresh: Vec::with_capacity(max_entries),
            cand: Vec::with_capacity(max_entries),
            best: Vec::new(),
            merged: Vec::new(),
            starts: Vec::new(),
            exact: Vec::new(),
            ranked: Vec::new(),
            ranked_new: Vec::new(),
            answer: Vec::new(),
            allowed: Vec::new(),
            coords: [0; 64],
            pending: Vec::with_capacity(engine.map.copies),
            still: Vec::with_capacity(engine.map.copies),
            qkeys: vec![0; engine.map.copies],
            hits: Vec::with_capacity(engine.map.copies),
            centre_terms: vec![(f32::NAN, 0.0); engine.sketch_centre_count],
            stats: SearchStats::default(),
        }
    }
}

impl Engine {
    pub fn new(index: &Index, kernel: SketchFn) -> Self {
        let h = index.header();
        let (exact_f32, exact_f16) = crate::simd::exact_kernels();
        let mut engine = Self {
            map: index.copy_map(),
            kernel,
            exact_f32,
            exact_f16,
            sketch_width: h.sketch_width as usize,
            sketch_norms: sketch_norms(index),
            sketch_centre_count: index.sketch_centre_scales().len(),
            row_len: h.row_len as usize,
            list_len: h.list_len as usize,
            seeds: crate::seeds::entry_points(index),
            far_seeds: f32::INFINITY,
            query_shell: None,
            decode: octex_lattice::decoder::best_decode(),
        };
        engine.query_shell = crate::shell::QueryShell::of(index, &engine.map);
        engine.far_seeds = crate::seeds::far_seed_distance(index, &engine);
        engine
    }

    /// Sketch query codes (`n x w` `i16`) and their steps from principal
    /// coordinates (`n x m`): `a_j` is the first `w` coordinates (zero beyond
    /// `m`) times the sketch scales, coded by [`QueryScale`], the rule the GPU
    /// kernel follows.
    pub fn sketch_queries(&self, index: &Index, pcs: &[f32], q: &mut SketchQueries) {
        let m = self.map.basis_dim;
        let w = self.sketch_width;
        let scales = index.sketch_scales();
        let residual = !index.sketch_centre_scales().is_empty();
        q.codes.clear();
        q.scales.clear();
        q.coords.clear();
        for r in pcs.chunks_exact(m) {
            let a = |j: usize| if j < m { r[j] * scales[j] } else { 0.0 };
            let amax = (0..w).fold(0.0f32, |mx, j| mx.max(a(j).abs()));
            let scale = QueryScale::new(amax, w as u32);
            q.codes.extend((0..w).map(|j| scale.code(a(j), w as u32)));
            q.scales.push(scale);
            if residual {
                q.coords
                    .extend((0..w).map(|j| if j < m { r[j] } else { 0.0 }));
            }
        }
    }

    /// Rank the ids in `s.fresh` by sketch distance into `s.cand`, those at
    /// `bound` or beyond left out (see [`merge_bound`]). Not inlined, so that
    /// profiles separate ranking from the rest of the wave loop.
    #[inline(never)]
    fn rank_fresh(&self, index: &Index, qs: SketchQuery, s: &mut Scratch, bound: f32) {
        let sk = index.sketch();
        let w = self.sketch_width;
        let norms = &self.sketch_norms;
        let row = |id: u32| &sk[id as usize * w..id as usize * w + w];
        // Software pipeline: a core keeps only ~10-20 misses in flight, so
        // prefetch PREFETCH_AHEAD rows (and norms) ahead of the distance being
        // computed rather than all rows up front.
        for &id in s.fresh.iter().take(PREFETCH_AHEAD) {
            prefetch(row(id));
            prefetch_at(&norms[id as usize]);
        }
        s.cand.clear();
        let ids = index.sketch_centre_ids();
        for (i, &id) in s.fresh.iter().enumerate() {
            if let Some(&ahead) = s.fresh.get(i + PREFETCH_AHEAD) {
                prefetch(row(ahead));
                prefetch_at(&norms[ahead as usize]);
            }
            let dot = (self.kernel)(qs.codes, row(id));
            let d = if qs.coords.is_empty() {
                estimate(norms[id as usize], qs.scale, dot)
            } else {
                // A centre's term is computed when one of its vectors is
                // first ranked (a query meets a few of the centres).
                let c = ids[id as usize] as usize;
                if s.centre_terms[c].0.is_nan() {
                    let centre = &index.sketch_centres()[c * w..(c + 1) * w];
                    s.centre_terms[c] = (
                        centre_term(centre, qs.coords),
                        qs.scale.two_step * index.sketch_centre_scales()[c],
                    );
                }
                let (term, step) = s.centre_terms[c];
                centre_estimate(norms[id as usize], term, step, dot)
            };
            if d >= bound {
                continue;
            }
            s.cand.push(Cand {
                d,
                id,
                expanded: false,
                exact: false,
            });
        }
        s.stats.sketch_distances += s.fresh.len() as u64;
    }

    /// Merge `s.cand` into the best list, keeping `m` entries sorted by distance.
    /// Not inlined, for the same reason.
    #[inline(never)]
    fn merge(&self, s: &mut Scratch, m: usize) {
        merge_into(&mut s.best, &mut s.cand, &mut s.merged, m);
    }

    /// A filtered search: merge the allowed entries of `s.cand` into its
    /// answer list, keeping `want`.
    fn merge_answer(&self, s: &mut Scratch, filter: &IdFilter, want: usize) {
        s.allowed.clear();
        s.allowed
            .extend(s.cand.iter().filter(|c| filter.allows(c.id)).copied());
        merge_into(&mut s.answer, &mut s.allowed, &mut s.merged, want);
    }

    /// Exact squared L2 distance of vector `id` to `q` (stored space).
    #[inline]
    pub(crate) fn exact_distance(&self, index: &Index, q: &[f32], id: u32) -> f32 {
        let dim = index.stored_dim();
        let i = id as usize;
        match index.vectors() {
            RerankView::F32(v) => (self.exact_f32)(q, &v[i * dim..(i + 1) * dim]),
            RerankView::F16(v) => (self.exact_f16)(q, &v[i * dim..(i + 1) * dim]),
        }
    }

    /// Hint the CPU to load vector `id`'s rerank row.
    #[inline]
    fn prefetch_vector(&self, index: &Index, id: u32) {
        let dim = index.stored_dim();
        let i = id as usize;
        match index.vectors() {
            RerankView::F32(v) => prefetch(&v[i * dim..(i + 1) * dim]),
            RerankView::F16(v) => prefetch(&v[i * dim..(i + 1) * dim]),
        }
    }

    /// Append the exact distances of `ids` to `q` to `out`, in order, each
    /// vector prefetched [`RERANK_PREFETCH_AHEAD`] distances ahead.
    fn exact_distances(
        &self,
        index: &Index,
        q: &[f32],
        ids: impl Iterator<Item = u32> + Clone,
        out: &mut Vec<(f32, u32)>,
    ) {
        for id in ids.clone().take(RERANK_PREFETCH_AHEAD) {
            self.prefetch_vector(index, id);
        }
        let mut ahead = ids.clone().skip(RERANK_PREFETCH_AHEAD);
        for id in ids {
            if let Some(next) = ahead.next() {
                self.prefetch_vector(index, next);
            }
            out.push((self.exact_distance(index, q, id), id));
        }
    }

    /// The exact `k` nearest of the allowed ids to `q` (stored space), by a
    /// scan of their vectors; padded with `PAD_ID` / infinity when fewer are
    /// allowed. `s.exact` is scratch.
    pub fn scan(
        &self,
        index: &Index,
        q: &[f32],
        filter: &IdFilter,
        s: &mut Scratch,
        out_ids: &mut [u32],
        out_d: &mut [f32],
    ) {
        let k = out_ids.len();
        s.exact.clear();
        let mut worst = f32::INFINITY;
        for id in filter.ids() {
            let d = self.exact_distance(index, q, id);
            if d <= worst {
                s.exact.push((d, id));
                if s.exact.len() >= 2 * k.max(16) {
                    s.exact.select_nth_unstable_by(k - 1, |a, b| {
                        a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
                    });
                    s.exact.truncate(k);
                    worst = s.exact[k - 1].0;
                }
            }
        }
        s.stats.queries += 1;
        s.stats.scanned_queries += 1;
        s.stats.exact_distances += filter.count() as u64;
        s.exact
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        write_answer(&s.exact, out_ids, out_d);
    }

    /// Per-wave rerank: exact distances for the best `R` by sketch that have
    /// none yet, merged into the exact list (sorted by distance, then id; at
    /// most `m` entries).
    #[inline(never)]
    fn exact_pass(&self, index: &Index, q: &[f32], s: &mut Scratch, rerank: usize, m: usize) {
        s.ranked_new.clear();
        let take = rerank.min(s.best.len());
        for c in s.best[..take].iter_mut().filter(|c| !c.exact) {
            c.exact = true;
            s.ranked_new.push(Ranked {
                d: f32::NAN,
                id: c.id,
                expanded: c.expanded,
            });
        }
        // s.exact is free until the final rerank.
        s.exact.clear();
        self.exact_distances(index, q, s.ranked_new.iter().map(|r| r.id), &mut s.exact);
        for (r, &(d, _)) in s.ranked_new.iter_mut().zip(&s.exact) {
            r.d = d;
        }
        s.stats.exact_distances += s.ranked_new.len() as u64;
        s.ranked.extend_from_slice(&s.ranked_new);
        s.ranked
            .sort_unstable_by(|a, b| a.d.total_cmp(&b.d).then(a.id.cmp(&b.id)));
        s.ranked.truncate(m);
    }

    /// Search one query. `z` is its projection into all copies, `qs` its sketch
    /// coordinates, `q` the stored-space query (normalised or augmented).
    /// Writes `plan.k` ids and exact squared L2 distances (in the stored
    /// space), padded with `PAD_ID` / infinity when fewer were found.
    ///
    /// With `filter`, only its allowed ids are returned: the search routes
    /// through every id, keeps the best `R` allowed ones by sketch apart, runs
    /// more waves (up to `filter.max_waves`) until it holds `R` of them, and
    /// reranks those.
    #[allow(clippy::too_many_arguments)]
    pub fn search_projected(
        &self,
        index: &Index,
        z: &[f32],
        qs: SketchQuery,
        q: &[f32],
        plan: &SearchPlan,
        filter: Option<Filtered>,
        s: &mut Scratch,
        out_ids: &mut [u32],
        out_d: &mut [f32],
    ) {
        let cd = self.map.copy_dim();
        let nsp = self.map.spacings.len();
        let p = &plan.params;
        let (r, m, k) = (plan.read_depth, plan.keep, plan.k);
        s.visited.clear();
        s.best.clear();
        s.ranked.clear();
        s.answer.clear();
        s.fresh.clear();
        let want = p.rerank.max(k);
        s.centre_terms.fill((f32::NAN, 0.0));
        s.stats.queries += 1;

        // First round, level by level from the finest spacing: decode every
        // pending copy's fragment and prefetch its key slot, then probe; copies
        // whose fragment is not stored go on to the next coarser spacing. The
        // ripples found are prefetched before they are read.
        let tables = index.tables();
        let table_keys = index.table_keys();
        let table_slots = index.table_slots();
        let ripples = index.ripples();
        let l = self.list_len;
        s.pending.clear();
        s.pending.extend(0..self.map.copies as u32);
        s.hits.clear();
        for sp in 0..nsp {
            if s.pending.is_empty() {
                break;
            }
            for &c in &s.pending {
                let c = c as usize;
                (self.decode)(
                    &self.map,
                    &z[c * cd..(c + 1) * cd],
                    c,
                    sp,
                    &mut s.coords[..cd],
                );
                let key = octex_lattice::fragment_key(&s.coords[..cd]);
                s.qkeys[c] = key;
                let e = &tables[c * nsp + sp];
                if e.capacity > 0 {
                    let slot = e.slot_offset as usize + (key as usize & (e.capacity as usize - 1));
                    prefetch_at(&table_keys[slot]);
                }
            }
            s.still.clear();
            for &c in &s.pending {
                let cu = c as usize;
                let e = &tables[cu * nsp + sp];
                let (so, cap) = (e.slot_offset as usize, e.capacity as usize);
                match octex_index::table::lookup(
                    &table_keys[so..so + cap],
                    &table_slots[so..so + cap],
                    s.qkeys[cu],
                ) {
                    Some(ord) => {
                        let start = (e.ripple_base as usize + ord as usize) * l;
                        prefetch_at(&ripples[start]);
                        s.hits.push(start as u32);
                        s.stats.spacing_hits[sp.min(7)] += 1;
                    }
                    None => s.still.push(c),
                }
            }
            std::mem::swap(&mut s.pending, &mut s.still);
        }
        s.stats.copies_without_fragment += s.pending.len() as u64;
        for &start in &s.hits {
            let start = start as usize;
            let ripple = stored(&ripples[start..start + r]);
            s.stats.first_round_entries += ripple.len() as u64;
            s.visited.insert_new(ripple, &mut s.fresh);
        }
        let found = s.fresh.len();
        self.rank_fresh(index, qs, s, f32::INFINITY);
        // The nearest first-round candidate (least sketch distance, then id),
        // as the GPU finds it; measured only where the count does not decide
        // and a far distance exists (not for inner product).
        let nearest = match found >= p.start_points && self.far_seeds.is_finite() {
            true => s
                .cand
                .iter()
                .min_by(|a, b| a.d.total_cmp(&b.d).then(a.id.cmp(&b.id)))
                .map_or(f32::INFINITY, |c| self.exact_distance(index, q, c.id)),
            false => 0.0,
        };
        let seeded = visits_seeds(found as u32, p.start_points as u32, nearest, self.far_seeds);
        if seeded && found >= p.start_points {
            // Keep the start_points - 1 nearest (the GPU's buffer bound).
            s.cand
                .sort_unstable_by(|a, b| a.d.total_cmp(&b.d).then(a.id.cmp(&b.id)));
            s.cand.truncate(p.start_points - 1);
        }
        if let Some(f) = filter {
            self.merge_answer(s, f.ids, want);
        }
        self.merge(s, m);
        if seeded {
            s.stats.seeded_queries += 1;
            s.fresh.clear();
            s.visited.insert_new(&self.seeds, &mut s.fresh);
            self.rank_fresh(index, qs, s, merge_bound(&s.best, m, filter.is_some()));
            if let Some(f) = filter {
                self.merge_answer(s, f.ids, want);
            }
            self.merge(s, m);
        }

        // Waves: `W`, and with a filter more until its answer list is full.
        let rows = index.rows();
        let lt = self.row_len;
        let waves = filter.map_or(p.waves, |f| f.max_waves.max(p.waves));
        // A filtered search keeps a frontier for all its waves, and stops
        // past `W` once its answer list is full and either its k-th best
        // allowed distance is within the best `R` of all (where an unfiltered
        // search would answer from) or a wave left it where it was.
        let m = if filter.is_some() {
            m.max(p.start_points * waves)
        } else {
            m
        };
        let kth = |s: &Scratch| s.answer.get(k - 1).map_or(f32::INFINITY, |c| c.d);
        let mut last_kth = f32::INFINITY;
        for wave in 0..waves {
            if wave >= p.waves {
                let now = kth(s);
                let reached = s
                    .best
                    .get(want.min(s.best.len()).saturating_sub(1))
                    .is_some_and(|c| now <= c.d);
                if s.answer.len() >= want && (reached || now >= last_kth) {
                    break;
                }
                last_kth = now;
                s.stats.extra_waves += 1;
            } else if filter.is_some() {
                last_kth = kth(s);
            }
            s.starts.clear();
            if p.wave_rerank {
                self.exact_pass(index, q, s, p.rerank, m);
                for c in s.ranked.iter_mut() {
                    if s.starts.len() == p.start_points {
                        break;
                    }
                    if !c.expanded {
                        c.expanded = true;
                        s.starts.push(c.id);
                    }
                }
            }
            for c in s.best.iter_mut() {
                if s.starts.len() == p.start_points {
                    break;
                }
                if !c.expanded && !c.exact {
                    c.expanded = true;
                    s.starts.push(c.id);
                }
            }
            if s.starts.is_empty() {
                break;
            }
            s.fresh.clear();
            for &u in &s.starts {
                prefetch(&rows[u as usize * lt..(u as usize + 1) * lt]);
            }
            for &u in &s.starts {
                let row = stored(&rows[u as usize * lt..(u as usize + 1) * lt]);
                s.visited.insert_new(row, &mut s.fresh);
            }
            self.rank_fresh(index, qs, s, merge_bound(&s.best, m, filter.is_some()));
            if let Some(f) = filter {
                self.merge_answer(s, f.ids, want);
            }
            self.merge(s, m);
        }

        // Exact rerank of the R best (per-wave mode: of the best R not yet
        // reranked, and the answer comes from every entry reranked).
        if let Some(f) = filter {
            // The answer list reranked, with the allowed entries a per-wave
            // rerank already has.
            s.exact.clear();
            s.exact.extend(
                s.ranked
                    .iter()
                    .filter(|c| f.ids.allows(c.id))
                    .map(|c| (c.d, c.id)),
            );
            let have = s.exact.len();
            s.fresh.clear();
            s.fresh.extend(
                s.answer
                    .iter()
                    .map(|c| c.id)
                    .filter(|id| !s.ranked.iter().any(|r| r.id == *id)),
            );
            self.exact_distances(index, q, s.fresh.iter().copied(), &mut s.exact);
            s.stats.exact_distances += (s.exact.len() - have) as u64;
            s.exact
                .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        } else if p.wave_rerank {
            self.exact_pass(index, q, s, p.rerank, m);
            s.exact.clear();
            s.exact.extend(s.ranked.iter().map(|c| (c.d, c.id)));
        } else {
            s.exact.clear();
            let take = p.rerank.min(s.best.len());
            self.exact_distances(index, q, s.best[..take].iter().map(|c| c.id), &mut s.exact);
            s.stats.exact_distances += take as u64;
            s.exact
                .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        }
        write_answer(&s.exact, out_ids, out_d);
    }
}
