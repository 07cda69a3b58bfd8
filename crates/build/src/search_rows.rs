//! Neighbour rows by the index's own search (the paper's build for large `n`).
//! Passes after the first search the vectors in the rows' breadth-first
//! order ([`locality_order`]): the same lists, sooner.
//!
//! Pass 1: every base vector searches the index with the first round only
//! (`W = 0`, whole ripples); its own id is removed. These rows, with reverse
//! entries, go into the index. Pass 2: every base vector searches again with
//! [`PASS2_WAVES`] waves over the pass-1 rows. Then [`JOIN_ROUNDS`] local
//! joins ([`crate::refine`]) offer each vector its neighbours' lists. Decision: unlike the paper (sketch
//! ranking only), both passes rerank the `2 Lt` sketch-best entries by exact
//! distance: on the CPU the vectors are at hand, and exact rows lift recall at
//! search time for a few percent more build time.
//!
//! With a GPU the passes run on the GPU search backend (the same results as the
//! CPU's: the backends agree id for id), on all of the base at 8,192 queries a
//! launch.

use octex_index::{Index, IndexParts, PAD_ID};
use octex_search::{Backend, BackendSearcher, GpuOptions, SearchParams};

use crate::progress::Stage;
use crate::rows::{assemble, RowOrder, RowShape};
use crate::BuildError;

/// Waves of pass 2.
pub const PASS2_WAVES: usize = 2;
/// Start points per wave in pass 2.
pub const PASS2_START_POINTS: usize = 16;
/// Rounds of local joins ([`crate::refine`]) after pass 2, with exact
/// distances: each raises the rows' recall of exact neighbours where the
/// sketch-ranked passes missed some, for about a tenth of pass 2's time
/// (docs/RESULTS.md, "Decisions").
pub const JOIN_ROUNDS: usize = 1;
/// A third, deeper pass runs where the forward lists after pass 2 hold less
/// than this share of a sample's exact nearest neighbours
/// ([`crate::check::RowTruth`]) and the pass, tried on that sample first,
/// lifts it by [`DEEP_PASS_MIN_GAIN`]: data of high intrinsic dimension
/// (within a cluster or overall), where two cheap passes leave rows short.
pub const DEEP_PASS_BELOW: f64 = 0.97;
pub const DEEP_PASS_MIN_GAIN: f64 = 0.01;
/// Start points and waves of the deeper pass.
pub const DEEP_PASS_START_POINTS: usize = 48;
pub const DEEP_PASS_WAVES: usize = 3;
/// Base vectors searched per call (progress granularity).
const CHUNK: usize = 16_384;

fn forward_lists(
    searcher: &mut BackendSearcher,
    x: &[f32],
    dim: usize,
    k: usize,
    p: &SearchParams,
    pb: &Stage,
    order: Option<&[u32]>,
) -> Result<(Vec<u32>, Vec<f32>), BuildError> {
    let n = x.len() / dim;
    let mut ids = vec![PAD_ID; n * k];
    let mut dists = vec![f32::INFINITY; n * k];
    let mut gathered = Vec::new();
    for start in (0..n).step_by(CHUNK) {
        let end = (start + CHUNK).min(n);
        let who = |q: usize| order.map_or(start + q, |o| o[start + q] as usize);
        let chunk: &[f32] = match order {
            None => &x[start * dim..end * dim],
            Some(o) => {
                gathered.clear();
                for &u in &o[start..end] {
                    gathered.extend_from_slice(&x[u as usize * dim..(u as usize + 1) * dim]);
                }
                &gathered
            }
        };
        // k + 1 results: the vector itself is (almost always) among them.
        let res = searcher
            .search_stored(chunk, (k + 1).min(n), p)
            .map_err(|source| BuildError::Search {
                stage: "row search",
                source,
            })?;
        for q in 0..res.len() {
            let u = who(q);
            let (out_ids, out_d) = (&mut ids[u * k..(u + 1) * k], &mut dists[u * k..(u + 1) * k]);
            let mut taken = 0;
            for (&id, &d) in res.ids(q).iter().zip(res.distances(q)) {
                if taken < k && id as usize != u && id != PAD_ID {
                    out_ids[taken] = id;
                    out_d[taken] = d;
                    taken += 1;
                }
            }
        }
        pb.inc(res.len() as u64);
    }
    Ok((ids, dists))
}

