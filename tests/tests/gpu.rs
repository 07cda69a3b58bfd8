//! GPU tests: run where a CUDA driver and device exist, and skip (saying so)
//! everywhere else. CI has no GPU; these run on the lent H200 through the
//! test binary built here and carried (`scripts/device-run.sh`).

use octex_index::Metric;
use octex_kernels::layout::{BatchView, IndexView};
use octex_kernels::{DeviceIndexView, GpuBruteForce};
use octex_search::{Backend, GpuOptions, Index, SearchParams};
use octex_tests::{brute_force, clustered, gpu_or_skip, recall, test_params};

fn build(base: &[f32], dim: usize, metric: Metric) -> Index {
    let built = octex_build::build(base, dim, metric, &test_params()).unwrap();
    Index::new(built.index)
}

/// The GPU decodes fragments exactly as the CPU does (same `z` in, same keys out).
#[test]
fn fragment_keys_match_the_cpu_decoder() {
    let Some(gpu) = gpu_or_skip("fragment_keys_match_the_cpu_decoder") else {
        return;
    };
    let dim = 32;
    let base = clustered(3000, dim, 20, 1);
    let index = build(&base, dim, Metric::L2);
    let map = index.raw().copy_map();
    let n = 500;
    let mut pcs = Vec::new();
    let mut z = vec![0f32; n * map.width()];
    map.project_batch(&base[..n * dim], &mut pcs, &mut z, false);
    let shifts = gpu.upload(&map.shifts).unwrap();
    let inv: Vec<f32> = map.spacings.iter().map(|s| 1.0f32 / s).collect();
    let inv_d = gpu.upload(&inv).unwrap();
    let view = IndexView {
        shifts: octex_kernels::device_address(&shifts, gpu.stream()),
        inv_spacings: octex_kernels::device_address(&inv_d, gpu.stream()),
        copies: map.copies as u32,
        blocks: map.blocks as u32,
        spacings: map.spacings.len() as u32,
        width: map.width() as u32,
        ..Default::default()
    };
    // SAFETY: `fragment_keys` reads only the shifts and spacings, uploaded
    // above and alive to the end of this test; the other addresses are null
    // and unread.
    let dview = unsafe { DeviceIndexView::new(&gpu, view) }.unwrap();
    let zd = gpu.upload(&z).unwrap();
    let items = n * map.copies * map.spacings.len();
    let mut keys = gpu.zeros::<u64>(items).unwrap();
    let mut dists = gpu.zeros::<f32>(items).unwrap();
    gpu.fragment_keys(
        &dview,
        &zd.slice(..),
        n,
        &mut keys.slice_mut(..),
        &mut dists.slice_mut(..),
    )
    .unwrap();
    let (mut hk, mut hd) = (vec![0u64; items], vec![0f32; items]);
    gpu.download(&keys, &mut hk).unwrap();
    gpu.download(&dists, &mut hd).unwrap();
    let cd = map.copy_dim();
    let mut same = 0;
    for v in 0..n {
        for c in 0..map.copies {
            for s in 0..map.spacings.len() {
                let zc = &z[v * map.width() + c * cd..v * map.width() + (c + 1) * cd];
                let (fk, d) = map.fragment(zc, c, s);
                let g = (v * map.copies + c) * map.spacings.len() + s;
                if fk.key == hk[g] && (d - hd[g]).abs() <= 1e-5 * d.max(1.0) {
                    same += 1;
                }
            }
        }
    }
    assert_eq!(
        same,
        items,
        "GPU and CPU fragment keys differ in {} of {items}",
        items - same
    );
}

/// GPU brute force finds the exact neighbours (and skips self in a self-join).
#[test]
fn brute_force_matches_the_cpu() {
    let Some(gpu) = gpu_or_skip("brute_force_matches_the_cpu") else {
        return;
    };
    let dim = 24;
    // Not a multiple of the tile or the block: 70,001 base vectors, 333 queries.
    let base = clustered(70_001, dim, 50, 2);
    let queries = clustered(333, dim, 50, 3);
    let bf = GpuBruteForce::new(&gpu, &base, dim).unwrap();
    let (ids, d) = bf.search(&queries, 10, None).unwrap();
    let truth = brute_force(&base, &queries, dim, 10);
    let r = recall(&ids, &truth, 10);
    assert!(r > 0.999, "GPU brute force recall {r}");
    assert!(d
        .chunks_exact(10)
        .all(|row| row.windows(2).all(|w| w[0] <= w[1])));
    let (self_ids, _) = bf.search(&base[..100 * dim], 5, Some(0)).unwrap();
    for (q, row) in self_ids.chunks_exact(5).enumerate() {
        assert!(
            !row.contains(&(q as u32)),
            "query {q} found itself: {row:?}"
        );
    }
    assert!(
        bf.search(&queries, octex_kernels::layout::MAX_TOPK as usize + 1, None)
            .is_err(),
        "k above the kernel's limit"
    );
}

