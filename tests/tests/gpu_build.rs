//! GPU builder steps against their CPU counterparts: prefix sums and the radix
//! sort against `std`, ripples and key tables against `ripples::build_copy` on
//! the same projected coordinates, the sketch against `sketch::encode`.
//! They skip (saying so) where there is no GPU.

use octex_build::centre_knn::IvfParams;
use octex_build::gpu_sort_builder::GpuRippleBuilder;
use octex_build::ripples::{RippleRule, RippleSpec};
use octex_build::{gpu_ripples, ripples, sketch};
use octex_index::table::{lookup, table_capacity};
use octex_kernels::sort::KeyWord;
use octex_kernels::GpuSort;
use octex_lattice::{CopyMap, CopyMapParams};
use octex_tests::{clustered, gpu_or_skip};

/// A small LCG, so the test needs no RNG crate.
fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s >> 11
    }
}

#[test]
fn gpu_scan_and_radix_sort_match_std() {
    let Some(gpu) = gpu_or_skip("gpu_scan_and_radix_sort_match_std") else {
        return;
    };
    let mut next = lcg(5);
    let mut sorter = GpuSort::new(&gpu, 300_000).unwrap();
    for n in [1usize, 255, 4095, 4096, 4097, 70_001, 300_000] {
        // Prefix sums.
        let vals: Vec<u32> = (0..n).map(|_| (next() % 7) as u32).collect();
        let mut d = gpu.upload(&[vals.clone(), vec![0]].concat()).unwrap();
        sorter.scan(&mut d, n).unwrap();
        let mut got = vec![0u32; n + 1];
        gpu.download(&d, &mut got).unwrap();
        let mut run = 0u32;
        for i in 0..n {
            assert_eq!(got[i], run, "n = {n}: prefix {i}");
            run += vals[i];
        }
        assert_eq!(got[n], run, "n = {n}: total");
        // Sort by (u64 key, u32 minor), ties by id; few distinct keys so ties occur.
        let keys: Vec<u64> = (0..n).map(|_| (next() % 50) * 0x1_0000_0001).collect();
        let minor: Vec<u32> = (0..n).map(|_| (next() % 4) as u32).collect();
        let (dk, dm) = (gpu.upload(&keys).unwrap(), gpu.upload(&minor).unwrap());
        let mut perm = gpu.zeros::<u32>(n).unwrap();
        sorter
            .sort_ids(
                &mut perm,
                n,
                &[
                    KeyWord::U32(&dm),
                    KeyWord::U64Low(&dk),
                    KeyWord::U64High(&dk),
                ],
            )
            .unwrap();
        let mut got = vec![0u32; n];
        gpu.download(&perm, &mut got).unwrap();
        let mut want: Vec<u32> = (0..n as u32).collect();
        want.sort_by_key(|&i| (keys[i as usize], minor[i as usize], i));
        assert_eq!(got, want, "n = {n}: sorted ids");
    }
}

/// A copy map over `m` principal coordinates (identity basis), rotating the
/// first `mc` of them into `mc / 8` blocks per copy, with `spacings`.
fn map_for(m: usize, mc: usize, copies: usize, spacings: Vec<f32>) -> CopyMap {
    let mut basis = vec![0f64; m * m];
    for i in 0..m {
        basis[i * m + i] = 1.0;
    }
    let params = CopyMapParams {
        copies,
        blocks: mc / 8,
        seed: 3,
    };
    CopyMap::random(
        &vec![0.0; m],
        &basis,
        m,
        mc,
        &vec![1.0; mc],
        &params,
        spacings,
    )
}

/// A ripple spec with pmin 1 (`lists` 0: the default count).
fn spec(list_len: usize, rule: RippleRule, lists: usize, probes: usize) -> RippleSpec {
    RippleSpec {
        list_len,
        pmin: 1,
        rule,
        ivf: IvfParams {
            lists,
            probes,
            ..Default::default()
        },
    }
}

