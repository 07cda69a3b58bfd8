//! Build, save, load and search across crates.

use octex_build::{build, BuildParams, RowMethod};
use octex_index::{Index, Metric, PAD_ID};
use octex_search::{SearchError, SearchParams};
use octex_tests::*;

const DIM: usize = 32;

fn data() -> (Vec<f32>, Vec<f32>) {
    let all = clustered(12_000, DIM, 40, 7);
    let (base, queries) = all.split_at(11_000 * DIM);
    (base.to_vec(), queries.to_vec())
}

#[test]
fn recall_on_clustered_data_is_high_and_grows_with_waves() {
    let (base, queries) = data();
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    let index = octex_search::Index::new(built.index);
    let truth = brute_force(&base, &queries, DIM, 10);
    let mut last = 0.0;
    for waves in [0, 1, 2] {
        let p = SearchParams {
            waves,
            ..SearchParams::default()
        };
        let res = index.search(&queries, 10, &p).unwrap();
        let r = recall(&res.ids, &truth, 10);
        assert!(
            r >= last - 1e-9,
            "recall fell from {last} to {r} at W={waves}"
        );
        last = r;
    }
    assert!(last >= 0.9, "recall@10 {last} below 0.9 at W=2");
    // Distances are ascending, finite, and equal to the true squared L2 up to f16.
    let res = index
        .search(&queries[..DIM * 50], 10, &SearchParams::default())
        .unwrap();
    for q in 0..50 {
        let d = res.distances(q);
        assert!(d.windows(2).all(|w| w[0] <= w[1]));
        let id = res.ids(q)[0] as usize;
        let exact: f32 = (0..DIM)
            .map(|j| (queries[q * DIM + j] - base[id * DIM + j]).powi(2))
            .sum();
        assert!(
            (exact - d[0]).abs() <= 1e-2 * exact.max(1.0),
            "{exact} vs {}",
            d[0]
        );
    }
}

#[test]
fn simd_and_portable_kernels_give_the_same_results() {
    let (base, queries) = data();
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    let bytes = built.index.as_bytes().to_vec();
    let fast = octex_search::Index::new(built.index);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.octex");
    std::fs::write(&path, &bytes).unwrap();
    let mut portable = octex_search::Index::load(&path).unwrap();
    portable.force_portable_kernel().unwrap();
    let p = SearchParams::default();
    let a = fast.search(&queries, 10, &p).unwrap();
    let b = portable.search(&queries, 10, &p).unwrap();
    let same = a.ids.iter().zip(&b.ids).filter(|(x, y)| x == y).count();
    assert!(
        same as f64 >= 0.99 * a.ids.len() as f64,
        "{same} of {} ids agree",
        a.ids.len()
    );
}

