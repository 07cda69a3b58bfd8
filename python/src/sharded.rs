//! `ShardedIndex` and `merge_topk` of `octex._octex`: bindings of
//! `octex_build::sharded`.

use std::path::PathBuf;

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use octex_build::{merge_topk as merge, BuildParams, Order, ShardAnswer, ShardError, ShardedIndex};

use crate::{parse, result_arrays, search_error, PySearchParams};
use octex_search::{Backend, SearchParams};

fn shard_error(e: ShardError) -> PyErr {
    match e {
        ShardError::Build(e) => crate::build_error(e),
        ShardError::Search(e) => search_error(e),
        e @ (ShardError::Index(_) | ShardError::Io { .. }) => PyOSError::new_err(e.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// An index cut into shards (contiguous id ranges), one octex index each,
/// with a manifest; searches merge the shards' answers (global ids).
#[pyclass(module = "octex._octex", name = "ShardedIndex")]
pub struct PyShardedIndex {
    inner: ShardedIndex,
}

#[pymethods]
impl PyShardedIndex {
    /// Build `shards` indexes over `base` (`(n, dim)`, rows cut in order).
    #[staticmethod]
    #[pyo3(signature = (base, metric="l2", shards=2, seed=None))]
    fn build(
        py: Python<'_>,
        base: PyReadonlyArray2<'_, f32>,
        metric: &str,
        shards: usize,
        seed: Option<u64>,
    ) -> PyResult<Self> {
        let metric = parse("metric", metric)?;
        let dim = base.shape()[1];
        let values = base
            .as_slice()
            .map_err(|_| PyValueError::new_err("base must be C-contiguous"))?;
        let mut params = BuildParams::default();
        if let Some(s) = seed {
            params.seed = s;
        }
        let inner = py
            .detach(|| ShardedIndex::build(values, dim, metric, shards, &params))
            .map_err(shard_error)?;
        Ok(Self { inner })
    }

    /// Load a shard directory written by `save`, validated.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py
            .detach(|| ShardedIndex::load(&path))
            .map_err(shard_error)?;
        Ok(Self { inner })
    }

    /// Write the shard files and the manifest into the directory `path`.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.inner.save(&path)).map_err(shard_error)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The manifest, as JSON.
    #[getter]
    fn manifest(&self) -> PyResult<String> {
        serde_json::to_string(self.inner.manifest())
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The `k` nearest of each query over all shards: `(ids uint64, distances)`.
    /// `backend`: `"auto"` (the GPU when usable), `"cpu"` or `"gpu"`.
    #[pyo3(signature = (queries, k=10, params=None, backend="auto"))]
    #[allow(clippy::type_complexity)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        params: Option<PySearchParams>,
        backend: &str,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        let backend: Backend = parse("backend", backend)?;
        let dim = self.inner.manifest().dim;
        if queries.shape()[1] != dim || k == 0 {
            return Err(PyValueError::new_err(format!(
                "queries of dimension {} (the index: {dim}), k {k} (at least 1)",
                queries.shape()[1]
            )));
        }
        let q = queries
            .as_slice()
            .map_err(|_| PyValueError::new_err("queries must be C-contiguous"))?;
        let p: Option<SearchParams> = params.map(Into::into);
        let (ids, d) = py
            .detach(|| self.inner.search(q, k, p.as_ref(), backend))
            .map_err(shard_error)?;
        result_arrays(py, q.len() / dim, k, ids, d)
    }
}

/// Write the manifest of a directory of shard files built elsewhere (each
/// `files[s]` holding ids `first_ids[s] .. first_ids[s] + lens[s]`).
#[pyfunction]
pub fn write_shard_manifest(
    path: PathBuf,
    metric: &str,
    dim: usize,
    files: Vec<String>,
    first_ids: Vec<u64>,
    lens: Vec<u64>,
) -> PyResult<()> {
    if files.len() != first_ids.len() || files.len() != lens.len() {
        return Err(PyValueError::new_err(
            "one first id and one length per file",
        ));
    }
    let shards = files
        .into_iter()
        .zip(first_ids.into_iter().zip(lens))
        .map(|(file, (first_id, len))| octex_build::sharded::ShardEntry {
            file,
            first_id,
            len,
        })
        .collect();
    let manifest = octex_build::ShardManifest {
        version: octex_build::sharded::MANIFEST_VERSION,
        metric: parse("metric", metric)?,
        dim,
        shards,
        build_params: BuildParams::default(),
    };
    octex_build::sharded::write_manifest(&path, &manifest).map_err(shard_error)
}

/// Merge shards' answers: `ids` and `distances` are lists of `(nq, k_i)`
/// arrays (`uint64` ids, `2**64 - 1` where missing); the `k` best of each
/// query, nearest first (smallest distance, or largest with `descending`),
/// ties by id, an id once.
#[pyfunction]
#[pyo3(signature = (ids, distances, k, descending=false))]
#[allow(clippy::type_complexity)]
pub fn merge_topk<'py>(
    py: Python<'py>,
    ids: Vec<PyReadonlyArray2<'py, u64>>,
    distances: Vec<PyReadonlyArray2<'py, f32>>,
    k: usize,
    descending: bool,
) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
    if ids.len() != distances.len() || ids.is_empty() || k == 0 {
        return Err(PyValueError::new_err(
            "one distance array per id array, at least one pair, and k >= 1",
        ));
    }
    let nq = ids[0].shape()[0];
    let mut parts = Vec::with_capacity(ids.len());
    for (i, d) in ids.iter().zip(&distances) {
        if i.shape() != d.shape() || i.shape()[0] != nq {
            return Err(PyValueError::new_err(format!(
                "id arrays and distance arrays must match and have {nq} rows"
            )));
        }
        let contiguous = |_| PyValueError::new_err("arrays must be C-contiguous");
        parts.push(ShardAnswer {
            ids: i.as_slice().map_err(contiguous)?,
            distances: d.as_slice().map_err(contiguous)?,
            k: i.shape()[1],
        });
    }
    let order = if descending {
        Order::Descending
    } else {
        Order::Ascending
    };
    let (out_ids, out_d) = merge(&parts, nq, k, order);
    let shape = |e: numpy::ndarray::ShapeError| PyValueError::new_err(e.to_string());
    let out_ids = Array2::from_shape_vec((nq, k), out_ids).map_err(shape)?;
    let out_d = Array2::from_shape_vec((nq, k), out_d).map_err(shape)?;
    Ok((out_ids.into_pyarray(py), out_d.into_pyarray(py)))
}