/// CPU and GPU top-10 ids of one search: recall within 0.005 of each other,
/// more than 95% of the ids shared.
fn assert_backends_agree(p: &SearchParams, cpu: &[u32], gpu: &[u32], truth: &[u32]) {
    let (rc, rg) = (recall(cpu, truth, 10), recall(gpu, truth, 10));
    let same = cpu.iter().zip(gpu).filter(|(a, b)| a == b).count() as f64 / cpu.len() as f64;
    let same_sets = recall(gpu, cpu, 10);
    eprintln!("{p:?}: recall CPU {rc:.4} GPU {rg:.4}, same ids in place {same:.4}, as sets {same_sets:.4}");
    assert!(
        (rc - rg).abs() <= 0.005,
        "{p:?}: recall CPU {rc} vs GPU {rg}"
    );
    assert!(
        same_sets > 0.95,
        "{p:?}: only {same_sets} of the top-10 ids agree"
    );
}

/// Searcher options of batches of `max_batch` with exact products (whatever
/// the default): batches of different sizes must then agree id for id, where
/// cuBLAS may take TF32 tensor cores for one batch shape and not another.
fn exact_products(max_batch: usize) -> GpuOptions {
    GpuOptions {
        device: 0,
        max_batch,
        tf32_projection: false,
        ..GpuOptions::default()
    }
}

/// The same index searched on CPU and GPU: recall within 0.005, > 95% of the
/// top-10 ids identical. Also: batch of 1, a batch split by `max_batch`, k = R,
/// graph replays repeatable, no duplicate ids.
#[test]
fn cpu_and_gpu_agree() {
    let Some(_gpu) = gpu_or_skip("cpu_and_gpu_agree") else {
        return;
    };
    let dim = 48;
    let base = clustered(30_000, dim, 64, 4);
    let queries = clustered(1_000, dim, 64, 5);
    let index = build(&base, dim, Metric::L2);
    let truth = brute_force(&base, &queries, dim, 10);
    let mut g = index
        .gpu(&GpuOptions {
            device: 0,
            max_batch: 384,
            ..GpuOptions::default()
        })
        .unwrap();
    for p in [
        SearchParams::default(),
        SearchParams {
            read_depth: 8,
            start_points: 16,
            waves: 1,
            rerank: 16,
            wave_rerank: false,
        },
        // Near the top of a block's shared memory at rows of 64 (one block
        // per multiprocessor: the latency build; S128 W4 would spill).
        SearchParams {
            read_depth: 16,
            start_points: 96,
            waves: 4,
            rerank: 64,
            wave_rerank: false,
        },
        // Per-wave rerank, with S below R and with S above R (start points
        // topped up in sketch order).
        SearchParams {
            read_depth: 16,
            start_points: 32,
            waves: 3,
            rerank: 64,
            wave_rerank: true,
        },
        SearchParams {
            read_depth: 16,
            start_points: 96,
            waves: 4,
            rerank: 32,
            wave_rerank: true,
        },
        // Past the shared memory of a block (the candidate buffer alone is
        // 256 KiB): the large arrays spill to global scratch.
        SearchParams {
            read_depth: 16,
            start_points: 512,
            waves: 6,
            rerank: 64,
            wave_rerank: false,
        },
        SearchParams {
            read_depth: 16,
            start_points: 512,
            waves: 6,
            rerank: 128,
            wave_rerank: true,
        },
    ] {
        let (smem, spill) = g.memory_per_query(10, &p).unwrap();
        eprintln!("{p:?}: {smem} bytes of shared memory and {spill} of global scratch per query");
        assert_eq!(spill > 0, p.start_points == 512, "{p:?}");
        let cpu = index.search(&queries, 10, &p).unwrap();
        let gpu = g.search(&queries, 10, &p).unwrap();
        assert_backends_agree(&p, &cpu.ids, &gpu.ids, &truth);
        for row in gpu.ids.chunks_exact(10) {
            let mut r = row.to_vec();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r.len(), 10, "duplicate ids in {row:?}");
        }
        assert!(gpu.stats.sketch_distances > 0 && gpu.stats.queries == 1000);
        let exact_ratio = gpu.stats.exact_distances as f64 / cpu.stats.exact_distances as f64;
        assert!(
            (0.9..=1.1).contains(&exact_ratio),
            "{p:?}: exact distances GPU {} CPU {}",
            gpu.stats.exact_distances,
            cpu.stats.exact_distances
        );
        // Replaying the captured graphs gives the same answers.
        assert_eq!(g.search(&queries, 10, &p).unwrap().ids, gpu.ids);
    }
    // Batch of one, and k = R.
    let p = SearchParams {
        rerank: 10,
        ..Default::default()
    };
    let one = g.search(&queries[..dim], 10, &p).unwrap();
    let cpu_one = index.search(&queries[..dim], 10, &p).unwrap();
    assert!(recall(&one.ids, &cpu_one.ids, 10) >= 0.9);
    // The profiled path gives the graph's answers.
    let (prof, times) = g.search_profiled(&queries, 10, &p).unwrap();
    assert_eq!(prof.ids, g.search(&queries, 10, &p).unwrap().ids);
    assert!(times.search_ms > 0.0);
    // k above R reranks k on both backends, as if R = k had been asked.
    let (wide_gpu, wide_cpu) = (
        g.search(&queries, 40, &p).unwrap(),
        index.search(&queries, 40, &p).unwrap(),
    );
    let asked = SearchParams { rerank: 40, ..p };
    assert_eq!(wide_gpu.ids, g.search(&queries, 40, &asked).unwrap().ids);
    let shared = recall(&wide_gpu.ids, &wide_cpu.ids, 40);
    assert!(shared > 0.95, "k = 40 > R: {shared} of the ids agree");
}

