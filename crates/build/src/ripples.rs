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
//! (always populated, processed just before). The parent's [`PARENT_CANDIDATES`]
//! members nearest to *its* centre (or its completed ripple when it is short
//! itself) and the short fragment's own members are ranked by distance to the
//! short fragment's centre in the copy's projection, and the nearest `l` kept.
//! Decision: candidates from the parent's members rather than only its `l`-long
//! ripple, because a fine fragment at the edge of a coarse one is far from the
//! coarse centre whose list the ripple holds; this costs `O(64 * 8b)` per short
//! fragment. Short fragments at the coarsest spacing stay short (padded with
//! `PAD_ID`).

use octex_index::table::{build_table, lookup, PAD_ID};
use octex_index::TableEntry;
use octex_lattice::CopyMap;
use rayon::prelude::*;

/// Parent members considered when completing a short fragment.
pub const PARENT_CANDIDATES: usize = 64;

/// The copy's rotation (`m_c x 8b` within the `m x width` rotation), padded
/// with zero rows to `m x 8b`: `z = pcs * rot` for every copy's projection (CPU and GPU).
pub fn copy_rotation(map: &CopyMap, c: usize) -> Vec<f32> {
    let (cd, width, m, mc) = (
        map.copy_dim(),
        map.width(),
        map.basis_dim,
        map.rotation_dim(),
    );
    let mut rot = vec![0f32; m * cd];
    for t in 0..mc {
        rot[t * cd..(t + 1) * cd]
            .copy_from_slice(&map.rotation[t * width + c * cd..t * width + (c + 1) * cd]);
    }
    rot
}

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

/// The ripples and key tables of every (copy, spacing), laid out as the index
/// stores them: `tables[c * spacings + s]` says where table (c, s) lives in the
/// flat arrays (the data need not be in table order: the GPU appends spacings
/// coarsest first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlatRipples {
    pub tables: Vec<TableEntry>,
    pub table_keys: Vec<u64>,
    pub table_slots: Vec<u32>,
    pub ripples: Vec<u32>,
    /// Stored fragments per spacing, over all copies.
    pub fragments: Vec<usize>,
    /// Of those, completed from the coarser spacing.
    pub short: Vec<usize>,
    pub collisions: usize,
}

impl FlatRipples {
    /// Empty tables for `copies x spacings`.
    pub fn new(copies: usize, spacings: usize) -> Self {
        Self {
            tables: vec![TableEntry::default(); copies * spacings],
            fragments: vec![0; spacings],
            short: vec![0; spacings],
            ..Default::default()
        }
    }

    /// Record table `at` as the next `capacity` slots and `ripple_ids` ids
    /// of the flat arrays (which the caller then appends).
    fn record(
        &mut self,
        at: usize,
        capacity: usize,
        ripple_ids: usize,
        list_len: usize,
    ) -> TableEntry {
        let e = TableEntry {
            slot_offset: self.table_keys.len() as u64,
            capacity: capacity as u64,
            ripple_base: (self.ripples.len() / list_len) as u64,
            fragments: (ripple_ids / list_len) as u64,
        };
        self.tables[at] = e;
        e
    }

    /// Room for table `at` of `capacity` slots and `ripple_ids` ids, to be
    /// filled in place (the new ranges zeroed on all cores, so first touches
    /// of fresh pages run in parallel); returns the table's entry.
    pub fn append(
        &mut self,
        at: usize,
        capacity: usize,
        ripple_ids: usize,
        list_len: usize,
    ) -> TableEntry {
        let e = self.record(at, capacity, ripple_ids, list_len);
        self.table_keys
            .par_extend(rayon::iter::repeat_n(0u64, capacity));
        self.table_slots
            .par_extend(rayon::iter::repeat_n(0u32, capacity));
        self.ripples
            .par_extend(rayon::iter::repeat_n(0u32, ripple_ids));
        e
    }

    /// Flatten the CPU builder's per-copy ripples, building the key tables (in
    /// parallel over tables).
    pub fn from_copies(per_copy: Vec<Vec<SpacingRipples>>, list_len: usize) -> Self {
        let spacings = per_copy.first().map_or(0, |c| c.len());
        let mut flat = Self::new(per_copy.len(), spacings);
        let levels: Vec<SpacingRipples> = per_copy.into_iter().flatten().collect();
        let tables: Vec<(Vec<u64>, Vec<u32>)> =
            levels.par_iter().map(|sr| build_table(&sr.keys)).collect();
        for (t, (sr, (sk, si))) in levels.iter().zip(tables).enumerate() {
            flat.record(t, sk.len(), sr.ripples.len(), list_len);
            flat.table_keys.extend_from_slice(&sk);
            flat.table_slots.extend_from_slice(&si);
            flat.ripples.extend_from_slice(&sr.ripples);
            let s = t % spacings.max(1);
            flat.fragments[s] += sr.keys.len();
            flat.short[s] += sr.short;
            flat.collisions += sr.collisions;
        }
        flat
    }
}

