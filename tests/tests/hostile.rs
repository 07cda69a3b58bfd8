//! Hostile input (issue 16): files that are corrupted, crafted with correct
//! checksums, or hold values at the edges; parameters and vectors past what a
//! search or a build can take. Every case ends in a typed error or a correct
//! answer, never a panic, a hang or an out-of-bounds read.

use std::panic::{catch_unwind, AssertUnwindSafe};

use octex_build::{build, BuildError, BuildParams};
use octex_index::{Index as RawIndex, IndexError, LoadOptions, Metric, RerankVectors};
use octex_search::{Index, SearchError, SearchParams};
use octex_tests::{clustered, mutated_files, mutated_headers, test_params};

const DIM: usize = 16;

/// A small index with a residual sketch, so that mutations reach its
/// centre sections as well.
fn small(metric: Metric) -> (RawIndex, Vec<f32>) {
    let base = clustered(2_000, DIM, 8, 3);
    let params = octex_build::BuildParams {
        sketch_centres: Some(1),
        ..test_params()
    };
    let built = build(&base, DIM, metric, &params).unwrap();
    assert!(!built.index.sketch_centre_ids().is_empty());
    (built.index, clustered(20, DIM, 8, 4))
}

/// Search `index` as users would (a batch, one query, a few parameter sets
/// including k above the rerank depth): whatever it answers, it must not
/// panic. Returns the first panic's message.
fn search_must_not_panic(raw: RawIndex, queries: &[f32]) -> Option<String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let index = Index::new(raw);
        let dim = index.dim();
        let q: Vec<f32> = queries.iter().cycle().take(dim * 4).copied().collect();
        for p in [
            SearchParams::default(),
            SearchParams {
                read_depth: 64,
                start_points: 8,
                waves: 1,
                rerank: 8,
                wave_rerank: false,
            },
        ] {
            let _ = index.search(&q, 10.min(index.len()), &p);
            let _ = index.search_one(&q[..dim], 3.min(index.len()), &p);
        }
    }));
    outcome.err().map(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn invalid(r: Result<RawIndex, IndexError>) -> String {
    match r {
        Err(IndexError::Invalid { problem, .. }) => problem,
        Err(e) => panic!("expected Invalid, got {e}"),
        Ok(_) => panic!("a crafted index loaded"),
    }
}

/// A few thousand corrupted files, checksums off (the corruption reaches the
/// validator): each either fails to load with an error or searches without
/// a panic. Header fields changed behind a recomputed checksum likewise.
#[test]
fn mutated_files_load_with_an_error_or_search_without_panic() {
    let (raw, queries) = small(Metric::L2);
    let off = LoadOptions {
        verify_checksums: false,
    };
    let (mut loaded, mut refused) = (0, 0);
    let mut panics = Vec::new();
    for (what, bytes) in mutated_files(&raw, 3_000, 11) {
        match RawIndex::from_bytes(&bytes, off) {
            Err(_) => refused += 1,
            Ok(ix) => {
                loaded += 1;
                if let Some(msg) = search_must_not_panic(ix, &queries) {
                    panics.push(format!("{what}: {msg}"));
                }
            }
        }
    }
    for (what, parts) in mutated_headers(&raw, 600, 12) {
        match catch_unwind(AssertUnwindSafe(|| RawIndex::from_parts(parts))) {
            Err(_) => panics.push(format!("from_parts panicked on header {what}")),
            Ok(Err(_)) => refused += 1,
            Ok(Ok(ix)) => {
                loaded += 1;
                if let Some(msg) = search_must_not_panic(ix, &queries) {
                    panics.push(format!("header {what}: {msg}"));
                }
            }
        }
    }
    eprintln!(
        "3,600 mutations: {loaded} loaded and searched, {refused} refused, {} panics",
        panics.len()
    );
    assert!(
        panics.is_empty(),
        "{} panics, first: {:?}",
        panics.len(),
        &panics[..panics.len().min(5)]
    );
    assert!(
        loaded > 100 && refused > 100,
        "the harness reaches both outcomes"
    );
    // With checksums on, every byte mutation that changes the file is refused.
    let on = LoadOptions::default();
    for (what, bytes) in mutated_files(&raw, 300, 13) {
        if bytes != raw.as_bytes() {
            assert!(
                RawIndex::from_bytes(&bytes, on).is_err(),
                "{what} loaded with checksums on"
            );
        }
    }
}

/// Each row of issue 16's table, crafted with correct checksums.
#[test]
fn crafted_headers_and_sections_are_refused() {
    let (raw, _) = small(Metric::L2);
    let parts = raw.to_parts();

    // An occupied key-table slot naming fragment u32::MAX.
    let mut p = parts.clone();
    let occupied = p
        .table_keys
        .iter()
        .position(|&k| k != octex_index::table::EMPTY_KEY)
        .unwrap();
    p.table_slots[occupied] = u32::MAX;
    assert!(invalid(RawIndex::from_parts(p)).contains("names fragment"));

    // A free slot's ordinal is never read: any value loads.
    let mut p = parts.clone();
    let free = p
        .table_keys
        .iter()
        .position(|&k| k == octex_index::table::EMPTY_KEY)
        .unwrap();
    p.table_slots[free] = 12345;
    assert!(RawIndex::from_parts(p).is_ok());

    // A table whose every slot is occupied (a lookup could not end).
    let mut p = parts.clone();
    let e = p.tables[0];
    for s in 0..e.capacity as usize {
        let slot = e.slot_offset as usize + s;
        if p.table_keys[slot] == octex_index::table::EMPTY_KEY {
            p.table_keys[slot] = 0x1234_5678 + s as u64;
            p.table_slots[slot] = 0;
        }
    }
    assert!(invalid(RawIndex::from_parts(p)).contains("keys for"));

    // Metric and dimensions: inner product without the extra dimension, L2
    // with input_dim != dim, input_dim 0, cosine off by one.
    for (metric, input_dim) in [
        (Metric::InnerProduct, DIM),
        (Metric::L2, DIM - 1),
        (Metric::L2, 0),
        (Metric::Cosine, DIM + 1),
    ] {
        let mut p = parts.clone();
        p.header.metric = metric;
        p.header.input_dim = input_dim as u32;
        assert!(
            invalid(RawIndex::from_parts(p)).contains("dimension"),
            "{metric} {input_dim}"
        );
    }

    // Blocks beyond the engines' buffers; a sketch width not a multiple of 16.
    let mut p = parts.clone();
    p.header.blocks = 9;
    assert!(RawIndex::from_parts(p).is_err());
    let mut p = parts.clone();
    p.header.sketch_width = 8;
    p.sketch = vec![0; raw.len() * 8];
    p.sketch_scales = vec![1.0; 8];
    assert!(invalid(RawIndex::from_parts(p)).contains("sketch width"));

    // NaN in a rerank vector; NaN max_norm.
    let mut p = parts.clone();
    match &mut p.vectors {
        RerankVectors::F16(v) => v[5] = half::f16::NAN,
        RerankVectors::F32(v) => v[5] = f32::NAN,
    }
    assert!(invalid(RawIndex::from_parts(p)).contains("non-finite"));
    let mut p = parts.clone();
    p.header.max_norm = f32::NAN;
    assert!(invalid(RawIndex::from_parts(p)).contains("max_norm"));

    // Trailing bytes after the last section.
    let mut bytes = raw.as_bytes().to_vec();
    bytes.push(0);
    assert!(
        invalid(RawIndex::from_bytes(&bytes, LoadOptions::default()))
            .contains("follow the last section")
    );
    assert!(RawIndex::from_bytes(raw.as_bytes(), LoadOptions::default()).is_ok());
}

/// Parameters whose products would allocate without bound are refused before
/// anything is allocated.
#[test]
fn oversized_search_parameters_are_typed_errors() {
    let (raw, queries) = small(Metric::L2);
    let index = Index::new(raw);
    for p in [
        SearchParams {
            read_depth: 16,
            start_points: 1_000_000_000,
            waves: 100_000,
            rerank: 32,
            wave_rerank: false,
        },
        SearchParams {
            read_depth: 16,
            start_points: 64,
            waves: usize::MAX,
            rerank: 32,
            wave_rerank: false,
        },
        SearchParams {
            read_depth: 16,
            start_points: usize::MAX,
            waves: 3,
            rerank: 32,
            wave_rerank: false,
        },
        SearchParams {
            read_depth: 16,
            start_points: 64,
            waves: 3,
            rerank: usize::MAX,
            wave_rerank: false,
        },
        SearchParams {
            read_depth: 16,
            start_points: 1 << 20,
            waves: 64,
            rerank: 32,
            wave_rerank: false,
        },
    ] {
        let r = index.search(&queries[..DIM], 10, &p);
        assert!(
            matches!(r, Err(SearchError::TooLarge { .. })),
            "{p:?}: {r:?}"
        );
        assert!(matches!(
            index.searcher(&p),
            Err(SearchError::TooLarge { .. })
        ));
    }
}

/// Huge and tiny finite values: cosine answers as for the same vectors at
/// unit scale; L2 refuses norms whose squared distances overflow f32.
#[test]
fn huge_and_tiny_finite_values_are_exact_or_refused() {
    let base = clustered(2_000, DIM, 8, 5);
    let queries = clustered(50, DIM, 8, 6);
    let cos = Index::new(
        build(&base, DIM, Metric::Cosine, &test_params())
            .unwrap()
            .index,
    );
    let p = SearchParams::default();
    let want = cos.search(&queries, 10, &p).unwrap();
    for scale in [1e30f32, 1e-30] {
        let scaled: Vec<f32> = queries.iter().map(|v| v * scale).collect();
        let got = cos.search(&scaled, 10, &p).unwrap();
        assert_eq!(got.ids, want.ids, "cosine queries scaled by {scale}");
    }
    // One base row scaled by 1e20: cosine normalises it to the same vector.
    let mut scaled_base = base.clone();
    scaled_base[7 * DIM..8 * DIM]
        .iter_mut()
        .for_each(|v| *v *= 1e20);
    let f16 = BuildParams {
        vector_dtype: Some(octex_index::VectorDtype::F16),
        ..test_params()
    };
    let built = build(&scaled_base, DIM, Metric::Cosine, &f16).unwrap();
    let plain = build(&base, DIM, Metric::Cosine, &f16).unwrap();
    let (a, b) = match (built.index.vectors(), plain.index.vectors()) {
        (octex_index::RerankView::F16(a), octex_index::RerankView::F16(b)) => (
            a[7 * DIM..8 * DIM]
                .iter()
                .map(|v| v.to_f32())
                .collect::<Vec<_>>(),
            b[7 * DIM..8 * DIM]
                .iter()
                .map(|v| v.to_f32())
                .collect::<Vec<_>>(),
        ),
        _ => panic!("f16 rerank vectors as asked"),
    };
    for (x, y) in a.iter().zip(&b) {
        assert!(
            (x - y).abs() < 1e-3,
            "row 7 stored as {a:?}, unscaled {b:?}"
        );
    }
    // L2: a 1e30 query is refused with a typed error, a 1e30 base row too.
    let l2 = Index::new(build(&base, DIM, Metric::L2, &test_params()).unwrap().index);
    let huge: Vec<f32> = queries[..DIM].iter().map(|v| v * 1e30 + 1e30).collect();
    assert!(matches!(
        l2.search(&huge, 10, &p),
        Err(SearchError::HugeQuery { query: 0, .. })
    ));
    let mut huge_base = base.clone();
    huge_base[3 * DIM] = 1e30;
    assert!(matches!(
        build(&huge_base, DIM, Metric::L2, &test_params()),
        Err(BuildError::HugeVector { row: 3, .. })
    ));
}

/// A vector file declaring an enormous dimension is refused before the
/// builder allocates its dim x dim covariance.
#[test]
fn enormous_dimensions_are_refused_before_allocating() {
    let dim = 1 << 20;
    let data = vec![0.5f32; 2 * dim];
    match build(&data, dim, Metric::L2, &test_params()) {
        Err(BuildError::DimensionTooLarge { dim: d, max }) => assert!(d == dim && max < dim),
        Err(e) => panic!("expected DimensionTooLarge, got {e}"),
        Ok(_) => panic!("built over 2^20 dimensions"),
    }
}
