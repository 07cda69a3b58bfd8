//! [`SearchPlan`]: the sizes of one search, computed once from the index and
//! the parameters. The CPU engine and the GPU launch both read it; nothing
//! recomputes these rules elsewhere.

use octex_index::IndexHeader;

use crate::{SearchError, SearchParams};

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

/// Most waves one search runs (the paper runs up to 6).
pub const MAX_WAVES: usize = 64;

/// Most entries one query may read, `C min(r, l) + W S Lt`, and most
/// candidates it may keep or rerank: about 20 bytes of scratch each per
/// thread (80 MiB at the bound). The paper's largest configuration reads
/// about 235,000.
pub const MAX_ENTRIES: usize = 1 << 22;

impl SearchPlan {
    /// The plan for `k` neighbours with `p` over an index with `header`, or
    /// [`SearchError::TooLarge`] when a parameter or a product of them is past
    /// what one query may use ([`MAX_WAVES`], [`MAX_ENTRIES`]). Nothing is
    /// allocated before this check.
    pub fn new(header: &IndexHeader, p: &SearchParams, k: usize) -> Result<Self, SearchError> {
        let params = p.for_k(k);
        let too_large = |what: &'static str, value: Option<usize>, max: usize| match value {
            Some(v) if v <= max => Ok(v),
            v => Err(SearchError::TooLarge {
                what,
                value: v.unwrap_or(usize::MAX),
                max,
            }),
        };
        too_large("waves W", Some(params.waves), MAX_WAVES)?;
        too_large("start points S", Some(params.start_points), MAX_ENTRIES)?;
        too_large("rerank depth R", Some(params.rerank), MAX_ENTRIES)?;
        let read_depth = params.read_depth.min(header.list_len as usize);
        let expanded = params
            .waves
            .checked_mul(params.start_points)
            .and_then(|sw| sw.checked_mul(header.row_len as usize));
        let max_entries = too_large(
            "entries per query C r + W S Lt",
            expanded.and_then(|e| e.checked_add(header.copies as usize * read_depth)),
            MAX_ENTRIES,
        )?;
        let keep = too_large(
            "kept candidates max(R, S W, S, k)",
            params
                .start_points
                .checked_mul(params.waves)
                .map(|sw| sw.max(params.rerank).max(params.start_points).max(k)),
            MAX_ENTRIES,
        )?;
        Ok(Self {
            params,
            k,
            read_depth,
            keep,
            max_entries,
        })
    }
}
