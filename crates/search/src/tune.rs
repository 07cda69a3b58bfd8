//! Parameters chosen for a recall target: [`Index::tune_for_recall`] searches
//! the space of `(r, S, W, R)` on a sample of the index's own vectors for the
//! cheapest point (work per query, [`cost_per_query`]) whose recall@k reaches
//! the target, and keeps it only when it holds on a second, held-back sample.
//! When no point reaches the target it says so ([`Tuned::reached`]) and what
//! to change in the build ([`Tuned::advice`]).
//!
//! The sample: [`TUNE_QUERIES`] stored vectors spread over the index (and as
//! many held back), each moved off itself by a random step as long as its
//! distance to its nearest other vector (a query is rarely a copy of a base
//! vector, and an indexed vector is an easy query: its own neighbour row
//! holds its exact neighbours), turned into queries as the metric stores them
//! (cosine: normalised again; inner product: the extra coordinate 0), against
//! exact neighbours computed on the fly ([`crate::knn`] over the rerank vectors).

use crate::seeds::stored_vector;
use octex_index::{Metric, SearchDefaults, VectorDtype};

use crate::knn::{self, Exclude, KnnMetric};
use crate::{Index, SearchError, SearchParams, SearchStats};

/// Sample vectors used as queries to choose a point, and as many again to
/// check it.
pub const TUNE_QUERIES: usize = 256;

/// What the sample's recall must exceed the target by (its standard error at
/// recall 0.99 and k = 10 is about 0.002).
pub const TUNE_MARGIN: f64 = 0.002;

/// The sample may miss at most this fraction of what the target allows: a
/// point is taken when the sample's recall is at least
/// `1 - TUNE_MISS_FRACTION (1 - target)` (and `target + TUNE_MARGIN`), since
/// queries from another distribution than the base miss more than the
/// sample (the text set's questions: 2.2 times the misses).
pub const TUNE_MISS_FRACTION: f64 = 0.5;

/// The sample recall a point needs for `target`.
pub fn required_sample_recall(target: f64) -> f64 {
    (1.0 - TUNE_MISS_FRACTION * (1.0 - target))
        .max(target + TUNE_MARGIN)
        .min(1.0)
}

/// Fewest caller's queries [`Index::tune_for_recall_on`] tunes on.
pub const MIN_QUERY_SAMPLE: usize = 64;

/// Start points tried, ascending (a point's `S` is the smallest of these that
/// reaches the target at its `W`, `R` and `r`).
const START_POINTS: [usize; 15] = [4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512];
/// Waves tried.
const WAVES: [usize; 6] = [1, 2, 3, 4, 5, 6];
/// Rerank depths tried (raised to `k`).
const RERANKS: [usize; 6] = [16, 32, 64, 128, 256, 1024];

/// Work of one query in bytes read: every sketch row, every rerank vector
/// and every ripple entry it touched (`stats` summed over its queries).
pub fn cost_per_query(index: &Index, stats: &SearchStats) -> f64 {
    let h = index.raw.header();
    let bytes = stats.sketch_distances * h.sketch_width as u64 + stats.first_round_entries * 4;
    bytes as f64 / stats.queries.max(1) as f64 + rerank_cost_per_query(index, stats)
}

/// The part of [`cost_per_query`] the exact rerank reads.
fn rerank_cost_per_query(index: &Index, stats: &SearchStats) -> f64 {
    let h = index.raw.header();
    let vector_bytes = match h.vector_dtype {
        VectorDtype::F16 => 2,
        VectorDtype::F32 => 4,
    };
    (stats.exact_distances * h.dim as u64 * vector_bytes) as f64 / stats.queries.max(1) as f64
}

/// A point chosen for a recall target.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    pub target: f64,
    pub params: SearchParams,
    /// Recall@k on the sample that chose it, and on the held-back sample.
    pub sample_recall: f64,
    pub held_out_recall: f64,
    /// Bytes read per query ([`cost_per_query`]) on the sample.
    pub cost: f64,
    /// Both samples reached [`required_sample_recall`]`(target)` and the
    /// target. When false, `params` are the point of highest recall found.
    pub reached: bool,
}

impl Tuned {
    /// What to change when the target was not reached ([`rebuild_advice`]).
    pub fn advice(&self, index: &Index) -> Option<String> {
        (!self.reached).then(|| rebuild_advice(index, self.held_out_recall, self.target))
    }
}

/// The recall an index can reach: [`Index::reach`] on the held-back sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Reach {
    /// Recall@k of the index's default parameters ([`Index::default_params`]).
    pub default_recall: f64,
    /// Recall@k of [`deepest_params`], the deepest search the tuner tries.
    pub best_recall: f64,
}

