//! Every GPU of a server, each holding the whole index: the replicated
//! layout, which the placement planner chooses whenever the index fits one
//! GPU (`octex_placement`). Each device answers a contiguous share of every
//! batch through its own [`GpuSearcher`] (`crate::fan_out`: one host thread
//! a device, results joined in query order). Per query the work is the
//! single-GPU search's, so the results are the single-GPU results.
//!
//! The same ordinal may be named more than once: each entry is then a
//! logical device (its own streams, kernels, buffers and copy of the index
//! on one card), which is how the layout is tested on a machine of one GPU.

use super::GpuSearcher;
use crate::{GpuOptions, Index, SearchError, SearchParams, SearchResults};

/// Searches an [`Index`] on several GPUs, one replica of the index on each.
/// Create with [`Index::multi_gpu`].
pub struct MultiGpuSearcher {
    searchers: Vec<GpuSearcher>,
}

impl Index {
    /// Copy this index to every GPU of `devices` (CUDA ordinals; an ordinal
    /// named twice is two logical devices on one card) and return a searcher
    /// that splits each batch over them. `opts.device` is ignored; the other
    /// options apply to every device. An empty `devices` is
    /// [`SearchError::NoDevices`]; an index that does not fit one device
    /// fails as [`Index::gpu`] does.
    pub fn multi_gpu(
        &self,
        devices: &[usize],
        opts: &GpuOptions,
    ) -> Result<MultiGpuSearcher, SearchError> {
        if devices.is_empty() {
            return Err(SearchError::NoDevices);
        }
        let searchers = devices
            .iter()
            .map(|&device| self.gpu(&GpuOptions { device, ..*opts }))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MultiGpuSearcher { searchers })
    }

    /// This index on every GPU the driver shows (`CUDA_VISIBLE_DEVICES`
    /// chooses them), one replica each; `opts.device` is ignored.
    pub fn every_gpu(&self, opts: &GpuOptions) -> Result<MultiGpuSearcher, SearchError> {
        let all: Vec<usize> = (0..octex_kernels::device_count()).collect();
        if all.is_empty() {
            return Err(SearchError::Gpu(super::GpuError::NoDriver));
        }
        self.multi_gpu(&all, opts)
    }
}

impl MultiGpuSearcher {
    /// The devices, in words, in the order they take shares of a batch.
    pub fn devices(&self) -> Vec<String> {
        self.searchers.iter().map(|s| s.device()).collect()
    }

    /// How many (logical) devices search.
    pub fn len(&self) -> usize {
        self.searchers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.searchers.is_empty()
    }

    /// Bytes of index data on each device.
    pub fn index_bytes(&self) -> u64 {
        self.searchers.first().map_or(0, |s| s.index_bytes())
    }

    /// Search a batch (`nq x dim`, row-major) for the `k` nearest of each
    /// query: the contract and results of [`GpuSearcher::search`]. Device
    /// `i` of `G` answers queries `i * ceil(nq / G) ..`; a batch of fewer
    /// queries than devices leaves the last ones idle.
    pub fn search(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_inner(queries, k, p, false)
    }

    /// [`GpuSearcher::search_stored`] over every device.
    pub fn search_stored(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_inner(queries, k, p, true)
    }

    /// The searchers, one a device, in the order they take shares.
    pub fn searchers(&self) -> &[GpuSearcher] {
        &self.searchers
    }

    fn search_inner(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        stored_space: bool,
    ) -> Result<SearchResults, SearchError> {
        let index = self.searchers[0].index();
        let dim = index.query_dim(stored_space);
        index.check(queries, k, p, dim)?;
        crate::fan_out::fan_out(&mut self.searchers, queries, dim, k, |searcher, part| {
            match stored_space {
                true => searcher.search_stored(part, k, p),
                false => searcher.search(part, k, p),
            }
        })
    }
}
