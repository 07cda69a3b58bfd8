//! `cargo xtask codes`: how well compressed codes rank a data set's vectors,
//! measured against exact ground truth (issue 13, "a ranking that holds up in
//! high dimensions").
//!
//! Every code is scored the same way, over the whole base: each query ranks
//! all `n` vectors by the code's distance estimate, and the score at `R` is
//! the share of the true top 10 inside the estimate's top `R` (recall@10 of a
//! rerank of `R` candidates). The smaller the `R` a code needs for a recall,
//! the fewer exact distances a search pays after it; its bytes per vector are
//! what the search reads for every candidate it ranks.
//!
//! Codes, all in the coordinates of the data's full principal basis (an
//! orthonormal change of basis: distances are unchanged):
//! - `pca-int8 w`: octex's sketch, built by the builder's own functions: the
//!   first `w` principal coordinates, int8, one scale per coordinate. The
//!   estimate ignores the coordinates past `w`.
//! - `pca-4bit w`: the same coordinates at 4 bits (`w / 2` bytes).
//! - `rot-Bbit`: all `D` coordinates after a random rotation, `B` bits each,
//!   one scale per coordinate (`D B / 8` bytes).
//! - `rabitq-Bbit`: RaBitQ's estimator: each centred vector's unit direction,
//!   rotated, on a per-vector grid of `B` bits, rescaled by its inner product
//!   with the true direction so that the inner-product estimate is unbiased;
//!   the exact norm is kept (`D B / 8 + 8` bytes).

use std::path::PathBuf;

use anyhow::{ensure, Result};
use clap::Args;
use faer::MatRef;
use octex_lattice::GaussianRng;
use rayon::prelude::*;

use crate::data::{self, Dataset};