/// Batches that fill every multiprocessor with 128-thread blocks (2,500
/// queries; 1,056 are enough on an H200) run the narrow build of the search
/// where its shared memory fits (small S): it agrees with the CPU, and gives
/// the very ids the 256-thread builds give to the same queries in batches of
/// 384, and in batches of 100 (at most one query per multiprocessor on any
/// GPU with 100 or more) the 1,024-thread latency build wherever a round has
/// 2,048 ids or more (here the default S64 and S96, with rows of 32). The
/// batches of 100 also find their fragments inside the search kernel, the
/// larger ones in `query_fragments` before it.
#[test]
fn large_batches_agree_between_cpu_and_gpu() {
    let Some(_gpu) = gpu_or_skip("large_batches_agree_between_cpu_and_gpu") else {
        return;
    };
    let dim = 48;
    let base = clustered(30_000, dim, 64, 4);
    let queries = clustered(2_500, dim, 64, 8);
    let index = build(&base, dim, Metric::L2);
    let truth = brute_force(&base, &queries, dim, 10);
    let mut large = index.gpu(&exact_products(4_096)).unwrap();
    let mut small = index.gpu(&exact_products(384)).unwrap();
    let mut tiny = index.gpu(&exact_products(100)).unwrap();
    for p in [
        SearchParams {
            read_depth: 8,
            start_points: 16,
            waves: 1,
            rerank: 16,
            wave_rerank: false,
        },
        SearchParams {
            read_depth: 16,
            start_points: 16,
            waves: 2,
            rerank: 32,
            wave_rerank: true,
        },
        SearchParams::default(),
        SearchParams {
            read_depth: 16,
            start_points: 96,
            waves: 2,
            rerank: 32,
            wave_rerank: true,
        },
    ] {
        let cpu = index.search(&queries, 10, &p).unwrap();
        let gpu = large.search(&queries, 10, &p).unwrap();
        assert_backends_agree(&p, &cpu.ids, &gpu.ids, &truth);
        assert_eq!(gpu.stats.queries, 2_500);
        assert_eq!(
            gpu.ids,
            small.search(&queries, 10, &p).unwrap().ids,
            "{p:?}: the narrow and wide builds disagree"
        );
        assert_eq!(
            gpu.ids,
            tiny.search(&queries, 10, &p).unwrap().ids,
            "{p:?}: batches of 2,500 and of 100 disagree"
        );
    }
}

