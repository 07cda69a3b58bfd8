//! Helpers of octex's end-to-end tests: realistic synthetic data (a Gaussian
//! mixture with a decaying spectrum, like real embeddings) and exact references.

use octex_lattice::GaussianRng;

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

/// Exact top-k ids by squared L2 (brute force, for references).
pub fn brute_force(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Vec<u32> {
    let (ids, _) = octex_build::knn::exact_knn(
        base,
        queries,
        dim,
        k,
        octex_build::knn::KnnMetric::L2,
        false,
        &|_| {},
    );
    ids
}

/// Exact top-k ids by inner product.
pub fn brute_force_ip(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Vec<u32> {
    let (ids, _) = octex_build::knn::exact_knn(
        base,
        queries,
        dim,
        k,
        octex_build::knn::KnnMetric::NegDot,
        false,
        &|_| {},
    );
    ids
}

/// recall@k of `found` against `truth`, both `nq x k`.
pub fn recall(found: &[u32], truth: &[u32], k: usize) -> f64 {
    let nq = truth.len() / k;
    let hits: usize = (0..nq)
        .map(|q| {
            found[q * k..(q + 1) * k]
                .iter()
                .filter(|id| truth[q * k..(q + 1) * k].contains(id))
                .count()
        })
        .sum();
    hits as f64 / (nq * k) as f64
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