#[derive(Args)]
pub struct CodesArgs {
    /// Data set name or folder (with manifest.json, base, query, gt).
    #[arg(long)]
    data: String,
    /// Queries scored (the first ones of the query file).
    #[arg(long, default_value_t = 500)]
    queries: usize,
    /// Sketch widths of the principal-coordinate codes (default: the width
    /// the builder picks for this data, and half and twice it).
    #[arg(long, value_delimiter = ',')]
    widths: Vec<usize>,
    /// Write codes.json and codes.png (bytes per vector against the
    /// candidates needed for recall 0.99) here.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Depths at which recall is printed.
const DEPTHS: [usize; 8] = [10, 20, 40, 80, 160, 320, 640, 1000];
/// The recall whose rerank depth `codes.png` plots against bytes.
const PLOT_RECALL: f64 = 0.99;
/// Deepest rank tracked.
const MAX_DEPTH: usize = 1000;

/// One code's approximation of every base vector, in the space its queries
/// are mapped to: the estimate is `norm_term[i] - 2 <approx_i, q>` (plus a
/// term of the query alone, which does not change its ranking).
struct Approx {
    name: String,
    bytes_per_vector: f64,
    dim: usize,
    approx: Vec<f32>,
    norm_term: Vec<f32>,
    /// The queries in the code's space (`nq x dim`).
    queries: Vec<f32>,
}

pub fn run(args: CodesArgs, root: &std::path::Path) -> Result<()> {
    let ds = Dataset::open(&args.data, root)?;
    let metric = ds.metric()?;
    let (raw_base, dim) = data::read_vectors(&ds.base())?;
    let (raw_q, qdim) = data::read_vectors(&ds.queries())?;
    ensure!(dim == qdim, "base has dimension {dim}, queries {qdim}");
    let (gt, gk) = data::read_ids(&ds.gt())?;
    ensure!(
        gk >= 10,
        "ground truth holds {gk} neighbours per query, codes needs 10"
    );
    let nq = args.queries.min(raw_q.len() / dim);
    let (base, sdim, max_norm) = octex_build::prepare(&raw_base, dim, metric)?;
    let base = base.into_owned();
    drop(raw_base);
    let n = base.len() / sdim;
    let mut queries = vec![0f32; nq * sdim];
    for (q, out) in raw_q.chunks_exact(dim).zip(queries.chunks_exact_mut(sdim)) {
        let norm2 = octex_index::Metric::squared_norm(q);
        metric
            .prepare_query(q, norm2, (max_norm as f64).powi(2), out)
            .map_err(|p| anyhow::anyhow!("query: {p:?}"))?;
    }
    println!(
        "{}: {n} vectors, stored dimension {sdim}, {metric}; {nq} queries, recall@10 in the top R of each code's ranking of all {n}",
        args.data
    );

    // Full principal basis: coordinates of every vector, centred.
    let rows = octex_build::pca::sample_rows(n, 100_000, 0x5EED);
    let pca = octex_build::pca::fit(&base, sdim, &rows, |s| s.global.len());
    let basis: Vec<f32> = pca.basis.iter().map(|&v| v as f32).collect();
    let coords = project(&base, &pca.mean, &basis, sdim, sdim);
    drop(base);
    let qcoords = project(&queries, &pca.mean, &basis, sdim, sdim);
    let auto_w = octex_build::sketch::width_for_spectra(&pca.spectrum, &pca.local).min(sdim);
    let widths = if args.widths.is_empty() {
        let mut w = vec![
            (auto_w / 32 * 16).max(16),
            auto_w,
            (2 * auto_w).min(sdim / 16 * 16).max(16),
        ];
        w.sort_unstable();
        w.dedup();
        w
    } else {
        args.widths.clone()
    };

    let rotation = random_rotation(sdim, 0xC0DE);
    let rotated = project(&coords, &vec![0.0; sdim], &rotation, sdim, sdim);
    let qrotated = project(&qcoords, &vec![0.0; sdim], &rotation, sdim, sdim);

    println!(
        "{:<16} {:>7}  {}   R for 0.90 / 0.95 / 0.99",
        "code",
        "bytes",
        DEPTHS.map(|d| format!("{d:>6}")).join("")
    );
    let mut report = Vec::new();
    let mut plot_points = Vec::new();
    // Each code is built, scored and dropped in turn (a code of 384-d data
    // holds as many floats as the base).
    let mut score = |code: Approx| {
        let curve = recall_curve(&code, &gt, gk, nq);
        let need = |target: f64| {
            curve
                .iter()
                .position(|&r| r >= target - 1e-12)
                .map_or("-".to_string(), |i| (i + 1).to_string())
        };
        println!(
            "{:<16} {:>7.1}  {}   {} / {} / {}",
            code.name,
            code.bytes_per_vector,
            DEPTHS.map(|d| format!("{:>6.3}", curve[d - 1])).join(""),
            need(0.90),
            need(0.95),
            need(0.99)
        );
        plot_points.push(crate::plot::CodePoint {
            name: code.name.clone(),
            bytes_per_vector: code.bytes_per_vector,
            candidates: curve
                .iter()
                .position(|&r| r >= PLOT_RECALL - 1e-12)
                .map(|i| (i + 1) as f64),
        });
        report.push(serde_json::json!({
            "code": code.name,
            "bytes_per_vector": code.bytes_per_vector,
            "recall_at_depth": DEPTHS.iter().map(|&d| (d, curve[d - 1])).collect::<Vec<_>>(),
        }));
    };
    for &w in &widths {
        ensure!(
            w % 16 == 0 && w <= sdim,
            "width {w}: a multiple of 16, at most {sdim}"
        );
        score(pca_int8(&coords, &qcoords, sdim, w));
        score(scalar(
            format!("pca-4bit {w}"),
            &coords,
            &qcoords,
            sdim,
            w,
            4,
        ));
    }
    for bits in [2, 4, 8] {
        score(scalar(
            format!("rot-{bits}bit"),
            &rotated,
            &qrotated,
            sdim,
            sdim,
            bits,
        ));
    }
    for bits in [1, 2, 4] {
        score(rabitq(&rotated, &qrotated, sdim, bits));
    }
    if let Some(dir) = args.out {
        std::fs::create_dir_all(&dir)?;
        let json = serde_json::json!({
            "data": args.data, "n": n, "dim": sdim, "metric": metric.to_string(),
            "queries": nq, "codes": report,
        });
        std::fs::write(dir.join("codes.json"), serde_json::to_string_pretty(&json)?)?;
        let png = dir.join("codes.png");
        let title = format!(
            "{}: candidates for recall@10 {PLOT_RECALL} by code",
            args.data
        );
        match crate::plot::codes_png(&png, &title, &plot_points) {
            Ok(()) => println!(
                "wrote {} and {}",
                dir.join("codes.json").display(),
                png.display()
            ),
            Err(e) => println!("wrote {}; no plot: {e:#}", dir.join("codes.json").display()),
        }
    }
    Ok(())
}

/// `(x - mean) * basis` for every row of `x` (`rows x dim` times `dim x m`).
fn project(x: &[f32], mean: &[f32], basis: &[f32], dim: usize, m: usize) -> Vec<f32> {
    let rows = x.len() / dim;
    let mut centred = x.to_vec();
    centred.par_chunks_mut(dim).for_each(|r| {
        r.iter_mut().zip(mean).for_each(|(v, m)| *v -= m);
    });
    let mut out = faer::Mat::<f32>::zeros(rows, m);
    faer::linalg::matmul::matmul(
        out.as_mut(),
        faer::Accum::Replace,
        MatRef::from_row_major_slice(&centred, rows, dim),
        MatRef::from_row_major_slice(basis, dim, m),
        1.0,
        faer::Par::rayon(0),
    );
    let mut flat = vec![0f32; rows * m];
    flat.par_chunks_mut(m).enumerate().for_each(|(i, r)| {
        r.iter_mut().enumerate().for_each(|(j, v)| *v = out[(i, j)]);
    });
    flat
}

/// A seeded random orthogonal `d x d` matrix (QR of a Gaussian one).
fn random_rotation(d: usize, seed: u64) -> Vec<f32> {
    let mut rng = GaussianRng::new(seed, 0x0707);
    let g = faer::Mat::<f64>::from_fn(d, d, |_, _| rng.normal());
    let q = g.qr().compute_Q();
    (0..d * d).map(|k| q[(k / d, k % d)] as f32).collect()
}

/// The first `w` of `dim` columns of `x`.
fn leading(x: &[f32], dim: usize, w: usize) -> Vec<f32> {
    x.chunks_exact(dim)
        .flat_map(|r| r[..w].iter().copied())
        .collect()
}

fn squared_norms(x: &[f32], dim: usize) -> Vec<f32> {
    x.par_chunks(dim)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect()
}

/// octex's sketch: the builder's scales (on the PCA sample's rows) and codes.
fn pca_int8(coords: &[f32], qcoords: &[f32], dim: usize, w: usize) -> Approx {
    let lead = leading(coords, dim, w);
    let rows = octex_build::pca::sample_rows(lead.len() / w, 100_000, 0x5EED);
    let sample: Vec<f32> = rows
        .iter()
        .flat_map(|&r| lead[r * w..(r + 1) * w].iter().copied())
        .collect();
    let scales = octex_build::sketch::fit_scales(&sample, w);
    let codes = octex_build::sketch::encode(&lead, &scales);
    let approx: Vec<f32> = codes
        .iter()
        .enumerate()
        .map(|(k, &c)| c as f32 * scales[k % w])
        .collect();
    Approx {
        name: format!("pca-int8 {w}"),
        bytes_per_vector: w as f64,
        dim: w,
        norm_term: squared_norms(&approx, w),
        approx,
        queries: leading(qcoords, dim, w),
    }
}

/// `bits`-bit midrise scalar codes of the first `w` columns, one scale per
/// column (its 99.9th percentile of `|value|` over half the levels).
fn scalar(name: String, x: &[f32], q: &[f32], dim: usize, w: usize, bits: u32) -> Approx {
    let lead = leading(x, dim, w);
    let half = (1i32 << (bits - 1)) as f32;
    let scales: Vec<f32> = (0..w)
        .map(|j| {
            let mut col: Vec<f32> = lead.iter().skip(j).step_by(w).map(|v| v.abs()).collect();
            let k = ((col.len() as f64 * 0.999) as usize).min(col.len() - 1);
            let v = *col.select_nth_unstable_by(k, f32::total_cmp).1;
            if v > 0.0 {
                v / half
            } else {
                1.0
            }
        })
        .collect();
    let approx: Vec<f32> = lead
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let s = scales[k % w];
            ((v / s).floor().clamp(-half, half - 1.0) + 0.5) * s
        })
        .collect();
    Approx {
        name,
        bytes_per_vector: (w * bits as usize) as f64 / 8.0,
        dim: w,
        norm_term: squared_norms(&approx, w),
        approx,
        queries: leading(q, dim, w),
    }
}

