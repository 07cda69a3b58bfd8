//! Refinement of approximate forward lists by local joins (in the manner of
//! NN-descent): a vector's true neighbours are mostly neighbours of its
//! neighbours, so each round offers every vector the forward lists of its
//! first [`JOIN_FANOUT`] forward and reverse neighbours, scores the offers
//! exactly and keeps the best `k`. The rows by search start from the index's
//! first round and reach exact rows' quality in a few rounds at a fraction of
//! exact rows' `n^2 D` cost.

use rayon::prelude::*;

use octex_index::PAD_ID;
use octex_search::knn::{squared_l2, TopK};
use octex_search::simd::prefetch;

/// Forward and reverse neighbours of a vector whose lists a round offers it.
pub const JOIN_FANOUT: usize = 16;

/// Vectors a round scores per parallel task (progress granularity).
const TASK: usize = 1_024;
/// Offered vectors prefetched ahead of the distance being computed (the
/// offers are random reads of the base).
const PREFETCH_AHEAD: usize = 8;

/// Up to `cap` vectors that list each vector among their first `fanout`
/// (`n` rows of `cap`, `PAD_ID`-padded), nearest listers first.
fn reverse(ids: &[u32], dists: &[f32], k: usize, fanout: usize, cap: usize) -> Vec<u32> {
    let n = ids.len() / k;
    let mut listers: Vec<(u32, f32, u32)> = Vec::with_capacity(n * fanout);
    for u in 0..n {
        for j in 0..fanout.min(k) {
            let v = ids[u * k + j];
            if v != PAD_ID {
                listers.push((v, dists[u * k + j], u as u32));
            }
        }
    }
    listers
        .par_sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut out = vec![PAD_ID; n * cap];
    for run in listers.chunk_by(|a, b| a.0 == b.0) {
        let v = run[0].0 as usize;
        for (slot, e) in out[v * cap..(v + 1) * cap].iter_mut().zip(run) {
            *slot = e.2;
        }
    }
    out
}

