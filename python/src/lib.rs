//! # octex-python
//!
//! The Rust half of the `octex` Python package (module `octex._octex`; the
//! Python half in `octex/` adds dtype conversion, progress bars, type stubs
//! and the Faiss drop-in). It binds the Rust API and adds nothing to it:
//! `build` is `octex_build::build_with_progress`, `Index` is an
//! `octex_search::Index` with its searchers, parameters are the Rust
//! structs'. numpy arrays come in as `float32` C-contiguous views (no copy)
//! and results go out as arrays that take over the Rust buffers (no copy);
//! the GIL is released while Rust works. Errors become `ValueError` (bad
//! input or parameters), `OSError` (files) or `RuntimeError` (the GPU).
//!
//! Place in the pipeline: on top of `octex-build` and `octex-search`.

mod sharded;

use std::path::PathBuf;

use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyKeyError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use octex_build::{BuildError, BuildParams, LiveError, LiveIndex, Progress};
use octex_index::{IndexError, Metric, VectorDtype};
use octex_search::{Backend, IdFilter, Index, ParamsFrom, SearchError, SearchParams, SharedIndex};

fn index_error(e: IndexError) -> PyErr {
    // Every index error comes from a file (or bytes that stand for one).
    PyOSError::new_err(e.to_string())
}