/// RaBitQ's estimator on a `bits`-bit grid: direction `u` of the quantised
/// unit vector, approximation `|x| u / <u, o>` (`o` the true unit direction),
/// exact `|x|^2` as the norm term.
fn rabitq(x: &[f32], q: &[f32], dim: usize, bits: u32) -> Approx {
    let half = (1i32 << (bits - 1)) as f32;
    let mut approx = vec![0f32; x.len()];
    let mut norm_term = vec![0f32; x.len() / dim];
    approx
        .par_chunks_mut(dim)
        .zip(norm_term.par_iter_mut())
        .zip(x.par_chunks(dim))
        .for_each(|((out, t), r)| {
            let norm2: f32 = r.iter().map(|v| v * v).sum();
            *t = norm2;
            let norm = norm2.sqrt();
            if norm == 0.0 {
                return;
            }
            // Per-vector grid: the largest coordinate sits in the top level.
            let amax = r.iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = amax / half;
            let mut u2 = 0f32;
            let mut uo = 0f32;
            for (o, &v) in out.iter_mut().zip(r) {
                let u = if bits == 1 {
                    v.signum()
                } else {
                    (v / s).floor().clamp(-half, half - 1.0) + 0.5
                };
                *o = u;
                u2 += u * u;
                uo += u * v;
            }
            let un = u2.sqrt();
            // <u/|u|, o> with o = r / |r|.
            let cos = uo / (un * norm);
            let f = norm / (un * cos.max(1e-6));
            out.iter_mut().for_each(|o| *o *= f);
        });
    Approx {
        name: format!("rabitq-{bits}bit"),
        bytes_per_vector: (dim * bits as usize) as f64 / 8.0 + 8.0,
        dim,
        approx,
        norm_term,
        queries: q.to_vec(),
    }
}

