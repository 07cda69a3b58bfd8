//! Several GPUs, one replica of the index on each ([`MultiGpuSearcher`]):
//! tested with G logical devices on one card (the same ordinal named G
//! times), and on every real device where the machine has more than one.
//! Skips where there is no CUDA driver, as the other GPU tests do.

use octex_index::Metric;
use octex_search::{Backend, GpuOptions, Index, Queries, SearchError, SearchParams, SharedIndex};
use octex_tests::{brute_force, clustered, gpu_or_skip, recall, test_params};

/// Exact products, so that batches of any size agree id for id (see the GPU
/// tests' `exact_products`).
fn exact_products() -> GpuOptions {
    GpuOptions {
        max_batch: 4_096,
        tf32_projection: false,
        ..GpuOptions::default()
    }
}

/// G logical devices return exactly the single device's ids and distances,
/// for G = 1, 2, 3 and 4 and batches that do not divide evenly; a batch of
/// fewer queries than devices, and no device at all, are handled.
#[test]
fn logical_devices_return_the_single_gpu_results() {
    let Some(gpu) = gpu_or_skip("logical_devices_return_the_single_gpu_results") else {
        return;
    };
    let dim = 48;
    let base = clustered(30_000, dim, 64, 4);
    let queries = clustered(2_501, dim, 64, 8);
    let built = octex_build::build(&base, dim, Metric::L2, &test_params()).unwrap();
    let index = Index::new(built.index);
    let truth = brute_force(&base, &queries, dim, 10);
    let mut single = index.gpu(&exact_products()).unwrap();
    let params = [
        SearchParams::default(),
        SearchParams {
            read_depth: 16,
            start_points: 32,
            waves: 2,
            rerank: 32,
            wave_rerank: true,
        },
    ];
    for g in 1..=4 {
        let mut multi = index.multi_gpu(&vec![0; g], &exact_products()).unwrap();
        assert_eq!(multi.len(), g);
        for p in &params {
            let one = single.search(&queries, 10, p).unwrap();
            let many = multi.search(&queries, 10, p).unwrap();
            assert_eq!(one.ids, many.ids, "{g} logical devices, {p:?}: ids differ");
            assert_eq!(
                one.distances, many.distances,
                "{g} logical devices, {p:?}: distances differ"
            );
            assert_eq!(many.stats.queries, 2_501);
            assert_eq!(one.stats.sketch_distances, many.stats.sketch_distances);
            assert!(recall(&many.ids, &truth, 10) > 0.9);
        }
        // Fewer queries than devices: the first devices answer them.
        let two = &queries[..2 * dim];
        let p = SearchParams::default();
        assert_eq!(
            multi.search(two, 10, &p).unwrap().ids,
            single.search(two, 10, &p).unwrap().ids
        );
        // Bad input is refused before any device runs.
        assert!(matches!(
            multi.search(&queries[..dim - 1], 10, &p),
            Err(SearchError::Ragged { .. })
        ));
    }
    assert!(matches!(
        index.multi_gpu(&[], &exact_products()),
        Err(SearchError::NoDevices)
    ));

    // What the bindings open: every GPU the driver shows, default options.
    let shared = SharedIndex::new(index.clone());
    let p = SearchParams::default();
    let batch = Queries::new(&queries, dim).unwrap();
    let from_shared = shared.search(batch, 10, &p, Backend::Gpu).unwrap();
    let mut one = index.gpu(&GpuOptions::default()).unwrap();
    let from_one = one.search(&queries, 10, &p).unwrap();
    if octex_kernels::device_count() == 1 {
        assert_eq!(from_shared.ids, from_one.ids);
    } else {
        // TF32 products may round batches of other sizes differently.
        let (a, b) = (
            recall(&from_shared.ids, &truth, 10),
            recall(&from_one.ids, &truth, 10),
        );
        assert!((a - b).abs() < 0.005, "every GPU {a}, one {b}");
    }

    // Every real device of the machine, where it has several.
    drop(gpu);
    let devices = octex_kernels::device_count();
    if devices > 1 {
        let all: Vec<usize> = (0..devices).collect();
        let mut multi = index.multi_gpu(&all, &exact_products()).unwrap();
        let p = SearchParams::default();
        assert_eq!(
            multi.search(&queries, 10, &p).unwrap().ids,
            single.search(&queries, 10, &p).unwrap().ids,
            "{devices} GPUs"
        );
    }
}
