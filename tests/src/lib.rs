//! Helpers of octex's end-to-end tests: realistic synthetic data (a Gaussian
//! mixture with a decaying spectrum, like real embeddings) and exact references.

use octex_lattice::GaussianRng;
use octex_search::Metric;

/// `n` vectors of dimension `dim` from `clusters` Gaussian clusters whose centres
/// and spreads decay along the coordinates (anisotropic, like real embeddings).
pub fn clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    let mut rng = GaussianRng::new(seed, 0);
    let decay: Vec<f64> = (0..dim).map(|j| 1.0 / (1.0 + j as f64 / 6.0)).collect();
    let centres: Vec<f64> = (0..clusters * dim)
        .map(|i| 3.0 * rng.normal() * decay[i % dim])
        .collect();
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = (rng.next_u64() % clusters as u64) as usize;
        for j in 0..dim {
            out.push((centres[c * dim + j] + rng.normal() * decay[j]) as f32);
        }
    }
    out
}

/// `n` vectors of dimension `dim` from `clusters` Gaussian clusters far from
/// the origin whose spreads differ 100x (0.02 to 2, centres about 4 apart
/// along each coordinate) and whose sizes fall as `1 / (i + 1)`: data where
/// one sketch grid for all of it cannot tell a tight cluster's members apart.
pub fn uneven_clusters(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    let mut rng = GaussianRng::new(seed, 1);
    let centres: Vec<f64> = (0..clusters * dim).map(|_| 4.0 * rng.normal()).collect();
    let spread = |i: usize| 0.02 * 100f64.powf(i as f64 / (clusters - 1).max(1) as f64);
    let weights: Vec<f64> = (0..clusters)
        .scan(0.0, |s, i| {
            *s += 1.0 / (i + 1) as f64;
            Some(*s)
        })
        .collect();
    let total = weights[clusters - 1];
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let u = rng.uniform() * total;
        // Sizes fall with i; spreads are shuffled over the sizes.
        let c = weights.partition_point(|&w| w < u).min(clusters - 1);
        let s = spread((c * 7) % clusters);
        for j in 0..dim {
            out.push((centres[c * dim + j] + rng.normal() * s) as f32);
        }
    }
    out
}

