//! Filtered search: only allowed ids come back, and recall against the exact
//! filtered answer stays high from half the ids allowed down to a handful.

use octex_build::build;
use octex_index::{Metric, PAD_ID};
use octex_search::{IdFilter, SearchError, SearchParams};
use octex_tests::*;

const DIM: usize = 32;

/// Ids allowed at `per_mille` of 1,000, spread over the index by a hash.
fn allowed(n: usize, per_mille: u64) -> Vec<u32> {
    (0..n as u32)
        .filter(|&id| {
            (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32 & 1023 < per_mille * 1024 / 1000
        })
        .collect()
}

/// The exact top `k` among `ids`, `PAD_ID` beyond them.
fn filtered_truth(base: &[f32], queries: &[f32], ids: &[u32], k: usize) -> Vec<u32> {
    let sub: Vec<f32> = ids
        .iter()
        .flat_map(|&id| {
            base[id as usize * DIM..(id as usize + 1) * DIM]
                .iter()
                .copied()
        })
        .collect();
    let kk = k.min(ids.len());
    let nq = queries.len() / DIM;
    let found = brute_force(&sub, queries, DIM, kk);
    (0..nq)
        .flat_map(|q| (0..k).map(move |t| (q, t)))
        .map(|(q, t)| {
            if t < kk {
                ids[found[q * kk + t] as usize]
            } else {
                PAD_ID
            }
        })
        .collect()
}

#[test]
fn filtered_search_returns_allowed_ids_at_high_recall() {
    let all = clustered(12_000, DIM, 40, 11);
    let (base, queries) = all.split_at(11_000 * DIM);
    let queries = &queries[..300 * DIM];
    let n = base.len() / DIM;
    let index =
        octex_search::Index::new(build(base, DIM, Metric::L2, &test_params()).unwrap().index);
    let p = SearchParams::default();
    let k = 10;
    let plain = recall(
        &index.search(queries, k, &p).unwrap().ids,
        &brute_force(base, queries, DIM, k),
        k,
    );
    // A cheap point searches the index where half the ids are allowed (the
    // defaults read about as many entries as the index holds: they scan).
    let cheap = SearchParams {
        read_depth: 8,
        start_points: 16,
        waves: 1,
        rerank: 32,
        wave_rerank: false,
    };
    for (per_mille, p) in [1000, 500, 100, 10, 1]
        .into_iter()
        .flat_map(|pm| [(pm, p), (pm, cheap)])
    {
        let ids = allowed(n, per_mille);
        let filter = IdFilter::from_ids(n, ids.iter().copied()).unwrap();
        let res = index.search_filtered(queries, k, &p, &filter).unwrap();
        assert!(
            res.ids.iter().all(|&id| id == PAD_ID || filter.allows(id)),
            "{per_mille}: a denied id came back"
        );
        let truth = filtered_truth(base, queries, &ids, k);
        let r = recall(&res.ids, &truth, k);
        let st = res.stats;
        println!(
            "{per_mille} per mille ({} ids), S={}: recall@10 {r:.4}, {} of {} queries scanned, {} extra waves",
            ids.len(),
            p.start_points,
            st.scanned_queries,
            st.queries,
            st.extra_waves
        );
        assert!(r >= 0.95, "{per_mille} per mille: recall {r}");
        if per_mille == 1000 {
            assert!(
                r >= plain - 0.01,
                "all allowed: {r} against {plain} unfiltered"
            );
        }
        if ids.len() < k {
            // Fewer allowed than k: every one of them, then padding.
            assert_eq!(r, 1.0);
            assert!(res.ids(0)[ids.len()..].iter().all(|&id| id == PAD_ID));
            assert!(res.distances(0)[ids.len()..]
                .iter()
                .all(|d| d.is_infinite()));
        }
    }
    // Nothing allowed: padding only; a filter of another index: an error.
    let none = index
        .search_filtered(queries, k, &p, &IdFilter::none(n))
        .unwrap();
    assert!(none.ids.iter().all(|&id| id == PAD_ID));
    assert!(matches!(
        index.search_filtered(queries, k, &p, &IdFilter::all(n + 1)),
        Err(SearchError::FilterLength { got, n: m }) if got == n + 1 && m == n
    ));
}
