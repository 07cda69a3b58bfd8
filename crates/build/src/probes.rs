//! How close a build's stored ripples come to the exact `l` nearest of
//! their fragments' centres, on the fragments that sampled base vectors read
//! as queries ([`stored_ripple_recall`]: the build report's ripple recall).

use octex_index::table::lookup;
use octex_lattice::CopyMap;

use crate::ripples::{centre_of, RippleTables};

/// The fragments that `samples` seeded sample vectors of copy `copy` would
/// read as queries: each one's finest fragment for which `stored(spacing,
/// key)` holds (none: the vector is skipped). Returns each one's spacing and
/// key, and the centres (`picked x 8b`). Only the sampled vectors are decoded.
pub(crate) fn sample_fragments(
    map: &CopyMap,
    copy: usize,
    z: &[f32],
    samples: usize,
    seed: u64,
    stored: &dyn Fn(usize, u64) -> bool,
) -> (Vec<(usize, u64)>, Vec<f32>) {
    let cd = map.copy_dim();
    let rows = crate::pca::sample_rows(z.len() / cd, samples, seed);
    let mut picked = Vec::with_capacity(rows.len());
    let mut centres = Vec::with_capacity(rows.len() * cd);
    for &r in &rows {
        let zr = &z[r * cd..(r + 1) * cd];
        let found = (0..map.spacings.len())
            .map(|s| (s, map.fragment(zr, copy, s).0.key))
            .find(|&(s, key)| stored(s, key));
        if let Some((s, key)) = found {
            picked.push((s, key));
            let at = centres.len();
            centres.resize(at + cd, 0.0);
            centre_of(map, copy, s, zr, &mut centres[at..]);
        }
    }
    (picked, centres)
}

/// How close the stored ripples of copy `copy` come to the exact `l` nearest
/// of their fragments' centres: the recall of the lists in `stored` against a
/// brute-force k-NN over `z` (that copy's projection), over the fragments
/// that `samples` seeded sample vectors read as queries (the finest stored
/// one), each found by its key. It measures what was stored, whichever rule or
/// builder (CPU or GPU) made it.
pub fn stored_ripple_recall(
    map: &CopyMap,
    copy: usize,
    z: &[f32],
    stored: RippleTables<'_>,
    list_len: usize,
    samples: usize,
) -> f64 {
    let cd = map.copy_dim();
    let spacings = map.spacings.len();
    let l = list_len;
    let ordinal = |s: usize, key: u64| {
        let t = stored.tables[copy * spacings + s];
        let slots = t.slot_offset as usize..(t.slot_offset + t.capacity) as usize;
        lookup(
            &stored.table_keys[slots.clone()],
            &stored.table_slots[slots],
            key,
        )
        .map(|ord| t.ripple_base as usize + ord as usize)
    };
    let (picked, centres) = sample_fragments(map, copy, z, samples, 0x5a_4b1e, &|s, key| {
        ordinal(s, key).is_some()
    });
    let mut lists = Vec::with_capacity(picked.len() * l);
    for &(s, key) in &picked {
        let at = ordinal(s, key).expect("sampled fragments are stored") * l;
        lists.extend_from_slice(&stored.ripples[at..at + l]);
    }
    crate::centre_knn::recall_against_exact(z, cd, &centres, &lists, l)
}