/// Projections after 50 principal coordinates: at 50 dimensions the
/// principal coordinates sit before the copies' projections in one
/// product's rows, padded by default to 52 columns so that the projections
/// start 16-byte aligned and `query_fragments` reads them 16 bytes at a
/// time. Batches of 1,000 (that kernel) and of 100 (the lookup inside the
/// search kernel) give the same ids, and both agree with the CPU; so do the
/// unpadded rows (`GpuTuning::unpadded_principal_columns`), which are not
/// 16-byte aligned: the lookup's 4-byte path.
#[test]
fn fifty_principal_coordinates_agree_between_cpu_and_gpu() {
    let Some(_gpu) = gpu_or_skip("fifty_principal_coordinates_agree_between_cpu_and_gpu") else {
        return;
    };
    let dim = 50;
    let base = clustered(20_000, dim, 48, 11);
    let queries = clustered(1_000, dim, 48, 12);
    let index = build(&base, dim, Metric::L2);
    let basis_dim = index.raw().header().basis_dim;
    assert_ne!(
        basis_dim % 4,
        0,
        "the test needs principal coordinates that leave the projections unaligned"
    );
    let truth = brute_force(&base, &queries, dim, 10);
    for unpadded in [false, true] {
        let with = |max_batch| GpuOptions {
            tuning: octex_search::GpuTuning {
                unpadded_principal_columns: unpadded,
                ..Default::default()
            },
            ..exact_products(max_batch)
        };
        let mut batched = index.gpu(&with(1_000)).unwrap();
        let mut tiny = index.gpu(&with(100)).unwrap();
        for p in [
            SearchParams {
                read_depth: 8,
                start_points: 16,
                waves: 1,
                rerank: 16,
                wave_rerank: false,
            },
            SearchParams::default(),
        ] {
            let cpu = index.search(&queries, 10, &p).unwrap();
            let gpu = batched.search(&queries, 10, &p).unwrap();
            assert_backends_agree(&p, &cpu.ids, &gpu.ids, &truth);
            assert_eq!(
                gpu.ids,
                tiny.search(&queries, 10, &p).unwrap().ids,
                "{p:?}: batches of 1,000 and of 100 disagree (unpadded: {unpadded})"
            );
        }
    }
}

/// Queries far from all data find no stored fragment: the GPU takes the entry
/// points as the CPU does and still returns k distinct results.
#[test]
fn far_queries_and_inner_product_on_gpu() {
    let Some(_gpu) = gpu_or_skip("far_queries_and_inner_product_on_gpu") else {
        return;
    };
    let dim = 32;
    let base = clustered(8_000, dim, 16, 6);
    let index = build(&base, dim, Metric::L2);
    let far: Vec<f32> = (0..4 * dim).map(|i| 1e4 + i as f32).collect();
    let mut g = index.gpu(&GpuOptions::default()).unwrap();
    let res = g.search(&far, 10, &SearchParams::default()).unwrap();
    assert_eq!(res.stats.seeded_queries, 4);
    assert!(res.ids.iter().all(|&i| i != u32::MAX));
    let cpu = index.search(&far, 10, &SearchParams::default()).unwrap();
    assert!(recall(&res.ids, &cpu.ids, 10) >= 0.9);

    let ip = build(&base, dim, Metric::InnerProduct);
    let queries = clustered(200, dim, 16, 7);
    let cpu = ip.search(&queries, 10, &SearchParams::default()).unwrap();
    let mut g = ip.gpu(&GpuOptions::default()).unwrap();
    let gpu = g.search(&queries, 10, &SearchParams::default()).unwrap();
    assert!(recall(&gpu.ids, &cpu.ids, 10) > 0.95);
    // The first round and a wave, where the query shell (`octex_search::shell`)
    // decides what is found: the GPU moves the queries as the CPU does.
    let shell = ip.raw().header().query_shell;
    let first = SearchParams {
        start_points: 16,
        waves: 1,
        rerank: 64,
        ..Default::default()
    };
    let (c1, g1) = (
        ip.search(&queries, 10, &first).unwrap(),
        g.search(&queries, 10, &first).unwrap(),
    );
    let shared = recall(&g1.ids, &c1.ids, 10);
    eprintln!("query shell {shell:?}: S16 W1 ids shared {shared:.4}");
    assert!(shared > 0.95, "{shared}");
    for (a, b) in cpu.distances.iter().zip(&gpu.distances) {
        if a.is_finite() && b.is_finite() {
            assert!(
                (a - b).abs() <= 1e-2 * a.abs().max(1.0),
                "distance {a} vs {b}"
            );
        }
    }
    // Bad input is refused before the GPU runs.
    let mut nan = queries[..dim].to_vec();
    nan[3] = f32::NAN;
    assert!(g.search(&nan, 10, &SearchParams::default()).is_err());
    assert!(g
        .search(&queries[..dim - 1], 10, &SearchParams::default())
        .is_err());
    let _ = BatchView::default();
}

