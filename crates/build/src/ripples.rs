//! Fragment ripples of one copy.
//!
//! For each spacing, coarsest first: one pass decodes every vector's fragment
//! (key, check word, squared distance to the centre); one sort by (key, distance,
//! id) lays every fragment's members out nearest-first; a fragment with at least
//! `pmin` members is stored. Keys whose members disagree on the check word are
//! collisions of two fragments and are dropped. What a stored fragment's ripple
//! holds is the [`RippleRule`]:
//!
//! - [`RippleRule::Nearest`] (the paper's, section 3.3, and the default): the `l`
//!   base vectors nearest to the fragment's centre in the copy's projection,
//!   whether or not they are members, found here through an inverted file over
//!   the copy's projection ([`crate::centre_knn`]), or by the CPU builder
//!   through the neighbour rows ([`crate::ripples_by_rows`]), which starts
//!   from the members rule's ripples. When `pmin >= l` every stored
//!   fragment holds at least `l` members and the build keeps its `l` members
//!   nearest to the centre instead, as the paper does at a billion vectors (a
//!   sort, no search).
//! - [`RippleRule::Members`] (octex's first rule, kept for comparison and run by
//!   the GPU sort builder): the fragment's own members nearest to the centre;
//!   **short fragments** (fewer than `l` members) are completed from their
//!   parent, the fragment one spacing coarser that holds the short fragment's
//!   nearest member. The parent's [`PARENT_CANDIDATES`] members nearest to *its*
//!   centre (or its completed ripple when it is short itself) and the short
//!   fragment's own members are ranked by distance to the short fragment's
//!   centre, and the nearest `l` kept. Short fragments at the coarsest spacing
//!   stay short (padded with `PAD_ID`).
//!
//! Measured on GloVe-50 (C=64, r=16, 1,000 queries, pool recall at W=0): the
//! members rule's lists are centred far from most queries, because at 390k
//! vectors almost every fine fragment holds a few members; the nearest rule's
//! lists are what the query would have found around its own fragment. The
//! figures are in `docs/RESULTS.md`.

use octex_index::table::{build_table, lookup, PAD_ID};
use octex_index::TableEntry;
use octex_lattice::CopyMap;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::centre_knn::{IvfParams, ProjectedIvf};

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

/// Projected coordinates (`rows x 8b`) of copy `c`, from principal coordinates
/// (`n x m`), for all rows or the given ones; blocks of rows on all cores,
/// each block's product single-threaded.
pub(crate) fn project_copy(
    pcs: &[f32],
    map: &CopyMap,
    c: usize,
    rows: Option<&[usize]>,
) -> Vec<f32> {
    const BLOCK: usize = 4096;
    let cd = map.copy_dim();
    let m = map.basis_dim;
    let rot = copy_rotation(map, c);
    let zero = vec![0f32; cd];
    let project = |src: &[f32]| {
        let mut z = vec![0f32; src.len() / m.max(1) * cd];
        z.par_chunks_mut(cd * BLOCK)
            .zip(src.par_chunks(m * BLOCK))
            .for_each(|(zc, xc)| {
                octex_lattice::copymap::project_rows(xc, m, &rot, &zero, zc, false)
            });
        z
    };
    match rows {
        None => project(pcs),
        Some(rows) => project(
            &rows
                .iter()
                .flat_map(|&r| pcs[r * m..(r + 1) * m].iter().copied())
                .collect::<Vec<f32>>(),
        ),
    }
}

/// One (copy, spacing) table's content.
#[derive(Clone, Debug, Default)]
pub struct SpacingRipples {
    /// Stored fragments' keys.
    pub keys: Vec<u64>,
    /// `keys.len() x l` ids, nearest to the centre first, padded with `PAD_ID`.
    pub ripples: Vec<u32>,
    /// A member of each stored fragment (its nearest to the centre), whose
    /// decoding gives the centre back.
    pub anchors: Vec<u32>,
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
    /// A member of each stored fragment, by ripple ordinal (the GPU builder
    /// fills it under the members rule only).
    pub anchors: Vec<u32>,
    /// Stored fragments per spacing, over all copies.
    pub fragments: Vec<usize>,
    /// Of those, fragments with fewer than `l` members.
    pub short: Vec<usize>,
    pub collisions: usize,
}

