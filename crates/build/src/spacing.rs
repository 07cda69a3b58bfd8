//! Choosing the spacings from the data.
//!
//! Decision (from the design's prototype, re-measured in the build report): the
//! paper's fixed 2.0-5.0 is far too fine below a billion vectors (almost every
//! fragment holds one vector and many queries find none). We instead measure, on
//! copy 0 over the data (or a sample of at most [`PROBE_ROWS`] rows), the share of
//! vectors whose fragment holds at least `pmin` *other* vectors (a proxy for "the
//! query's fragment is stored"), pick the finest spacing where that share reaches
//! `finest_hit_rate` (bisection in log space), then step geometrically by
//! `ratio` until the median vector's fragment holds `l` members.

use octex_lattice::CopyMap;
use std::collections::HashMap;

/// Rows used to probe spacings.
pub const PROBE_ROWS: usize = 1_000_000;

/// Per-vector population statistics of copy 0's fragments at one spacing.
struct Probe {
    /// Share of vectors whose fragment holds >= pmin other vectors.
    hit_rate: f64,
    /// Median over vectors of their fragment's size.
    median_size: usize,
}

fn probe(map: &CopyMap, z: &[f32], spacing: f32, pmin: usize) -> Probe {
    let cd = map.copy_dim();
    let mut m = map.clone();
    m.spacings = vec![spacing];
    let keys: Vec<u64> = z
        .chunks_exact(cd)
        .map(|zr| m.fragment(zr, 0, 0).0.key)
        .collect();
    let mut counts: HashMap<u64, u32> = HashMap::with_capacity(keys.len());
    for &k in &keys {
        *counts.entry(k).or_insert(0) += 1;
    }
    let mut sizes: Vec<u32> = keys.iter().map(|k| counts[k]).collect();
    let hits = sizes.iter().filter(|&&c| c as usize > pmin).count();
    let mid = sizes.len() / 2;
    let median = *sizes.select_nth_unstable(mid).1 as usize;
    Probe {
        hit_rate: hits as f64 / keys.len().max(1) as f64,
        median_size: median,
    }
}

/// The chosen spacings and what was measured for each.
#[derive(Clone, Debug)]
pub struct SpacingChoice {
    pub spacings: Vec<f32>,
    pub hit_rates: Vec<f64>,
    pub median_sizes: Vec<usize>,
}

/// Choose spacings from `z`, the copy-0 projection (`rows x 8b`) of the data.
pub fn choose(
    map: &CopyMap,
    z: &[f32],
    pmin: usize,
    list_len: usize,
    hit_rate: f64,
    ratio: f64,
    max_spacings: usize,
) -> SpacingChoice {
    let (mut lo, mut hi) = (0.05f64, 256.0f64);
    for _ in 0..14 {
        let mid = (lo * hi).sqrt();
        if probe(map, z, mid as f32, pmin).hit_rate >= hit_rate {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let mut out = SpacingChoice {
        spacings: Vec::new(),
        hit_rates: Vec::new(),
        median_sizes: Vec::new(),
    };
    let mut f = hi;
    for _ in 0..max_spacings {
        let p = probe(map, z, f as f32, pmin);
        out.spacings.push(f as f32);
        out.hit_rates.push(p.hit_rate);
        out.median_sizes.push(p.median_size);
        if p.median_size >= list_len {
            break;
        }
        f *= ratio;
    }
    out
}
