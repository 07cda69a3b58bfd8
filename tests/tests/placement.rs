//! The placement plan of a built index and the loader's memory advice: a
//! plan for less memory than the index puts its rerank vectors on disk, and
//! advising the mapped file so changes no answer.

use octex_build::{build, placement_sizes};
use octex_index::{Index as RawIndex, Metric};
use octex_placement::{plan, Machine, Part, Tier};
use octex_search::{Index, SearchParams};
use octex_tests::{clustered, test_params};

#[test]
fn a_mapped_index_planned_with_vectors_on_disk_answers_the_same() {
    let dim = 48;
    let base = clustered(4_000, dim, 12, 5);
    let built = build(&base, dim, Metric::L2, &test_params()).unwrap().index;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.octex");
    built.save(&path).unwrap();

    let raw = RawIndex::load(&path).unwrap();
    let sizes = placement_sizes(&raw);
    assert!(sizes.total() <= raw.as_bytes().len() as u64);
    // Room for the per-wave parts only.
    let p = plan(&sizes, &Machine::new(0, 0, sizes.per_wave())).unwrap();
    assert_eq!(p.placement(Part::Vectors).tier, Tier::Disk);
    assert!(p.shrinks.is_empty());
    assert_eq!(p.placement(Part::Rows).tier, Tier::Host);

    let queries = clustered(40, dim, 12, 6);
    let params = SearchParams::default();
    let before = Index::new(RawIndex::load(&path).unwrap())
        .search(&queries, 10, &params)
        .unwrap();
    for on_disk in [true, false] {
        raw.advise_memory(on_disk).unwrap();
    }
    let index = Index::new(raw);
    let after = index.search(&queries, 10, &params).unwrap();
    assert_eq!(before.ids, after.ids);
    assert_eq!(before.distances, after.distances);
    // An index in owned memory takes the advice as a no-op.
    built.advise_memory(true).unwrap();
}