fn search_error(e: SearchError) -> PyErr {
    match e {
        SearchError::Index(e) => index_error(e),
        e @ (SearchError::BackendUnavailable(_)
        | SearchError::Gpu(_)
        | SearchError::FilterOnGpu) => PyRuntimeError::new_err(e.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

fn build_error(e: BuildError) -> PyErr {
    match e {
        BuildError::Search { source, .. } => search_error(source),
        BuildError::Index(e) => index_error(e),
        e @ BuildError::Gpu(_) => PyRuntimeError::new_err(e.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

fn live_error(e: LiveError) -> PyErr {
    match e {
        LiveError::Build(e) => build_error(e),
        LiveError::Search(e) => search_error(e),
        LiveError::File(e) => index_error(e),
        e => PyValueError::new_err(e.to_string()),
    }
}

fn parse<T: std::str::FromStr<Err = E>, E: std::fmt::Display>(what: &str, s: &str) -> PyResult<T> {
    s.parse()
        .map_err(|e| PyValueError::new_err(format!("{what} {s:?}: {e}")))
}

/// Search parameters: `read_depth` (r), `start_points` (S), `waves` (W),
/// `rerank` (R), `wave_rerank` (rerank in every wave). More of any: higher
/// recall, slower.
#[pyclass(module = "octex._octex", name = "SearchParams", from_py_object)]
#[derive(Clone, Copy)]
struct PySearchParams {
    #[pyo3(get, set)]
    read_depth: usize,
    #[pyo3(get, set)]
    start_points: usize,
    #[pyo3(get, set)]
    waves: usize,
    #[pyo3(get, set)]
    rerank: usize,
    #[pyo3(get, set)]
    wave_rerank: bool,
}

impl From<PySearchParams> for SearchParams {
    fn from(p: PySearchParams) -> Self {
        SearchParams {
            read_depth: p.read_depth,
            start_points: p.start_points,
            waves: p.waves,
            rerank: p.rerank,
            wave_rerank: p.wave_rerank,
        }
    }
}

impl From<SearchParams> for PySearchParams {
    fn from(p: SearchParams) -> Self {
        PySearchParams {
            read_depth: p.read_depth,
            start_points: p.start_points,
            waves: p.waves,
            rerank: p.rerank,
            wave_rerank: p.wave_rerank,
        }
    }
}

#[pymethods]
impl PySearchParams {
    /// Parameters left out take `SearchParams::default()`'s values (a search
    /// given no parameters at all takes its index's own, `Index.default_params`).
    #[new]
    #[pyo3(signature = (read_depth=None, start_points=None, waves=None, rerank=None, wave_rerank=None))]
    fn new(
        read_depth: Option<usize>,
        start_points: Option<usize>,
        waves: Option<usize>,
        rerank: Option<usize>,
        wave_rerank: Option<bool>,
    ) -> Self {
        let d = SearchParams::default();
        PySearchParams {
            read_depth: read_depth.unwrap_or(d.read_depth),
            start_points: start_points.unwrap_or(d.start_points),
            waves: waves.unwrap_or(d.waves),
            rerank: rerank.unwrap_or(d.rerank),
            wave_rerank: wave_rerank.unwrap_or(d.wave_rerank),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "SearchParams(read_depth={}, start_points={}, waves={}, rerank={}, wave_rerank={})",
            self.read_depth,
            self.start_points,
            self.waves,
            self.rerank,
            if self.wave_rerank { "True" } else { "False" }
        )
    }

    fn __eq__(&self, other: &Self) -> bool {
        SearchParams::from(*self) == SearchParams::from(*other)
    }
}

/// A loaded or built index. Search it on the CPU or the GPU; save it.
#[pyclass(module = "octex._octex", name = "Index")]
struct PyIndex {
    /// The index as built or loaded, its GPU searcher once opened, and its
    /// tuned parameters.
    shared: SharedIndex,
    /// From the first add or remove on: the index with its adds, removes
    /// and user ids, searched on the CPU.
    live: Option<LiveIndex>,
}

impl PyIndex {
    fn new(index: Index) -> Self {
        PyIndex {
            shared: SharedIndex::new(index),
            live: None,
        }
    }

    /// The index searched now (with its inserted vectors, once live).
    fn current(&self) -> &Index {
        match &self.live {
            Some(live) => live.index(),
            None => self.shared.index(),
        }
    }

    /// The queries' values and the parameters to search them with (see
    /// [`PyIndex::params_for`]), warning with a tuning's advice.
    fn prepare<'a>(
        &self,
        py: Python<'_>,
        queries: &'a PyReadonlyArray2<'_, f32>,
        k: usize,
        recall: Option<f64>,
        params: Option<PySearchParams>,
    ) -> PyResult<(&'a [f32], SearchParams)> {
        let values = queries
            .as_slice()
            .map_err(|_| PyValueError::new_err("queries must be C-contiguous"))?;
        let (p, advice) = py
            .detach(|| self.params_for(recall, params, k, values))
            .map_err(search_error)?;
        if let Some(advice) = advice {
            warn(py, &advice)?;
        }
        Ok((values, p))
    }

    /// The living index, made on first use (user ids = positions).
    fn live_mut(&mut self) -> &mut LiveIndex {
        let shared = &self.shared;
        self.live
            .get_or_insert_with(|| LiveIndex::new(shared.index().clone(), BuildParams::default()))
    }

    /// The parameters of a search: `params`, the defaults, or (with
    /// `recall`) those tuned for the target on `queries` at its first use,
    /// with what to rebuild with when the target was out of reach.
    fn params_for(
        &self,
        recall: Option<f64>,
        params: Option<PySearchParams>,
        k: usize,
        queries: &[f32],
    ) -> Result<(SearchParams, Option<String>), SearchError> {
        let from = match (recall, params) {
            (Some(_), Some(_)) => return Err(SearchError::RecallAndParams),
            (None, Some(p)) => ParamsFrom::Given(p.into()),
            (None, None) => ParamsFrom::Given(self.current().default_params()),
            (Some(target), None) => ParamsFrom::Recall(target),
        };
        self.shared.params(from, k, queries)
    }
}

#[pymethods]
impl PyIndex {
    /// Load (memory-map) and validate an index file, plain or saved after
    /// adds and removes (then searched by user id, as before the save).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let live = py
            .detach(|| LiveIndex::load(&path, BuildParams::default()))
            .map_err(live_error)?;
        let mut out = PyIndex::new(live.index().clone());
        if !live.ids_are_positions() {
            out.live = Some(live);
        }
        Ok(out)
    }

    /// Write the index atomically (temporary file, fsync, rename): a crash
    /// during the save leaves the previous file whole. After adds and
    /// removes the file holds the user ids, removals and vectors not yet
    /// inserted, and `load` gives back the same answers; when half the
    /// built vectors or more are removed, the index is rebuilt over the
    /// live ones first.
    fn save(&mut self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        if let Some(live) = &mut self.live {
            return py.detach(|| live.save(&path)).map_err(live_error);
        }
        let index = self.shared.index();
        py.detach(|| index.raw().save(&path)).map_err(index_error)
    }

    /// Live vectors in the index (added, not removed).
    fn __len__(&self) -> usize {
        match &self.live {
            Some(live) => live.len(),
            None => self.shared.index().len(),
        }
    }

    /// Whether the index has had adds or removes (its searches then run on
    /// the CPU and return user ids, `uint64`).
    #[getter]
    fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// Add a `float32` C-contiguous `(n, dim)` array with `ids` (`uint64`,
    /// or the next free ids); returns the ids. A duplicate id or a vector the
    /// metric cannot take refuses the whole batch.
    #[pyo3(signature = (vectors, ids=None))]
    fn add<'py>(
        &mut self,
        py: Python<'py>,
        vectors: PyReadonlyArray2<'py, f32>,
        ids: Option<PyReadonlyArray1<'py, u64>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let values = vectors
            .as_slice()
            .map_err(|_| PyValueError::new_err("vectors must be C-contiguous"))?;
        if vectors.shape()[1] != self.current().dim() {
            return Err(PyValueError::new_err(format!(
                "vectors have dimension {}, the index {}",
                vectors.shape()[1],
                self.current().dim()
            )));
        }
        let ids = match &ids {
            Some(a) => Some(
                a.as_slice()
                    .map_err(|_| PyValueError::new_err("ids must be contiguous"))?,
            ),
            None => None,
        };
        let live = self.live_mut();
        let out = py.detach(|| live.add(values, ids)).map_err(live_error)?;
        Ok(out.into_pyarray(py))
    }

    /// Remove `ids` (`uint64`); returns how many were in the index.
    fn remove(&mut self, ids: PyReadonlyArray1<'_, u64>) -> PyResult<usize> {
        let ids = ids
            .as_slice()
            .map_err(|_| PyValueError::new_err("ids must be contiguous"))?;
        Ok(self.live_mut().remove(ids))
    }

    /// The ids of the live vectors (`uint64`): user ids after adds or
    /// removes, else positions.
    fn ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        match &self.live {
            Some(live) => live.ids().into_pyarray(py),
            None => (0..self.shared.index().len() as u64)
                .collect::<Vec<u64>>()
                .into_pyarray(py),
        }
    }

    /// The vectors of `ids` (`uint64`: user ids after adds or removes, else
    /// positions) as the index holds them, `(n, dim)`; `KeyError` for an
    /// id the index does not hold.
    fn reconstruct<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let ids = ids
            .as_slice()
            .map_err(|_| PyValueError::new_err("ids must be contiguous"))?;
        let raw = self.current().raw();
        let dim = raw.input_dim();
        let mut out = Vec::with_capacity(ids.len() * dim);
        for &id in ids {
            let v = match &self.live {
                Some(live) => live.vector(id),
                None => {
                    (id < raw.len() as u64).then(|| octex_build::stored_vector(raw, id as usize))
                }
            };
            out.extend(v.ok_or_else(|| PyKeyError::new_err(id))?);
        }
        Array2::from_shape_vec((ids.len(), dim), out)
            .map(|a| a.into_pyarray(py))
            .map_err(|e| PyRuntimeError::new_err(format!("internal: {e}")))
    }

    /// Insert the vectors still waiting into the index itself.
    fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        match &mut self.live {
            Some(live) => py.detach(|| live.flush()).map_err(live_error),
            None => Ok(()),
        }
    }

    /// [`PyIndex::search`] of a live index: user ids (`uint64`, missing
    /// entries `2**64 - 1`), on the CPU; `allowed`: user ids.
    #[pyo3(signature = (queries, k=10, params=None, recall=None, allowed=None))]
    #[allow(clippy::type_complexity)]
    fn search_live<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        params: Option<PySearchParams>,
        recall: Option<f64>,
        allowed: Option<PyReadonlyArray1<'py, u64>>,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        let Some(live) = &self.live else {
            return Err(PyValueError::new_err(
                "the index has had no adds or removes",
            ));
        };
        let nq = queries.shape()[0];
        let (values, p) = self.prepare(py, &queries, k, recall, params)?;
        let allowed = match &allowed {
            Some(a) => Some(
                a.as_slice()
                    .map_err(|_| PyValueError::new_err("allowed ids must be contiguous"))?,
            ),
            None => None,
        };
        let res = py
            .detach(|| live.search(values, k, &p, allowed))
            .map_err(live_error)?;
        result_arrays(py, nq, k, res.ids, res.distances)
    }

    /// Dimension of the queries it takes.
    #[getter]
    fn dim(&self) -> usize {
        self.shared.index().dim()
    }

    /// `"l2"`, `"cosine"` or `"ip"`.
    #[getter]
    fn metric(&self) -> String {
        self.shared.index().metric().to_string()
    }

    /// The parameters a search given none takes: the point the build chose
    /// for this index (`Index::choose_defaults`), or the fixed defaults for
    /// an index saved before builds chose one.
    #[getter]
    fn default_params(&self) -> PySearchParams {
        self.current().default_params().into()
    }

    /// Bytes of the index (as saved).
    #[getter]
    fn nbytes(&self) -> usize {
        self.current().raw().as_bytes().len()
    }

    /// The cheapest parameters whose recall@k reaches `recall` on a sample
    /// of `queries` (a float32 `(nq, dim)` array; without it, of the index's
    /// own vectors), and that sample recall.
    #[pyo3(signature = (recall, k=10, queries=None))]
    fn params_for_recall(
        &self,
        py: Python<'_>,
        recall: f64,
        k: usize,
        queries: Option<PyReadonlyArray2<'_, f32>>,
    ) -> PyResult<(PySearchParams, f64)> {
        let values = match &queries {
            Some(q) => {
                if q.shape()[1] != self.shared.index().dim() {
                    return Err(PyValueError::new_err(format!(
                        "queries have dimension {}, the index {}",
                        q.shape()[1],
                        self.shared.index().dim()
                    )));
                }
                q.as_slice()
                    .map_err(|_| PyValueError::new_err("queries must be C-contiguous"))?
            }
            None => &[],
        };
        let t = py
            .detach(|| self.shared.index().tune_for_recall_on(values, recall, k))
            .map_err(search_error)?;
        if let Some(advice) = t.advice(self.shared.index()) {
            warn(py, &advice)?;
        }
        Ok((t.params.into(), t.sample_recall))
    }

    /// Search a `float32` C-contiguous `(nq, dim)` array for the `k` nearest
    /// of each query: `(ids, distances)`, both `(nq, k)`, ids `uint32`
    /// (missing entries `2**32 - 1`, distances `inf`). `allowed`: the only
    /// ids that may be returned (`uint32`), for a filtered search.
    #[pyo3(signature = (queries, k=10, params=None, recall=None, backend="auto", allowed=None))]
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        params: Option<PySearchParams>,
        recall: Option<f64>,
        backend: &str,
        allowed: Option<PyReadonlyArray1<'py, u32>>,
    ) -> PyResult<(Bound<'py, PyArray2<u32>>, Bound<'py, PyArray2<f32>>)> {
        if self.live.is_some() {
            return Err(PyValueError::new_err(
                "an index with adds or removes is searched by search_live (user ids)",
            ));
        }
        let backend: Backend = parse("backend", backend)?;
        let (nq, dim) = (queries.shape()[0], queries.shape()[1]);
        let (values, p) = self.prepare(py, &queries, k, recall, params)?;
        let filter = match &allowed {
            Some(ids) => {
                let ids = ids
                    .as_slice()
                    .map_err(|_| PyValueError::new_err("allowed ids must be contiguous"))?;
                Some(
                    IdFilter::from_ids(self.shared.index().len(), ids.iter().copied())
                        .map_err(search_error)?,
                )
            }
            None => None,
        };
        let res = py
            .detach(|| -> Result<_, SearchError> {
                let batch = octex_search::Queries::new(values, dim)?;
                match &filter {
                    Some(f) => self.shared.search_filtered(batch, k, &p, f, backend),
                    None => self.shared.search(batch, k, &p, backend),
                }
            })
            .map_err(search_error)?;
        result_arrays(py, nq, k, res.ids, res.distances)
    }

    /// Seconds per call of the Rust search alone (CPU, default parameters)
    /// over `reps` calls, for measuring the Python layer's overhead
    /// (`examples/python/overhead.py`).
    fn _rust_search_seconds(
        &self,
        py: Python<'_>,
        queries: PyReadonlyArray2<'_, f32>,
        k: usize,
        reps: usize,
    ) -> PyResult<f64> {
        let dim = queries.shape()[1];
        let values = queries
            .as_slice()
            .map_err(|_| PyValueError::new_err("queries must be C-contiguous"))?;
        let p = self.shared.index().default_params();
        py.detach(|| {
            let t = std::time::Instant::now();
            for _ in 0..reps.max(1) {
                let batch = octex_search::Queries::new(values, dim)?;
                std::hint::black_box(self.shared.index().search_queries(batch, k, &p)?);
            }
            Ok(t.elapsed().as_secs_f64() / reps.max(1) as f64)
        })
        .map_err(search_error)
    }

    fn __repr__(&self) -> String {
        format!(
            "octex.Index({} vectors, dim {}, {})",
            self.__len__(),
            self.current().dim(),
            self.current().metric()
        )
    }
}

