//! [`SearchPlan`]: the sizes of one search, computed once from the index and
//! the parameters. The CPU engine and the GPU launch both read it; nothing
//! recomputes these rules elsewhere.

use octex_index::IndexHeader;

use crate::SearchParams;

/// What a search of `k` neighbours with given parameters keeps and reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchPlan {
    /// The parameters as the search runs them: `R` raised to `k`
    /// ([`SearchParams::for_k`]).
    pub params: SearchParams,
    /// Neighbours returned per query.
    pub k: usize,
    /// Ids read from the head of each copy's ripple: `min(r, l)`.
    pub read_depth: usize,
    /// Candidates kept between waves, `M = max(R, S W, S, k)`: enough for the
    /// rerank, for every wave's start points and for the answer.
    pub keep: usize,
    /// Most entries one query reads: `C min(r, l)` from the ripples plus
    /// `W S Lt` from the neighbour rows.
    pub max_entries: usize,
}

impl SearchPlan {
    /// The plan for `k` neighbours with `p` over an index with `header`.
    pub fn new(header: &IndexHeader, p: &SearchParams, k: usize) -> Self {
        let params = p.for_k(k);
        let read_depth = params.read_depth.min(header.list_len as usize);
        let keep = params
            .rerank
            .max(params.start_points * params.waves)
            .max(params.start_points)
            .max(k);
        let max_entries = header.copies as usize * read_depth
            + params.waves * params.start_points * header.row_len as usize;
        Self {
            params,
            k,
            read_depth,
            keep,
            max_entries,
        }
    }
}
