//! Fragment ripples of one copy, by sorting.
//!
//! For each spacing, coarsest first: one pass decodes every vector's fragment
//! (key, check word, squared distance to the centre); one sort by (key, distance,
//! id) lays every fragment's members out nearest-first; a fragment with at least
//! `pmin` members keeps its first `l`. Keys whose members disagree on the check
//! word are collisions of two fragments and are dropped.
//!
//! **Short fragments** (fewer than `l` members) are completed from their parent:
//! the fragment one spacing coarser that holds the short fragment's nearest member
//! (always populated, processed just before). Its ripple and the members are
//! ranked by distance to the short fragment's centre in the copy's projection and
//! the nearest `l` kept. This costs `O(l log l)` per short fragment; the design's
//! prototype measured W=0 recall 0.710 vs 0.631 and W=1 0.954 vs 0.941 for it.
//! Short fragments at the coarsest spacing stay short (padded with `PAD_ID`).

use octex_index::table::{build_table, lookup, PAD_ID};
use octex_lattice::CopyMap;

/// One (copy, spacing) table's content.
#[derive(Clone, Debug, Default)]
pub struct SpacingRipples {
    /// Stored fragments' keys.
    pub keys: Vec<u64>,
    /// `keys.len() x l` ids, nearest to the centre first, padded with `PAD_ID`.
    pub ripples: Vec<u32>,
    /// Fragments with fewer than `l` members (completed from the parent).
    pub short: usize,
    /// Keys dropped for collisions.
    pub collisions: usize,
}

/// Ripples of one copy, spacing by spacing (finest first, as in the index).
pub fn build_copy(map: &CopyMap, copy: usize, z: &[f32], list_len: usize, pmin: usize) -> Vec<SpacingRipples> {
    let cd = map.copy_dim();
    let n = z.len() / cd;
    let l = list_len;
    let spacings = map.spacings.len();
    let mut out: Vec<SpacingRipples> = vec![SpacingRipples::default(); spacings];
    let mut keys = vec![0u64; n];
    let mut checks = vec![0u64; n];
    let mut dists = vec![0f32; n];
    let mut order: Vec<u32> = (0..n as u32).collect();
    // The coarser spacing's per-vector keys and its table, for parent lookups.
    let mut parent: Option<(Vec<u64>, Vec<u64>, Vec<u32>)> = None;
    let mut coords = vec![0i32; cd];
    let mut centre = vec![0f32; cd];
    let mut cand: Vec<(f32, u32)> = Vec::with_capacity(2 * l);

    for s in (0..spacings).rev() {
        for i in 0..n {
            let (fk, d) = map.fragment(&z[i * cd..(i + 1) * cd], copy, s);
            keys[i] = fk.key;
            checks[i] = fk.check;
            dists[i] = d;
        }
        order.sort_unstable_by_key(|&i| (keys[i as usize], dists[i as usize].to_bits(), i));
        let (finer, coarser) = out.split_at_mut(s + 1);
        let res = &mut finer[s];
        let mut start = 0;
        while start < n {
            let key = keys[order[start] as usize];
            let mut end = start + 1;
            while end < n && keys[order[end] as usize] == key {
                end += 1;
            }
            let members = &order[start..end];
            start = end;
            if members.len() < pmin {
                continue;
            }
            let check = checks[members[0] as usize];
            if members.iter().any(|&m| checks[m as usize] != check) {
                res.collisions += 1;
                continue;
            }
            res.keys.push(key);
            let first = members[0] as usize;
            if members.len() >= l {
                res.ripples.extend_from_slice(&members[..l]);
                continue;
            }
            res.short += 1;
            cand.clear();
            map.decode(&z[first * cd..(first + 1) * cd], copy, s, &mut coords);
            map.centre(&coords, copy, s, &mut centre);
            let dist_to_centre = |id: u32| -> f32 {
                let zr = &z[id as usize * cd..(id as usize + 1) * cd];
                zr.iter().zip(&centre).map(|(a, b)| (a - b) * (a - b)).sum()
            };
            cand.extend(members.iter().map(|&m| (dist_to_centre(m), m)));
            if let Some((pkeys, slot_keys, slot_ids)) = &parent {
                if let Some(ord) = lookup(slot_keys, slot_ids, pkeys[first]) {
                    let pr = &coarser[0].ripples[ord as usize * l..(ord as usize + 1) * l];
                    for &id in pr.iter().take_while(|&&id| id != PAD_ID) {
                        if !members.contains(&id) {
                            cand.push((dist_to_centre(id), id));
                        }
                    }
                }
            }
            cand.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let before = res.ripples.len();
            res.ripples.extend(cand.iter().take(l).map(|c| c.1));
            res.ripples.resize(before + l, PAD_ID);
        }
        let (slot_keys, slot_ids) = build_table(&res.keys);
        parent = Some((keys.clone(), slot_keys, slot_ids));
    }
    out
}
