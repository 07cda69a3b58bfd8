//! The living index on disk: saved after adds and removes, loaded back to the
//! same answers; damaged files refused; a plain loader told what it holds.

use octex_build::{build, LiveError, LiveIndex};
use octex_index::{IndexError, Metric};
use octex_search::SearchParams;
use octex_tests::*;

const DIM: usize = 24;

/// A living index with own ids, built, inserted, pending and removed
/// vectors: 2,000 built (ids 10,000 + position), 1,200 added (inserted at
/// the threshold), 30 more pending, 1 in 10 removed.
fn changed_index(metric: Metric) -> (LiveIndex, Vec<f32>) {
    let base = clustered(3_300, DIM, 12, 5);
    let params = test_params();
    let built = build(&base[..2_000 * DIM], DIM, metric, &params).unwrap();
    let ids: Vec<u64> = (0..2_000).map(|i| 10_000 + i).collect();
    let mut live = LiveIndex::with_ids(octex_search::Index::new(built.index), params, ids).unwrap();
    live.add(&base[2_000 * DIM..3_200 * DIM], None).unwrap();
    live.flush().unwrap();
    live.add(&base[3_200 * DIM..3_230 * DIM], None).unwrap();
    assert!(live.pending() > 0 && live.index().len() > 2_000);
    let removed: Vec<u64> = (10_000..12_000).step_by(10).chain(12_000..12_030).collect();
    assert_eq!(live.remove(&removed), removed.len());
    (live, base)
}

#[test]
fn a_saved_living_index_loads_to_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let p = SearchParams::default();
    for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        let (mut live, base) = changed_index(metric);
        let queries = &base[3_230 * DIM..3_300 * DIM];
        let path = dir.path().join(format!("{metric}.octex"));
        live.save(&path).unwrap();
        let back = LiveIndex::load(&path, test_params()).unwrap();
        assert_eq!((back.len(), back.pending()), (live.len(), live.pending()));
        let before = live.search(queries, 10, &p, None).unwrap();
        let after = back.search(queries, 10, &p, None).unwrap();
        assert_eq!(before, after, "{metric}");
        // Auto ids go on from where they were, not from the live maximum.
        let mut back = back;
        let next = back.add(&base[..DIM], None).unwrap()[0];
        assert_eq!(next, live.add(&base[..DIM], None).unwrap()[0]);
        // A plain loader does not pass the file off as a plain index.
        let err = octex_index::Index::load(&path).unwrap_err();
        assert!(matches!(err, IndexError::LivingFile(_)), "{err}");
    }
}

#[test]
fn an_unchanged_index_saves_as_a_plain_file_and_a_plain_file_loads_live() {
    let dir = tempfile::tempdir().unwrap();
    let base = clustered(1_500, DIM, 6, 8);
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    let mut live = LiveIndex::new(octex_search::Index::new(built.index), test_params());
    let path = dir.path().join("plain.octex");
    live.save(&path).unwrap();
    let plain = octex_index::Index::load(&path).unwrap();
    assert_eq!(plain.len(), 1_500);
    let back = LiveIndex::load(&path, test_params()).unwrap();
    assert!(back.ids_are_positions());
    assert_eq!(back.len(), 1_500);
}

#[test]
fn removing_most_vectors_compacts_on_save() {
    let dir = tempfile::tempdir().unwrap();
    let base = clustered(2_000, DIM, 8, 9);
    let built = build(&base, DIM, Metric::L2, &test_params()).unwrap();
    let mut live = LiveIndex::new(octex_search::Index::new(built.index), test_params());
    let gone: Vec<u64> = (0..1_200).collect();
    live.remove(&gone);
    let path = dir.path().join("compact.octex");
    live.save(&path).unwrap();
    assert_eq!(live.index().len(), 800, "rebuilt over the live vectors");
    let back = LiveIndex::load(&path, test_params()).unwrap();
    assert_eq!(back.len(), 800);
    let res = back
        .search(&base[..50 * DIM], 5, &SearchParams::default(), None)
        .unwrap();
    assert!(res.ids.iter().all(|id| (1_200..2_000).contains(id)));
}

#[test]
fn damaged_living_files_are_refused_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let (mut live, _) = changed_index(Metric::L2);
    let path = dir.path().join("live.octex");
    live.save(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let bad = dir.path().join("bad.octex");
    let load = |bytes: &[u8]| {
        std::fs::write(&bad, bytes).unwrap();
        LiveIndex::load(&bad, test_params())
    };
    // Truncated anywhere, one byte flipped in the header, in each living
    // section and in the embedded index: an error each time.
    for cut in [10, 30, 200, good.len() / 2, good.len() - 1] {
        assert!(load(&good[..cut]).is_err(), "cut at {cut}");
    }
    let hlen = u32::from_le_bytes(good[12..16].try_into().unwrap()) as usize;
    for at in [8, 30, 24 + hlen + 100, good.len() / 3, good.len() - 100] {
        let mut b = good.clone();
        b[at] ^= 0x40;
        match load(&b) {
            Err(LiveError::File(_)) => {}
            Err(e) => panic!("byte {at}: unexpected error {e}"),
            Ok(_) => panic!("byte {at} flipped and the file loaded"),
        }
    }
    // Another version is named as such.
    let mut b = good.clone();
    b[8] = 9;
    assert!(matches!(
        load(&b),
        Err(LiveError::File(IndexError::Version { found: 9, .. }))
    ));
}

#[test]
fn the_reserved_id_is_refused() {
    let base = clustered(1_200, DIM, 4, 2);
    let built = build(&base[..1_100 * DIM], DIM, Metric::L2, &test_params()).unwrap();
    let mut live = LiveIndex::new(octex_search::Index::new(built.index), test_params());
    assert!(matches!(
        live.add(&base[1_100 * DIM..1_101 * DIM], Some(&[u64::MAX])),
        Err(LiveError::ReservedId)
    ));
    assert_eq!(live.len(), 1_100);
}
