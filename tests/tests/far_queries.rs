//! Queries from outside the data (another mixture's clusters, as questions
//! against passages or one model's queries against another's data) find
//! their neighbours as queries from inside it do: a query whose nearest
//! first-round candidate lies far beyond the data's typical neighbour
//! distance starts from the seeds (`octex_core::layout::visits_seeds`).

use octex_build::build;
use octex_index::Metric;
use octex_search::Index;
use octex_tests::{brute_force, clustered, recall, test_params};

const DIM: usize = 64;

#[test]
fn queries_from_another_mixture_reach_high_recall_at_the_defaults() {
    // 64 tight clusters: the rows join each cluster within itself only.
    let base = clustered(10_000, DIM, 64, 1);
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    let index = Index::new(built.index);
    let inside = &base[..300 * DIM];
    let outside = clustered(300, DIM, 64, 2);
    let p = index.default_params();
    for (what, queries) in [("inside", inside), ("outside", &outside[..])] {
        let truth = brute_force(&base, queries, DIM, 10);
        let found = index.search(queries, 10, &p).unwrap();
        let r = recall(&found.ids, &truth, 10);
        eprintln!(
            "{what}: recall@10 {r:.4}, {} of 300 seeded",
            found.stats.seeded_queries
        );
        assert!(r >= 0.95, "queries {what} the data: recall@10 {r:.4}");
    }
}
