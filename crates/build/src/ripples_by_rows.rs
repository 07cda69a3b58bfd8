//! The paper's ripples (the `l` vectors nearest to each fragment's centre in
//! the copy's projection) found through the neighbour rows: how the CPU
//! builder finds them.
//!
//! The build starts from each fragment's own members nearest to its centre
//! ([`crate::ripples::RippleRule::Members`]: a sort, no search), and the rows
//! by search run over those ripples (their queries are base vectors, which
//! lie in the fragments they read). Once the rows exist, every ripple is
//! offered the first [`ROW_ENTRIES`] row entries of its first
//! [`EXPANDED_ENTRIES`] ids, all scored by distance to the fragment's centre
//! in the copy's projection, and keeps the `l` nearest. Vectors near the
//! centre are near the fragment's nearest members, and the rows list those.
//! This replaces an inverted-file search per centre, whose cost grows as
//! `n^1.5` (docs/RESULTS.md, "Build time").

use rayon::prelude::*;

use octex_index::{IndexParts, PAD_ID};
use octex_lattice::CopyMap;
use octex_search::simd::prefetch;

/// Ripple entries (nearest to the centre first) whose row entries are offered.
pub const EXPANDED_ENTRIES: usize = 4;
/// Row entries offered per expanded ripple entry.
pub const ROW_ENTRIES: usize = 16;
/// Offered vectors prefetched ahead of the distance being computed.
const PREFETCH_AHEAD: usize = 8;

/// Replace every ripple of `parts` by the `l` vectors nearest to its
/// fragment's centre among the ripple and the rows of its first entries.
/// `anchors` holds a member of each stored fragment by ripple ordinal (its
/// decoding gives the centre), `pcs` every vector's principal coordinates
/// (`n x basis_dim`); `on_copy` is told of each copy done. Nothing changes
/// when the anchors do not match the ripples or there are no rows.
pub fn nearest_through_rows(
    parts: &mut IndexParts,
    map: &CopyMap,
    pcs: &[f32],
    anchors: &[u32],
    on_copy: &dyn Fn(),
) {
    let l = parts.header.list_len as usize;
    let lt = parts.header.row_len as usize;
    let spacings = map.spacings.len();
    let cd = map.copy_dim();
    let rows = &parts.rows;
    if l == 0 || anchors.len() * l != parts.ripples.len() || rows.is_empty() {
        return;
    }
    for c in 0..map.copies {
        let z = crate::ripples::project_copy(pcs, map, c, None);
        for s in 0..spacings {
            let e = parts.tables[c * spacings + s];
            let (a, b) = (
                e.ripple_base as usize,
                (e.ripple_base + e.fragments) as usize,
            );
            parts.ripples[a * l..b * l]
                .par_chunks_mut(l)
                .zip(&anchors[a..b])
                .for_each_init(
                    || (vec![0f32; cd], Vec::new(), Vec::new()),
                    |(centre, ids, scored), (ripple, &anchor)| {
                        let za = &z[anchor as usize * cd..(anchor as usize + 1) * cd];
                        crate::ripples::centre_of(map, c, s, za, centre);
                        offered(ripple, rows, lt, ids);
                        let zv = |v: u32| &z[v as usize * cd..(v as usize + 1) * cd];
                        for &v in ids.iter().take(PREFETCH_AHEAD) {
                            prefetch(zv(v));
                        }
                        scored.clear();
                        for (i, &v) in ids.iter().enumerate() {
                            if let Some(&ahead) = ids.get(i + PREFETCH_AHEAD) {
                                prefetch(zv(ahead));
                            }
                            scored.push((octex_search::knn::squared_l2(zv(v), centre), v));
                        }
                        keep_nearest(scored, ripple);
                    },
                );
        }
        on_copy();
    }
}

/// The ids offered to `ripple`: its own and the first [`ROW_ENTRIES`] row
/// entries of its first [`EXPANDED_ENTRIES`], sorted, without repeats or
/// padding.
fn offered(ripple: &[u32], rows: &[u32], lt: usize, ids: &mut Vec<u32>) {
    ids.clear();
    ids.extend(ripple.iter().copied().filter(|&id| id != PAD_ID));
    for &u in ripple.iter().take(EXPANDED_ENTRIES) {
        if u == PAD_ID {
            break;
        }
        let row = &rows[u as usize * lt..(u as usize + 1) * lt];
        ids.extend(
            row.iter()
                .take(ROW_ENTRIES)
                .copied()
                .filter(|&v| v != PAD_ID),
        );
    }
    ids.sort_unstable();
    ids.dedup();
}

/// The `ripple.len()` nearest of `scored` (distance, id) into `ripple`,
/// nearest first, ties by id, padded with `PAD_ID`.
fn keep_nearest(scored: &mut [(f32, u32)], ripple: &mut [u32]) {
    let by = |x: &(f32, u32), y: &(f32, u32)| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1));
    let keep = ripple.len().min(scored.len());
    if keep < scored.len() {
        scored.select_nth_unstable_by(keep, by);
    }
    scored[..keep].sort_unstable_by(by);
    for (j, slot) in ripple.iter_mut().enumerate() {
        *slot = if j < keep { scored[j].1 } else { PAD_ID };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_nearest_in_order_and_pads() {
        let mut scored = vec![(3.0, 7), (1.0, 9), (1.0, 2), (0.5, 4)];
        let mut ripple = [0u32; 3];
        keep_nearest(&mut scored, &mut ripple);
        assert_eq!(ripple, [4, 2, 9]);
        let mut few = vec![(2.0, 1)];
        let mut ripple = [0u32; 3];
        keep_nearest(&mut few, &mut ripple);
        assert_eq!(ripple, [1, PAD_ID, PAD_ID]);
    }

    #[test]
    fn offers_the_ripple_and_the_first_row_entries_of_its_first_ids() {
        // Rows of 20 entries: vector u's row is u*100 + 0..20.
        let lt = 20;
        let rows: Vec<u32> = (0..10u32)
            .flat_map(|u| (0..lt as u32).map(move |j| u * 100 + j))
            .collect();
        let ripple = [5, 1, 2, 3, 4, PAD_ID];
        let mut ids = Vec::new();
        offered(&ripple, &rows, lt, &mut ids);
        let mut want: Vec<u32> = vec![5, 1, 2, 3, 4];
        for u in [5u32, 1, 2, 3] {
            want.extend((0..ROW_ENTRIES as u32).map(|j| u * 100 + j));
        }
        want.sort_unstable();
        want.dedup();
        assert_eq!(ids, want);
    }
}
