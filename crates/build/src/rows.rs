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

/// Assemble rows from forward lists (`n x k` ids and distances, nearest first,
/// `PAD_ID` for missing entries).
pub fn assemble(fwd_ids: &[u32], fwd_dist: &[f32], k: usize, shape: RowShape) -> Vec<u32> {
    let n = fwd_ids.len() / k.max(1);
    let ks = shape.reverse_source.min(k);
    // Reverse candidates grouped by target (counting sort), each with its distance.
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
    let lt = shape.row_len;
    let mut rows = vec![PAD_ID; n * lt];
    rows.par_chunks_mut(lt).enumerate().for_each_init(Vec::new, |buf: &mut Vec<(f32, u32)>, (u, row)| {
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
        buf.clear();
        buf.extend_from_slice(&rev[counts[u] as usize..counts[u + 1] as usize]);
        buf.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut taken = 0;
        for &(_, v) in buf.iter() {
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
