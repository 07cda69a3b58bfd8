//! The inner-product query shell an index keeps ([`octex_search::shell`]):
//! the median norm, as a share of the largest, of the exact answers of
//! [`SHELL_SAMPLE`] base vectors taken as queries (each without itself),
//! kept where it finds more of those answers at the first of two search
//! points ([`SHELL_POINTS`]) and no fewer at the second than the queries
//! left where they are. Inner product only; other metrics keep none.

use octex_index::{Index, Metric, PAD_ID};
use octex_search::knn::{self, KnnMetric};
use octex_search::SearchParams;
use serde::Serialize;

use crate::BuildError;

/// Base vectors taken as queries.
pub const SHELL_SAMPLE: usize = 512;
/// The search points the choice compares: the first round and a wave, and
/// three waves.
pub const SHELL_POINTS: [(usize, usize); 2] = [(16, 1), (32, 3)];
/// Recall the shell must gain at the first point; at the second (deeper)
/// it must lose none: moved queries can start in a part of the graph the
/// waves do not leave (docs/RESULTS.md, "Inner product").
pub const SHELL_MIN_GAIN: f64 = 0.005;
/// Neighbours compared.
const K: usize = 10;

/// What the choice measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ShellChoice {
    /// The median answer norm over the largest.
    pub shell: f32,
    /// Recall@10 of the sample at [`SHELL_POINTS`] without and with it.
    pub recall_without: [f64; 2],
    pub recall_with: [f64; 2],
    pub kept: bool,
}

/// `index` (built over the stored vectors `x`, `sdim` each) with its query
/// shell chosen, and what the choice measured (`None` but for inner
/// product).
pub fn choose(
    index: Index,
    x: &[f32],
    sdim: usize,
    seed: u64,
) -> Result<(Index, Option<ShellChoice>), BuildError> {
    let h = index.header();
    let n = index.len();
    if h.metric != Metric::InnerProduct || n < 2 * K || h.max_norm <= 0.0 {
        return Ok((index, None));
    }
    let (input, m, h_list_len) = (h.input_dim as usize, h.max_norm, h.list_len as usize);
    let picks = crate::pca::sample_rows(n, SHELL_SAMPLE, seed ^ 0x5e11);
    // Each pick as a caller's query: its input coordinates, scaled to norm
    // M, 0 appended (`Metric::prepare_query`).
    let mut queries = vec![0f32; picks.len() * sdim];
    for (q, &id) in queries.chunks_exact_mut(sdim).zip(&picks) {
        let own = &x[id * sdim..id * sdim + input];
        let n2 = Metric::squared_norm(own);
        if Metric::InnerProduct
            .prepare_query(own, n2, (m as f64).powi(2), q)
            .is_err()
        {
            q.fill(0.0);
        }
    }
    // Each pick's answers but itself (a query is not in the index it
    // searches): the best `K` of `K + 1`.
    let (found, _) = knn::exact_knn(x, &queries, sdim, K + 1, KnnMetric::NegDot, false, &|_| {});
    let truth = without_own(&found, &picks);
    // A stored vector's norm from its appended coordinate.
    let norm = |id: u32| {
        let a = x[id as usize * sdim + input];
        (m * m - a * a).max(0.0).sqrt() / m
    };
    let mut norms: Vec<f32> = truth
        .iter()
        .filter(|&&id| id != PAD_ID)
        .map(|&id| norm(id))
        .collect();
    if norms.is_empty() {
        return Ok((index, None));
    }
    let mid = norms.len() / 2;
    let (_, &mut shell, _) = norms.select_nth_unstable_by(mid, f32::total_cmp);
    if !(shell > 0.0 && shell < 1.0) {
        return Ok((index, None));
    }
    let stage = "choosing the query shell";
    // The sample's mean recall at the points, and the index back.
    let evaluate = |index: Index| -> Result<(Index, [f64; 2]), BuildError> {
        let searchable = octex_search::Index::new(index);
        let mut recalls = [0.0; 2];
        for (i, (s, w)) in SHELL_POINTS.into_iter().enumerate() {
            let p = SearchParams {
                read_depth: h_list_len,
                start_points: s,
                waves: w,
                rerank: 4 * s,
                wave_rerank: false,
            };
            let res = searchable
                .search_stored(&queries, K + 1, &p)
                .map_err(|source| BuildError::Search { stage, source })?;
            let ids = without_own(&res.ids, &picks);
            // Both are `K` wide over the same queries: no shape error.
            recalls[i] = knn::recall_at_k(&ids, K, &truth, K, K).unwrap_or(0.0);
        }
        let raw = searchable.into_raw().map_err(|_| BuildError::Search {
            stage,
            source: octex_search::SearchError::IndexShared,
        })?;
        Ok((raw, recalls))
    };
    let (index, recall_without) = evaluate(index)?;
    let (index, recall_with) = evaluate(index.with_query_shell(Some(shell))?)?;
    let kept =
        recall_with[0] >= recall_without[0] + SHELL_MIN_GAIN && recall_with[1] >= recall_without[1];
    let choice = ShellChoice {
        shell,
        recall_without,
        recall_with,
        kept,
    };
    let index = if kept {
        index
    } else {
        index.with_query_shell(None)?
    };
    Ok((index, Some(choice)))
}

/// The first `K` of each row of `K + 1` ids other than the row's pick.
fn without_own(rows: &[u32], picks: &[usize]) -> Vec<u32> {
    let mut out = Vec::with_capacity(picks.len() * K);
    for (row, &own) in rows.chunks_exact(K + 1).zip(picks) {
        let before = out.len();
        out.extend(row.iter().filter(|&&id| id as usize != own).take(K));
        out.resize(before + K, PAD_ID);
    }
    out
}