/// The nearest-to-centre rule on the GPU against the CPU's, on the CPU's own
/// projection: the same stored fragments and tables; with every list probed
/// both are exact, so the ripples agree but for float near-ties; with 6 of
/// ~170 lists probed both are approximate and still agree almost everywhere
/// (k-means assignments may differ at ties).
#[test]
fn gpu_nearest_ripples_match_cpu_nearest_ripples() {
    let Some(gpu) = gpu_or_skip("gpu_nearest_ripples_match_cpu_nearest_ripples") else {
        return;
    };
    let (n, cd, l) = (30_000usize, 32usize, 16usize);
    let pcs = clustered(n, cd, 40, 23);
    let map = map_for(cd, cd, 2, vec![1.5, 2.5, 4.0, 6.0]);
    for (lists, probes, most_differ) in [(16usize, 16usize, 0.002f64), (0, 6, 0.03)] {
        let spec = spec(l, RippleRule::Nearest, lists, probes);
        let mut rippler = gpu_ripples::GpuCopyRipples::new(&gpu, n, cd, &spec).unwrap();
        for c in 0..map.copies {
            let rot = ripples::copy_rotation(&map, c);
            let mut z = vec![0f32; n * cd];
            octex_lattice::copymap::project_rows(&pcs, cd, &rot, &vec![0.0; cd], &mut z, false);
            let want = ripples::build_copy(&map, c, &z, &spec);
            let zd = gpu.upload(&z).unwrap();
            let got = rippler.copy_to_host(&gpu, &map, c, &zd.slice(..)).unwrap();
            for (s, (w, g)) in want.iter().zip(&got).enumerate() {
                let at = format!("lists {lists}, probes {probes}, copy {c}, spacing {s}");
                assert_eq!(w.keys, g.keys, "{at}: keys");
                assert_eq!(w.short, g.short, "{at}: short fragments");
                for (i, &k) in g.keys.iter().enumerate() {
                    assert_eq!(lookup(&g.slot_keys, &g.slot_ids, k), Some(i as u32));
                }
                // Same ids in each ripple, as sets (near-ties may swap order).
                let mut differ = 0usize;
                for (a, b) in w.ripples.chunks(l).zip(g.ripples.chunks(l)) {
                    differ += b.iter().filter(|id| !a.contains(id)).count();
                }
                let share = differ as f64 / w.ripples.len() as f64;
                eprintln!(
                    "{at}: {} fragments, {share:.5} of ripple ids differ",
                    g.keys.len()
                );
                assert!(share <= most_differ, "{at}: {share} of ripple ids differ");
            }
        }
    }
}

/// Same projected coordinates in, the same ripples, anchors, short and
/// collision counts out; every key found in the GPU's table at its ordinal.
#[test]
fn gpu_ripples_equal_cpu_ripples() {
    let Some(gpu) = gpu_or_skip("gpu_ripples_equal_cpu_ripples") else {
        return;
    };
    let (n, cd, l) = (30_000usize, 32usize, 16usize);
    let pcs = clustered(n, cd, 40, 21);
    let map = map_for(cd, cd, 2, vec![1.5, 2.5, 4.0, 6.0]);
    for pmin in [1usize, 3] {
        let mut builder = GpuRippleBuilder::new(&gpu, n, l).unwrap();
        for c in 0..map.copies {
            let rot = ripples::copy_rotation(&map, c);
            let mut z = vec![0f32; n * cd];
            octex_lattice::copymap::project_rows(&pcs, cd, &rot, &vec![0.0; cd], &mut z, false);
            let want = ripples::build_copy_members(&map, c, &z, l, pmin);
            let zd = gpu.upload(&z).unwrap();
            let shift = gpu.upload(&map.shifts[c * cd..(c + 1) * cd]).unwrap();
            let got = builder
                .build_copy(&gpu, &zd.slice(..), map.blocks, &shift, &map.spacings, pmin)
                .unwrap();
            for (s, (w, g)) in want.iter().zip(&got).enumerate() {
                let at = format!("pmin {pmin}, copy {c}, spacing {s}");
                assert_eq!(w.keys, g.keys, "{at}: keys");
                assert_eq!(w.short, g.short, "{at}: short fragments");
                assert_eq!(w.collisions, g.collisions, "{at}: collisions");
                let differ = w
                    .ripples
                    .iter()
                    .zip(&g.ripples)
                    .filter(|(a, b)| a != b)
                    .count();
                assert_eq!(differ, 0, "{at}: {differ} ripple ids differ");
                assert_eq!(w.anchors, g.anchors, "{at}: anchors");
                assert_eq!(
                    g.slot_keys.len(),
                    table_capacity(g.keys.len()),
                    "{at}: capacity"
                );
                for (i, &k) in g.keys.iter().enumerate() {
                    assert_eq!(
                        lookup(&g.slot_keys, &g.slot_ids, k),
                        Some(i as u32),
                        "{at}: key {i}"
                    );
                }
                eprintln!(
                    "{at}: {} fragments, {} short, identical",
                    g.keys.len(),
                    g.short
                );
            }
        }
    }
}

