//! The residual sketch (codes relative to centres, `octex_build::sketch_centres`):
//! chosen where one grid cannot rank tight clusters, kept through a save and
//! load, refused when damaged, a better ranking than one grid there, and a
//! fallback seed in each of its centres.

use octex_index::Metric;
use octex_search::{Index, SearchParams};
use octex_tests::{brute_force, clustered, recall, test_params, uneven_clusters};

fn build(base: &[f32], dim: usize, centres: Option<usize>) -> octex_build::Built {
    let params = octex_build::BuildParams {
        sketch_centres: centres,
        ..test_params()
    };
    octex_build::build(base, dim, Metric::L2, &params).unwrap()
}

#[test]
fn tight_clusters_get_centres_and_rank_better() {
    let dim = 32;
    let data = uneven_clusters(12_500, dim, 60, 5);
    let (base, queries) = data.split_at(12_000 * dim);
    let truth = brute_force(base, queries, dim, 10);
    let auto = build(base, dim, None);
    let plain = build(base, dim, Some(0));
    let (plain_rank, resid_rank) = auto.report.sketch_ranking.unwrap();
    assert!(
        auto.report.sketch_centres > 0 && resid_rank > plain_rank + 0.05,
        "centres {} ranking {plain_rank} -> {resid_rank}",
        auto.report.sketch_centres
    );
    assert_eq!(plain.report.sketch_centres, 0);
    assert!(plain.index.sketch_centre_ids().is_empty());
    // A short rerank: the sketch's ranking decides the result.
    let p = SearchParams {
        rerank: 16,
        ..SearchParams::default()
    };
    let (auto, plain) = (Index::new(auto.index), Index::new(plain.index));
    let ra = recall(&auto.search(queries, 10, &p).unwrap().ids, &truth, 10);
    let rp = recall(&plain.search(queries, 10, &p).unwrap().ids, &truth, 10);
    eprintln!("rerank 16: recall one grid {rp:.4}, centres {ra:.4}");
    assert!(ra > rp + 0.05 && ra > 0.9, "one grid {rp}, centres {ra}");
}

#[test]
fn broad_data_keeps_one_grid() {
    let dim = 32;
    let base = clustered(8_000, dim, 20, 9);
    let built = build(&base, dim, None);
    let (plain_rank, resid_rank) = built.report.sketch_ranking.unwrap();
    assert_eq!(
        built.report.sketch_centres, 0,
        "ranking {plain_rank} -> {resid_rank}"
    );
}

#[test]
fn centres_survive_a_save_and_damage_is_refused() {
    let dim = 16;
    let base = uneven_clusters(4_000, dim, 30, 7);
    let built = build(&base, dim, Some(1));
    let index = built.index;
    let k = index.sketch_centre_scales().len();
    assert!(k > 0 && index.sketch_centres().len() == k * 16);
    let dir = std::env::temp_dir().join(format!("octex-resid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("i.octex");
    index.save(&path).unwrap();
    let loaded = octex_index::Index::load(&path).unwrap();
    assert_eq!(loaded.sketch_centre_ids(), index.sketch_centre_ids());
    assert_eq!(loaded.sketch_centres(), index.sketch_centres());
    let q = &base[..50 * dim];
    let p = SearchParams::default();
    let a = Index::new(index).search(q, 10, &p).unwrap();
    let b = Index::new(loaded).search(q, 10, &p).unwrap();
    assert_eq!(a.ids, b.ids);
    // A centre id out of range, a zero centre scale: refused at load.
    let mut parts = octex_index::Index::load(&path).unwrap().to_parts();
    parts.sketch_centre_ids[3] = k as u16;
    let err = octex_index::Index::from_parts(parts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("centre id"), "{err}");
    let mut parts = octex_index::Index::load(&path).unwrap().to_parts();
    parts.sketch_centre_scales[0] = 0.0;
    let err = octex_index::Index::from_parts(parts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("centre's scale"), "{err}");
    let mut parts = octex_index::Index::load(&path).unwrap().to_parts();
    parts.sketch_centre_ids.pop();
    assert!(octex_index::Index::from_parts(parts).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

/// Queries of small, wide clusters among tight ones: the lattice (spaced for
/// the tight clusters) gives some no stored fragment and the neighbour graph
/// does not join their clusters to the rest; the fallback seeds hold a member
/// of every sketch centre, so their waves start inside their cluster.
#[test]
fn queries_of_small_clusters_find_their_neighbours() {
    let (dim, n, nq) = (64, 30_000, 2_000);
    let data = uneven_clusters(n + nq, dim, 300, 9);
    let (base, queries) = data.split_at(n * dim);
    let truth = brute_force(base, queries, dim, 10);
    let built = build(base, dim, None);
    assert!(built.report.sketch_centres > 0);
    let index = Index::new(built.index);
    let got = index.search(queries, 10, &SearchParams::default()).unwrap();
    let r = recall(&got.ids, &truth, 10);
    eprintln!("recall@10 at the defaults: {r:.4}");
    assert!(r >= 0.995, "recall {r}");
}
