//! The search defaults a build stores in its index: chosen on the index's own
//! sample, kept through saves and loads, read back from files written
//! before they existed (format version 2; version 3 lacks the query shell),
//! and refused when out of range.

use octex_build::{build, BuildParams};
use octex_index::{Index as RawIndex, IndexError, LoadOptions, Metric, SearchDefaults};
use octex_search::{Index, SearchParams, DEFAULTS_TARGET};
use octex_tests::{brute_force, clustered, recall, test_params};
use xxhash_rust::xxh3::xxh3_64;

const DIM: usize = 32;

fn built(n: usize) -> (RawIndex, Vec<f32>) {
    let base = clustered(n, DIM, 20, 7);
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    (built.index, base)
}

/// Queries near base vectors but not on them.
fn queries_near(base: &[f32], count: usize) -> Vec<f32> {
    let n = base.len() / DIM;
    let mut q = Vec::with_capacity(count * DIM);
    for i in 0..count {
        let row = &base[(i * 37 % n) * DIM..(i * 37 % n + 1) * DIM];
        q.extend(
            row.iter()
                .enumerate()
                .map(|(j, &x)| x + 0.05 * ((i + j) % 5) as f32 - 0.1),
        );
    }
    q
}

/// The bytes of `index` as format version 2 wrote them: the header without
/// its last two fields (the `None`s of `search_defaults` and `query_shell`,
/// one zero byte each).
fn as_version_2(index: RawIndex) -> Vec<u8> {
    let index = index.with_search_defaults(None).unwrap();
    as_older(index, 2)
}

/// The bytes of `index` (its last header fields `None`) as format
/// `version` (2 or 3) wrote them: the header without the fields it lacked.
fn as_older(index: RawIndex, version: u32) -> Vec<u8> {
    let index = index.with_query_shell(None).unwrap();
    let missing = (octex_index::FORMAT_VERSION - version) as usize;
    let mut bytes = index.as_bytes().to_vec();
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    // The last bytes become padding before the first section.
    assert!(
        bytes[24 + hlen - missing..24 + hlen]
            .iter()
            .all(|&b| b == 0),
        "a None is one zero byte"
    );
    let short = hlen - missing;
    let sum = xxh3_64(&bytes[24..24 + short]);
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    bytes[12..16].copy_from_slice(&(short as u32).to_le_bytes());
    bytes[16..24].copy_from_slice(&sum.to_le_bytes());
    bytes
}

/// Uniform vectors in `[0, 1)^dim` (intrinsic dimension `dim`).
fn uniform(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = octex_tests::Rng(seed | 1);
    (0..n * dim)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
        .collect()
}

/// On easy data a build keeps the fixed defaults, which reach the target.
#[test]
fn a_build_keeps_the_fixed_defaults_where_they_reach_the_target() {
    let (raw, base) = built(6_000);
    let stored = raw
        .header()
        .search_defaults
        .expect("a build chooses defaults");
    assert!(stored.is_valid());
    assert_eq!(stored.target, DEFAULTS_TARGET as f32);
    assert!(stored.held_out_recall as f64 >= DEFAULTS_TARGET);
    let index = Index::new(raw);
    assert_eq!(index.default_params(), SearchParams::default());
    let queries = queries_near(&base, 300);
    let truth = brute_force(&base, &queries, DIM, 10);
    let r = recall(
        &index
            .search(&queries, 10, &index.default_params())
            .unwrap()
            .ids,
        &truth,
        10,
    );
    assert!(r >= 0.95, "recall {r}");
}

/// Where the fixed point falls short of the target on the index's sample
/// (short rows, few copies, data of high intrinsic dimension), the stored
/// defaults are deeper, never shallower in any coordinate, and recover the
/// recall on fresh queries.
#[test]
fn a_weak_index_gets_deeper_defaults_that_recover_recall() {
    let dim = 64;
    let base = uniform(10_000, dim, 3);
    let params = BuildParams {
        copies: Some(8),
        row_len: Some(8),
        ..test_params()
    };
    let raw = build(&base, dim, Metric::L2, &params).unwrap().index;
    let index = Index::new(raw);
    let (p, fixed) = (index.default_params(), SearchParams::default());
    assert!(
        p.read_depth >= fixed.read_depth
            && p.start_points >= fixed.start_points
            && p.waves >= fixed.waves
            && p.rerank >= fixed.rerank
            && p != fixed,
        "{p:?}"
    );
    let queries = uniform(300, dim, 4);
    let truth = brute_force(&base, &queries, dim, 10);
    let at = |p: &SearchParams| recall(&index.search(&queries, 10, p).unwrap().ids, &truth, 10);
    let (deeper, shallow) = (at(&p), at(&fixed));
    assert!(
        deeper > shallow && deeper >= 0.95,
        "{deeper} at {p:?}, {shallow} at the fixed point"
    );
}