/// The base vectors breadth first through `rows` (`lt` ids each), from
/// each vector not yet reached in id order: consecutive ones are near each
/// other, so a pass searching them in this order finds the index's parts
/// its last queries read still in the cache.
pub fn locality_order(rows: &[u32], lt: usize) -> Vec<u32> {
    let n = rows.len() / lt.max(1);
    let mut reached = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for root in 0..n {
        if reached[root] {
            continue;
        }
        reached[root] = true;
        let mut head = order.len();
        order.push(root as u32);
        while head < order.len() {
            let u = order[head] as usize;
            head += 1;
            for &v in &rows[u * lt..(u + 1) * lt] {
                if v != PAD_ID && !reached[v as usize] {
                    reached[v as usize] = true;
                    order.push(v);
                }
            }
        }
    }
    order
}

/// The row searcher over `index`: its GPU backend when `gpu`, else the CPU.
fn searcher(index: &octex_search::Index, gpu: bool) -> Result<BackendSearcher, BuildError> {
    let backend = if gpu { Backend::Gpu } else { Backend::Cpu };
    let opts = GpuOptions {
        device: 0,
        max_batch: 8_192,
        // The rows are built from exact products, as on the CPU, whatever
        // the default.
        tf32_projection: false,
        ..GpuOptions::default()
    };
    index
        .open_on(backend, &opts)
        .map_err(|source| BuildError::Search {
            stage: "opening the row search",
            source,
        })
}

/// What [`rows_by_search`] measured: the share of a sample's exact
/// neighbours the forward lists held after pass 2, and after the deeper
/// pass where one ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RowSearchReport {
    pub pass2_recall: f64,
    /// The sample's lists after the deeper pass tried on it alone.
    pub deep_pass_trial: Option<f64>,
    pub deep_pass_recall: Option<f64>,
}

/// Rows for `parts` (whose rows are ignored) over stored vectors `x`, the
/// searches on the GPU when `gpu`.
pub fn rows_by_search(
    parts: &mut IndexParts,
    x: &[f32],
    dim: usize,
    shape: RowShape,
    pb: &Stage,
    gpu: bool,
) -> Result<(Vec<u32>, RowSearchReport), BuildError> {
    let n = x.len() / dim;
    let lt = shape.row_len;
    let k = shape.candidates.max(lt).min(n.saturating_sub(1)).max(1);
    let list_len = parts.header.list_len as usize;
    let rerank = (2 * lt).max(k + 1).min(n);
    pb.restart(2 * n as u64, 0);
    parts.rows = vec![PAD_ID; n * lt];
    let first = octex_search::Index::new(Index::from_parts(parts.clone())?);
    let p1 = SearchParams {
        read_depth: list_len,
        start_points: 1,
        waves: 0,
        rerank,
        wave_rerank: false,
    };
    let (ids, dists) = one_pass(&first, gpu, x, dim, k, &p1, pb, None)?;
    drop(first);
    // The rows the build's own passes search are in distance order: the
    // detour order ([`crate::rows::order_by_detours`]) is as costly as a
    // pass and lifted neither the lists nor the final index's recall.
    let searched_shape = RowShape {
        order: RowOrder::Distance,
        ..shape
    };
    parts.rows = assemble(&ids, &dists, k, searched_shape);
    // Passes 2 and 3 search the vectors breadth first through these rows.
    let order = locality_order(&parts.rows, lt);
    let order = Some(order.as_slice());
    let second = octex_search::Index::new(Index::from_parts(parts.clone())?);
    let p2 = SearchParams {
        read_depth: list_len,
        start_points: PASS2_START_POINTS,
        waves: PASS2_WAVES,
        rerank,
        wave_rerank: false,
    };
    let (mut ids, mut dists) = one_pass(&second, gpu, x, dim, k, &p2, pb, order)?;
    drop(second);
    join(x, dim, &mut ids, &mut dists, k);
    let truth = crate::check::RowTruth::new(
        x,
        dim,
        &crate::pca::sample_rows(n, crate::check::ROW_CHECK_SAMPLE, 0x7e57),
    );
    let recall = truth.row_recall(x, dim, &ids, k);
    tracing::info!(recall, "forward lists after pass 2");
    let mut report = RowSearchReport {
        pass2_recall: recall,
        ..RowSearchReport::default()
    };
    if recall < DEEP_PASS_BELOW {
        parts.rows = assemble(&ids, &dists, k, searched_shape);
        let third = octex_search::Index::new(Index::from_parts(parts.clone())?);
        let p3 = SearchParams {
            start_points: DEEP_PASS_START_POINTS,
            waves: DEEP_PASS_WAVES,
            ..p2
        };
        // The pass on the sample first: kept for all only where it gains.
        let trial = deep_pass_on_sample(&third, x, dim, k, &ids, &dists, &p3, &truth)?;
        tracing::info!(recall, trial, "deeper pass on the sample");
        report.deep_pass_trial = Some(trial);
        if trial < recall + DEEP_PASS_MIN_GAIN {
            return Ok((assemble(&ids, &dists, k, shape), report));
        }
        pb.restart(pb.total() + n as u64, pb.position());
        let (ids3, dists3) = one_pass(&third, gpu, x, dim, k, &p3, pb, order)?;
        drop(third);
        merge_lists(&mut ids, &mut dists, &ids3, &dists3, k);
        join(x, dim, &mut ids, &mut dists, k);
        let recall = truth.row_recall(x, dim, &ids, k);
        tracing::info!(recall, "forward lists after the deeper pass");
        report.deep_pass_recall = Some(recall);
    }
    Ok((assemble(&ids, &dists, k, shape), report))
}