/// One round of local joins over forward lists `ids`/`dists` (`n x k`, each
/// row ascending by squared L2 distance, `PAD_ID`/infinity padded) of the
/// stored vectors `x` (`n x dim`). Returns how many list entries changed;
/// `on_rows` is told of every `TASK` vectors done.
pub fn join_round(
    x: &[f32],
    dim: usize,
    ids: &mut [u32],
    dists: &mut [f32],
    k: usize,
    on_rows: &(dyn Fn(usize) + Sync),
) -> usize {
    let n = ids.len() / k.max(1);
    if n < 2 || k == 0 {
        return 0;
    }
    let f = JOIN_FANOUT.min(k);
    let rev = reverse(ids, dists, k, f, f);
    let (old_ids, old_dists) = (ids.to_vec(), dists.to_vec());
    let changed: usize = ids
        .par_chunks_mut(TASK * k)
        .zip(dists.par_chunks_mut(TASK * k))
        .enumerate()
        .map_init(
            // Per task: the epoch each vector was last offered in, and a
            // vector's offers.
            || (vec![0u32; n], 0u32, Vec::new()),
            |(seen, epoch, offered), (t, (ids_out, d_out))| {
                let mut changed = 0;
                for (r, (row_ids, row_d)) in ids_out
                    .chunks_exact_mut(k)
                    .zip(d_out.chunks_exact_mut(k))
                    .enumerate()
                {
                    let u = t * TASK + r;
                    *epoch = epoch.wrapping_add(1);
                    if *epoch == 0 {
                        seen.iter_mut().for_each(|s| *s = 0);
                        *epoch = 1;
                    }
                    let mut top = TopK::new(k);
                    seen[u] = *epoch;
                    for (&v, &d) in old_ids[u * k..(u + 1) * k]
                        .iter()
                        .zip(&old_dists[u * k..(u + 1) * k])
                    {
                        if v != PAD_ID {
                            seen[v as usize] = *epoch;
                            top.push(d, v);
                        }
                    }
                    let via = old_ids[u * k..u * k + f]
                        .iter()
                        .chain(&rev[u * f..(u + 1) * f]);
                    offered.clear();
                    for &v in via {
                        if v == PAD_ID {
                            continue;
                        }
                        let v = v as usize;
                        let offers = old_ids[v * k..v * k + f]
                            .iter()
                            .chain(&rev[v * f..(v + 1) * f]);
                        for &w in offers.chain(std::iter::once(&(v as u32))) {
                            if w == PAD_ID || seen[w as usize] == *epoch {
                                continue;
                            }
                            seen[w as usize] = *epoch;
                            offered.push(w);
                        }
                    }
                    let xu = &x[u * dim..(u + 1) * dim];
                    let row = |w: u32| &x[w as usize * dim..(w as usize + 1) * dim];
                    for &w in offered.iter().take(PREFETCH_AHEAD) {
                        prefetch(row(w));
                    }
                    for (i, &w) in offered.iter().enumerate() {
                        if let Some(&ahead) = offered.get(i + PREFETCH_AHEAD) {
                            prefetch(row(ahead));
                        }
                        top.push(squared_l2(xu, row(w)), w);
                    }
                    let (ti, td) = top.sorted();
                    for j in 0..k {
                        let (id, d) = match j < ti.len() {
                            true => (ti[j], td[j]),
                            false => (PAD_ID, f32::INFINITY),
                        };
                        changed += usize::from(row_ids[j] != id);
                        row_ids[j] = id;
                        row_d[j] = d;
                    }
                }
                on_rows(ids_out.len() / k);
                changed
            },
        )
        .sum();
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use octex_lattice::GaussianRng;
    use octex_search::knn::{exact_knn, KnnMetric};

    fn recall(got: &[u32], want: &[u32], k: usize, at: usize) -> f64 {
        let n = got.len() / k;
        let mut hit = 0;
        for u in 0..n {
            let g = &got[u * k..u * k + at];
            hit += want[u * k..u * k + at]
                .iter()
                .filter(|w| g.contains(w))
                .count();
        }
        hit as f64 / (n * at) as f64
    }

    /// Random lists converge to the exact ones: each round raises recall, and
    /// a few rounds come close to exact.
    #[test]
    fn rounds_approach_exact_lists() {
        let (n, dim, k) = (3_000, 12, 16);
        let mut rng = GaussianRng::new(3, 0);
        let x: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let (exact, _) = exact_knn(&x, &x, dim, k, KnnMetric::L2, true, &|_| {});
        // Start from random lists with their true distances.
        let mut ids = vec![0u32; n * k];
        let mut dists = vec![0f32; n * k];
        for u in 0..n {
            let mut top = TopK::new(k);
            while top.len() < k {
                let v = (rng.next_u64() % n as u64) as usize;
                if v != u && !top.sorted().0.contains(&(v as u32)) {
                    top.push(
                        squared_l2(&x[u * dim..(u + 1) * dim], &x[v * dim..(v + 1) * dim]),
                        v as u32,
                    );
                }
            }
            let (top_ids, top_dists) = top.sorted();
            ids[u * k..(u + 1) * k].copy_from_slice(top_ids);
            dists[u * k..(u + 1) * k].copy_from_slice(top_dists);
        }
        let mut last = recall(&ids, &exact, k, 10);
        for _ in 0..6 {
            join_round(&x, dim, &mut ids, &mut dists, k, &|_| {});
            let now = recall(&ids, &exact, k, 10);
            assert!(now >= last, "recall fell from {last} to {now}");
            last = now;
        }
        assert!(
            last > 0.95,
            "six rounds from random lists reach only {last}"
        );
        // Rows stay sorted, without self or repeats, with true distances.
        for u in 0..n {
            let row = &ids[u * k..(u + 1) * k];
            assert!(!row.contains(&(u as u32)));
            let mut s = row.to_vec();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), k);
            let d = &dists[u * k..(u + 1) * k];
            assert!(d.windows(2).all(|w| w[0] <= w[1]));
            let v = row[0] as usize;
            let want = squared_l2(&x[u * dim..(u + 1) * dim], &x[v * dim..(v + 1) * dim]);
            assert!((d[0] - want).abs() <= 1e-5 * want.max(1.0));
        }
    }

    #[test]
    fn reverse_lists_hold_the_nearest_listers() {
        // 0 and 2 list 1 first; 2 is nearer.
        let ids = vec![1, 2, 2, 0, 1, 0];
        let dists = vec![3.0, 4.0, 1.0, 1.0, 0.5, 2.0];
        let rev = reverse(&ids, &dists, 2, 1, 2);
        assert_eq!(&rev[2..4], &[2, 0]);
        assert_eq!(&rev[0..2], &[PAD_ID, PAD_ID]);
        assert_eq!(&rev[4..6], &[1, PAD_ID]);
    }
}
