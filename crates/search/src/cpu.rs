//! The CPU backend: batches split into chunks of [`QUERY_CHUNK`] queries
//! over all rayon threads (each with its own scratch, reused across the
//! chunks it takes), and [`SingleQuerySearcher`], one query at a time on the calling
//! thread.

use rayon::prelude::*;

use crate::index::QUERY_CHUNK;
use crate::{
    engine, Index, Queries, SearchError, SearchParams, SearchPlan, SearchResults, SearchStats,
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
        self.search_batch(queries, k, p, false)
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
        self.search_batch(queries, k, p, true)
    }

    fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        stored_space: bool,
    ) -> Result<SearchResults, SearchError> {
        let qdim = if stored_space {
            self.raw.stored_dim()
        } else {
            self.dim()
        };
        let nq = self.check(queries, k, p, qdim)?;
        let plan = SearchPlan::new(self.raw.header(), p, k)?;
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
                    z.resize(qn * width, 0.0);
                    self.engine.map.project_batch(stored, pcs, z, false);
                    self.engine.sketch_queries(&self.raw, pcs, qs);
                    scratch.stats = SearchStats::default();
                    for i in 0..qn {
                        self.engine.search_projected(
                            &self.raw,
                            &z[i * width..(i + 1) * width],
                            qs.get(i, w),
                            &stored[i * sdim..(i + 1) * sdim],
                            &plan,
                            scratch,
                            &mut id_out[i * k..(i + 1) * k],
                            &mut d_out[i * k..(i + 1) * k],
                        );
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
        ix.engine.sketch_queries(&ix.raw, &self.pcs, &mut self.qs);
        let mut ids = vec![0u32; k];
        let mut d = vec![0f32; k];
        ix.engine.search_projected(
            &ix.raw,
            &self.z,
            self.qs.get(0, ix.engine.sketch_width),
            &self.stored,
            &plan,
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