/// Borrowed key tables and ripples of every (copy, spacing), as
/// [`FlatRipples`] or the index's parts hold them.
#[derive(Clone, Copy, Debug)]
pub struct RippleTables<'a> {
    pub tables: &'a [TableEntry],
    pub table_keys: &'a [u64],
    pub table_slots: &'a [u32],
    pub ripples: &'a [u32],
}

impl<'a> RippleTables<'a> {
    /// The tables and ripples of an index's parts.
    pub fn of_parts(parts: &'a octex_index::IndexParts) -> Self {
        Self {
            tables: &parts.tables,
            table_keys: &parts.table_keys,
            table_slots: &parts.table_slots,
            ripples: &parts.ripples,
        }
    }
}

impl FlatRipples {
    /// Borrowed tables and ripples.
    pub fn view(&self) -> RippleTables<'_> {
        RippleTables {
            tables: &self.tables,
            table_keys: &self.table_keys,
            table_slots: &self.table_slots,
            ripples: &self.ripples,
        }
    }

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
            flat.anchors.extend_from_slice(&sr.anchors);
            let s = t % spacings.max(1);
            flat.fragments[s] += sr.keys.len();
            flat.short[s] += sr.short;
            flat.collisions += sr.collisions;
        }
        flat
    }
}

/// Which ids a stored fragment's ripple holds (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RippleRule {
    /// The `l` base vectors nearest to the fragment's centre (the paper's).
    #[default]
    Nearest,
    /// The fragment's own members, short ones completed from the parent.
    Members,
}

impl std::str::FromStr for RippleRule {
    type Err = String;
    /// `nearest` or `members`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "nearest" => Ok(RippleRule::Nearest),
            "members" => Ok(RippleRule::Members),
            o => Err(format!("ripple rule {o:?}: nearest or members")),
        }
    }
}

/// How one copy's ripples are built.
#[derive(Clone, Copy, Debug)]
pub struct RippleSpec {
    /// Ripple length `l`.
    pub list_len: usize,
    /// Smallest stored fragment `pmin`.
    pub pmin: usize,
    pub rule: RippleRule,
    /// The inverted file of [`RippleRule::Nearest`].
    pub ivf: IvfParams,
}

impl RippleSpec {
    /// Whether the ripples come from a search around the centres (rather than
    /// from the members alone).
    pub fn searches(&self) -> bool {
        self.rule == RippleRule::Nearest && self.pmin < self.list_len
    }
}

/// The stored fragments of one (copy, spacing): keys, and member ranges of
/// the vectors sorted by (key, distance to the centre, id).
struct Stored {
    /// Every vector's key at this spacing.
    keys: Vec<u64>,
    /// Vectors sorted by (key, distance to centre, id).
    order: Vec<u32>,
    /// Stored fragments' keys.
    stored_keys: Vec<u64>,
    /// Member range in `order` of each stored fragment, by ordinal.
    groups: Vec<(u32, u32)>,
    collisions: usize,
}

fn stored_fragments(map: &CopyMap, copy: usize, z: &[f32], s: usize, pmin: usize) -> Stored {
    let cd = map.copy_dim();
    let n = z.len() / cd;
    let mut keys = vec![0u64; n];
    let mut checks = vec![0u64; n];
    // Sort packed (key, distance, id) tuples rather than ids through the
    // arrays: the same order, with sequential instead of random accesses
    // (an indirect sort of 1M ids took seconds in cache misses).
    let mut packed: Vec<(u64, u32, u32)> = Vec::with_capacity(n);
    for i in 0..n {
        let (fk, d) = map.fragment(&z[i * cd..(i + 1) * cd], copy, s);
        keys[i] = fk.key;
        checks[i] = fk.check;
        packed.push((fk.key, d.to_bits(), i as u32));
    }
    packed.sort_unstable();
    let order: Vec<u32> = packed.iter().map(|p| p.2).collect();
    drop(packed);
    let mut out = Stored {
        keys,
        order,
        stored_keys: Vec::new(),
        groups: Vec::new(),
        collisions: 0,
    };
    let mut start = 0;
    while start < n {
        let key = out.keys[out.order[start] as usize];
        let mut end = start + 1;
        while end < n && out.keys[out.order[end] as usize] == key {
            end += 1;
        }
        let members = &out.order[start..end];
        let range = (start as u32, end as u32);
        start = end;
        if members.len() < pmin {
            continue;
        }
        let check = checks[members[0] as usize];
        if members.iter().any(|&m| checks[m as usize] != check) {
            out.collisions += 1;
            continue;
        }
        out.stored_keys.push(key);
        out.groups.push(range);
    }
    out
}

