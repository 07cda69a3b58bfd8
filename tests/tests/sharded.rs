//! Sharded indexes: merged answers equal one index's where the shards are
//! exact, ANN recall holds, and shard directories round-trip or are refused.

use octex_build::{merge_topk, BuildParams, Order, ShardAnswer, ShardedIndex};
use octex_index::Metric;
use octex_search::knn::{exact_knn, KnnMetric};
use octex_search::{Backend, SearchParams};
use octex_tests::*;
use proptest::prelude::*;

const DIM: usize = 16;

/// Exact answers of each shard (global ids), merged: the exact answer of
/// the whole, id for id.
#[test]
fn merged_exact_shards_equal_the_exact_whole() {
    let base = clustered(4_000, DIM, 9, 3);
    let queries = clustered(60, DIM, 9, 4);
    let k = 10;
    let (all_ids, all_d) = exact_knn(&base, &queries, DIM, k, KnnMetric::L2, false, &|_| {});
    for shards in [1usize, 3, 4] {
        let n = 4_000;
        let answers: Vec<(Vec<u64>, Vec<f32>)> = (0..shards)
            .map(|s| {
                let (a, b) = (n * s / shards, n * (s + 1) / shards);
                let (ids, d) = exact_knn(
                    &base[a * DIM..b * DIM],
                    &queries,
                    DIM,
                    k,
                    KnnMetric::L2,
                    false,
                    &|_| {},
                );
                (ids.iter().map(|&i| a as u64 + i as u64).collect(), d)
            })
            .collect();
        let parts: Vec<ShardAnswer> = answers
            .iter()
            .map(|(ids, distances)| ShardAnswer { ids, distances, k })
            .collect();
        let (ids, d) = merge_topk(&parts, 60, k, Order::Ascending);
        let want: Vec<u64> = all_ids.iter().map(|&i| i as u64).collect();
        assert_eq!(ids, want, "{shards} shards");
        assert_eq!(d, all_d);
    }
}

proptest! {
    /// merge_topk against sorting everything: nearest first, ties by id,
    /// repeats once, padding where short, in both orders.
    #[test]
    fn merge_topk_is_the_best_k_of_the_union(
        shards in prop::collection::vec(prop::collection::vec((0u64..40, -5i32..5), 0..6), 1..5),
        k in 1usize..8,
        descending in any::<bool>(),
    ) {
        let order = if descending { Order::Descending } else { Order::Ascending };
        // One query; each shard's answer padded to its own k.
        let kk = shards.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let answers: Vec<(Vec<u64>, Vec<f32>)> = shards.iter().map(|s| {
            let mut ids: Vec<u64> = s.iter().map(|e| e.0).collect();
            let mut d: Vec<f32> = s.iter().map(|e| e.1 as f32).collect();
            ids.resize(kk, u64::MAX);
            d.resize(kk, f32::INFINITY);
            (ids, d)
        }).collect();
        let parts: Vec<ShardAnswer> = answers.iter().map(|(ids, distances)| ShardAnswer { ids, distances, k: kk }).collect();
        let (ids, d) = merge_topk(&parts, 1, k, order);
        let mut all: Vec<(f32, u64)> = shards.iter().flatten().map(|e| (e.1 as f32, e.0)).collect();
        all.sort_by(|a, b| {
            let by = if descending { b.0.total_cmp(&a.0) } else { a.0.total_cmp(&b.0) };
            by.then(a.1.cmp(&b.1))
        });
        let mut seen = std::collections::HashSet::new();
        all.retain(|e| seen.insert(e.1));
        for t in 0..k {
            match all.get(t) {
                Some(&(dd, id)) => { prop_assert_eq!(ids[t], id); prop_assert_eq!(d[t], dd); }
                None => {
                    prop_assert_eq!(ids[t], u64::MAX);
                    prop_assert!(d[t].is_infinite());
                }
            }
        }
    }
}

#[test]
fn sharded_search_keeps_recall_and_round_trips() {
    let base = clustered(8_000, DIM, 20, 5);
    let queries = clustered(200, DIM, 20, 6);
    let params = test_params();
    let p = SearchParams::default();
    let k = 10;
    let truth = brute_force(&base, &queries, DIM, k);
    let one = octex_search::Index::new(
        octex_build::build(&base, DIM, Metric::L2, &params)
            .unwrap()
            .index,
    );
    let single = recall(&one.search(&queries, k, &p).unwrap().ids, &truth, k);
    let sharded = ShardedIndex::build(&base, DIM, Metric::L2, 4, &params).unwrap();
    assert_eq!(sharded.len(), 8_000);
    let (ids, d) = sharded.search(&queries, k, Some(&p), Backend::Cpu).unwrap();
    let truth64: Vec<u64> = truth.iter().map(|&i| i as u64).collect();
    let hits = ids
        .chunks_exact(k)
        .zip(truth64.chunks_exact(k))
        .map(|(f, t)| t.iter().filter(|x| f.contains(x)).count())
        .sum::<usize>();
    let four = hits as f64 / truth.len() as f64;
    println!("recall@10: one index {single:.4}, four shards {four:.4}");
    assert!(
        four >= single - 0.01,
        "four shards {four} against one index {single}"
    );
    // Saved and loaded: the same answers.
    let dir = tempfile::tempdir().unwrap();
    sharded.save(dir.path()).unwrap();
    let back = ShardedIndex::load(dir.path()).unwrap();
    assert_eq!(back.manifest(), sharded.manifest());
    let answer = (ids, d);
    assert_eq!(
        back.search(&queries, k, Some(&p), Backend::Cpu).unwrap(),
        answer
    );
    // No parameters: each shard's own defaults (the fixed point on this
    // clustered data, as the shards' builds chose).
    assert_eq!(
        back.search(&queries, k, None, Backend::Cpu).unwrap(),
        answer
    );
    // A shard that is not what the manifest says is refused.
    let file = dir.path().join(&sharded.manifest().shards[1].file);
    let other = octex_build::build(&base[..500 * DIM], DIM, Metric::L2, &params).unwrap();
    other.index.save(&file).unwrap();
    let err = ShardedIndex::load(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("the manifest says"), "{err}");
    std::fs::write(dir.path().join("manifest.json"), b"{").unwrap();
    assert!(ShardedIndex::load(dir.path()).is_err());
    // Shard counts that cannot be.
    assert!(ShardedIndex::build(
        &base[..3 * DIM],
        DIM,
        Metric::L2,
        4,
        &BuildParams::default()
    )
    .is_err());
    assert!(ShardedIndex::build(&base, DIM, Metric::L2, 0, &params).is_err());
}
