//! Neighbour rows with reverse entries.
//!
//! A row = the first `k_f` forward neighbours, then up to `k_r` reverse entries
//! (vectors that list the row's owner among their first `k_s` forward neighbours,
//! nearest first), then the remaining forward neighbours; de-duplicated, `Lt` ids,
//! padded with `PAD_ID`.

use octex_index::PAD_ID;
use rayon::prelude::*;

/// Row assembly parameters.
#[derive(Clone, Copy, Debug)]
pub struct RowShape {
    pub row_len: usize,
    pub forward_head: usize,
    pub reverse_max: usize,
    pub reverse_source: usize,
}

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
pub fn assemble(fwd_ids: &[u32], fwd_dist: &[f32], k: usize, shape: RowShape) -> Vec<u32> {
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
}