/// The centre (in the copy's projection) of the fragment holding `z_row` at
/// spacing `s`.
pub(crate) fn centre_of(map: &CopyMap, copy: usize, s: usize, z_row: &[f32], centre: &mut [f32]) {
    let mut coords = [0i32; 64];
    let cd = map.copy_dim();
    octex_lattice::decoder::best_decode()(map, z_row, copy, s, &mut coords[..cd]);
    map.centre(&coords[..cd], copy, s, centre);
}

/// Ripples of one copy, spacing by spacing (finest first, as in the index),
/// by `spec`'s rule. `z` is the copy's projection of every vector (`n x 8b`).
pub fn build_copy(map: &CopyMap, copy: usize, z: &[f32], spec: &RippleSpec) -> Vec<SpacingRipples> {
    if !spec.searches() {
        // Members, or Nearest with pmin >= l: every stored fragment holds at
        // least l members and its l nearest members are its ripple.
        return build_copy_members(map, copy, z, spec.list_len, spec.pmin);
    }
    let cd = map.copy_dim();
    let l = spec.list_len;
    let spacings = map.spacings.len();
    let mut out: Vec<SpacingRipples> = vec![SpacingRipples::default(); spacings];
    // Every stored fragment's centre, all spacings together (one search).
    let mut centres: Vec<f32> = Vec::new();
    let t_sort = std::time::Instant::now();
    for (s, res) in out.iter_mut().enumerate() {
        let st = stored_fragments(map, copy, z, s, spec.pmin);
        let at = centres.len();
        centres.resize(at + st.groups.len() * cd, 0.0);
        for (f, &(a, b)) in st.groups.iter().enumerate() {
            let first = st.order[a as usize] as usize;
            res.anchors.push(first as u32);
            centre_of(
                map,
                copy,
                s,
                &z[first * cd..(first + 1) * cd],
                &mut centres[at + f * cd..at + (f + 1) * cd],
            );
            if ((b - a) as usize) < l {
                res.short += 1;
            }
        }
        res.keys = st.stored_keys;
        res.collisions = st.collisions;
    }
    tracing::debug!(
        copy,
        seconds = t_sort.elapsed().as_secs_f64(),
        "stored fragments"
    );
    let t0 = std::time::Instant::now();
    let ivf = ProjectedIvf::build(z, cd, &spec.ivf);
    let t1 = t0.elapsed().as_secs_f64();
    let lists = ivf.nearest(&centres, l, spec.ivf.probes, PAD_ID);
    tracing::debug!(
        copy,
        ivf_seconds = t1,
        search_seconds = t0.elapsed().as_secs_f64() - t1,
        centres = centres.len() / cd,
        "searched ripples"
    );
    let mut at = 0;
    for res in out.iter_mut() {
        let len = res.keys.len() * l;
        res.ripples = lists[at..at + len].to_vec();
        at += len;
    }
    out
}