/// Queries from another mixture than the data's: the GPU sends the same
/// queries to the seeds as the CPU (`visits_seeds`: their nearest first-round
/// candidate lies far out) and agrees with its answers.
#[test]
fn queries_outside_the_data_agree_between_cpu_and_gpu() {
    let Some(_gpu) = gpu_or_skip("queries_outside_the_data_agree_between_cpu_and_gpu") else {
        return;
    };
    let dim = 64;
    let base = clustered(10_000, dim, 64, 1);
    let queries = clustered(300, dim, 64, 2);
    let index = build(&base, dim, Metric::L2);
    let p = SearchParams::default();
    let cpu = index.search(&queries, 10, &p).unwrap();
    let mut g = index.gpu(&exact_products(1024)).unwrap();
    let gpu = g.search(&queries, 10, &p).unwrap();
    let (a, b) = (cpu.stats.seeded_queries, gpu.stats.seeded_queries);
    eprintln!("seeded: CPU {a}, GPU {b} of 300");
    assert!(a >= 100 && a.abs_diff(b) <= 3, "seeded CPU {a} GPU {b}");
    let truth = brute_force(&base, &queries, dim, 10);
    assert_backends_agree(&p, &cpu.ids, &gpu.ids, &truth);
    assert!(recall(&gpu.ids, &truth, 10) >= 0.95);
}

/// Data of 2 and 3 dimensions (stored padded to one block): the GPU search
/// and the GPU build agree with the CPU's.
#[test]
fn low_dimensional_data_agrees_between_cpu_and_gpu() {
    let Some(_gpu) = gpu_or_skip("low_dimensional_data_agrees_between_cpu_and_gpu") else {
        return;
    };
    for (dim, metric) in [(2, Metric::L2), (3, Metric::InnerProduct)] {
        let base = clustered(6_000, dim, 12, 9);
        let queries = clustered(300, dim, 12, 10);
        let index = build(&base, dim, metric);
        let p = SearchParams::default();
        let cpu = index.search(&queries, 10, &p).unwrap();
        let mut g = index.gpu(&exact_products(1024)).unwrap();
        let gpu = g.search(&queries, 10, &p).unwrap();
        let truth = match metric {
            Metric::InnerProduct => octex_tests::brute_force_ip(&base, &queries, dim, 10),
            _ => brute_force(&base, &queries, dim, 10),
        };
        assert_backends_agree(&p, &cpu.ids, &gpu.ids, &truth);
        let params = octex_build::BuildParams {
            backend: Backend::Gpu,
            ..test_params()
        };
        let on_gpu = octex_build::build(&base, dim, metric, &params).unwrap();
        let on_gpu = Index::new(on_gpu.index);
        let rebuilt = on_gpu.search(&queries, 10, &p).unwrap();
        assert!(
            recall(&rebuilt.ids, &truth, 10) >= recall(&cpu.ids, &truth, 10) - 0.01,
            "{dim}-d {metric}: the GPU build's index falls short of the CPU build's"
        );
    }
}

/// Without a driver, asking for the GPU is an error value.
#[test]
fn gpu_request_without_driver_is_an_error() {
    assert_eq!(
        octex_search::gpu_available(),
        octex_kernels::driver_available()
    );
    if octex_kernels::driver_available() {
        eprintln!("SKIPPED gpu_request_without_driver_is_an_error: a GPU is present");
        return;
    }
    let dim = 16;
    let base = clustered(2_000, dim, 8, 8);
    let index = build(&base, dim, Metric::L2);
    let err = index
        .gpu(&GpuOptions::default())
        .err()
        .expect("no GPU here");
    assert!(err.to_string().contains("no CUDA driver"), "{err}");
}