/// The recall of the sample's lists (of `truth`) after a pass of `p` over
/// `third` on the sample alone, merged into their lists `ids`/`dists`
/// (`n x k`).
#[allow(clippy::too_many_arguments)]
fn deep_pass_on_sample(
    third: &octex_search::Index,
    x: &[f32],
    dim: usize,
    k: usize,
    ids: &[u32],
    dists: &[f32],
    p: &SearchParams,
    truth: &crate::check::RowTruth,
) -> Result<f64, BuildError> {
    let sample = truth.sample();
    let xs: Vec<f32> = sample
        .iter()
        .flat_map(|&u| x[u * dim..(u + 1) * dim].iter().copied())
        .collect();
    let (mut sids, mut sdists) = gather(ids, dists, k, sample);
    let (found, found_d) = forward_lists(
        &mut searcher(third, false)?,
        &xs,
        dim,
        k,
        p,
        &Stage::hidden(),
        None,
    )?;
    // `forward_lists` took the sample's positions for ids: its own id is
    // removed here instead.
    let (found, found_d) = without_self(found, found_d, k, sample);
    merge_lists(&mut sids, &mut sdists, &found, &found_d, k);
    Ok(truth.lists_recall(x, dim, &sids, k))
}

/// The lists (`k` each) of the vectors `sample`, in its order.
fn gather(ids: &[u32], dists: &[f32], k: usize, sample: &[usize]) -> (Vec<u32>, Vec<f32>) {
    let ids = sample
        .iter()
        .flat_map(|&u| ids[u * k..(u + 1) * k].iter().copied())
        .collect();
    let dists = sample
        .iter()
        .flat_map(|&u| dists[u * k..(u + 1) * k].iter().copied())
        .collect();
    (ids, dists)
}

/// Lists found for the vectors `sample` (`k` each, in its order) without the
/// vector itself.
fn without_self(
    ids: Vec<u32>,
    dists: Vec<f32>,
    k: usize,
    sample: &[usize],
) -> (Vec<u32>, Vec<f32>) {
    let mut out = (Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len()));
    for (i, &u) in sample.iter().enumerate() {
        let row = ids[i * k..(i + 1) * k]
            .iter()
            .zip(&dists[i * k..(i + 1) * k]);
        let kept: Vec<(u32, f32)> = row
            .filter(|(&id, _)| id as usize != u)
            .map(|(&id, &d)| (id, d))
            .collect();
        for j in 0..k {
            let (id, d) = kept.get(j).copied().unwrap_or((PAD_ID, f32::INFINITY));
            out.0.push(id);
            out.1.push(d);
        }
    }
    out
}

fn join(x: &[f32], dim: usize, ids: &mut [u32], dists: &mut [f32], k: usize) {
    for round in 0..JOIN_ROUNDS {
        let t = std::time::Instant::now();
        let changed = crate::refine::join_round(x, dim, ids, dists, k, &|_| {});
        tracing::info!(
            round,
            changed,
            secs = t.elapsed().as_secs_f64(),
            "row join round"
        );
    }
}

