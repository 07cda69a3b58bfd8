//! [`SharedIndex`]: an index with the backends it was searched on kept open,
//! and the parameters tuned for each recall target kept too. The Python and
//! C bindings each hold one, so neither chooses a backend, opens a GPU or
//! caches a tuning by itself.

use std::sync::Mutex;

use crate::{Backend, BackendSearcher, GpuOptions, Index, Queries, SearchError, SearchParams};
use crate::{IdFilter, SearchResults, Tuned};

/// An [`Index`] and its lazily opened GPU searcher (the index stays in device
/// memory between calls), shared by the threads of a binding.
pub struct SharedIndex {
    index: Index,
    gpu: Mutex<Option<BackendSearcher>>,
    /// Parameters tuned per (recall target, k), each tuned once.
    tuned: Mutex<Vec<((u64, usize), SearchParams)>>,
    /// A device context for copies to and from a device the searcher is
    /// not open on (opened once).
    #[cfg(feature = "gpu")]
    copies: Mutex<Option<octex_kernels::Gpu>>,
}

/// How a search's parameters are given.
#[derive(Clone, Copy, Debug)]
pub enum ParamsFrom {
    /// The index's own ([`Index::default_params`]).
    Defaults,
    Given(SearchParams),
    /// Tuned for this recall@k target on the first batch's queries
    /// ([`Index::tune_for_recall_on`]), then reused.
    Recall(f64),
}

impl SharedIndex {
    pub fn new(index: Index) -> Self {
        SharedIndex {
            index,
            gpu: Mutex::new(None),
            tuned: Mutex::new(Vec::new()),
            #[cfg(feature = "gpu")]
            copies: Mutex::new(None),
        }
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The parameters `from` gives for a search of `k` neighbours of
    /// `queries`, and, when a recall target was out of reach, what to rebuild
    /// with ([`Tuned::advice`]).
    pub fn params(
        &self,
        from: ParamsFrom,
        k: usize,
        queries: &[f32],
    ) -> Result<(SearchParams, Option<String>), SearchError> {
        match from {
            ParamsFrom::Defaults => Ok((self.index.default_params(), None)),
            ParamsFrom::Given(p) => Ok((p, None)),
            ParamsFrom::Recall(target) => {
                let key = (target.to_bits(), k);
                let mut tuned = self.tuned.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((_, p)) = tuned.iter().find(|(kk, _)| *kk == key) {
                    return Ok((*p, None));
                }
                let t: Tuned = self.index.tune_for_recall_on(queries, target, k)?;
                tuned.push((key, t.params));
                Ok((t.params, t.advice(&self.index)))
            }
        }
    }

    /// Search on `backend` ([`Backend::resolve`]); the GPU searcher is opened
    /// at the first GPU search and kept. GPU searches run one at a time.
    pub fn search(
        &self,
        queries: Queries<'_>,
        k: usize,
        p: &SearchParams,
        backend: Backend,
    ) -> Result<SearchResults, SearchError> {
        match backend.resolve()? {
            Backend::Gpu => self.with_gpu(|s| s.search_queries(queries, k, p))?,
            _ => self.index.search_queries(queries, k, p),
        }
    }

    /// [`SharedIndex::search`] returning only ids `filter` allows
    /// ([`Index::search_filtered`]). Filtered search runs on the CPU: `Auto`
    /// takes it there, `Gpu` is [`SearchError::FilterOnGpu`].
    pub fn search_filtered(
        &self,
        queries: Queries<'_>,
        k: usize,
        p: &SearchParams,
        filter: &IdFilter,
        backend: Backend,
    ) -> Result<SearchResults, SearchError> {
        if backend == Backend::Gpu {
            return Err(SearchError::FilterOnGpu);
        }
        let queries = queries.with_dim(self.index.dim())?;
        self.index.search_filtered(queries, k, p, filter)
    }

    /// Run `f` on the GPU searcher, opening it (on every GPU the driver
    /// shows, one replica each, [`Index::open_on_every_gpu`]) if it is not
    /// open yet.
    pub fn with_gpu<R>(&self, f: impl FnOnce(&mut BackendSearcher) -> R) -> Result<R, SearchError> {
        let mut slot = self.gpu.lock().unwrap_or_else(|e| e.into_inner());
        let searcher = match &mut *slot {
            Some(s) => s,
            empty => empty.insert(
                self.index
                    .open_on_every_gpu(Backend::Gpu, &GpuOptions::default())?,
            ),
        };
        Ok(f(searcher))
    }

    /// Run `f` on a context of CUDA device `ordinal` (for copies of a
    /// caller's device memory): the GPU searcher's own where it is open on
    /// that device, else one opened at the first such call and kept.
    #[cfg(feature = "gpu")]
    pub fn with_device<R>(
        &self,
        ordinal: usize,
        f: impl FnOnce(&octex_kernels::Gpu) -> R,
    ) -> Result<R, SearchError> {
        let slot = self.gpu.lock().unwrap_or_else(|e| e.into_inner());
        let open: &[crate::GpuSearcher] = match &*slot {
            Some(BackendSearcher::Gpu(s)) => std::slice::from_ref(&**s),
            Some(BackendSearcher::Gpus(m)) => m.searchers(),
            _ => &[],
        };
        if let Some(s) = open.iter().find(|s| s.gpu().context().ordinal() == ordinal) {
            return Ok(f(s.gpu()));
        }
        drop(slot);
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        let gpu = match &mut *copies {
            Some(g) if g.context().ordinal() == ordinal => g,
            other => other.insert(octex_kernels::Gpu::open(ordinal)?),
        };
        Ok(f(gpu))
    }
}