/// The GPU sketch equals the CPU's, from resident and from streamed
/// principal coordinates.
#[test]
fn gpu_sketch_equals_cpu_sketch() {
    let Some(gpu) = gpu_or_skip("gpu_sketch_equals_cpu_sketch") else {
        return;
    };
    let (n, m, w) = (5_003usize, 40usize, 48usize);
    let pcs: Vec<f32> = clustered(n, m, 10, 4).iter().map(|v| v * 3.0).collect();
    let coords: Vec<f32> = (0..n)
        .flat_map(|r| (0..w).map(move |j| if j < m { r * m + j } else { usize::MAX }))
        .map(|i| if i == usize::MAX { 0.0 } else { pcs[i] })
        .collect();
    let scales = sketch::fit_scales(&coords, w);
    let want = sketch::encode(&coords, &scales);
    let resident = gpu_ripples::DevicePrincipal::new(&gpu, &pcs, m).unwrap();
    assert!(resident.device.is_some());
    let streamed = gpu_ripples::DevicePrincipal {
        host: &pcs,
        device: None,
        m,
    };
    for dp in [&resident, &streamed] {
        let got = gpu_ripples::sketch(&gpu, dp, w, &scales).unwrap();
        let differ = want.iter().zip(&got).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{differ} of {} sketch values differ", want.len());
    }
}

/// Principal coordinates streamed from the host give the same ripples and
/// tables as resident ones.
#[test]
fn gpu_ripples_streamed_equal_resident() {
    let Some(gpu) = gpu_or_skip("gpu_ripples_streamed_equal_resident") else {
        return;
    };
    let (n, m) = (12_000usize, 48usize);
    let pcs = clustered(n, m, 30, 8);
    let map = map_for(m, 32, 3, vec![1.0, 1.5, 2.2]);
    let pb = octex_build::progress::Stage::hidden();
    let resident = gpu_ripples::DevicePrincipal::new(&gpu, &pcs, m).unwrap();
    let streamed = gpu_ripples::DevicePrincipal {
        host: &pcs,
        device: None,
        m,
    };
    for rule in [RippleRule::Members, RippleRule::Nearest] {
        let spec = spec(12, rule, 0, 6);
        let a = gpu_ripples::build_all(&gpu, &map, &resident, &spec, &pb).unwrap();
        let b = gpu_ripples::build_all(&gpu, &map, &streamed, &spec, &pb).unwrap();
        assert!(!a.ripples.is_empty());
        // The members rule keeps an anchor per fragment for the ripples
        // through the rows; a searched one needs none.
        let anchors = match rule {
            RippleRule::Members => a.ripples.len() / 12,
            RippleRule::Nearest => 0,
        };
        assert_eq!(a.anchors.len(), anchors, "{rule:?}: anchors");
        assert_eq!(
            a, b,
            "{rule:?}: streamed and resident principal coordinates give other tables"
        );
    }
}