/// Exact top-k ids by squared L2 ([`octex_search::knn`], for references).
pub fn brute_force(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Vec<u32> {
    octex_search::knn::ground_truth(base, queries, dim, k, Metric::L2, &|_| {})
        .expect("L2 takes any finite vector")
}

/// Exact top-k ids by inner product.
pub fn brute_force_ip(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Vec<u32> {
    octex_search::knn::ground_truth(base, queries, dim, k, Metric::InnerProduct, &|_| {})
        .expect("inner product takes any finite vector")
}

/// recall@k of `found` against `truth`, both `nq x k`.
pub fn recall(found: &[u32], truth: &[u32], k: usize) -> f64 {
    octex_search::knn::recall_at_k(found, k, truth, k, k).expect("nq x k rows on both sides")
}

/// Small, fast build parameters for tests.
pub fn test_params() -> octex_build::BuildParams {
    octex_build::BuildParams {
        copies: Some(16),
        ..Default::default()
    }
}

/// Device 0, or `None` (saying so) where there is no CUDA driver or device:
/// every GPU test starts with it and skips cleanly without a GPU. With
/// `OCTEX_REQUIRE_GPU=1` (set it on a GPU machine) a missing GPU fails the
/// test instead, so that a skip cannot pass for a run.
pub fn gpu_or_skip(test: &str) -> Option<octex_kernels::Gpu> {
    if !octex_kernels::driver_available() {
        let required = std::env::var("OCTEX_REQUIRE_GPU").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{test}: OCTEX_REQUIRE_GPU=1 but no CUDA driver or device was found"
        );
        eprintln!("SKIPPED {test}: no CUDA driver or device on this machine");
        return None;
    }
    Some(octex_kernels::Gpu::open(0).expect("a driver is present, so opening device 0 must work"))
}

/// A small deterministic generator for the mutation harness (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// `count` mutated copies of an index file's bytes, each with what was done.
/// Each mutation picks the header or one section (uniformly, so the small
/// sections that validation guards are hit as often as the large ones), then
/// flips a bit, writes a boundary value (0, 1, `n`, `n + 1`, `u32::MAX`,
/// NaN, infinity, `u64::MAX`) or a random word, copies 16 bytes from
/// elsewhere, truncates the file or appends bytes. Header bytes are covered by
/// its checksum; [`mutated_headers`] changes header fields behind it.
pub fn mutated_files(
    index: &octex_index::Index,
    count: usize,
    seed: u64,
) -> Vec<(String, Vec<u8>)> {
    let bytes = index.as_bytes();
    let n = index.len() as u32;
    let mut regions: Vec<(String, std::ops::Range<usize>)> = vec![(
        "header".into(),
        0..index
            .header()
            .sections
            .first()
            .map_or(bytes.len(), |s| s.offset as usize),
    )];
    for s in &index.header().sections {
        if s.len > 0 {
            regions.push((
                format!("{:?}", s.kind),
                s.offset as usize..(s.offset + s.len) as usize,
            ));
        }
    }
    let mut rng = Rng(seed | 1);
    (0..count)
        .map(|_| {
            let mut b = bytes.to_vec();
            let (name, r) = &regions[rng.below(regions.len())];
            let at = r.start + rng.below(r.len());
            let at4 = (at & !3).max(r.start).min(r.end.saturating_sub(4));
            let what = match rng.below(8) {
                0 => {
                    b[at] ^= 1 << rng.below(8);
                    format!("bit flip at {at}")
                }
                1 | 2 => {
                    let specials = [
                        0,
                        1,
                        n,
                        n + 1,
                        u32::MAX,
                        u32::MAX - 1,
                        0x7fc0_0000,
                        0x7f80_0000,
                        0xff80_0000,
                    ];
                    let v = specials[rng.below(specials.len())];
                    if at4 + 4 <= b.len() {
                        b[at4..at4 + 4].copy_from_slice(&v.to_le_bytes());
                    }
                    format!("u32 {v:#x} at {at4}")
                }
                3 => {
                    let at8 = (at & !7).max(r.start);
                    if at8 + 8 <= b.len() {
                        b[at8..at8 + 8].copy_from_slice(&u64::MAX.to_le_bytes());
                    }
                    format!("u64::MAX at {at8}")
                }
                4 => {
                    let v = rng.next_u64() as u32;
                    if at4 + 4 <= b.len() {
                        b[at4..at4 + 4].copy_from_slice(&v.to_le_bytes());
                    }
                    format!("random u32 {v:#x} at {at4}")
                }
                5 => {
                    let from = rng.below(b.len().saturating_sub(16));
                    let chunk: Vec<u8> = b[from..from + 16].to_vec();
                    let to = at.min(b.len() - 16);
                    b[to..to + 16].copy_from_slice(&chunk);
                    format!("16 bytes from {from} to {to}")
                }
                6 => {
                    b.truncate(at);
                    format!("truncated to {at}")
                }
                _ => {
                    let extra = 1 + rng.below(64);
                    b.extend((0..extra).map(|i| i as u8));
                    format!("{extra} bytes appended")
                }
            };
            (format!("{name}: {what}"), b)
        })
        .collect()
}

/// `count` copies of an index's parts with one header field changed (the
/// header checksum is recomputed by `Index::from_parts`, as a crafted file
/// would carry it).
pub fn mutated_headers(
    index: &octex_index::Index,
    count: usize,
    seed: u64,
) -> Vec<(String, octex_index::IndexParts)> {
    use octex_index::Metric;
    let mut rng = Rng(seed | 1);
    let base = index.to_parts();
    (0..count)
        .map(|_| {
            let mut p = base.clone();
            let h = &mut p.header;
            let pick = |rng: &mut Rng, v: u32| -> u32 {
                [
                    0,
                    1,
                    v.wrapping_sub(1),
                    v + 1,
                    2 * v,
                    7,
                    9,
                    15,
                    17,
                    u32::MAX,
                ][rng.below(10)]
            };
            let what = match rng.below(11) {
                0 => {
                    h.input_dim = pick(&mut rng, h.input_dim);
                    format!("input_dim {}", h.input_dim)
                }
                1 => {
                    h.dim = pick(&mut rng, h.dim);
                    format!("dim {}", h.dim)
                }
                2 => {
                    h.blocks = pick(&mut rng, h.blocks);
                    format!("blocks {}", h.blocks)
                }
                3 => {
                    h.sketch_width = pick(&mut rng, h.sketch_width);
                    format!("sketch_width {}", h.sketch_width)
                }
                4 => {
                    h.list_len = pick(&mut rng, h.list_len);
                    format!("list_len {}", h.list_len)
                }
                5 => {
                    h.row_len = pick(&mut rng, h.row_len);
                    format!("row_len {}", h.row_len)
                }
                6 => {
                    h.copies = pick(&mut rng, h.copies);
                    format!("copies {}", h.copies)
                }
                7 => {
                    h.spacings = pick(&mut rng, h.spacings);
                    format!("spacings {}", h.spacings)
                }
                8 => {
                    h.metric = [Metric::L2, Metric::Cosine, Metric::InnerProduct][rng.below(3)];
                    format!("metric {}", h.metric)
                }
                9 => {
                    h.max_norm = [f32::NAN, f32::INFINITY, -1.0, 0.0, 1e30][rng.below(5)];
                    format!("max_norm {}", h.max_norm)
                }
                _ => {
                    h.n = pick(&mut rng, h.n as u32) as u64;
                    format!("n {}", h.n)
                }
            };
            (what, p)
        })
        .collect()
}