/// Forwards build progress to a Python callable `callback(event, stage,
/// value)` (`event`: "start" with the total, "advance" with the steps,
/// "finish"), taking the GIL for each call.
struct PyProgress(Py<PyAny>);

impl PyProgress {
    fn call(&self, event: &str, stage: &str, value: u64) {
        Python::attach(|py| {
            // A failing callback must not stop the build: its error is shown.
            if let Err(e) = self.0.call1(py, (event, stage, value)) {
                e.print(py);
            }
        });
    }
}

impl Progress for PyProgress {
    fn start(&self, stage: &'static str, total: u64) {
        self.call("start", stage, total);
    }
    fn advance(&self, stage: &'static str, steps: u64) {
        self.call("advance", stage, steps);
    }
    fn finish(&self, stage: &'static str) {
        self.call("finish", stage, 0);
    }
}

/// Build an index over a `float32` C-contiguous `(n, dim)` array.
#[pyfunction]
#[pyo3(signature = (base, metric="l2", backend="auto", copies=None, list_len=None, row_len=None, sketch_width=None, vectors="auto", seed=None, progress=None, ids=None))]
#[allow(clippy::too_many_arguments)]
fn build(
    py: Python<'_>,
    base: PyReadonlyArray2<'_, f32>,
    metric: &str,
    backend: &str,
    copies: Option<usize>,
    list_len: Option<usize>,
    row_len: Option<usize>,
    sketch_width: Option<usize>,
    vectors: &str,
    seed: Option<u64>,
    progress: Option<Py<PyAny>>,
    ids: Option<PyReadonlyArray1<'_, u64>>,
) -> PyResult<PyIndex> {
    let metric: Metric = parse("metric", metric)?;
    let backend: Backend = parse("backend", backend)?;
    let vector_dtype = match vectors {
        "auto" => None,
        "f16" | "float16" => Some(VectorDtype::F16),
        "f32" | "float32" => Some(VectorDtype::F32),
        other => {
            return Err(PyValueError::new_err(format!(
                "vectors {other:?}: auto, f16 or f32"
            )))
        }
    };
    let dim = base.shape()[1];
    let values = base
        .as_slice()
        .map_err(|_| PyValueError::new_err("base must be C-contiguous"))?;
    let mut params = BuildParams {
        copies,
        list_len,
        row_len,
        sketch_width,
        backend,
        vector_dtype,
        ..Default::default()
    };
    if let Some(s) = seed {
        params.seed = s;
    }
    let built = py
        .detach(|| match progress {
            Some(cb) => {
                octex_build::build_with_progress(values, dim, metric, &params, &PyProgress(cb))
            }
            None => octex_build::build(values, dim, metric, &params),
        })
        .map_err(build_error)?;
    let mut out = PyIndex::new(Index::new(built.index));
    if let Some(ids) = ids {
        let ids = ids
            .as_slice()
            .map_err(|_| PyValueError::new_err("ids must be contiguous"))?
            .to_vec();
        let live = LiveIndex::with_ids(out.shared.index().clone(), params, ids);
        out.live = Some(live.map_err(live_error)?);
    }
    Ok(out)
}