/// Reverse lists from the GPU's radix sort equal the CPU's counting sort, and
/// exact rows with the base in chunks equal those with the base whole.
#[test]
fn gpu_rows_chunked_and_reverse_lists_match() {
    let Some(gpu) = gpu_or_skip("gpu_rows_chunked_and_reverse_lists_match") else {
        return;
    };
    let (n, d, k) = (140_000usize, 24usize, 16usize);
    let x = clustered(n, d, 200, 13);
    let pb = octex_build::progress::Stage::hidden();
    let (ids, dists) = octex_build::gpu_rows::exact_knn(&gpu, &x, d, k, true, &pb).unwrap();
    // Three chunks of 65,536 rows.
    let (ci, cd) = octex_build::gpu_rows::exact_knn_chunked(&gpu, &x, d, k, true, &pb, 1).unwrap();
    let (mut same_ids, mut worst) = (0usize, 0f32);
    for r in 0..n {
        let (a, b) = (&ids[r * k..(r + 1) * k], &ci[r * k..(r + 1) * k]);
        assert!(!b.contains(&(r as u32)), "row {r} lists itself");
        same_ids += a.iter().filter(|v| b.contains(v)).count();
        let (da, db) = (dists[r * k + k - 1], cd[r * k + k - 1]);
        worst = worst.max((da - db).abs() / da.max(1e-6));
    }
    let share = same_ids as f64 / (n * k) as f64;
    eprintln!(
        "chunked vs whole: {share:.5} of ids shared, k-th distance differs by {worst:.2e} at most"
    );
    assert!(share > 0.995, "only {share} of the ids agree");
    assert!(worst < 1e-2, "k-th distances differ by {worst}");
    for ks in [1usize, 4, 16] {
        let want = octex_build::rows::reverse_lists(&ids, &dists, k, ks);
        let got = octex_build::gpu_rows::reverse_lists(&gpu, &ids, &dists, k, ks).unwrap();
        assert_eq!(want.offsets, got.offsets, "ks {ks}: offsets");
        assert_eq!(want.sources, got.sources, "ks {ks}: sources");
    }
}

/// Two GPU builds of the same data and seed give the same bytes (the key
/// tables' layout does not depend on the order of the GPU's inserts).
#[test]
fn gpu_build_is_deterministic() {
    let Some(_gpu) = gpu_or_skip("gpu_build_is_deterministic") else {
        return;
    };
    let dim = 32;
    let base = clustered(20_000, dim, 40, 17);
    let params = octex_build::BuildParams {
        backend: octex_build::Backend::Gpu,
        row_method: octex_build::RowMethod::Exact,
        // Rows of 64 (the default), the longest the GPU's exact rows take
        // (longer ones run on the CPU).
        row_len: Some(64),
        ..octex_tests::test_params()
    };
    let build = || {
        octex_build::build(&base, dim, octex_index::Metric::L2, &params)
            .unwrap()
            .index
    };
    let (a, b) = (build(), build());
    assert_eq!(
        a.as_bytes(),
        b.as_bytes(),
        "same seed, same bytes on the GPU"
    );
}

/// The GPU's spacing probes choose exactly what the CPU's choose.
#[test]
fn gpu_spacing_choice_equals_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_spacing_choice_equals_cpu") else {
        return;
    };
    let (n, cd) = (50_000usize, 32usize);
    let pcs = clustered(n, cd, 60, 31);
    let map = map_for(cd, cd, 1, vec![1.0]);
    let rot = ripples::copy_rotation(&map, 0);
    let mut z = vec![0f32; n * cd];
    octex_lattice::copymap::project_rows(&pcs, cd, &rot, &vec![0.0; cd], &mut z, false);
    for (pmin, list_len) in [(1usize, 16usize), (2, 32)] {
        let t = octex_build::spacing::SpacingTargets {
            pmin,
            list_len,
            hit_rate: 0.8,
            ratio: 1.37,
            max_spacings: 6,
        };
        let cpu = octex_build::spacing::choose(&map, &z, &t);
        let gpu = gpu_ripples::choose_spacings(&gpu, &map, &z, &t).unwrap();
        eprintln!("pmin {pmin}: {:?}", gpu.spacings);
        assert_eq!(cpu, gpu, "pmin {pmin}");
    }
}