/// Ripples of one copy by [`RippleRule::Members`] (finest first).
pub fn build_copy_members(
    map: &CopyMap,
    copy: usize,
    z: &[f32],
    list_len: usize,
    pmin: usize,
) -> Vec<SpacingRipples> {
    let cd = map.copy_dim();
    let l = list_len;
    let spacings = map.spacings.len();
    let mut out: Vec<SpacingRipples> = vec![SpacingRipples::default(); spacings];
    // The coarser spacing's stored fragments and their table, for parent lookups.
    let mut parent: Option<(Stored, Vec<u64>, Vec<u32>)> = None;
    let mut centre = vec![0f32; cd];
    let mut cand: Vec<(f32, u32)> = Vec::with_capacity(2 * l);

    for s in (0..spacings).rev() {
        let st = stored_fragments(map, copy, z, s, pmin);
        let (finer, coarser) = out.split_at_mut(s + 1);
        let res = &mut finer[s];
        res.collisions = st.collisions;
        res.keys = st.stored_keys.clone();
        for &(a, b) in &st.groups {
            let members = &st.order[a as usize..b as usize];
            let first = members[0] as usize;
            res.anchors.push(first as u32);
            if members.len() >= l {
                res.ripples.extend_from_slice(&members[..l]);
                continue;
            }
            res.short += 1;
            cand.clear();
            centre_of(map, copy, s, &z[first * cd..(first + 1) * cd], &mut centre);
            let dist_to_centre = |id: u32| -> f32 {
                octex_search::knn::squared_l2(&z[id as usize * cd..(id as usize + 1) * cd], &centre)
            };
            cand.extend(members.iter().map(|&m| (dist_to_centre(m), m)));
            if let Some((par, slot_keys, slot_ids)) = &parent {
                if let Some(ord) = lookup(slot_keys, slot_ids, par.keys[first]) {
                    let (pa, pb) = par.groups[ord as usize];
                    let pmembers = &par.order[pa as usize..pb as usize];
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
        parent = Some((st, slot_keys, slot_ids));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::stored_ripple_recall;
    use octex_lattice::{CopyMapParams, GaussianRng};

    /// Gaussian projected coordinates and a one-copy map over them.
    fn one_copy(n: usize, spacings: Vec<f32>) -> (Vec<f32>, CopyMap) {
        let cd = 32;
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
            &vec![1.0; cd],
            &CopyMapParams {
                copies: 1,
                blocks: 4,
                seed: 3,
            },
            spacings,
        );
        (z, map)
    }

    /// The paper's rule: every stored fragment's ripple is the brute-force `l`
    /// nearest of its centre (all lists probed), nearest first.
    #[test]
    fn nearest_rule_ripples_are_the_brute_force_neighbours_of_the_centres() {
        let (n, cd, l) = (4_000usize, 32usize, 8usize);
        let (z, map) = one_copy(n, vec![1.6, 2.4]);
        let spec = RippleSpec {
            list_len: l,
            pmin: 1,
            rule: RippleRule::Nearest,
            ivf: IvfParams {
                lists: 16,
                probes: 16,
                ..Default::default()
            },
        };
        let out = build_copy(&map, 0, &z, &spec);
        for (s, sr) in out.iter().enumerate() {
            assert!(!sr.keys.is_empty());
            // The centre of each stored fragment, from any member.
            let mut centres: std::collections::HashMap<u64, Vec<f32>> = Default::default();
            for i in 0..n {
                let zr = &z[i * cd..(i + 1) * cd];
                let key = map.fragment(zr, 0, s).0.key;
                centres.entry(key).or_insert_with(|| {
                    let mut c = vec![0f32; cd];
                    centre_of(&map, 0, s, zr, &mut c);
                    c
                });
            }
            assert_eq!(
                sr.keys.len(),
                centres.len(),
                "pmin = 1 stores every fragment"
            );
            for (f, key) in sr.keys.iter().enumerate() {
                let c = &centres[key];
                let dist = |id: u32| -> f32 {
                    let x = &z[id as usize * cd..(id as usize + 1) * cd];
                    x.iter().zip(c).map(|(a, b)| (a - b) * (a - b)).sum()
                };
                let mut all: Vec<(f32, u32)> = (0..n as u32).map(|i| (dist(i), i)).collect();
                all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let ripple = &sr.ripples[f * l..(f + 1) * l];
                for (t, &id) in ripple.iter().enumerate() {
                    let (want_d, _) = all[t];
                    assert!(
                        (dist(id) - want_d).abs() <= 1e-3 * want_d.max(1.0),
                        "spacing {s}, fragment {f}, entry {t}: {} vs the exact {want_d}",
                        dist(id)
                    );
                }
            }
        }
        // The builder's own check agrees, on the flattened tables.
        let flat = FlatRipples::from_copies(vec![out], l);
        let r = stored_ripple_recall(&map, 0, &z, flat.view(), l, 64);
        assert!(r > 0.999, "recall {r}");
        // The members rule's lists are further from the exact ones.
        let members = FlatRipples::from_copies(vec![build_copy_members(&map, 0, &z, l, 1)], l);
        let rm = stored_ripple_recall(&map, 0, &z, members.view(), l, 64);
        assert!(rm < r, "members {rm} vs nearest {r}");
        // pmin >= l: member lists, no search.
        assert!(!RippleSpec { pmin: l, ..spec }.searches());
    }

    #[test]
    fn ripples_hold_the_nearest_members_sorted_by_distance_to_the_centre() {
        let (n, cd, l) = (6_000usize, 32usize, 8usize);
        let (z, map) = one_copy(n, vec![1.6, 2.4, 3.6]);
        let out = build_copy_members(&map, 0, &z, l, 1);
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