/// The deepest point [`Index::tune_for_recall`] walks to: its largest `S`,
/// `W` and `R`, at `r = l` (`list_len`).
pub fn deepest_params(list_len: usize) -> SearchParams {
    SearchParams {
        read_depth: list_len.max(1),
        start_points: START_POINTS[START_POINTS.len() - 1],
        waves: WAVES[WAVES.len() - 1],
        rerank: RERANKS[RERANKS.len() - 1],
        wave_rerank: false,
    }
}

/// The recall an index must be able to reach for [`Reach::advice`] to stay
/// silent.
pub const REACH_TARGET: f64 = 0.99;

impl Reach {
    /// What to rebuild with when [`deepest_params`] stays below [`REACH_TARGET`].
    pub fn advice(&self, index: &Index) -> Option<String> {
        (self.best_recall < REACH_TARGET)
            .then(|| rebuild_advice(index, self.best_recall, REACH_TARGET))
    }
}

/// "Recall `reached` is the most this index reached, below `target`", and
/// what to rebuild with: more copies, longer rows, exact rows, a wider sketch
/// (from the index's own sizes).
pub fn rebuild_advice(index: &Index, reached: f64, target: f64) -> String {
    let h = index.raw.header();
    format!(
        "recall {reached:.4} (held-back sample) is the most this index reached, below {target}; \
         rebuild with more copies (--copies {}), longer rows (--row-len {}), exact rows \
         (--rows exact) or a wider sketch (--sketch-width {})",
        h.copies * 2,
        h.row_len * 2,
        (h.sketch_width * 2)
            .min(h.dim.div_ceil(16) * 16)
            .max(h.sketch_width),
    )
}

/// Recall@[`DEFAULTS_K`] a build's stored defaults are chosen for
/// ([`Index::choose_defaults`]): high enough that queries from another
/// distribution than the base, which miss up to twice what the sample
/// misses, stay above 0.95.
pub const DEFAULTS_TARGET: f64 = 0.98;
/// The `k` the stored defaults are chosen for.
pub const DEFAULTS_K: usize = 10;

/// One point measured on a sample ([`Sample::recall`]).
#[derive(Clone, Copy, Debug)]
struct Measured {
    recall: f64,
    /// Standard error of `recall` over the sample's queries.
    error: f64,
    cost: f64,
    /// The part of `cost` the exact rerank reads.
    rerank_cost: f64,
}

impl Measured {
    /// Passes when the recall reaches `required` and stays at or above the
    /// target one standard error down: where a query's recall is nearly all
    /// or nothing (its first round finds its cluster or not), a sample's
    /// mean scatters far more than the fixed margin allows for.
    fn passes(&self, required: f64, target: f64) -> bool {
        self.recall >= required && self.recall - self.error >= target
    }
}

/// The tuning sample of an index: queries and their exact neighbours.
struct Sample {
    queries: Vec<f32>,
    truth: Vec<u32>,
    k: usize,
}

impl Sample {
    /// Recall@k of `p` on the sample, its standard error (the spread of
    /// the queries' own recalls over the square root of their number), and
    /// the cost per query.
    fn recall(&self, index: &Index, p: &SearchParams) -> Result<Measured, SearchError> {
        let res = index.search_stored(&self.queries, self.k, p)?;
        let nq = res.len();
        let per_query: Vec<f64> = (0..nq)
            .map(|qi| {
                let truth = &self.truth[qi * self.k..(qi + 1) * self.k];
                knn::hits_at_k(res.ids(qi), truth, self.k) as f64 / self.k.max(1) as f64
            })
            .collect();
        let mean = per_query.iter().sum::<f64>() / nq.max(1) as f64;
        let var = per_query.iter().map(|r| (r - mean).powi(2)).sum::<f64>()
            / nq.saturating_sub(1).max(1) as f64;
        Ok(Measured {
            recall: mean,
            error: (var / nq.max(1) as f64).sqrt(),
            cost: cost_per_query(index, &res.stats),
            rerank_cost: rerank_cost_per_query(index, &res.stats),
        })
    }
}

impl Index {
    /// The cheapest `(r, S, W, R)` whose recall@`k` on a sample of the
    /// index's own vectors reaches [`required_sample_recall`]`(target)`, kept
    /// when a held-back sample reaches it too. Costs a brute-force pass of
    /// both samples over the index and a few dozen searches of the sample.
    pub fn tune_for_recall(&self, target: f64, k: usize) -> Result<Tuned, SearchError> {
        check_target(target)?;
        let n = self.len();
        // The step off each sample vector needs its nearest other vector.
        if k == 0 || k + 1 > n {
            return Err(SearchError::KAboveCount { k: k + 1, n });
        }
        let (tune, held) = self.tuning_samples(k);
        self.walk(&tune, &held, target, required_sample_recall(target), k)
    }

