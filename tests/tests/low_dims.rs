//! Data of fewer than eight dimensions (coordinates, small tabular
//! records): stored padded with zeros to one E8 block, it builds, searches,
//! saves, loads and grows like any other, with the exact distances.

use octex_build::{build, LiveIndex};
use octex_index::{Index, Metric};
use octex_search::knn::ground_truth;
use octex_search::SearchParams;
use octex_tests::*;

/// `n` rows of `dim` values: clustered, plus uniform noise so that few
/// distances tie.
fn rows(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    clustered(n, dim, 12, seed)
        .into_iter()
        .map(|v| v + (rng.below(1 << 20) as f32 / (1 << 20) as f32 - 0.5) * 0.05)
        .collect()
}

fn exact_distance(metric: Metric, q: &[f32], x: &[f32]) -> f32 {
    let dot: f32 = q.iter().zip(x).map(|(a, b)| a * b).sum();
    let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>().sqrt();
    match metric {
        Metric::L2 => q.iter().zip(x).map(|(a, b)| (a - b) * (a - b)).sum(),
        Metric::Cosine => 1.0 - dot / (norm(q) * norm(x)),
        Metric::InnerProduct => -dot,
    }
}

#[test]
fn one_to_seven_dimensions_build_and_search_exactly_enough() {
    let cases = [
        (1, Metric::L2),
        (2, Metric::L2),
        (3, Metric::L2),
        (7, Metric::L2),
        (2, Metric::Cosine),
        (3, Metric::InnerProduct),
        (7, Metric::InnerProduct),
    ];
    for (dim, metric) in cases {
        let all = rows(4_200, dim, 11 + dim as u64);
        let (base, queries) = all.split_at(4_000 * dim);
        let built = build(base, dim, metric, &test_params()).unwrap();
        assert_eq!(built.index.input_dim(), dim);
        assert_eq!(built.index.stored_dim(), metric.stored_dim(dim));
        let index = octex_search::Index::new(built.index);
        let truth = ground_truth(base, queries, dim, 10, metric, &|_| {}).unwrap();
        let res = index.search(queries, 10, &SearchParams::default()).unwrap();
        let r = recall(&res.ids, &truth, 10);
        assert!(r >= 0.95, "{dim}-d {metric}: recall@10 {r}");
        for q in 0..queries.len() / dim {
            let (id, d) = (res.ids(q)[0] as usize, res.distances(q)[0]);
            let want = exact_distance(
                metric,
                &queries[q * dim..(q + 1) * dim],
                &base[id * dim..(id + 1) * dim],
            );
            assert!(
                (d - want).abs() <= 1e-3 * want.abs().max(1.0),
                "{dim}-d {metric}: reported {d}, exact {want}"
            );
        }
    }
}

#[test]
fn a_two_dimensional_index_round_trips_and_grows() {
    let dim = 2;
    let all = rows(6_300, dim, 5);
    let (base, queries) = all.split_at(6_000 * dim);
    let p = SearchParams::default();
    let first = build(&base[..3_000 * dim], dim, Metric::L2, &test_params()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d2.octex");
    first.index.save(&path).unwrap();
    let loaded = octex_search::Index::new(Index::load(&path).unwrap());
    let before = octex_search::Index::new(first.index);
    let (a, b) = (
        before.search(queries, 10, &p).unwrap(),
        loaded.search(queries, 10, &p).unwrap(),
    );
    assert_eq!((a.ids, a.distances), (b.ids, b.distances));
    // Grown in place to the whole base: recall against the exact answer.
    let mut live = LiveIndex::new(loaded, test_params());
    for part in base[3_000 * dim..].chunks(1_000 * dim) {
        live.add(part, None).unwrap();
    }
    live.flush().unwrap();
    assert_eq!((live.len(), live.pending()), (6_000, 0));
    let truth = brute_force(base, queries, dim, 10);
    let found = live.search(queries, 10, &p, None).unwrap();
    let found: Vec<u32> = found.ids.iter().map(|&id| id as u32).collect();
    let r = recall(&found, &truth, 10);
    assert!(r >= 0.95, "grown 2-d index: recall@10 {r}");
}
