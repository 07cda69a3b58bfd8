//! Neighbour rows with reverse entries.
//!
//! A row = the first `k_f` forward neighbours, then up to `k_r` reverse entries
//! (vectors that list the row's owner among their first `k_s` forward neighbours,
//! nearest first), then the remaining forward neighbours; de-duplicated, `Lt` ids,
//! padded with `PAD_ID`.
//!
//! "Forward" is in distance order (the paper's rows) or, with
//! [`RowOrder::Detours`], in the order of [`order_by_detours`].

use octex_index::PAD_ID;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// The order of a vector's forward neighbours before a row is assembled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum RowOrder {
    /// Nearest first: the paper's rows. (The serde default: parameters
    /// written before the choice existed were built this way.)
    #[default]
    Distance,
    /// Fewest detours first, then nearest ([`order_by_detours`]): a row's
    /// head and the reverse entries taken from it favour neighbours in
    /// directions the nearer ones do not already reach.
    Detours,
}

impl std::str::FromStr for RowOrder {
    type Err = String;
    /// `distance` or `detours`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "distance" => Ok(RowOrder::Distance),
            "detours" => Ok(RowOrder::Detours),
            o => Err(format!("row order {o:?}: distance or detours")),
        }
    }
}

/// Row assembly parameters.
#[derive(Clone, Copy, Debug)]
pub struct RowShape {
    pub row_len: usize,
    pub forward_head: usize,
    pub reverse_max: usize,
    pub reverse_source: usize,
    pub order: RowOrder,
    /// Forward neighbours found per vector before the row is assembled
    /// (`k`, at least `row_len`).
    pub candidates: usize,
}

/// Reorder every forward list (`n x k` ids and distances, nearest first) by
/// its detour counts, fewest first, ties nearest first: neighbour `v` at rank
/// `j` of `u`'s list has a detour through the neighbour `w` at rank `i < j`
/// when `v` is in `w`'s list at a rank `m` with `max(i, m) < j` (a path
/// `u -> w -> v` of two edges each nearer in rank than the direct one; the
/// rank-based count of CAGRA's graph optimisation, Ootomo et al. 2024). A
/// neighbour that many nearer ones lead to is the one a wave reaches anyway.
/// Cost `n k^2` lookups, on all cores. `PAD_ID` entries stay last. Lists
/// longer than [`MAX_DETOUR_LIST`] keep their distance order.
pub fn order_by_detours(ids: &mut [u32], dists: &mut [f32], k: usize) {
    if !(3..=MAX_DETOUR_LIST).contains(&k) {
        return;
    }
    let n = ids.len() / k;
    let original = ids.to_vec();
    ids.par_chunks_mut(k)
        .zip(dists.par_chunks_mut(k))
        .enumerate()
        .for_each_init(
            || {
                (
                    // Rank + 1 of each id in the list at hand, 0 elsewhere:
                    // one load a lookup, no probing (a hash table of the
                    // list took four times as long).
                    vec![0u16; n],
                    vec![0u32; k + SPARE_SLOTS],
                    Vec::with_capacity(k),
                    vec![0f32; k],
                )
            },
            |(rank_of, detours, order, d_old), (u, (row, drow))| {
                let list = &original[u * k..(u + 1) * k];
                // In reverse, so a repeated id keeps its first rank.
                for (j, &v) in list.iter().enumerate().rev() {
                    if v != PAD_ID {
                        rank_of[v as usize] = j as u16 + 1;
                    }
                }
                detours.iter_mut().for_each(|d| *d = 0);
                for &w in list.iter().take(PREFETCH_AHEAD) {
                    prefetch_list(&original, w, k);
                }
                // The last neighbour has no later rank to count into.
                for (i, &w) in list.iter().enumerate().take(k - 1) {
                    if let Some(&ahead) = list.get(i + PREFETCH_AHEAD) {
                        prefetch_list(&original, ahead, k);
                    }
                    if w == PAD_ID {
                        continue;
                    }
                    let of_w = &original[w as usize * k..(w as usize + 1) * k];
                    // Only ranks m < j can count, and j < k.
                    for (m, &v) in of_w.iter().enumerate().take(k - 1) {
                        // Ids absent from the list, and padding, count
                        // into a spare slot past `k`, one of several so
                        // that successive misses do not wait on each other.
                        let spare = k + m % SPARE_SLOTS;
                        let j = match v {
                            PAD_ID => spare,
                            v => (rank_of[v as usize] as usize).wrapping_sub(1).min(spare),
                        };
                        detours[j] += u32::from(i.max(m) < j);
                    }
                }
                for &v in list {
                    if v != PAD_ID {
                        rank_of[v as usize] = 0;
                    }
                }
                order.clear();
                order.extend((0..k as u32).map(|j| {
                    let pad = list[j as usize] == PAD_ID;
                    (if pad { u32::MAX } else { detours[j as usize] }, j)
                }));
                order.sort_unstable();
                d_old.copy_from_slice(drow);
                for (slot, &(_, j)) in order.iter().enumerate() {
                    row[slot] = list[j as usize];
                    drow[slot] = d_old[j as usize];
                }
            },
        );
}