/// `Index::open_on` is the one way to choose a backend: `auto` takes the GPU
/// exactly when one is usable; where there is none, `gpu` is a typed error;
/// where there is one, the GPU searcher it opens returns what `Index::gpu`
/// returns, and the CPU one what `Index::search` returns.
#[test]
fn open_on_chooses_the_backend_in_one_place() {
    let dim = 16;
    let base = clustered(3_000, dim, 8, 8);
    let queries = clustered(200, dim, 8, 9);
    let index = build(&base, dim, Metric::L2);
    let p = SearchParams::default();
    let opts = GpuOptions::default();
    let auto = index.open_on(Backend::Auto, &opts).unwrap();
    let want = if octex_search::gpu_available() {
        Backend::Gpu
    } else {
        Backend::Cpu
    };
    assert_eq!(auto.backend(), want);
    let mut cpu = index.open_on(Backend::Cpu, &opts).unwrap();
    assert_eq!(
        cpu.search(&queries, 10, &p).unwrap(),
        index.search(&queries, 10, &p).unwrap()
    );
    match index.open_on(Backend::Gpu, &opts) {
        Ok(mut g) => {
            assert!(octex_search::gpu_available());
            let direct = index.gpu(&opts).unwrap().search(&queries, 10, &p).unwrap();
            assert_eq!(g.search(&queries, 10, &p).unwrap(), direct);
        }
        Err(e) => {
            assert!(!octex_search::gpu_available());
            assert!(
                matches!(e, octex_search::SearchError::BackendUnavailable(_)),
                "{e}"
            );
            assert!(
                std::env::var("OCTEX_REQUIRE_GPU").as_deref() != Ok("1"),
                "{e}"
            );
        }
    }
}

/// The same data and seed built on the CPU and on the GPU with `rows`.
fn cpu_and_gpu_builds(
    base: &[f32],
    dim: usize,
    rows: octex_build::RowMethod,
) -> (octex_build::Built, octex_build::Built) {
    let build_on = |backend| {
        // Rows of 64 (the default): the longest the GPU's exact rows take
        // (longer ones are built on the CPU), so that exact rows run on the GPU.
        // f16 vectors, asked for: the GPU rounds them, and they are compared.
        // Ripples through the rows on both (the default).
        let params = octex_build::BuildParams {
            backend,
            row_method: rows,
            row_len: Some(64),
            vector_dtype: Some(octex_index::VectorDtype::F16),
            ..test_params()
        };
        let built = octex_build::build(base, dim, Metric::L2, &params).unwrap();
        assert!(built.report.ripples_through_rows, "{backend:?}");
        built
    };
    (
        build_on(octex_build::Backend::Cpu),
        build_on(octex_build::Backend::Gpu),
    )
}

/// The GPU builder (principal coordinates and exact rows on the GPU) against
/// the CPU builder with exact rows: same data and seed, recall within 0.005.
#[test]
fn gpu_build_matches_cpu_build() {
    let Some(_gpu) = gpu_or_skip("gpu_build_matches_cpu_build") else {
        return;
    };
    let dim = 40;
    let base = clustered(25_000, dim, 50, 9);
    let queries = clustered(500, dim, 50, 10);
    let truth = brute_force(&base, &queries, dim, 10);
    let (cpu, gpu) = cpu_and_gpu_builds(&base, dim, octex_build::RowMethod::Exact);
    assert_eq!(cpu.report.backend, "cpu");
    assert_eq!(gpu.report.backend, "gpu");
    // The f16 rerank vectors (rounded on the GPU) are the CPU's, bit for bit.
    match (cpu.index.vectors(), gpu.index.vectors()) {
        (octex_index::RerankView::F16(a), octex_index::RerankView::F16(b)) => assert!(a == b),
        _ => panic!("both builds store the f16 rerank vectors asked for"),
    }
    // The GPU's row products run on TF32 (relative error ~1e-3), so near-ties
    // swap places: compare each row's forward head as a set.
    let (rc, rg) = (cpu.index.rows(), gpu.index.rows());
    let lt = cpu.index.header().row_len as usize;
    let head = lt / 2;
    let shared: usize = rc
        .chunks_exact(lt)
        .zip(rg.chunks_exact(lt))
        .map(|(a, b)| a[..head].iter().filter(|id| b[..head].contains(id)).count())
        .sum();
    let overlap = shared as f64 / (rc.len() / lt * head) as f64;
    eprintln!("forward heads shared: {overlap:.4}");
    assert!(
        overlap > 0.9,
        "only {overlap} of the forward neighbours agree"
    );
    let (ci, gi) = (Index::new(cpu.index), Index::new(gpu.index));
    for p in [
        SearchParams::default(),
        SearchParams {
            start_points: 16,
            waves: 1,
            ..Default::default()
        },
    ] {
        let r_cpu = recall(&ci.search(&queries, 10, &p).unwrap().ids, &truth, 10);
        let r_gpu = recall(&gi.search(&queries, 10, &p).unwrap().ids, &truth, 10);
        eprintln!("{p:?}: CPU-built {r_cpu:.4}, GPU-built {r_gpu:.4}");
        assert!((r_cpu - r_gpu).abs() <= 0.005, "{p:?}: {r_cpu} vs {r_gpu}");
    }
}