#[test]
fn build_is_deterministic_and_save_load_round_trips() {
    let base = clustered(3_000, DIM, 10, 3);
    let a = build(&base, DIM, Metric::L2, &test_params()).unwrap().index;
    let b = build(&base, DIM, Metric::L2, &test_params()).unwrap().index;
    assert_eq!(a.as_bytes(), b.as_bytes(), "same seed, same bytes");
    let c = build(
        &base,
        DIM,
        Metric::L2,
        &BuildParams {
            seed: 99,
            ..test_params()
        },
    )
    .unwrap()
    .index;
    assert_ne!(a.as_bytes(), c.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.octex");
    a.save(&path).unwrap();
    let loaded = Index::load(&path).unwrap();
    assert_eq!(loaded.as_bytes(), a.as_bytes());
    assert_eq!(loaded.header(), a.header());
    // Saving over an existing file replaces it atomically (no temp file left).
    c.save(&path).unwrap();
    assert_eq!(Index::load(&path).unwrap().as_bytes(), c.as_bytes());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "a.octex")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn corrupted_files_are_errors_not_panics() {
    let base = clustered(2_000, DIM, 10, 4);
    let index = build(&base, DIM, Metric::L2, &test_params()).unwrap().index;
    let good = index.as_bytes().to_vec();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.octex");
    let load = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        Index::load(&path).map(|_| ()).unwrap_err().to_string()
    };
    // Truncated at several points.
    for cut in [0, 5, 20, 100, good.len() / 2, good.len() - 1] {
        let e = load(&good[..cut]);
        assert!(
            e.contains("truncated") || e.contains("not an octex index"),
            "cut {cut}: {e}"
        );
        assert!(e.contains("x.octex"), "{e}");
    }
    // A flipped bit in every section and in the header.
    for at in [30, good.len() / 3, good.len() / 2, good.len() - 10] {
        let mut b = good.clone();
        b[at] ^= 0x10;
        let e = load(&b);
        assert!(
            e.contains("checksum") || e.contains("invalid"),
            "flip at {at}: {e}"
        );
    }
    // A foreign file.
    let e = load(b"PK\x03\x04 this is a zip file, not an index at all");
    assert!(e.contains("not an octex index"), "{e}");
    // Another format version.
    let mut b = good.clone();
    b[8..12].copy_from_slice(&7u32.to_le_bytes());
    let e = load(&b);
    assert!(e.contains("version 7") && e.contains("rebuild"), "{e}");
    // A missing file.
    let e = Index::load(dir.path().join("none.octex"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.octex"), "{e}");
    // The good bytes still load.
    std::fs::write(&path, &good).unwrap();
    Index::load(&path).unwrap();
}

#[test]
fn exact_rows_hold_the_true_neighbours_and_reverse_entries() {
    let base = clustered(2_500, DIM, 10, 5);
    // The paper's rows: nearest first (the detour order, the default, is
    // tested in `octex_build::rows`).
    let p = BuildParams {
        row_method: RowMethod::Exact,
        row_order: octex_build::RowOrder::Distance,
        ..test_params()
    };
    let index = build(&base, DIM, Metric::L2, &p).unwrap().index;
    let h = index.header();
    let lt = h.row_len as usize;
    let k_f = lt / 2;
    // A reverse entry lists the owner among its first k_s forward neighbours.
    let k_s = octex_build::params::default_reverse_entries(lt);
    let n = index.len();
    let (truth, _) = octex_search::knn::exact_knn(
        &base,
        &base,
        DIM,
        lt,
        octex_search::knn::KnnMetric::L2,
        true,
        &|_| {},
    );
    let rows = index.rows();
    let mut head_hits = 0;
    for u in 0..n {
        let row = &rows[u * lt..(u + 1) * lt];
        assert!(!row.contains(&(u as u32)), "row {u} holds itself");
        let mut seen = std::collections::HashSet::new();
        assert!(
            row.iter()
                .filter(|&&v| v != PAD_ID)
                .all(|v| seen.insert(*v)),
            "row {u} has duplicates"
        );
        // The head is the k_f exact nearest (up to f16 / ties: count agreement).
        head_hits += row[..k_f]
            .iter()
            .filter(|id| truth[u * lt..u * lt + k_f].contains(id))
            .count();
        // Every entry is a forward neighbour or a reverse entry.
        for &v in row.iter().filter(|&&v| v != PAD_ID) {
            let forward = truth[u * lt..(u + 1) * lt].contains(&v);
            let reverse = truth[v as usize * lt..v as usize * lt + k_s].contains(&(u as u32));
            assert!(
                forward || reverse,
                "row {u} holds {v}, neither forward nor reverse"
            );
        }
    }
    assert!(
        head_hits as f64 >= 0.999 * (n * k_f) as f64,
        "{head_hits} of {}",
        n * k_f
    );
}

#[test]
fn cosine_and_inner_product_metrics() {
    let (base, queries) = data();
    let q = &queries[..DIM * 200];
    // Inner product: octex's reduction to L2 against exact maximum inner product.
    let built = build(&base, DIM, Metric::InnerProduct, &test_params()).unwrap();
    let index = octex_search::Index::new(built.index);
    let truth = brute_force_ip(&base, q, DIM, 10);
    let p = SearchParams {
        start_points: 32,
        rerank: 64,
        ..SearchParams::default()
    };
    let res = index.search(q, 10, &p).unwrap();
    let r = recall(&res.ids, &truth, 10);
    assert!(r >= 0.9, "inner-product recall {r}");
    let id = res.ids(0)[0] as usize;
    let ip: f32 = (0..DIM).map(|j| q[j] * base[id * DIM + j]).sum();
    assert!(
        (res.distances(0)[0] + ip).abs() <= 1e-2 * ip.abs().max(1.0),
        "reported {} for ip {ip}",
        res.distances(0)[0]
    );
    // Cosine: the same as L2 on normalised vectors; distance is 1 - cos.
    let built = build(&base, DIM, Metric::Cosine, &test_params()).unwrap();
    let index = octex_search::Index::new(built.index);
    let res = index.search(q, 10, &SearchParams::default()).unwrap();
    let norm = |v: &[f32]| -> Vec<f32> {
        v.chunks(DIM)
            .flat_map(|r| {
                let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
                r.iter().map(move |x| x / n)
            })
            .collect()
    };
    let truth = brute_force(&norm(&base), &norm(q), DIM, 10);
    assert!(recall(&res.ids, &truth, 10) >= 0.85);
    let d = res.distances(0)[0];
    assert!((0.0..=2.0).contains(&d), "cosine distance {d}");
}

#[test]
fn bad_input_gives_typed_errors() {
    let base = clustered(1_500, DIM, 5, 6);
    let index =
        octex_search::Index::new(build(&base, DIM, Metric::L2, &test_params()).unwrap().index);
    let p = SearchParams::default();
    let q = &base[..DIM];
    assert!(matches!(
        index.search(&[], 10, &p),
        Err(SearchError::EmptyBatch)
    ));
    assert!(matches!(
        index.search(&q[..DIM - 1], 10, &p),
        Err(SearchError::Ragged { .. })
    ));
    assert!(matches!(
        index.search_one(&q[..DIM - 1], 10, &p),
        Err(SearchError::Dimension {
            expected: DIM,
            got: 31
        })
    ));
    // A batch of 16-value rows whose length a 32-value index divides: the
    // flat call cannot tell, the shaped one refuses it.
    let wrong_rows = &base[..4 * DIM];
    let shaped = octex_search::Queries::new(wrong_rows, DIM / 2).unwrap();
    assert!(matches!(
        index.search_queries(shaped, 10, &p),
        Err(SearchError::Dimension {
            expected: DIM,
            got: 16
        })
    ));
    assert!(matches!(
        octex_search::Queries::new(&q[..DIM - 1], DIM),
        Err(SearchError::Ragged { .. })
    ));
    assert!(matches!(
        octex_search::Queries::new(q, 0),
        Err(SearchError::Ragged { .. })
    ));
    let right = octex_search::Queries::new(wrong_rows, DIM).unwrap();
    assert_eq!(right.len(), 4);
    assert_eq!(
        index.search_queries(right, 10, &p).unwrap(),
        index.search(wrong_rows, 10, &p).unwrap()
    );
    let mut nan = q.to_vec();
    nan[3] = f32::NAN;
    assert!(matches!(
        index.search(&nan, 10, &p),
        Err(SearchError::NotFinite {
            query: 0,
            col: 3,
            ..
        })
    ));
    nan[3] = f32::INFINITY;
    assert!(matches!(
        index.search_one(&nan, 10, &p),
        Err(SearchError::NotFinite { .. })
    ));
    // k above the rerank depth reranks k, the same as asking for R = k.
    let p = SearchParams { rerank: 32, ..p };
    let wide = index.search(q, 33, &p).unwrap();
    assert_eq!(wide.k, 33);
    let asked = SearchParams { rerank: 33, ..p };
    assert_eq!(wide.ids, index.search(q, 33, &asked).unwrap().ids);
    assert_eq!(index.search_one(q, 33, &p).unwrap().0, wide.ids);
    let deep = SearchParams { rerank: 5_000, ..p };
    assert!(matches!(
        index.search(q, 1_501, &deep),
        Err(SearchError::KAboveCount { .. })
    ));
    assert!(matches!(
        index.search(q, 0, &p),
        Err(SearchError::NotPositive { what: "k" })
    ));
    // search_one agrees with the batch path.
    let (ids, _) = index.search_one(q, 10, &p).unwrap();
    assert_eq!(ids, index.search(q, 10, &p).unwrap().ids);
    // A batch of one, a batch not a multiple of the internal chunk.
    assert_eq!(index.search(&base[..DIM * 33], 10, &p).unwrap().len(), 33);

    // Cosine rejects a zero query; builds reject bad data.
    let cos = octex_search::Index::new(
        build(&base, DIM, Metric::Cosine, &test_params())
            .unwrap()
            .index,
    );
    assert!(matches!(
        cos.search(&[0.0; DIM], 10, &p),
        Err(SearchError::ZeroQuery { query: 0 })
    ));
    use octex_build::BuildError;
    assert!(matches!(
        build(&[], DIM, Metric::L2, &test_params()),
        Err(BuildError::Empty)
    ));
    assert!(matches!(
        build(&base[..DIM + 3], DIM, Metric::L2, &test_params()),
        Err(BuildError::Ragged { .. })
    ));
    let mut bad = base.clone();
    bad[DIM * 7 + 2] = f32::NAN;
    assert!(matches!(
        build(&bad, DIM, Metric::L2, &test_params()),
        Err(BuildError::NotFinite { row: 7, col: 2, .. })
    ));
    let mut zero = base.clone();
    zero[DIM * 4..DIM * 5].fill(0.0);
    assert!(matches!(
        build(&zero, DIM, Metric::Cosine, &test_params()),
        Err(BuildError::ZeroVector { row: 4 })
    ));
}

#[test]
fn a_query_far_from_all_data_still_gets_k_results() {
    let (base, _) = data();
    let index =
        octex_search::Index::new(build(&base, DIM, Metric::L2, &test_params()).unwrap().index);
    let far: Vec<f32> = (0..DIM)
        .map(|j| 500.0 * if j % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let res = index.search(&far, 10, &SearchParams::default()).unwrap();
    assert_eq!(
        res.stats.seeded_queries, 1,
        "the first round found nothing and took the entry points"
    );
    assert!(res.ids(0).iter().all(|&id| id != PAD_ID));
    // The waves walk from the entry points towards it: more effort, better answer.
    let truth = brute_force(&base, &far, DIM, 10);
    let deep = index
        .search(
            &far,
            10,
            &SearchParams {
                start_points: 64,
                waves: 6,
                rerank: 64,
                ..SearchParams::default()
            },
        )
        .unwrap();
    let r = recall(&deep.ids, &truth, 10);
    assert!(r >= 0.8, "outlier recall {r}");
}

#[test]
fn tiny_index_with_fewer_vectors_than_a_row() {
    let base = clustered(20, 16, 2, 8);
    let index =
        octex_search::Index::new(build(&base, 16, Metric::L2, &test_params()).unwrap().index);
    let res = index
        .search(&base[..16 * 3], 10, &SearchParams::default())
        .unwrap();
    let truth = brute_force(&base, &base[..16 * 3], 16, 10);
    assert!(recall(&res.ids, &truth, 10) >= 0.9);
    let res = index
        .search(
            &base[..16],
            20,
            &SearchParams {
                rerank: 20,
                ..SearchParams::default()
            },
        )
        .unwrap();
    assert!(res.ids(0).iter().all(|&id| id != PAD_ID));
}

/// The paper's ripples (the `l` vectors nearest to each fragment's centre)
/// hold more of a query's true neighbours in the first round than the
/// fragment's own members topped up from the parent, at the same list length,
/// whether the CPU finds them through the rows (the default) or through the
/// inverted file (probes given).
#[test]
fn nearest_ripples_beat_member_ripples_in_the_first_round() {
    let (base, queries) = data();
    let truth = brute_force(&base, &queries, DIM, 10);
    let first_round = SearchParams {
        waves: 0,
        start_points: 16,
        rerank: 512,
        ..SearchParams::default()
    };
    let mut recalls = Vec::new();
    for (rule, probes) in [
        (octex_build::RippleRule::Members, None),
        (octex_build::RippleRule::Nearest, None),
        (octex_build::RippleRule::Nearest, Some(12)),
    ] {
        let params = BuildParams {
            ripple_rule: rule,
            ripple_probes: probes,
            ..test_params()
        };
        let built = build(&base, DIM, Metric::L2, &params).unwrap();
        let rr = built.report.ripple_recall;
        assert!((0.0..=1.0).contains(&rr), "ripple recall {rr}");
        assert_eq!(
            built.report.ripples_through_rows,
            rule == octex_build::RippleRule::Nearest && probes.is_none()
        );
        if probes.is_some() {
            assert!(
                rr > 0.8,
                "searched ripples: recall {rr} of the exact nearest"
            );
        }
        let index = octex_search::Index::new(built.index);
        let res = index.search(&queries, 10, &first_round).unwrap();
        recalls.push(recall(&res.ids, &truth, 10));
    }
    eprintln!(
        "first-round recall@10: members {:.4}, nearest through the rows {:.4}, through the inverted file {:.4}",
        recalls[0], recalls[1], recalls[2]
    );
    for (how, r) in [("rows", recalls[1]), ("inverted file", recalls[2])] {
        assert!(
            r > recalls[0],
            "first round: nearest through the {how} {r} vs members {}",
            recalls[0]
        );
    }
}

/// `tune_for_recall` picks parameters on a sample of the index's own
/// vectors; on held-back queries (another draw of the same mixture) they
/// reach the target within the sample's error, a higher target never costs
/// less, and a target the index cannot reach is reported with advice.
#[test]
fn tune_for_recall_reaches_the_target_on_held_back_queries() {
    // Few wide clusters in 64 dimensions: hard enough that the search climbs.
    let dim = 64;
    let all = clustered(9_000, dim, 4, 17);
    let (base, queries) = all.split_at(8_000 * dim);
    let index =
        octex_search::Index::new(build(base, dim, Metric::L2, &test_params()).unwrap().index);
    let truth = brute_force(base, queries, dim, 10);
    let mut last_cost = 0.0;
    for target in [0.9, 0.95, 0.99] {
        let t = index.tune_for_recall(target, 10).unwrap();
        let got = recall(
            &index.search(queries, 10, &t.params).unwrap().ids,
            &truth,
            10,
        );
        eprintln!("target {target}: {t:?}, held-back queries {got:.4}");
        assert!(t.reached, "{target} not reached: {:?}", t.advice(&index));
        assert!(t.sample_recall >= target && t.held_out_recall >= target);
        assert!(
            got >= target - 0.02,
            "held-back recall {got} for target {target}"
        );
        assert!(
            t.cost >= last_cost,
            "a higher target got cheaper parameters"
        );
        last_cost = t.cost;
        // The older call returns the same choice.
        let (p, sample) = index.params_for_recall(target, 10).unwrap();
        assert_eq!((p, sample), (t.params, t.sample_recall));
    }
    // A perfect recall with a sketch of 16 bytes and rerank at most 1024 of
    // 8,000 is out of reach on this data, or reached: either way said.
    let t = index.tune_for_recall(1.0, 10).unwrap();
    assert_eq!(t.reached, t.advice(&index).is_none());
    if !t.reached {
        assert!(t.advice(&index).unwrap().contains("--copies"));
    }
    assert!(index.tune_for_recall(1.5, 10).is_err());
    assert!(index.params_for_recall(0.9, index.len()).is_err());
}

/// `tune_for_recall_on` tunes on the caller's queries: drawn from another
/// mixture than the base, queries like them (not the ones tuned on) reach the
/// target; too few queries fall back to the index's own sample; `reach`
/// reports the default and deepest search's recall with advice below 0.99.
#[test]
fn tune_for_recall_on_queries_holds_for_queries_unlike_the_base() {
    let dim = 32;
    let base = clustered(6_000, dim, 8, 21);
    // Other centres: the queries sit where the base is sparse.
    let queries = clustered(1_000, dim, 8, 22);
    let index =
        octex_search::Index::new(build(&base, dim, Metric::L2, &test_params()).unwrap().index);
    let (tune_on, check_on) = queries.split_at(500 * dim);
    let truth = brute_force(&base, check_on, dim, 10);
    for target in [0.9, 0.95] {
        let t = index.tune_for_recall_on(tune_on, target, 10).unwrap();
        let got = recall(
            &index.search(check_on, 10, &t.params).unwrap().ids,
            &truth,
            10,
        );
        eprintln!("target {target}: {t:?}, other queries {got:.4}");
        assert!(t.reached, "{target} not reached: {:?}", t.advice(&index));
        assert!(got >= target - 0.02, "recall {got} for target {target}");
    }
    let few = &tune_on[..(octex_search::MIN_QUERY_SAMPLE - 1) * dim];
    assert_eq!(
        index.tune_for_recall_on(few, 0.9, 10).unwrap(),
        index.tune_for_recall(0.9, 10).unwrap()
    );
    assert!(index.tune_for_recall_on(tune_on, 0.0, 10).is_err());
    let reach = index.reach(10).unwrap();
    eprintln!("{reach:?}");
    assert!(reach.best_recall >= reach.default_recall - 0.01);
    assert_eq!(
        reach.advice(&index).is_some(),
        reach.best_recall < octex_search::REACH_TARGET
    );
}

/// A sketch wider than 96 bytes (up to D) ranks better: at a small rerank
/// depth, where the sketch decides what gets reranked, recall rises with
/// the width on 128-d data; widths past D (rounded up to 16) are refused.
#[test]
fn wider_sketches_rank_better() {
    let dim = 128;
    let all = clustered(9_000, dim, 6, 41);
    let (base, queries) = all.split_at(8_000 * dim);
    let truth = brute_force(base, queries, dim, 10);
    let p = SearchParams {
        rerank: 10,
        ..SearchParams::default()
    };
    let mut recalls = Vec::new();
    for width in [32, 128] {
        let params = BuildParams {
            sketch_width: Some(width),
            ..test_params()
        };
        let index = octex_search::Index::new(build(base, dim, Metric::L2, &params).unwrap().index);
        assert_eq!(index.raw().header().sketch_width as usize, width);
        let r = recall(&index.search(queries, 10, &p).unwrap().ids, &truth, 10);
        eprintln!("sketch width {width}: recall@10 at R = 10: {r:.4}");
        recalls.push(r);
    }
    assert!(recalls[1] > recalls[0] + 0.02, "{recalls:?}");
    let too_wide = BuildParams {
        sketch_width: Some(144),
        ..test_params()
    };
    assert!(build(base, dim, Metric::L2, &too_wide).is_err());
}

/// Per-wave rerank (the paper's mode when vectors are resident): every answer
/// carries its exact distance, answers are distinct and ascending, more exact
/// distances are computed than with one rerank, and where the sketch is coarse
/// (32 of 128 coordinates) choosing start points by exact distance finds more
/// of the true neighbours than the same R reranked once.
#[test]
fn wave_rerank_ranks_start_points_exactly() {
    let dim = 128;
    let all = clustered(9_000, dim, 6, 41);
    let (base, queries) = all.split_at(8_000 * dim);
    let truth = brute_force(base, queries, dim, 10);
    let params = BuildParams {
        sketch_width: Some(32),
        ..test_params()
    };
    let index = octex_search::Index::new(build(base, dim, Metric::L2, &params).unwrap().index);
    let once = SearchParams {
        start_points: 16,
        waves: 3,
        rerank: 16,
        ..SearchParams::default()
    };
    let every = SearchParams {
        wave_rerank: true,
        ..once
    };
    let (a, b) = (
        index.search(queries, 10, &once).unwrap(),
        index.search(queries, 10, &every).unwrap(),
    );
    let (ra, rb) = (recall(&a.ids, &truth, 10), recall(&b.ids, &truth, 10));
    eprintln!(
        "recall@10 rerank once {ra:.4} ({} exact distances), every wave {rb:.4} ({})",
        a.stats.exact_distances, b.stats.exact_distances
    );
    assert!(rb > ra, "per-wave rerank {rb} vs once {ra}");
    assert!(b.stats.exact_distances > a.stats.exact_distances);
    for q in 0..queries.len() / dim {
        let (ids, d) = (b.ids(q), b.distances(q));
        assert!(d.windows(2).all(|w| w[0] <= w[1]));
        let mut distinct = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 10);
        for (&id, &dist) in ids.iter().zip(d) {
            let exact: f32 = (0..dim)
                .map(|j| (queries[q * dim + j] - base[id as usize * dim + j]).powi(2))
                .sum();
            assert!(
                (exact - dist).abs() <= 1e-2 * exact.max(1.0),
                "{exact} vs {dist}"
            );
        }
    }
    // S above R: the start points are topped up in sketch order.
    let wide = SearchParams {
        start_points: 64,
        rerank: 16,
        ..every
    };
    let rw = recall(&index.search(queries, 10, &wide).unwrap().ids, &truth, 10);
    assert!(
        rw > ra,
        "S = 64 with per-wave rerank {rw} vs S = 16 once {ra}"
    );
}

/// The sketch distance the search ranks by (`octex-core::sketch`: the
/// query's int16 codes times the int8 rows, plus each row's norm) against
/// the float sketch distance `sum_j (q_j - sigma_j s_j)^2` computed here in
/// f64 from the index's sketch and scales, over every vector for 20 queries:
/// equal up to the query's `|q|^2` and the int16 rounding, so they rank alike.
#[test]
fn integer_sketch_estimate_matches_the_float_sketch_distance() {
    use octex_core::sketch::{estimate, row_norm, QueryScale};
    let (base, queries) = data();
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    let raw = &built.index;
    let w = raw.header().sketch_width as usize;
    let (sketch, scales) = (raw.sketch(), raw.sketch_scales());
    let map = raw.copy_map();
    let nq = 20;
    let mut pcs = Vec::new();
    let mut z = vec![0f32; nq * map.width()];
    map.project_batch(&queries[..nq * DIM], &mut pcs, &mut z, false);
    let m = map.basis_dim;
    let mut worst = 0f64;
    for q in 0..nq {
        let qs: Vec<f32> = (0..w)
            .map(|j| if j < m { pcs[q * m + j] } else { 0.0 })
            .collect();
        let a: Vec<f32> = qs.iter().zip(scales).map(|(x, s)| x * s).collect();
        let amax = a.iter().fold(0f32, |mx, v| mx.max(v.abs()));
        let scale = QueryScale::new(amax, w as u32);
        let codes: Vec<i32> = a.iter().map(|&v| scale.code(v, w as u32) as i32).collect();
        let q2: f64 = qs.iter().map(|&x| x as f64 * x as f64).sum();
        let (mut float_d, mut int_d) = (Vec::new(), Vec::new());
        for row in sketch.chunks_exact(w) {
            let exact: f64 = (0..w)
                .map(|j| (qs[j] as f64 - scales[j] as f64 * row[j] as f64).powi(2))
                .sum();
            let dot: i32 = (0..w).map(|j| codes[j] * row[j] as i32).sum();
            float_d.push(exact);
            int_d.push(estimate(row_norm(row, scales), scale, dot) as f64 + q2);
        }
        let spread = float_d.iter().cloned().fold(0f64, f64::max);
        for (f, i) in float_d.iter().zip(&int_d) {
            worst = worst.max((f - i).abs() / spread);
        }
        // The 10 nearest by either are the same vectors (up to ties).
        let top = |d: &[f64]| {
            let mut ids: Vec<usize> = (0..d.len()).collect();
            ids.sort_by(|&x, &y| d[x].total_cmp(&d[y]));
            ids.truncate(10);
            ids
        };
        let (tf, ti) = (top(&float_d), top(&int_d));
        let shared = tf.iter().filter(|id| ti.contains(id)).count();
        assert!(
            shared >= 9,
            "query {q}: top 10 by the two forms share {shared}"
        );
    }
    assert!(
        worst < 1e-4,
        "largest difference {worst} of the distance range"
    );
}

/// The bindings' handle searches as the index does, tunes a recall target
/// once (the second call reuses it), and refuses a GPU where there is none.
#[test]
fn shared_index_searches_as_the_index_and_tunes_each_target_once() {
    use octex_search::{Backend, ParamsFrom, Queries, SharedIndex};
    let (base, queries) = data();
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    let index = octex_search::Index::new(built.index);
    let shared = SharedIndex::new(index.clone());
    let p = SearchParams::default();
    let direct = index.search(&queries, 10, &p).unwrap();
    let batch = Queries::new(&queries, DIM).unwrap();
    let via = shared.search(batch, 10, &p, Backend::Cpu).unwrap();
    assert_eq!(via.ids, direct.ids);
    let (first, _) = shared
        .params(ParamsFrom::Recall(0.95), 10, &queries)
        .unwrap();
    let (again, advice) = shared
        .params(ParamsFrom::Recall(0.95), 10, &queries[..DIM])
        .unwrap();
    assert_eq!(first, again);
    assert!(advice.is_none());
    let res = index.search(&queries, 10, &first).unwrap();
    let r = recall(&res.ids, &brute_force(&base, &queries, DIM, 10), 10);
    assert!(r >= 0.94, "recall {r} at the point tuned for 0.95");
    if !octex_search::gpu_available() {
        let batch = Queries::new(&queries, DIM).unwrap();
        assert!(shared.search(batch, 10, &p, Backend::Gpu).is_err());
    }
}