/// Setting the defaults in place (a built index; values of the built ones'
/// encoded size fit where they were) and by assembling again (a mapped file,
/// or values too long for the place) give the same index; a save and a load
/// keep them.
#[test]
fn defaults_are_kept_through_both_ways_of_setting_them_and_a_file() {
    let (raw, _) = built(2_000);
    let small = SearchDefaults {
        read_depth: 8,
        start_points: 24,
        waves: 5,
        rerank: 32,
        target: 0.9,
        held_out_recall: 0.875,
    };
    let large = SearchDefaults {
        start_points: 300_000,
        rerank: 4_000_000,
        ..small
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.octex");
    raw.save(&path).unwrap();
    for d in [small, large] {
        let in_memory = RawIndex::from_bytes(raw.as_bytes(), LoadOptions::default())
            .unwrap()
            .with_search_defaults(Some(d))
            .unwrap();
        let mapped = RawIndex::load(&path)
            .unwrap()
            .with_search_defaults(Some(d))
            .unwrap();
        assert_eq!(in_memory.header().search_defaults, Some(d));
        assert_eq!(in_memory.as_bytes(), mapped.as_bytes());
        let out = dir.path().join("b.octex");
        mapped.save(&out).unwrap();
        let again = Index::new(RawIndex::load(&out).unwrap());
        assert_eq!(again.raw().header().search_defaults, Some(d));
        assert_eq!(again.default_params(), SearchParams::from(d));
    }
}

/// A file of format version 2 loads, searches as before, and takes the
/// fixed defaults; one of version 3 keeps its defaults; versions outside
/// 2..=4 are refused by name.
#[test]
fn version_2_files_load_with_the_fixed_defaults() {
    let (raw, base) = built(2_000);
    let current = Index::new(RawIndex::from_bytes(raw.as_bytes(), LoadOptions::default()).unwrap());
    let old_bytes = as_version_2(raw);
    let old = RawIndex::from_bytes(&old_bytes, LoadOptions::default()).unwrap();
    assert_eq!(old.header().search_defaults, None);
    let old = Index::new(old);
    assert_eq!(old.default_params(), SearchParams::default());
    let q = queries_near(&base, 50);
    let p = SearchParams::default();
    assert_eq!(
        old.search(&q, 10, &p).unwrap().ids,
        current.search(&q, 10, &p).unwrap().ids
    );

    // Version 3: the defaults kept, no query shell.
    let (raw3, _) = built(2_000);
    let defaults = raw3.header().search_defaults;
    let v3 = RawIndex::from_bytes(&as_older(raw3, 3), LoadOptions::default()).unwrap();
    assert_eq!(v3.header().search_defaults, defaults);
    assert_eq!(v3.header().query_shell, None);

    for version in [1u32, 5, 9] {
        let mut bytes = old_bytes.clone();
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        match RawIndex::from_bytes(&bytes, LoadOptions::default()) {
            Err(e @ IndexError::Version { .. }) => {
                assert!(e.to_string().contains("versions 2 to 4"), "{e}")
            }
            other => panic!("version {version}: {:?}", other.map(|_| ())),
        }
    }
}

/// Defaults out of range behind a correct checksum are refused at load.
#[test]
fn out_of_range_defaults_are_refused() {
    let (raw, _) = built(2_000);
    let good = raw.header().search_defaults.unwrap();
    for bad in [
        SearchDefaults { waves: 0, ..good },
        SearchDefaults {
            start_points: u32::MAX,
            ..good
        },
        SearchDefaults {
            held_out_recall: f32::NAN,
            ..good
        },
        SearchDefaults {
            target: 1.5,
            ..good
        },
    ] {
        let mut parts = raw.to_parts();
        parts.header.search_defaults = Some(bad);
        match RawIndex::from_parts(parts) {
            Err(IndexError::Invalid { problem, .. }) => {
                assert!(problem.contains("search defaults"), "{problem}")
            }
            other => panic!("{bad:?}: {:?}", other.map(|_| ())),
        }
    }
}