/// Rows by the paper's two search passes, run on the GPU search backend,
/// against the same passes on the CPU: recall within 0.005.
#[test]
fn gpu_search_rows_match_cpu_search_rows() {
    let Some(_gpu) = gpu_or_skip("gpu_search_rows_match_cpu_search_rows") else {
        return;
    };
    let dim = 40;
    let base = clustered(25_000, dim, 50, 11);
    let queries = clustered(500, dim, 50, 12);
    let truth = brute_force(&base, &queries, dim, 10);
    let (cpu, gpu) = cpu_and_gpu_builds(&base, dim, octex_build::RowMethod::Search);
    let (ci, gi) = (Index::new(cpu.index), Index::new(gpu.index));
    let p = SearchParams::default();
    let r_cpu = recall(&ci.search(&queries, 10, &p).unwrap().ids, &truth, 10);
    let r_gpu = recall(&gi.search(&queries, 10, &p).unwrap().ids, &truth, 10);
    eprintln!("search-built rows: CPU passes {r_cpu:.4}, GPU passes {r_gpu:.4}");
    assert!((r_cpu - r_gpu).abs() <= 0.005, "{r_cpu} vs {r_gpu}");
}

/// A program keeps an index and its GPU searcher side by side in one struct
/// (the searcher holds its own handle of the index).
#[test]
fn index_and_gpu_searcher_live_in_one_struct() {
    struct Service {
        index: octex_search::Index,
        gpu: Option<octex_search::GpuSearcher>,
    }
    fn assert_send<T: Send>() {}
    assert_send::<octex_search::Index>();
    let dim = 16;
    let base = clustered(2_000, dim, 8, 9);
    let index = build(&base, dim, Metric::L2);
    let gpu = gpu_or_skip("index_and_gpu_searcher_live_in_one_struct")
        .map(|_| index.gpu(&GpuOptions::default()).unwrap());
    let mut service = Service { index, gpu };
    let q = &base[..dim];
    let p = SearchParams::default();
    let cpu = service.index.search(q, 5, &p).unwrap();
    assert_eq!(cpu.ids(0)[0], 0, "a base vector finds itself");
    if let Some(g) = &mut service.gpu {
        let found = g.search(q, 5, &p).unwrap();
        assert_eq!(found.ids(0)[0], 0, "the GPU finds the base vector too");
    }
}