    /// [`Self::tune_for_recall`] on the caller's own queries (`nq x dim`, as
    /// [`Index::search`] takes them): up to [`TUNE_QUERIES`] of them spread
    /// over the batch choose the point and as many others check it, against
    /// their exact neighbours. They stand for the queries to come, so the
    /// sample needs only [`TUNE_MARGIN`] over the target. With fewer than
    /// [`MIN_QUERY_SAMPLE`] queries it tunes on the index's own sample.
    pub fn tune_for_recall_on(
        &self,
        queries: &[f32],
        target: f64,
        k: usize,
    ) -> Result<Tuned, SearchError> {
        check_target(target)?;
        let dim = self.dim();
        let nq = queries.len() / dim.max(1);
        if nq < MIN_QUERY_SAMPLE {
            return self.tune_for_recall(target, k);
        }
        if k == 0 || k > self.len() {
            return Err(SearchError::KAboveCount { k, n: self.len() });
        }
        let m = (2 * TUNE_QUERIES).min(nq);
        let picked: Vec<f32> = (0..m)
            .flat_map(|i| {
                queries[i * nq / m * dim..(i * nq / m + 1) * dim]
                    .iter()
                    .copied()
            })
            .collect();
        let (mut stored, mut norms) = (Vec::new(), Vec::new());
        self.prepare(&picked, &mut stored, &mut norms, false)?;
        let (tune, held) = self.split_sample(&stored, k);
        self.walk(&tune, &held, target, (target + TUNE_MARGIN).min(1.0), k)
    }

    /// The cheapest point whose recall on `tune` reaches `required`, kept
    /// when `held` reaches it too (or the target plus [`TUNE_MARGIN`]).
    fn walk(
        &self,
        tune: &Sample,
        held: &Sample,
        target: f64,
        required: f64,
        k: usize,
    ) -> Result<Tuned, SearchError> {
        let list_len = self.raw.header().list_len as usize;
        let mut depths = vec![list_len.max(1)];
        if list_len >= 8 {
            depths.push(list_len / 2);
        }
        // Per (r, W, R): the smallest S that reaches `required` (recall
        // and cost grow with S), stepping up START_POINTS two at a time from
        // `from` and then back one; a point that misses and already costs
        // more than the cheapest passing point so far ends the walk (no
        // larger S can win), and so does one whose recall did not grow.
        let mut passing: Vec<(f64, SearchParams, f64)> = Vec::new();
        let mut best_seen = (SearchParams::default(), -1.0, f64::INFINITY);
        let mut cheapest = f64::INFINITY;
        // A probe (the deepest R, standing for every R) ends its walk on
        // the cost of its search without the rerank, which bounds the cost
        // of every R at that S from below.
        let mut walk_s = |read_depth: usize,
                          waves: usize,
                          rerank: usize,
                          from: usize,
                          probe: bool|
         -> Result<Option<usize>, SearchError> {
            let at = |s: usize| SearchParams {
                read_depth,
                start_points: START_POINTS[s],
                waves,
                rerank: rerank.max(k),
                wave_rerank: false,
            };
            let mut measure = |s: usize| -> Result<Measured, SearchError> {
                let m = tune.recall(self, &at(s))?;
                tracing::debug!(params = ?at(s), recall = m.recall, cost = m.cost, "tuning point");
                if m.recall > best_seen.1 {
                    best_seen = (at(s), m.recall, m.cost);
                }
                Ok(m)
            };
            let mut s = from;
            let mut last_recall = -1.0;
            let found = loop {
                let m = measure(s)?;
                if m.passes(required, target) {
                    // One step back, when it was skipped.
                    if s > from && (s - from) % 2 == 0 {
                        let m1 = measure(s - 1)?;
                        if m1.passes(required, target) {
                            break Some((m1.cost, s - 1, m1.recall));
                        }
                    }
                    break Some((m.cost, s, m.recall));
                }
                let bound = if probe {
                    m.cost - m.rerank_cost
                } else {
                    m.cost
                };
                // More start points that gained nothing: the rerank depth
                // (or the rows) caps this shape, as where a weak sketch
                // ranks the added candidates above the true neighbours.
                if bound >= cheapest || s + 1 >= START_POINTS.len() || m.recall <= last_recall {
                    break None;
                }
                last_recall = m.recall;
                s = (s + 2).min(START_POINTS.len() - 1);
            };
            Ok(found.map(|(c, s, r)| {
                cheapest = cheapest.min(c);
                passing.push((c, at(s), r));
                s
            }))
        };
        // The default shape first: it passes on most data, and its cost
        // then bounds every other walk.
        let d = SearchParams::default();
        walk_s(list_len.max(1), d.waves, d.rerank, 0, false)?;
        // Recall grows with R (the same candidates, more of them reranked):
        // the deepest R walks first, and where it passes at no S, no R
        // does; where it does, a smaller R needs at least as many start
        // points. The smaller R walk up from the smallest: the first that
        // passes at the deepest's S ends the walk (a larger R there costs
        // more, and none passes at fewer start points).
        let (deepest, shallower) = RERANKS.split_last().unwrap_or((&1024, &[]));
        for &r in &depths {
            for &w in &WAVES {
                if let Some(s_min) = walk_s(r, w, *deepest, 0, true)? {
                    for &rr in shallower {
                        if walk_s(r, w, rr, s_min, false)? == Some(s_min) {
                            break;
                        }
                    }
                }
            }
        }
        passing.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (cost, params, sample_recall) in passing {
            let held_out_recall = held.recall(self, &params)?.recall;
            if held_out_recall >= required.min(target + TUNE_MARGIN) {
                return Ok(Tuned {
                    target,
                    params,
                    sample_recall,
                    held_out_recall,
                    cost,
                    reached: true,
                });
            }
        }
        let (params, sample_recall, cost) = best_seen;
        let held_out_recall = held.recall(self, &params)?.recall;
        Ok(Tuned {
            target,
            params,
            sample_recall,
            held_out_recall,
            cost,
            reached: false,
        })
    }

