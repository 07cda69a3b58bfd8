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
use rayon::prelude::*;

/// Rows used to probe spacings.
pub const PROBE_ROWS: usize = 1_000_000;

/// Per-vector population statistics of copy 0's fragments at one spacing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probe {
    /// Share of vectors whose fragment holds >= pmin other vectors.
    pub hit_rate: f64,
    /// Median over vectors of their fragment's size.
    pub median_size: usize,
}

fn probe(map: &CopyMap, z: &[f32], spacing: f32, pmin: usize) -> Probe {
    let cd = map.copy_dim();
    let mut m = map.clone();
    m.spacings = vec![spacing];
    // Keys on all cores, then fragment sizes from the runs of the sorted keys:
    // every member of a run of length c has a fragment of size c.
    let mut keys: Vec<u64> = z
        .par_chunks_exact(cd)
        .map(|zr| m.fragment(zr, 0, 0).0.key)
        .collect();
    keys.par_sort_unstable();
    let runs: Vec<usize> = keys.chunk_by(|a, b| a == b).map(|run| run.len()).collect();
    Probe::from_runs(runs, pmin)
}

impl Probe {
    /// From the fragment sizes (one per populated fragment; they sum to the
    /// vectors probed).
    pub fn from_runs(mut runs: Vec<usize>, pmin: usize) -> Probe {
        let total: usize = runs.iter().sum();
        let hits: usize = runs.iter().filter(|&&c| c > pmin).sum();
        // The median over vectors of their fragment's size: the size at position
        // total / 2 of the multiset holding c copies of each run length c.
        runs.sort_unstable();
        let mid = total / 2;
        let mut seen = 0;
        let mut median = 0;
        for c in runs {
            seen += c;
            if seen > mid {
                median = c;
                break;
            }
        }
        Probe {
            hit_rate: hits as f64 / total.max(1) as f64,
            median_size: median,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SpacingChoice {
    pub spacings: Vec<f32>,
    pub hit_rates: Vec<f64>,
    pub median_sizes: Vec<usize>,
}

/// What the spacing choice aims for (from the resolved build parameters).
#[derive(Clone, Copy, Debug)]
pub struct SpacingTargets {
    /// Smallest stored fragment: a vector "hits" when its fragment holds at
    /// least `pmin` other vectors.
    pub pmin: usize,
    /// Stop once the median vector's fragment holds `list_len` members.
    pub list_len: usize,
    /// Share of hits at the finest spacing.
    pub hit_rate: f64,
    /// Ratio of consecutive spacings.
    pub ratio: f64,
    pub max_spacings: usize,
}

/// Choose spacings from `z`, the copy-0 projection (`rows x 8b`) of the data.
pub fn choose(map: &CopyMap, z: &[f32], t: &SpacingTargets) -> SpacingChoice {
    choose_with(
        &mut |f| Ok::<_, std::convert::Infallible>(probe(map, z, f, t.pmin)),
        t,
    )
    .unwrap_or_else(|e| match e {})
}

/// [`choose`] with another way to probe a spacing (the GPU's).
pub fn choose_with<E>(
    probe: &mut dyn FnMut(f32) -> Result<Probe, E>,
    t: &SpacingTargets,
) -> Result<SpacingChoice, E> {
    let (mut lo, mut hi) = (0.05f64, 256.0f64);
    for _ in 0..14 {
        let mid = (lo * hi).sqrt();
        if probe(mid as f32)?.hit_rate >= t.hit_rate {
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
    for _ in 0..t.max_spacings {
        let p = probe(f as f32)?;
        out.spacings.push(f as f32);
        out.hit_rates.push(p.hit_rate);
        out.median_sizes.push(p.median_size);
        if p.median_size >= t.list_len {
            break;
        }
        f *= t.ratio;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use octex_lattice::{CopyMapParams, GaussianRng};
    use std::collections::HashMap;

    /// The sorted-runs probe equals a plain count through a hash map.
    #[test]
    fn probe_matches_a_hash_map_count() {
        let (n, cd) = (20_000usize, 32usize);
        let mut rng = GaussianRng::new(7, 0);
        let z: Vec<f32> = (0..n * cd).map(|_| rng.normal() as f32).collect();
        let mut basis = vec![0f64; cd * cd];
        for i in 0..cd {
            basis[i * cd + i] = 1.0;
        }
        let params = CopyMapParams {
            copies: 1,
            blocks: 4,
            seed: 3,
        };
        let map = CopyMap::random(
            &vec![0.0; cd],
            &basis,
            cd,
            cd,
            &vec![1.0; cd],
            &params,
            vec![1.0],
        );
        for (spacing, pmin) in [(1.5f32, 1usize), (2.5, 1), (3.5, 2)] {
            let mut m = map.clone();
            m.spacings = vec![spacing];
            let keys: Vec<u64> = z
                .chunks_exact(cd)
                .map(|r| m.fragment(r, 0, 0).0.key)
                .collect();
            let mut counts: HashMap<u64, usize> = HashMap::new();
            for &k in &keys {
                *counts.entry(k).or_insert(0) += 1;
            }
            let mut sizes: Vec<usize> = keys.iter().map(|k| counts[k]).collect();
            let hits = sizes.iter().filter(|&&c| c > pmin).count();
            let median = *sizes.select_nth_unstable(n / 2).1;
            let p = probe(&map, &z, spacing, pmin);
            assert_eq!(p.hit_rate, hits as f64 / n as f64, "spacing {spacing}");
            assert_eq!(p.median_size, median, "spacing {spacing}");
        }
    }
}