/// Corrupted files that still load (checksums off) search on the GPU without
/// a device fault: the validator's invariants are what the kernel relies on.
/// After each search the device must still answer a known index correctly.
#[test]
fn mutated_files_that_load_search_on_the_gpu_without_fault() {
    let Some(_gpu) = gpu_or_skip("mutated_files_that_load_search_on_the_gpu_without_fault") else {
        return;
    };
    let dim = 16;
    let base = clustered(2_000, dim, 8, 3);
    let queries = clustered(64, dim, 8, 4);
    let built = octex_build::build(&base, dim, Metric::L2, &test_params()).unwrap();
    let good = Index::new(
        octex_index::Index::from_bytes(built.index.as_bytes(), octex_index::LoadOptions::default())
            .unwrap(),
    );
    let p = SearchParams::default();
    let want = good.search(&queries, 10, &p).unwrap();
    let off = octex_index::LoadOptions {
        verify_checksums: false,
    };
    let (mut searched, mut refused) = (0, 0);
    for (what, bytes) in octex_tests::mutated_files(&built.index, 400, 21) {
        let Ok(raw) = octex_index::Index::from_bytes(&bytes, off) else {
            refused += 1;
            continue;
        };
        let ix = Index::new(raw);
        let mut g = ix.gpu(&GpuOptions::default()).unwrap();
        // Errors (a refused plan) are fine; a fault is not.
        match g.search(&queries, 10, &p) {
            Ok(_) | Err(octex_search::SearchError::SharedMemory { .. }) => searched += 1,
            Err(e) => panic!("{what}: {e}"),
        }
    }
    let mut g = good.gpu(&GpuOptions::default()).unwrap();
    assert_eq!(g.search(&queries, 10, &p).unwrap().ids, want.ids);
    eprintln!("{searched} mutated indexes searched on the GPU, {refused} refused at load");
    assert!(searched > 50);
}

/// Sketches wider than one 96-byte group (any multiple of 16 up to D): the
/// GPU reads them in further groups and agrees with the CPU.
#[test]
fn wide_sketches_agree_between_cpu_and_gpu() {
    let Some(_gpu) = gpu_or_skip("wide_sketches_agree_between_cpu_and_gpu") else {
        return;
    };
    // Up to the widest a build chooses from the data (512 bytes).
    for (dim, width) in [(160, 96), (160, 112), (160, 160), (520, 512)] {
        let base = clustered(6_000, dim, 12, 31);
        let queries = clustered(500, dim, 12, 32);
        let params = octex_build::BuildParams {
            sketch_width: Some(width),
            ..test_params()
        };
        let index = Index::new(
            octex_build::build(&base, dim, Metric::L2, &params)
                .unwrap()
                .index,
        );
        let p = SearchParams {
            rerank: 16,
            ..SearchParams::default()
        };
        let cpu = index.search(&queries, 10, &p).unwrap();
        let gpu = index
            .gpu(&GpuOptions::default())
            .unwrap()
            .search(&queries, 10, &p)
            .unwrap();
        let same = cpu.ids.iter().zip(&gpu.ids).filter(|(a, b)| a == b).count() as f64
            / cpu.ids.len() as f64;
        let truth = brute_force(&base, &queries, dim, 10);
        let (rc, rg) = (recall(&cpu.ids, &truth, 10), recall(&gpu.ids, &truth, 10));
        eprintln!(
            "sketch width {width}: recall CPU {rc:.4} GPU {rg:.4}, same ids in place {same:.4}"
        );
        assert!(same >= 0.98 && (rc - rg).abs() <= 0.005, "width {width}");
    }
}

/// A residual sketch (codes relative to centres): the GPU builds the query's
/// table of centre terms as the CPU does and agrees with it.
#[test]
fn residual_sketches_agree_between_cpu_and_gpu() {
    let Some(_gpu) = gpu_or_skip("residual_sketches_agree_between_cpu_and_gpu") else {
        return;
    };
    let dim = 48;
    let data = octex_tests::uneven_clusters(10_500, dim, 60, 11);
    let (base, queries) = data.split_at(10_000 * dim);
    let params = octex_build::BuildParams {
        sketch_centres: Some(1),
        ..test_params()
    };
    let built = octex_build::build(base, dim, Metric::L2, &params).unwrap();
    assert!(built.report.sketch_centres > 0);
    let index = Index::new(built.index);
    let truth = brute_force(base, queries, dim, 10);
    for rerank in [16, 128] {
        let p = SearchParams {
            rerank,
            ..SearchParams::default()
        };
        let cpu = index.search(queries, 10, &p).unwrap();
        let gpu = index
            .gpu(&GpuOptions::default())
            .unwrap()
            .search(queries, 10, &p)
            .unwrap();
        assert_backends_agree(&p, &cpu.ids, &gpu.ids, &truth);
        let same = cpu.ids.iter().zip(&gpu.ids).filter(|(a, b)| a == b).count() as f64
            / cpu.ids.len() as f64;
        assert!(
            same >= 0.98,
            "rerank {rerank}: {same} of the ids in place agree"
        );
    }
}
