//! The probe count of the ripples' inverted files, chosen on a sample: the
//! fragments that sampled base vectors would read as queries get their
//! ripples searched with each rung of [`PROBE_LADDER`] in turn, and the first
//! rung whose lists hold [`PROBE_TARGET_RECALL`] of the exact `l` nearest to
//! the centre wins. [`stored_ripple_recall`] measures the same on a finished
//! build (the build report's ripple recall).

use octex_index::table::{lookup, PAD_ID};
use octex_lattice::CopyMap;

use crate::centre_knn::ProjectedIvf;
use crate::ripples::{centre_of, RippleSpec, RippleTables};

/// Probe counts tried, fewest first, when the build chooses them. The last
/// rung is 12: on GloVe-50 (no rung reaches the target) 24 probes took 1.6x
/// the ripple time of 12 for +0.007 first-round and +0.002 final recall.
pub const PROBE_LADDER: [usize; 4] = [4, 6, 8, 12];
/// Recall of the exact `l` nearest that the chosen probe count must reach on
/// the sample (the last rung is taken when none does).
pub const PROBE_TARGET_RECALL: f64 = 0.9;

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

/// The probe count for `spec`'s searched ripples: the fewest of
/// [`PROBE_LADDER`] whose lists hold [`PROBE_TARGET_RECALL`] of the exact `l`
/// nearest of the finest fragments' centres of `samples` sample vectors of
/// copy `copy` (else the last rung), with the recall it measured. Data whose centres sit inside the data reach
/// the target with few probes; centres far from the data (coarse spacings
/// against the data's extent, as on GloVe-50) take the last rung.
pub fn choose_probes(
    map: &CopyMap,
    copy: usize,
    z: &[f32],
    spec: &RippleSpec,
    samples: usize,
) -> (usize, f64) {
    let ivf = ProjectedIvf::build(z, map.copy_dim(), &spec.ivf);
    let search = |centres: &[f32], probes| {
        Ok::<_, std::convert::Infallible>(ivf.nearest(centres, spec.list_len, probes, PAD_ID))
    };
    choose_probes_with(map, copy, z, spec, samples, search).unwrap_or_else(|e| match e {})
}

/// [`choose_probes`] with the inverted-file search given: `search(centres,
/// probes)` returns the `l` ids found for each centre (the GPU builder passes
/// its own inverted file).
pub fn choose_probes_with<E, F>(
    map: &CopyMap,
    copy: usize,
    z: &[f32],
    spec: &RippleSpec,
    samples: usize,
    mut search: F,
) -> Result<(usize, f64), E>
where
    F: FnMut(&[f32], usize) -> Result<Vec<u32>, E>,
{
    let cd = map.copy_dim();
    // Before the tables exist: every vector's finest fragment (stored when
    // pmin = 1, the default below 2M vectors).
    let (_, centres) = sample_fragments(map, copy, z, samples, spec.ivf.seed, &|_, _| true);
    let exact = crate::centre_knn::ExactLists::new(z, cd, &centres, spec.list_len);
    let mut last = (PROBE_LADDER[PROBE_LADDER.len() - 1], 0.0);
    for &probes in &PROBE_LADDER {
        let r = exact.recall(&search(&centres, probes)?);
        last = (probes, r);
        if r >= PROBE_TARGET_RECALL {
            break;
        }
    }
    Ok(last)
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