/// The exact `k` nearest rows of `base` of every query (f64 products, all
/// cores): `(ids, distances)`, `(nq, k)`; distances squared L2 (`"l2"`) or
/// minus the inner product (`"ip"`); ids `2**32 - 1` past the base's rows.
#[pyfunction]
#[pyo3(signature = (queries, base, k, metric="l2"))]
#[allow(clippy::type_complexity)]
fn knn<'py>(
    py: Python<'py>,
    queries: PyReadonlyArray2<'py, f32>,
    base: PyReadonlyArray2<'py, f32>,
    k: usize,
    metric: &str,
) -> PyResult<(Bound<'py, PyArray2<u32>>, Bound<'py, PyArray2<f32>>)> {
    let metric = match metric {
        "l2" => octex_search::knn::KnnMetric::L2,
        "ip" => octex_search::knn::KnnMetric::NegDot,
        other => return Err(PyValueError::new_err(format!("metric {other:?}: l2 or ip"))),
    };
    let dim = base.shape()[1];
    if queries.shape()[1] != dim || dim == 0 || k == 0 {
        return Err(PyValueError::new_err(format!(
            "queries of dimension {}, base {dim}, k {k}: dimensions must match and k be positive",
            queries.shape()[1]
        )));
    }
    let contiguous = |what| PyValueError::new_err(format!("{what} must be C-contiguous"));
    let b = base.as_slice().map_err(|_| contiguous("base"))?;
    let q = queries.as_slice().map_err(|_| contiguous("queries"))?;
    if let Some(i) = b.iter().chain(q).position(|v| !v.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "value {i} of base then queries is not finite"
        )));
    }
    let nq = q.len() / dim;
    let (ids, dists) =
        py.detach(|| octex_search::knn::exact_knn(b, q, dim, k, metric, false, &|_| {}));
    result_arrays(py, nq, k, ids, dists)
}