    /// The search defaults a build stores in its index: the fixed
    /// [`SearchParams::default`] where it reaches [`DEFAULTS_TARGET`] at
    /// [`DEFAULTS_K`] on the tuning sample and the held-back one, else the
    /// fixed point deepened, coordinate by coordinate, to the point
    /// [`Self::tune_for_recall`] chooses for the target (or the best it
    /// found). Never shallower than the fixed point: queries from another
    /// distribution than the base can need its depth where the sample does
    /// not (docs/RESULTS.md, "Tried and not kept"). `None` for an index too
    /// small to sample.
    pub fn choose_defaults(&self) -> Result<Option<SearchDefaults>, SearchError> {
        let k = DEFAULTS_K;
        if self.len() < 2 * (k + 1) {
            return Ok(None);
        }
        let (target, required) = (DEFAULTS_TARGET, required_sample_recall(DEFAULTS_TARGET));
        let held_enough = required.min(target + TUNE_MARGIN);
        let (tune, held) = self.tuning_samples(k);
        let fixed = SearchParams::default();
        let mut chosen = fixed;
        let mut held_out = -1.0;
        if tune.recall(self, &fixed.for_k(k))?.passes(required, target) {
            held_out = held.recall(self, &fixed.for_k(k))?.recall;
        }
        if held_out < held_enough {
            let t = self.walk(&tune, &held, target, required, k)?;
            chosen = SearchParams {
                read_depth: fixed.read_depth.max(t.params.read_depth),
                start_points: fixed.start_points.max(t.params.start_points),
                waves: fixed.waves.max(t.params.waves),
                rerank: fixed.rerank.max(t.params.rerank),
                wave_rerank: false,
            };
            held_out = held.recall(self, &chosen.for_k(k))?.recall;
        }
        let count = |v: usize| v.min(1 << 22) as u32;
        Ok(Some(SearchDefaults {
            read_depth: count(chosen.read_depth),
            start_points: count(chosen.start_points),
            waves: count(chosen.waves),
            rerank: count(chosen.rerank),
            target: target as f32,
            held_out_recall: held_out as f32,
        }))
    }

    /// Recall@`k` of the default parameters and of the deepest search
    /// ([`deepest_params`]) on the held-back tuning sample: the build's check of
    /// what its index can reach.
    pub fn reach(&self, k: usize) -> Result<Reach, SearchError> {
        let n = self.len();
        if k == 0 || k + 1 > n {
            return Err(SearchError::KAboveCount { k: k + 1, n });
        }
        let (_, held) = self.tuning_samples(k);
        let deepest = deepest_params(self.raw.header().list_len as usize).for_k(k);
        Ok(Reach {
            default_recall: held.recall(self, &self.default_params().for_k(k))?.recall,
            best_recall: held.recall(self, &deepest)?.recall,
        })
    }

