//! Inner-product queries whose answers lie far from them (the data's
//! extremes along a wide feature, as item vectors of large norm answer user
//! vectors in recommendation): the query is scaled onto the stored vectors'
//! sphere (`Metric::query_scale`), which keeps its ranking and starts it
//! among its answers, and the distances reported are `-<q, x>`.

use octex_build::build;
use octex_index::Metric;
use octex_search::Index;
use octex_tests::{brute_force_ip, recall, test_params, Rng};

const DIM: usize = 32;

#[test]
fn queries_far_from_their_answers_reach_high_recall_at_the_defaults() {
    let (n, nq) = (10_000, 300);
    let mut rng = Rng(5);
    let mut uniform = || (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32;
    // Uniform in [0, 1]^D, feature 0 widened 100x along the base's order;
    // queries from the first tenth of that range.
    let mut base: Vec<f32> = (0..n * DIM).map(|_| uniform()).collect();
    for i in 0..n {
        base[i * DIM] += 100.0 * i as f32 / n as f32;
    }
    let mut queries: Vec<f32> = (0..nq * DIM).map(|_| uniform()).collect();
    for q in queries.chunks_exact_mut(DIM) {
        q[0] *= 10.0;
    }
    let built = build(&base, DIM, Metric::InnerProduct, &test_params()).unwrap();
    let index = Index::new(built.index);
    let truth = brute_force_ip(&base, &queries, DIM, 10);
    let found = index.search(&queries, 10, &index.default_params()).unwrap();
    let r = recall(&found.ids, &truth, 10);
    eprintln!(
        "recall@10 {r:.4}, {} of {nq} seeded",
        found.stats.seeded_queries
    );
    assert!(r >= 0.95, "recall@10 {r:.4}");
    // Distances are the negated inner products of the ids returned.
    for (qi, q) in queries.chunks_exact(DIM).enumerate() {
        for j in 0..10 {
            let id = found.ids[qi * 10 + j] as usize;
            let dot: f32 = q
                .iter()
                .zip(&base[id * DIM..(id + 1) * DIM])
                .map(|(a, b)| a * b)
                .sum();
            let d = found.distances[qi * 10 + j];
            assert!(
                (d + dot).abs() <= 1e-3 * dot.abs().max(1.0),
                "query {qi}: {d} vs {}",
                -dot
            );
        }
    }
}

/// Clusters of uneven sizes and spreads under inner product: the answers'
/// norms sit well below the largest, so queries scaled to it start their
/// first round off the answers' part of the sphere. The build moves them to
/// the answers' median norm (`query_shell`) where that finds more of a
/// sample's answers at the first search point and no fewer at the deeper
/// one; queries of the same kind held out then find more at the first point
/// and as many at the deeper one. The choice is stored in the header and
/// survives a save and load; on clustered data whose deeper point it would
/// cost, it is not kept.
#[test]
fn a_build_moves_inner_product_queries_to_their_answers_shell() {
    let all = octex_tests::uneven_clusters(8_300, DIM, 20, 21);
    let (base, queries) = all.split_at(8_000 * DIM);
    let built = build(base, DIM, Metric::InnerProduct, &test_params()).unwrap();
    let choice = built
        .report
        .query_shell
        .expect("inner product tries a shell");
    eprintln!("{choice:?}");
    assert!(choice.shell > 0.0 && choice.shell < 1.0);
    assert!(choice.kept, "{choice:?}");
    assert!(choice.recall_with[0] >= choice.recall_without[0] + 0.005);
    assert!(choice.recall_with[1] >= choice.recall_without[1]);
    assert_eq!(built.index.header().query_shell, Some(choice.shell));
    let bytes = built.index.as_bytes().to_vec();
    let loaded =
        octex_index::Index::from_bytes(&bytes, octex_index::LoadOptions::default()).unwrap();
    assert_eq!(loaded.header().query_shell, Some(choice.shell));
    let with = Index::new(loaded);
    let without = Index::new(built.index.with_query_shell(None).unwrap());
    let truth = brute_force_ip(base, queries, DIM, 10);
    let mut gains = Vec::new();
    for (s, w) in octex_build::query_shell::SHELL_POINTS {
        let p = octex_search::SearchParams {
            start_points: s,
            waves: w,
            rerank: 4 * s,
            ..Default::default()
        };
        let r_with = recall(&with.search(queries, 10, &p).unwrap().ids, &truth, 10);
        let r_without = recall(&without.search(queries, 10, &p).unwrap().ids, &truth, 10);
        eprintln!("S{s} W{w}: recall@10 {r_with:.4} with the shell, {r_without:.4} without");
        gains.push(r_with - r_without);
    }
    assert!(gains[0] > 0.02, "first point {gains:?}");
    assert!(gains[1] >= -0.005, "deeper point {gains:?}");

    let clustered = octex_tests::clustered(8_000, DIM, 20, 21);
    let built = build(&clustered, DIM, Metric::InnerProduct, &test_params()).unwrap();
    let choice = built
        .report
        .query_shell
        .expect("inner product tries a shell");
    eprintln!("clustered: {choice:?}");
    assert_eq!(choice.kept, built.index.header().query_shell.is_some());
    if !choice.kept {
        assert!(
            choice.recall_with[0] < choice.recall_without[0] + 0.005
                || choice.recall_with[1] < choice.recall_without[1]
        );
    }
}

/// A shell outside `(0, 1]`, or on another metric, is refused.
#[test]
fn a_query_shell_out_of_range_or_off_inner_product_is_refused() {
    let base = octex_tests::clustered(2_000, DIM, 8, 3);
    let ip = build(&base, DIM, Metric::InnerProduct, &test_params()).unwrap();
    let ip = ip.index.with_query_shell(None).unwrap();
    let ip = ip.with_query_shell(Some(0.7)).unwrap();
    assert_eq!(ip.header().query_shell, Some(0.7));
    let bytes = ip.as_bytes().to_vec();
    for bad in [0.0f32, -0.5, 1.5, f32::NAN] {
        let raw =
            octex_index::Index::from_bytes(&bytes, octex_index::LoadOptions::default()).unwrap();
        let err = match raw.with_query_shell(Some(bad)) {
            Err(e) => e,
            Ok(_) => panic!("shell {bad} accepted"),
        };
        assert!(err.to_string().contains("query shell"), "{err}");
    }
    let l2 = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    assert!(l2.report.query_shell.is_none());
    assert!(l2.index.with_query_shell(Some(0.5)).is_err());
}
