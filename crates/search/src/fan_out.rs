//! A batch split over several searchers: each takes a contiguous share of
//! the queries on its own host thread, and the shares' results are joined
//! in query order. The GPU backend's several devices
//! (`gpu::MultiGpuSearcher`) search through it; it holds no rule of the
//! search itself, so any searcher gives the same ids through it as alone.

use crate::{SearchError, SearchResults, SearchStats};

/// Search `nq` queries (`queries`, rows of `dim`, already checked) with
/// `workers`: worker `i` of `G` answers queries `i * ceil(nq / G) ..` through
/// `search(worker, share)`; a batch of fewer queries than workers leaves the
/// last ones idle. The first error of a share is returned; a panic in one
/// is resumed here.
pub(crate) fn fan_out<W: Send>(
    workers: &mut [W],
    queries: &[f32],
    dim: usize,
    k: usize,
    search: impl Fn(&mut W, &[f32]) -> Result<SearchResults, SearchError> + Sync,
) -> Result<SearchResults, SearchError> {
    let nq = queries.len() / dim.max(1);
    let share = nq.div_ceil(workers.len().max(1)).max(1);
    let search = &search;
    let parts: Vec<Result<SearchResults, SearchError>> = std::thread::scope(|scope| {
        let running: Vec<_> = workers
            .iter_mut()
            .zip(queries.chunks(share * dim))
            .map(|(worker, part)| scope.spawn(move || search(worker, part)))
            .collect();
        running
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut joined = SearchResults {
        k,
        ids: Vec::with_capacity(nq * k),
        distances: Vec::with_capacity(nq * k),
        stats: SearchStats::default(),
    };
    for part in parts {
        let part = part?;
        joined.ids.extend_from_slice(&part.ids);
        joined.distances.extend_from_slice(&part.distances);
        joined.stats.add(&part.stats);
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A searcher that answers query `q` (its first value) with ids `q..q+k`
    /// at distances `q`, and counts the queries it was given.
    fn answer(count: &mut usize, queries: &[f32], dim: usize, k: usize) -> SearchResults {
        let nq = queries.len() / dim;
        *count += nq;
        let mut r = SearchResults {
            k,
            ids: Vec::new(),
            distances: Vec::new(),
            stats: SearchStats {
                queries: nq as u64,
                ..SearchStats::default()
            },
        };
        for row in queries.chunks_exact(dim) {
            r.ids.extend((0..k as u32).map(|j| row[0] as u32 + j));
            r.distances.extend(std::iter::repeat_n(row[0], k));
        }
        r
    }

    /// Shares of 1 to 5 workers, and more workers than queries, join into
    /// the whole batch's answer in query order; the shares are contiguous
    /// and as even as `ceil(nq / G)` makes them; a share's error is the
    /// batch's.
    #[test]
    fn shares_join_into_the_whole_batch_answer() {
        let (nq, dim, k) = (103, 4, 3);
        let queries: Vec<f32> = (0..nq * dim).map(|i| (i / dim) as f32).collect();
        let whole = answer(&mut 0, &queries, dim, k);
        for g in [1, 2, 3, 5, 200] {
            let mut workers = vec![0usize; g];
            let joined = fan_out(&mut workers, &queries, dim, k, |c, q| {
                Ok(answer(c, q, dim, k))
            })
            .unwrap();
            assert_eq!(joined.ids, whole.ids, "{g} workers");
            assert_eq!(joined.distances, whole.distances, "{g} workers");
            assert_eq!(joined.stats.queries, nq as u64);
            let share = nq.div_ceil(g);
            for (i, &c) in workers.iter().enumerate() {
                assert_eq!(
                    c,
                    nq.saturating_sub(i * share).min(share),
                    "{g} workers, worker {i}"
                );
            }
        }
        let mut workers = vec![0usize; 3];
        let failed = fan_out(&mut workers, &queries, dim, k, |c, q| {
            if *c > 0 || q[0] > 50.0 {
                return Err(SearchError::EmptyBatch);
            }
            Ok(answer(c, q, dim, k))
        });
        assert!(matches!(failed, Err(SearchError::EmptyBatch)));
    }
}
