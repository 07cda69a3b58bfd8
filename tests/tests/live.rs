//! The living index: grown by adds, shrunk by removes, searched by user id.

use octex_build::{build, LiveError, LiveIndex};
use octex_index::Metric;
use octex_search::SearchParams;
use octex_tests::*;

const DIM: usize = 32;

/// recall@k of user-id results against exact positions mapped to user ids.
fn live_recall(found: &[u64], truth: &[u32], ids_of: &[u64], k: usize) -> f64 {
    let mut hits = 0;
    for (f, t) in found.chunks_exact(k).zip(truth.chunks_exact(k)) {
        hits += t
            .iter()
            .filter(|&&pos| f.contains(&ids_of[pos as usize]))
            .count();
    }
    hits as f64 / truth.len() as f64
}

#[test]
fn an_index_grown_by_adds_finds_what_a_fresh_build_finds() {
    let all = clustered(12_500, DIM, 40, 21);
    let (base, queries) = all.split_at(12_000 * DIM);
    let queries = &queries[..300 * DIM];
    let p = SearchParams::default();
    let k = 10;
    let half = 6_000;
    let params = test_params();
    let first = build(&base[..half * DIM], DIM, Metric::L2, &params).unwrap();
    // User ids far from positions: 1,000,000 + position.
    let uid = |pos: usize| 1_000_000 + pos as u64;
    let mut live = LiveIndex::with_ids(
        octex_search::Index::new(first.index),
        params.clone(),
        (0..half).map(uid).collect(),
    )
    .unwrap();
    // Grow to the whole set in 10 adds.
    let step = (12_000 - half) / 10;
    let mut insertions = 0;
    for s in 0..10 {
        let (a, b) = (half + s * step, half + (s + 1) * step);
        let ids: Vec<u64> = (a..b).map(uid).collect();
        let built_before = live.index().len();
        assert_eq!(live.add(&base[a * DIM..b * DIM], Some(&ids)).unwrap(), ids);
        insertions += (live.index().len() != built_before) as usize;
    }
    assert!(
        insertions >= 1,
        "the pending list never reached its threshold"
    );
    // Every vector in the index itself, none left to the exact scan.
    live.flush().unwrap();
    assert_eq!((live.len(), live.pending()), (12_000, 0));
    assert_eq!(live.index().len(), 12_000);
    let ids_of: Vec<u64> = (0..12_000).map(uid).collect();
    let truth = brute_force(base, queries, DIM, k);
    let grown = live_recall(
        &live.search(queries, k, &p, None).unwrap().ids,
        &truth,
        &ids_of,
        k,
    );
    let fresh = octex_search::Index::new(build(base, DIM, Metric::L2, &params).unwrap().index);
    let fresh_recall = recall(&fresh.search(queries, k, &p).unwrap().ids, &truth, k);
    println!(
        "grown in place {grown:.4}, fresh {fresh_recall:.4}, {insertions} insertions during the adds"
    );
    assert!(
        grown >= fresh_recall - 0.01,
        "grown {grown} against fresh {fresh_recall}"
    );

    // Remove 10%: none comes back, recall over the rest holds.
    let removed: Vec<u64> = (0..12_000).step_by(10).map(uid).collect();
    assert_eq!(live.remove(&removed), removed.len());
    assert_eq!(live.remove(&removed), 0, "removing twice removes nothing");
    let res = live.search(queries, k, &p, None).unwrap();
    assert!(res.ids.iter().all(|id| !removed.contains(id)));
    let kept: Vec<usize> = (0..12_000).filter(|i| i % 10 != 0).collect();
    let kept_base: Vec<f32> = kept
        .iter()
        .flat_map(|&i| base[i * DIM..(i + 1) * DIM].iter().copied())
        .collect();
    let kept_ids: Vec<u64> = kept.iter().map(|&i| uid(i)).collect();
    let kept_truth = brute_force(&kept_base, queries, DIM, k);
    let after = live_recall(&res.ids, &kept_truth, &kept_ids, k);
    assert!(
        after >= grown - 0.01,
        "after removing 10%: {after} against {grown}"
    );
    // A rebuild reclaims the removed vectors and keeps the ids and results.
    live.rebuild().unwrap();
    assert_eq!(live.index().len(), kept.len());
    let again = live.search(queries, k, &p, None).unwrap();
    assert!(live_recall(&again.ids, &kept_truth, &kept_ids, k) >= after - 0.01);
}