/// Each forward list (`k` ids per vector of `x`, `PAD_ID` last) re-scored
/// by direct differences ([`octex_search::knn::squared_l2`]) and sorted
/// nearest first, ties by id: lists found by rounded products come out in
/// exact order.
pub fn rescore(x: &[f32], dim: usize, k: usize, ids: &mut [u32], dists: &mut [f32]) {
    ids.par_chunks_mut(k)
        .zip(dists.par_chunks_mut(k))
        .enumerate()
        .for_each_init(Vec::new, |scored, (u, (row, drow))| {
            let q = &x[u * dim..(u + 1) * dim];
            scored.clear();
            scored.extend(row.iter().filter(|&&id| id != PAD_ID).map(|&id| {
                let v = &x[id as usize * dim..(id as usize + 1) * dim];
                (octex_search::knn::squared_l2(q, v), id)
            }));
            scored.sort_unstable_by(|a: &(f32, u32), b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for (j, (id, d)) in row.iter_mut().zip(drow.iter_mut()).enumerate() {
                (*d, *id) = scored.get(j).copied().unwrap_or((f32::INFINITY, PAD_ID));
            }
        });
}

/// Slots past the list that [`order_by_detours`] counts misses into.
const SPARE_SLOTS: usize = 8;

/// Neighbours ahead whose lists [`order_by_detours`] asks the cache for: the
/// lists are random reads, and waiting on each took half the time.
const PREFETCH_AHEAD: usize = 4;

/// Ask the cache for the list of `w` (`k` ids in `lists`); padding asks nothing.
#[inline(always)]
fn prefetch_list(lists: &[u32], w: u32, k: usize) {
    if w == PAD_ID {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    for line in lists[w as usize * k..(w as usize + 1) * k].chunks(16) {
        // SAFETY: a prefetch is a hint that never faults, of an address
        // inside `lists`; SSE is part of every x86-64 target.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (lists, k);
}

/// Longest forward list [`order_by_detours`] reorders (its ranks are held
/// in 16 bits).
pub const MAX_DETOUR_LIST: usize = u16::MAX as usize - 1;

/// Reverse entries grouped by target: `offsets` (`n + 1`) delimit, in
/// `sources`, the vectors that list each target among their first `k_s`
/// forward neighbours, nearest first (ties by source id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReverseLists {
    pub offsets: Vec<u32>,
    pub sources: Vec<u32>,
}

/// [`ReverseLists`] on the CPU: a counting sort by target, then a sort of each
/// target's sources by distance.
pub fn reverse_lists(fwd_ids: &[u32], fwd_dist: &[f32], k: usize, ks: usize) -> ReverseLists {
    let n = fwd_ids.len() / k.max(1);
    let ks = ks.min(k);
    let mut counts = vec![0u32; n + 1];
    for v in 0..n {
        for &u in fwd_ids[v * k..v * k + ks].iter().filter(|&&u| u != PAD_ID) {
            counts[u as usize + 1] += 1;
        }
    }
    for i in 0..n {
        counts[i + 1] += counts[i];
    }
    let mut fill = counts.clone();
    let mut rev: Vec<(f32, u32)> = vec![(0.0, 0); counts[n] as usize];
    for v in 0..n {
        for j in 0..ks {
            let u = fwd_ids[v * k + j];
            if u != PAD_ID {
                rev[fill[u as usize] as usize] = (fwd_dist[v * k + j], v as u32);
                fill[u as usize] += 1;
            }
        }
    }
    // Sort each target's group: split `rev` at the group boundaries.
    let mut groups: Vec<&mut [(f32, u32)]> = Vec::with_capacity(n);
    let mut rest: &mut [(f32, u32)] = &mut rev;
    for u in 0..n {
        let (g, r) = rest.split_at_mut((counts[u + 1] - counts[u]) as usize);
        groups.push(g);
        rest = r;
    }
    groups
        .par_iter_mut()
        .for_each(|g| g.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))));
    ReverseLists {
        offsets: counts,
        sources: rev.into_iter().map(|r| r.1).collect(),
    }
}