    /// [`Self::tune_for_recall`]'s parameters and sample recall; logs a
    /// warning with [`Tuned::advice`] when the target was not reached.
    pub fn params_for_recall(
        &self,
        target: f64,
        k: usize,
    ) -> Result<(SearchParams, f64), SearchError> {
        let t = self.tune_for_recall(target, k)?;
        if let Some(advice) = t.advice(self) {
            tracing::warn!("{advice}");
        }
        Ok((t.params, t.sample_recall))
    }

    /// The tuning sample and the held-back one ([`TUNE_QUERIES`] each, at
    /// most half the index each), as stored-space queries with their exact
    /// `k` nearest.
    fn tuning_samples(&self, k: usize) -> (Sample, Sample) {
        let n = self.len();
        let sdim = self.raw.stored_dim();
        let m = (2 * TUNE_QUERIES).min(n);
        let picks: Vec<usize> = (0..m).map(|i| i * n / m).collect();
        let stored = |id: usize, out: &mut [f32]| stored_vector(&self.raw, id, out);
        let mut own = vec![0f32; picks.len() * sdim];
        for (q, &id) in own.chunks_exact_mut(sdim).zip(&picks) {
            stored(id, q);
        }
        // Each sample vector's distance to its nearest other vector.
        let (_, nearest) = knn::exact_knn_of_rows(
            self.len(),
            &stored,
            &own,
            sdim,
            1,
            KnnMetric::L2,
            Exclude::Rows(&picks),
            &|_| {},
        );
        let metric = self.metric();
        // The input's coordinates: not inner product's appended one, nor the
        // padding of data under eight dimensions.
        let moved = self.dim();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut normal = move || {
            // Box-Muller on two xorshift draws.
            let mut draw = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                ((rng >> 11) as f64 + 0.5) / (1u64 << 53) as f64
            };
            let (u, v) = (draw(), draw());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        };
        let max_norm2 = (self.raw.header().max_norm as f64).powi(2);
        let mut queries = own;
        for (q, &d2) in queries.chunks_exact_mut(sdim).zip(&nearest) {
            let step = d2.max(0.0).sqrt() / (moved as f32).sqrt();
            q[..moved].iter_mut().for_each(|x| *x += step * normal());
            if metric != Metric::L2 {
                // Prepared as a query of the caller's would be: normalised
                // (cosine), scaled with 0 appended (inner product). A zero
                // vector, which a moved one cannot be, would stay as it is.
                let input = q[..moved].to_vec();
                let n2 = Metric::squared_norm(&input);
                let _ = metric.prepare_query(&input, n2, max_norm2, q);
            }
        }
        self.split_sample(&queries, k)
    }

    /// Stored-space `queries` with their exact `k` nearest, split in two
    /// spread over them: even rows tune, odd rows check.
    fn split_sample(&self, queries: &[f32], k: usize) -> (Sample, Sample) {
        let sdim = self.raw.stored_dim();
        let stored = |id: usize, out: &mut [f32]| stored_vector(&self.raw, id, out);
        let (truth, _) = knn::exact_knn_of_rows(
            self.len(),
            &stored,
            queries,
            sdim,
            k,
            KnnMetric::L2,
            Exclude::Nothing,
            &|_| {},
        );
        let nq = queries.len() / sdim;
        let split = |parity: usize| {
            let rows: Vec<usize> = (0..nq).filter(|i| i % 2 == parity).collect();
            Sample {
                queries: rows
                    .iter()
                    .flat_map(|&i| queries[i * sdim..(i + 1) * sdim].iter().copied())
                    .collect(),
                truth: rows
                    .iter()
                    .flat_map(|&i| truth[i * k..(i + 1) * k].iter().copied())
                    .collect(),
                k,
            }
        };
        (split(0), split(1))
    }
}

/// A recall target must lie in (0, 1].
fn check_target(target: f64) -> Result<(), SearchError> {
    if target > 0.0 && target <= 1.0 {
        Ok(())
    } else {
        Err(SearchError::RecallTarget { target })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_passes_one_standard_error_above_the_target() {
        let m = |recall, error| Measured {
            recall,
            error,
            cost: 1.0,
            rerank_cost: 0.0,
        };
        // Queries that agree: the fixed margin decides.
        assert!(m(0.953, 0.001).passes(0.952, 0.95));
        assert!(!m(0.951, 0.0005).passes(0.952, 0.95));
        // All-or-nothing queries: 0.954 on 256 of them is not 0.95 on all.
        assert!(!m(0.954, 0.0125).passes(0.952, 0.95));
        assert!(m(0.963, 0.0125).passes(0.952, 0.95));
    }
}
