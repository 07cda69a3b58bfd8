//! The CPU backend: batches split into chunks of [`QUERY_CHUNK`] queries
//! over all rayon threads (each with its own scratch, reused across the
//! chunks it takes), and [`SingleQuerySearcher`], one query at a time on the calling
//! thread.

use rayon::prelude::*;

use crate::filter::FilteredPlan;
use crate::index::QUERY_CHUNK;
use crate::{
    engine, IdFilter, Index, Queries, SearchError, SearchParams, SearchPlan, SearchResults,
    SearchStats,
};

impl Index {
    /// Search a shaped batch: [`Index::search`] after checking that its rows
    /// have the index's dimension ([`SearchError::Dimension`] otherwise).
    pub fn search_queries(
        &self,
        queries: Queries,
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search(queries.with_dim(self.dim())?, k, p)
    }

    /// Search a batch (`nq x dim`, row-major) for the `k` nearest of each
    /// query. The slice must be a whole number of rows; it cannot tell a
    /// wrong row length that divides it (use [`Index::search_queries`] when
    /// the caller's shape should be checked).
    pub fn search(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_batch(queries, k, p, false, None)
    }

    /// [`Index::search`] returning only ids `filter` allows (the rest of the
    /// `k` padded with `PAD_ID` and infinite distances when fewer are
    /// allowed). Where the allowed ids are few the batch scans them exactly
    /// instead (`filter.rs`). [`SearchError::FilterLength`] when the
    /// filter does not cover the index's ids.
    pub fn search_filtered(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        filter: &IdFilter,
    ) -> Result<SearchResults, SearchError> {
        if filter.len() != self.len() {
            return Err(SearchError::FilterLength {
                got: filter.len(),
                n: self.len(),
            });
        }
        self.search_batch(queries, k, p, false, Some(filter))
    }

    /// Search queries already in the stored space (`nq x stored dim`: normalised
    /// for cosine, augmented for inner product), returning squared L2 distances
    /// in that space. The builder uses it to compute neighbour rows of the base
    /// vectors themselves.
    pub fn search_stored(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_batch(queries, k, p, true, None)
    }

    fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        stored_space: bool,
        filter: Option<&IdFilter>,
    ) -> Result<SearchResults, SearchError> {
        let qdim = self.query_dim(stored_space);
        let nq = self.check(queries, k, p, qdim)?;
        let plan = SearchPlan::new(self.raw.header(), p, k)?;
        let filtered = filter.map(|f| (f, self.filtered_plan(&plan, f)));
        let sdim = self.raw.stored_dim();
        let width = self.engine.map.width();
        let w = self.engine.sketch_width;
        let mut ids = vec![0u32; nq * k];
        let mut dists = vec![0f32; nq * k];
        let chunk_out: Vec<Result<SearchStats, SearchError>> = ids
            .par_chunks_mut(QUERY_CHUNK * k)
            .zip(dists.par_chunks_mut(QUERY_CHUNK * k))
            .enumerate()
            .map_init(
                || {
                    (
                        engine::Scratch::new(&self.engine, &plan, self.len()),
                        Vec::new(),
                        Vec::new(),
                        Vec::new(),
                        Vec::new(),
                        engine::SketchQueries::default(),
                    )
                },
                |(scratch, stored, norms, pcs, z, qs), (ci, (id_out, d_out))| {
                    let q0 = ci * QUERY_CHUNK;
                    let qn = id_out.len() / k;
                    self.prepare(
                        &queries[q0 * qdim..(q0 + qn) * qdim],
                        stored,
                        norms,
                        stored_space,
                    )?;
                    scratch.stats = SearchStats::default();
                    let scan = matches!(filtered, Some((_, FilteredPlan::Scan)));
                    if !scan {
                        z.resize(qn * width, 0.0);
                        self.engine.map.project_batch(stored, pcs, z, false);
                        if let Some(shell) = &self.engine.query_shell {
                            shell.apply_batch(stored, sdim, z);
                        }
                        self.engine.sketch_queries(&self.raw, pcs, qs);
                    }
                    for i in 0..qn {
                        let (ids, ds) = (
                            &mut id_out[i * k..(i + 1) * k],
                            &mut d_out[i * k..(i + 1) * k],
                        );
                        let q = &stored[i * sdim..(i + 1) * sdim];
                        match filtered {
                            Some((f, FilteredPlan::Scan)) => {
                                self.engine.scan(&self.raw, q, f, scratch, ids, ds)
                            }
                            _ => self.engine.search_projected(
                                &self.raw,
                                &z[i * width..(i + 1) * width],
                                qs.get(i, w),
                                q,
                                &plan,
                                filtered.map(|(ids, fp)| engine::Filtered {
                                    ids,
                                    max_waves: match fp {
                                        FilteredPlan::Search { max_waves } => max_waves,
                                        FilteredPlan::Scan => p.waves,
                                    },
                                }),
                                scratch,
                                ids,
                                ds,
                            ),
                        }
                        if !stored_space {
                            for d in &mut d_out[i * k..(i + 1) * k] {
                                *d = self.report_distance(*d, norms[i]);
                            }
                        }
                    }
                    Ok(scratch.stats)
                },
            )
            .collect();
        let mut stats = SearchStats::default();
        for r in chunk_out {
            stats.add(&r?);
        }
        Ok(SearchResults {
            k,
            ids,
            distances: dists,
            stats,
        })
    }

    /// How a batch of `plan` with `filter` is searched.
    fn filtered_plan(&self, plan: &SearchPlan, filter: &IdFilter) -> FilteredPlan {
        let h = self.raw.header();
        let vector_bytes = match self.raw.vectors() {
            octex_index::RerankView::F32(_) => 4,
            octex_index::RerankView::F16(_) => 2,
        } * self.raw.stored_dim();
        FilteredPlan::new(
            plan,
            self.len(),
            filter.count(),
            vector_bytes,
            self.engine.sketch_width,
            h.row_len as usize,
            h.copies as usize,
        )
    }

    /// Search one query (single-query latency path; runs on the calling thread).
    pub fn search_one(
        &self,
        query: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<(Vec<u32>, Vec<f32>), SearchError> {
        let mut searcher = self.searcher(p)?;
        searcher.search(query, k)
    }

    /// A reusable single-query searcher that keeps its scratch between calls
    /// (an error when `p` is past what one query may use).
    pub fn searcher(&self, p: &SearchParams) -> Result<SingleQuerySearcher<'_>, SearchError> {
        Ok(SingleQuerySearcher {
            index: self,
            params: *p,
            scratch: engine::Scratch::new(
                &self.engine,
                &SearchPlan::new(self.raw.header(), p, 1)?,
                self.len(),
            ),
            stored: Vec::new(),
            norms: Vec::new(),
            pcs: Vec::new(),
            z: Vec::new(),
            qs: Default::default(),
        })
    }
}

/// Searches one query at a time on the calling thread, reusing its buffers.
pub struct SingleQuerySearcher<'a> {
    index: &'a Index,
    params: SearchParams,
    scratch: engine::Scratch,
    stored: Vec<f32>,
    norms: Vec<f32>,
    pcs: Vec<f32>,
    z: Vec<f32>,
    qs: engine::SketchQueries,
}

impl SingleQuerySearcher<'_> {
    pub fn search(&mut self, query: &[f32], k: usize) -> Result<(Vec<u32>, Vec<f32>), SearchError> {
        let ix = self.index;
        if query.len() != ix.dim() {
            return Err(SearchError::Dimension {
                expected: ix.dim(),
                got: query.len(),
            });
        }
        ix.check(query, k, &self.params, ix.dim())?;
        let plan = SearchPlan::new(ix.raw.header(), &self.params, k)?;
        ix.prepare(query, &mut self.stored, &mut self.norms, false)?;
        self.z.resize(ix.engine.map.width(), 0.0);
        ix.engine
            .map
            .project_batch(&self.stored, &mut self.pcs, &mut self.z, false);
        if let Some(shell) = &ix.engine.query_shell {
            shell.apply_batch(&self.stored, ix.raw.stored_dim(), &mut self.z);
        }
        ix.engine.sketch_queries(&ix.raw, &self.pcs, &mut self.qs);
        let mut ids = vec![0u32; k];
        let mut d = vec![0f32; k];
        ix.engine.search_projected(
            &ix.raw,
            &self.z,
            self.qs.get(0, ix.engine.sketch_width),
            &self.stored,
            &plan,
            None,
            &mut self.scratch,
            &mut ids,
            &mut d,
        );
        for v in &mut d {
            *v = ix.report_distance(*v, self.norms[0]);
        }
        Ok((ids, d))
    }
}