/// Ripples of one copy, spacing by spacing (finest first, as in the index).
pub fn build_copy(
    map: &CopyMap,
    copy: usize,
    z: &[f32],
    list_len: usize,
    pmin: usize,
) -> Vec<SpacingRipples> {
    let cd = map.copy_dim();
    let n = z.len() / cd;
    let l = list_len;
    let spacings = map.spacings.len();
    let mut out: Vec<SpacingRipples> = vec![SpacingRipples::default(); spacings];
    let mut keys = vec![0u64; n];
    let mut checks = vec![0u64; n];
    let mut dists = vec![0f32; n];
    let mut order: Vec<u32> = Vec::with_capacity(n);
    let mut packed: Vec<(u64, u32, u32)> = Vec::with_capacity(n);
    // The coarser spacing's per-vector keys, its table, its member order and the
    // member range of each stored fragment, for parent lookups.
    let mut parent: Option<Parent> = None;
    let mut groups: Vec<(u32, u32)> = Vec::new();
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
        // Sort packed (key, distance, id) tuples rather than ids through the
        // arrays: the same order, with sequential instead of random accesses
        // (an indirect sort of 1M ids took seconds in cache misses).
        packed.clear();
        packed.extend((0..n).map(|i| (keys[i], dists[i].to_bits(), i as u32)));
        packed.sort_unstable();
        order.clear();
        order.extend(packed.iter().map(|p| p.2));
        let (finer, coarser) = out.split_at_mut(s + 1);
        let res = &mut finer[s];
        groups.clear();
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
            groups.push(((end - members.len()) as u32, end as u32));
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
            if let Some(par) = &parent {
                if let Some(ord) = lookup(&par.slot_keys, &par.slot_ids, par.keys[first]) {
                    let (a, b) = par.groups[ord as usize];
                    let pmembers = &par.order[a as usize..b as usize];
                    let from_ripple;
                    let pool: &[u32] = if pmembers.len() >= l {
                        &pmembers[..pmembers.len().min(PARENT_CANDIDATES)]
                    } else {
                        from_ripple = &coarser[0].ripples[ord as usize * l..(ord as usize + 1) * l];
                        from_ripple
                    };
                    for &id in pool.iter().take_while(|&&id| id != PAD_ID) {
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
        parent = Some(Parent {
            keys: keys.clone(),
            slot_keys,
            slot_ids,
            order: order.clone(),
            groups: std::mem::take(&mut groups),
        });
    }
    out
}

/// What a finer spacing needs of the coarser one.
struct Parent {
    /// Every vector's key at the coarser spacing.
    keys: Vec<u64>,
    slot_keys: Vec<u64>,
    slot_ids: Vec<u32>,
    /// Vectors sorted by (key, distance to centre).
    order: Vec<u32>,
    /// Member range in `order` of each stored fragment, by ordinal.
    groups: Vec<(u32, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use octex_lattice::{CopyMapParams, GaussianRng};

    #[test]
    fn ripples_hold_the_nearest_members_sorted_by_distance_to_the_centre() {
        let (n, cd, l) = (6_000usize, 32usize, 8usize);
        let mut rng = GaussianRng::new(1, 0);
        let z: Vec<f32> = (0..n * cd).map(|_| rng.normal() as f32).collect();
        let mut basis = vec![0f64; cd * cd];
        for i in 0..cd {
            basis[i * cd + i] = 1.0;
        }
        let map = CopyMap::random(
            &vec![0.0; cd],
            &basis,
            cd,
            cd,
            1.0,
            &CopyMapParams {
                copies: 1,
                blocks: 4,
                seed: 3,
            },
            vec![1.6, 2.4, 3.6],
        );
        let out = build_copy(&map, 0, &z, l, 1);
        for (s, sr) in out.iter().enumerate() {
            // Members of every fragment by brute force.
            let mut members: std::collections::HashMap<u64, Vec<(f32, u32)>> = Default::default();
            for i in 0..n {
                let (k, d) = map.fragment(&z[i * cd..(i + 1) * cd], 0, s);
                members.entry(k.key).or_default().push((d, i as u32));
            }
            assert_eq!(
                sr.keys.len(),
                members.len(),
                "pmin = 1 stores every fragment"
            );
            for (f, key) in sr.keys.iter().enumerate() {
                let ripple = &sr.ripples[f * l..(f + 1) * l];
                let mut m = members[key].clone();
                m.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                if m.len() >= l {
                    let want: Vec<u32> = m[..l].iter().map(|x| x.1).collect();
                    assert_eq!(ripple, &want[..], "spacing {s}: not the l nearest members");
                } else {
                    // Short: every member is in, and the ripple is sorted by distance
                    // to the centre in the projection.
                    for (_, id) in &m {
                        assert!(ripple.contains(id));
                    }
                    let mut coords = [0i32; 32];
                    map.decode(
                        &z[m[0].1 as usize * cd..(m[0].1 as usize + 1) * cd],
                        0,
                        s,
                        &mut coords,
                    );
                    let mut centre = [0f32; 32];
                    map.centre(&coords, 0, s, &mut centre);
                    let dist = |id: u32| -> f32 {
                        (0..cd)
                            .map(|j| (z[id as usize * cd + j] - centre[j]).powi(2))
                            .sum()
                    };
                    let valid: Vec<u32> = ripple
                        .iter()
                        .copied()
                        .take_while(|&id| id != PAD_ID)
                        .collect();
                    assert!(
                        valid.windows(2).all(|w| dist(w[0]) <= dist(w[1])),
                        "spacing {s}: short ripple not sorted"
                    );
                    if s + 1 < out.len() {
                        // Completed to l whenever its parent offers enough ids.
                        let first = m[0].1 as usize;
                        let pkey = map
                            .fragment(&z[first * cd..(first + 1) * cd], 0, s + 1)
                            .0
                            .key;
                        let pf = out[s + 1]
                            .keys
                            .iter()
                            .position(|&k| k == pkey)
                            .expect("parent stored");
                        let parent_len = out[s + 1].ripples[pf * l..(pf + 1) * l]
                            .iter()
                            .filter(|&&id| id != PAD_ID)
                            .count();
                        if parent_len == l {
                            assert_eq!(
                                valid.len(),
                                l,
                                "spacing {s}: a short fragment under a full parent is completed"
                            );
                        }
                    }
                }
            }
        }
    }
}