/// Each vector's `k` nearest of its two forward lists (`n x k`, nearest
/// first, padded with `PAD_ID`), without repeats, into the first.
fn merge_lists(ids: &mut [u32], dists: &mut [f32], ids2: &[u32], dists2: &[f32], k: usize) {
    use rayon::prelude::*;
    ids.par_chunks_mut(k)
        .zip(dists.par_chunks_mut(k))
        .zip(ids2.par_chunks(k).zip(dists2.par_chunks(k)))
        .for_each(|((a, da), (b, db))| {
            let mut all: Vec<(f32, u32)> = da
                .iter()
                .zip(a.iter())
                .chain(db.iter().zip(b))
                .filter(|(_, &id)| id != PAD_ID)
                .map(|(&d, &id)| (d, id))
                .collect();
            all.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            let mut seen = std::collections::HashSet::with_capacity(all.len());
            all.retain(|e| seen.insert(e.1));
            for j in 0..k {
                let (d, id) = all.get(j).copied().unwrap_or((f32::INFINITY, PAD_ID));
                a[j] = id;
                da[j] = d;
            }
        });
}

/// One pass of forward lists, on the GPU when `gpu` and the GPU takes the
/// search (its shared memory bounds a query's plan: at C = 256 copies the
/// first round of pass 1 does not fit), else on the CPU cores, with a warning.
#[allow(clippy::too_many_arguments)]
fn one_pass(
    index: &octex_search::Index,
    gpu: bool,
    x: &[f32],
    dim: usize,
    k: usize,
    p: &SearchParams,
    pb: &Stage,
    order: Option<&[u32]>,
) -> Result<(Vec<u32>, Vec<f32>), BuildError> {
    let start = pb.position();
    if gpu {
        match searcher(index, true).and_then(|mut s| forward_lists(&mut s, x, dim, k, p, pb, order))
        {
            Ok(found) => return Ok(found),
            Err(e) => {
                tracing::warn!("GPU row search refused ({e}); this pass runs on the CPU cores");
                pb.restart(pb.total(), start);
            }
        }
    }
    let t = std::time::Instant::now();
    let found = forward_lists(&mut searcher(index, false)?, x, dim, k, p, pb, order)?;
    tracing::debug!(
        start_points = p.start_points,
        waves = p.waves,
        rerank = p.rerank,
        seconds = t.elapsed().as_secs_f64(),
        "row search pass"
    );
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locality_order_is_breadth_first_and_a_permutation() {
        // 0 -> 3, 5; 1 -> nothing; 2 -> 4; 3 -> 1; 4 -> 2; 5 -> 0, 3 (6 -> 0, 3).
        let p = PAD_ID;
        let rows = [3, 5, p, p, 4, p, 1, p, 2, p, 0, 3, 0, 3];
        let order = locality_order(&rows[..12], 2);
        assert_eq!(order, [0, 3, 5, 1, 2, 4]);
        let order = locality_order(&rows[..14], 2);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..7).collect::<Vec<u32>>());
    }

    /// Searching the vectors in another order finds the same lists.
    #[test]
    fn a_pass_in_the_locality_order_finds_the_same_lists() {
        let (n, dim, k) = (3_000, 16, 12);
        let mut rng = octex_lattice::GaussianRng::new(5, 0);
        let x: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let params = crate::BuildParams {
            backend: Backend::Cpu,
            copies: Some(8),
            ..Default::default()
        };
        let built = crate::build(&x, dim, octex_index::Metric::L2, &params).unwrap();
        let lt = built.index.header().row_len as usize;
        let order = locality_order(built.index.rows(), lt);
        let index = octex_search::Index::new(built.index);
        let p = SearchParams {
            start_points: 8,
            waves: 1,
            ..SearchParams::default()
        };
        let pb = Stage::hidden();
        let mut s = searcher(&index, false).unwrap();
        let plain = forward_lists(&mut s, &x, dim, k, &p, &pb, None).unwrap();
        let ordered = forward_lists(&mut s, &x, dim, k, &p, &pb, Some(&order)).unwrap();
        assert_ne!(order, (0..n as u32).collect::<Vec<_>>());
        assert!(plain.0 == ordered.0 && plain.1 == ordered.1);
        assert!((0..n).all(|u| !plain.0[u * k..(u + 1) * k].contains(&(u as u32))));
    }
}