/// Assemble rows from forward lists (`n x k` ids and distances, nearest first,
/// `PAD_ID` for missing entries).
/// With [`RowOrder::Detours`] the lists are reordered first
/// ([`order_by_detours`]), and the reverse entries come from the reordered heads.
pub fn assemble(fwd_ids: &[u32], fwd_dist: &[f32], k: usize, shape: RowShape) -> Vec<u32> {
    if shape.order == RowOrder::Detours {
        let (mut ids, mut dists) = (fwd_ids.to_vec(), fwd_dist.to_vec());
        order_by_detours(&mut ids, &mut dists, k);
        let rev = reverse_lists(&ids, &dists, k, shape.reverse_source);
        return assemble_with(&ids, k, shape, &rev);
    }
    let rev = reverse_lists(fwd_ids, fwd_dist, k, shape.reverse_source);
    assemble_with(fwd_ids, k, shape, &rev)
}

/// Assemble rows from forward lists and their reverse lists.
pub fn assemble_with(fwd_ids: &[u32], k: usize, shape: RowShape, rev: &ReverseLists) -> Vec<u32> {
    let n = fwd_ids.len() / k.max(1);
    let lt = shape.row_len;
    let mut rows = vec![PAD_ID; n * lt];
    rows.par_chunks_mut(lt).enumerate().for_each(|(u, row)| {
        let fwd = &fwd_ids[u * k..(u + 1) * k];
        let mut len = 0;
        let push = |id: u32, row: &mut [u32], len: &mut usize| {
            if id != PAD_ID && id as usize != u && *len < lt && !row[..*len].contains(&id) {
                row[*len] = id;
                *len += 1;
            }
        };
        for &id in fwd.iter().take(shape.forward_head) {
            push(id, row, &mut len);
        }
        let mut taken = 0;
        let sources = &rev.sources[rev.offsets[u] as usize..rev.offsets[u + 1] as usize];
        for &v in sources {
            if taken == shape.reverse_max {
                break;
            }
            let before = len;
            push(v, row, &mut len);
            taken += (len > before) as usize;
        }
        for &id in fwd.iter().skip(shape.forward_head) {
            push(id, row, &mut len);
        }
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_definition() {
        // 50 vectors with pseudo-random forward lists of 8.
        let (n, k) = (50usize, 8usize);
        let mut ids = Vec::new();
        let mut d = Vec::new();
        let mut s = 9u64;
        for u in 0..n {
            let mut row: Vec<u32> = Vec::new();
            while row.len() < k {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = ((s >> 33) % n as u64) as u32;
                if v as usize != u && !row.contains(&v) {
                    row.push(v);
                }
            }
            ids.extend_from_slice(&row);
            d.extend((0..k).map(|j| j as f32 + u as f32 * 0.001));
        }
        let shape = RowShape {
            row_len: 10,
            forward_head: 4,
            reverse_max: 3,
            reverse_source: 2,
            order: RowOrder::Distance,
            candidates: 8,
        };
        let rows = assemble(&ids, &d, k, shape);
        for u in 0..n {
            let row = &rows[u * 10..(u + 1) * 10];
            let fwd = &ids[u * k..(u + 1) * k];
            assert_eq!(&row[..4], &fwd[..4], "head = first k_f forward");
            // Reverse entries: v with u among v's first k_s forward neighbours.
            let rev: Vec<u32> = (0..n as u32)
                .filter(|&v| ids[v as usize * k..v as usize * k + 2].contains(&(u as u32)))
                .collect();
            let extra: Vec<u32> = row[4..]
                .iter()
                .copied()
                .filter(|&v| v != PAD_ID && !fwd.contains(&v))
                .collect();
            for v in &extra {
                assert!(
                    rev.contains(v),
                    "{v} in row {u} is neither forward nor reverse"
                );
            }
            let new_rev = rev.iter().filter(|v| !fwd[..4].contains(v)).count();
            let want = new_rev.min(3);
            assert!(
                row[4..4 + want]
                    .iter()
                    .all(|v| rev.contains(v) && !fwd[..4].contains(v)),
                "row {u}: up to k_r reverse entries after the head"
            );
            let mut seen = std::collections::HashSet::new();
            assert!(row
                .iter()
                .filter(|&&v| v != PAD_ID)
                .all(|v| seen.insert(*v)));
            assert!(row.iter().all(|&v| v == PAD_ID || v as usize != u));
        }
    }

    #[test]
    fn detours_move_reachable_neighbours_back() {
        // Vector 0 lists 1, 2, 3, 4 nearest first; 1 lists 2 first, so
        // 0 -> 1 -> 2 is a detour of two nearer-ranked edges and 2 goes back
        // behind the neighbours without one. 4's list reaches 3 only at a
        // rank (3) not nearer than 3's own (2): no detour.
        let k = 4;
        let mut ids = vec![
            1, 2, 3, 4, //
            2, 0, PAD_ID, PAD_ID, //
            0, 1, PAD_ID, PAD_ID, //
            0, PAD_ID, PAD_ID, PAD_ID, //
            0, 1, 2, 3, //
        ];
        let mut dists: Vec<f32> = (0..ids.len()).map(|i| i as f32).collect();
        let before = (ids.clone(), dists.clone());
        order_by_detours(&mut ids, &mut dists, k);
        assert_eq!(&ids[..4], &[1, 3, 4, 2]);
        assert_eq!(
            &dists[..4],
            &[0.0, 2.0, 3.0, 1.0],
            "distances travel with their ids"
        );
        // 1's list: 2 (rank 0), 0 (rank 1); 2 lists 0 at rank 0, so 0 has a
        // detour through 2 (max(0, 0) < 1); padding stays last.
        assert_eq!(&ids[4..8], &[2, 0, PAD_ID, PAD_ID]);
        for u in 0..5 {
            let mut a = before.0[u * k..(u + 1) * k].to_vec();
            let mut b = ids[u * k..(u + 1) * k].to_vec();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "row {u} keeps its entries");
        }
    }

    #[test]
    fn rescoring_puts_rounded_lists_in_exact_order_and_keeps_padding_last() {
        let (n, dim, k) = (40, 5, 6);
        let mut rng = octex_lattice::GaussianRng::new(8, 1);
        let x: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        // Each vector's list: its next six ids in reverse, the last one padded,
        // with made-up distances.
        let mut ids: Vec<u32> = (0..n)
            .flat_map(|u| {
                (1..=k).rev().map(move |j| match j {
                    1 => PAD_ID,
                    j => ((u + j) % n) as u32,
                })
            })
            .collect();
        let mut dists = vec![1.0f32; n * k];
        rescore(&x, dim, k, &mut ids, &mut dists);
        for u in 0..n {
            let row = &ids[u * k..(u + 1) * k];
            let d = &dists[u * k..(u + 1) * k];
            assert_eq!(row[k - 1], PAD_ID);
            assert!(d[k - 1].is_infinite());
            for j in 0..k - 1 {
                let v = row[j] as usize;
                let exact = octex_search::knn::squared_l2(
                    &x[u * dim..(u + 1) * dim],
                    &x[v * dim..(v + 1) * dim],
                );
                assert_eq!(d[j], exact);
                assert!(j == 0 || d[j - 1] <= d[j]);
            }
            let mut got: Vec<u32> = row[..k - 1].to_vec();
            got.sort_unstable();
            let mut want: Vec<u32> = (2..=k).map(|j| ((u + j) % n) as u32).collect();
            want.sort_unstable();
            assert_eq!(got, want);
        }
    }

    /// The counts follow the definition, brute force, on random lists with
    /// padding: each list's order is the one its counts give.
    #[test]
    fn detour_order_matches_the_definition() {
        let (n, k) = (300usize, 24usize);
        let mut s = 5u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as usize
        };
        let mut ids = Vec::new();
        for u in 0..n {
            let len = k - next() % 4;
            let mut row: Vec<u32> = Vec::new();
            while row.len() < len {
                let v = (next() % n) as u32;
                if v as usize != u && !row.contains(&v) {
                    row.push(v);
                }
            }
            row.resize(k, PAD_ID);
            ids.extend(row);
        }
        let dists: Vec<f32> = (0..ids.len()).map(|i| (i % k) as f32).collect();
        let (mut got, mut got_d) = (ids.clone(), dists.clone());
        order_by_detours(&mut got, &mut got_d, k);
        for u in 0..n {
            let list = &ids[u * k..(u + 1) * k];
            let mut want: Vec<(u32, usize)> = (0..k)
                .map(|j| {
                    if list[j] == PAD_ID {
                        return (u32::MAX, j);
                    }
                    let mut count = 0;
                    for (i, &w) in list.iter().enumerate().take(j) {
                        if w == PAD_ID {
                            continue;
                        }
                        let of_w = &ids[w as usize * k..(w as usize + 1) * k];
                        count += (0..j.min(k - 1))
                            .filter(|&m| i.max(m) < j && of_w[m] == list[j])
                            .count() as u32;
                    }
                    (count, j)
                })
                .collect();
            want.sort_unstable();
            let want_ids: Vec<u32> = want.iter().map(|&(_, j)| list[j]).collect();
            assert_eq!(&got[u * k..(u + 1) * k], &want_ids[..], "list {u}");
        }
    }
}