#[test]
fn adds_and_filters_speak_user_ids_and_refuse_what_they_cannot_take() {
    let base = clustered(3_000, DIM, 10, 3);
    let params = test_params();
    let built = build(&base[..2_000 * DIM], DIM, Metric::Cosine, &params).unwrap();
    let mut live = LiveIndex::new(octex_search::Index::new(built.index), params);
    // Next free ids follow the built ones.
    let new = live.add(&base[2_000 * DIM..2_010 * DIM], None).unwrap();
    assert_eq!(new, (2_000..2_010).collect::<Vec<u64>>());
    // A vector finds itself at once, pending or built.
    let p = SearchParams::default();
    for (pos, id) in [(2_005usize, 2_005u64), (17, 17)] {
        let res = live
            .search(&base[pos * DIM..(pos + 1) * DIM], 1, &p, None)
            .unwrap();
        assert_eq!(res.ids[0], id);
        assert!(res.distances[0].abs() < 1e-4, "{}", res.distances[0]);
    }
    // Filters by user id, over built and pending vectors.
    let allowed = [5u64, 2_003, 999_999];
    let res = live
        .search(&base[..DIM * 4], 3, &p, Some(&allowed))
        .unwrap();
    for row in res.ids.chunks_exact(3) {
        let mut row = row.to_vec();
        row.sort_unstable();
        assert_eq!(row, vec![5, 2_003, u64::MAX]);
    }
    // Refused whole, nothing added.
    let len = live.len();
    assert!(matches!(
        live.add(&base[..2 * DIM], Some(&[7_000, 7_000])),
        Err(LiveError::DuplicateId(7_000))
    ));
    assert!(matches!(
        live.add(&base[..DIM], Some(&[5])),
        Err(LiveError::DuplicateId(5))
    ));
    assert!(matches!(
        live.add(&[0.0; DIM], None),
        Err(LiveError::Vector { row: 0, .. })
    ));
    assert!(matches!(
        live.add(&base[..DIM + 1], None),
        Err(LiveError::Dimension { .. })
    ));
    let mut nan = base[..DIM].to_vec();
    nan[3] = f32::NAN;
    assert!(matches!(
        live.add(&nan, None),
        Err(LiveError::NotFinite { row: 0, col: 3, .. })
    ));
    assert_eq!(live.len(), len);
    // Removing a pending vector moves another into its place, still found.
    assert_eq!(live.remove(&[2_000]), 1);
    let res = live
        .search(&base[2_009 * DIM..2_010 * DIM], 1, &p, None)
        .unwrap();
    assert_eq!(res.ids[0], 2_009);
}

#[test]
fn inserted_vectors_are_found_in_every_metric() {
    let all = clustered(4_500, DIM, 30, 5);
    let (base, added) = all.split_at(3_000 * DIM);
    let p = SearchParams::default();
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        let params = test_params();
        let built = build(base, DIM, metric, &params).unwrap();
        let mut live = LiveIndex::new(octex_search::Index::new(built.index), params);
        // Inner product: three vectors longer than any built one cannot be
        // inserted (their stored form needs a larger norm bound).
        let mut added = added.to_vec();
        if metric == Metric::InnerProduct {
            for v in added.chunks_exact_mut(DIM).take(3) {
                v.iter_mut().for_each(|x| *x *= 100.0);
            }
        }
        let max2 = (live.index().raw().header().max_norm as f64).powi(2);
        let longer = added
            .chunks_exact(DIM)
            .filter(|v| Metric::squared_norm(v) > max2)
            .count();
        let expect_pending = if metric == Metric::InnerProduct {
            longer
        } else {
            0
        };
        assert!(metric != Metric::InnerProduct || longer >= 3);
        let ids = live.add(&added, None).unwrap();
        live.flush().unwrap();
        assert_eq!(live.pending(), expect_pending, "{metric:?}");
        assert_eq!(live.index().len(), 4_500 - expect_pending, "{metric:?}");
        assert_eq!(ids, (3_000..4_500).collect::<Vec<u64>>());
        // The first 300 added vectors as queries, against every vector.
        let k = 10;
        let queries = &added[..300 * DIM];
        let mut every = base.to_vec();
        every.extend_from_slice(&added);
        let truth = match metric {
            Metric::L2 => brute_force(&every, queries, DIM, k),
            Metric::InnerProduct => brute_force_ip(&every, queries, DIM, k),
            Metric::Cosine => {
                let unit = |v: &[f32]| -> Vec<f32> {
                    v.chunks_exact(DIM)
                        .flat_map(|r| {
                            let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
                            r.iter().map(move |x| x / n)
                        })
                        .collect()
                };
                brute_force(&unit(&every), &unit(queries), DIM, k)
            }
        };
        let found: Vec<u32> = live
            .search(queries, k, &p, None)
            .unwrap()
            .ids
            .iter()
            .map(|&id| id as u32)
            .collect();
        let r = recall(&found, &truth, k);
        assert!(r >= 0.95, "{metric:?}: recall@10 {r} after insertion");
    }
}

#[test]
fn an_insertion_larger_than_one_batch_goes_in_parts() {
    let dim = 16;
    let n = 3_000 + octex_build::insert::INSERT_BATCH + 500;
    let all = clustered(n + 200, dim, 50, 9);
    let (base, queries) = all.split_at(n * dim);
    let params = test_params();
    let built = build(&base[..3_000 * dim], dim, Metric::L2, &params).unwrap();
    let mut live = LiveIndex::new(octex_search::Index::new(built.index), params);
    live.add(&base[3_000 * dim..], None).unwrap();
    live.flush().unwrap();
    assert_eq!((live.index().len(), live.pending()), (n, 0));
    let k = 10;
    let truth = brute_force(base, queries, dim, k);
    let found: Vec<u32> = live
        .search(queries, k, &SearchParams::default(), None)
        .unwrap()
        .ids
        .iter()
        .map(|&id| id as u32)
        .collect();
    let r = recall(&found, &truth, k);
    assert!(
        r >= 0.95,
        "recall@10 {r} after inserting 3.8x the built vectors"
    );
}
