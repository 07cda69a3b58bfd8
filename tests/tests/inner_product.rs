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