/// Mean recall@10 inside the top `R` of the code's ranking, `R = 1 ..= 1000`.
fn recall_curve(code: &Approx, gt: &[u32], gk: usize, nq: usize) -> Vec<f64> {
    let n = code.norm_term.len();
    let m = code.dim;
    let x = MatRef::from_row_major_slice(&code.approx, n, m);
    let depth = MAX_DEPTH.min(n);
    let mut hits = vec![0u64; MAX_DEPTH];
    const CHUNK: usize = 32;
    for start in (0..nq).step_by(CHUNK) {
        let rows = CHUNK.min(nq - start);
        let qm =
            MatRef::from_row_major_slice(&code.queries[start * m..(start + rows) * m], rows, m);
        let mut dots = faer::Mat::<f32>::zeros(rows, n);
        faer::linalg::matmul::matmul(
            dots.as_mut(),
            faer::Accum::Replace,
            qm,
            x.transpose(),
            1.0,
            faer::Par::rayon(0),
        );
        let ranks: Vec<Vec<usize>> = (0..rows)
            .into_par_iter()
            .map(|i| {
                let mut est: Vec<(f32, u32)> = (0..n)
                    .map(|j| (code.norm_term[j] - 2.0 * dots[(i, j)], j as u32))
                    .collect();
                if depth < n {
                    est.select_nth_unstable_by(depth - 1, |a, b| a.0.total_cmp(&b.0));
                }
                est.truncate(depth);
                est.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
                let truth = &gt[(start + i) * gk..(start + i) * gk + 10];
                truth
                    .iter()
                    .map(|&t| est.iter().position(|e| e.1 == t).unwrap_or(MAX_DEPTH))
                    .collect()
            })
            .collect();
        for r in ranks.iter().flatten() {
            if *r < MAX_DEPTH {
                hits[*r] += 1;
            }
        }
    }
    let mut acc = 0u64;
    hits.iter()
        .map(|h| {
            acc += h;
            acc as f64 / (10 * nq) as f64
        })
        .collect()
}