/// Results as `(nq, k)` arrays (ids, distances).
#[allow(clippy::type_complexity)]
fn result_arrays<'py, T: numpy::Element>(
    py: Python<'py>,
    nq: usize,
    k: usize,
    ids: Vec<T>,
    distances: Vec<f32>,
) -> PyResult<(Bound<'py, PyArray2<T>>, Bound<'py, PyArray2<f32>>)> {
    let shape = |e: numpy::ndarray::ShapeError| {
        PyRuntimeError::new_err(format!("internal: results of {nq} x {k}: {e}"))
    };
    let ids = Array2::from_shape_vec((nq, k), ids).map_err(shape)?;
    let distances = Array2::from_shape_vec((nq, k), distances).map_err(shape)?;
    Ok((ids.into_pyarray(py), distances.into_pyarray(py)))
}

/// A Python `UserWarning` with `message`.
fn warn(py: Python<'_>, message: &str) -> PyResult<()> {
    let message = std::ffi::CString::new(message.replace('\0', " "))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    PyErr::warn(
        py,
        &py.get_type::<pyo3::exceptions::PyUserWarning>(),
        &message,
        1,
    )
}

/// Whether a GPU can be used: built with the `gpu` feature, a CUDA driver
/// loads and reports a device.
#[pyfunction]
fn gpu_available() -> bool {
    octex_search::gpu_available()
}

#[pymodule]
fn _octex(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyIndex>()?;
    m.add_class::<PySearchParams>()?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(knn, m)?)?;
    m.add_function(wrap_pyfunction!(sharded::merge_topk, m)?)?;
    m.add_function(wrap_pyfunction!(sharded::write_shard_manifest, m)?)?;
    m.add_class::<sharded::PyShardedIndex>()?;
    m.add_function(wrap_pyfunction!(gpu_available, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
