//! [`LiveIndex`]: an index that takes adds and removes, with 64-bit user
//! ids, over a built index.
//!
//! Removed ids never come back from the moment [`LiveIndex::remove`]
//! returns: the built index is searched with a filter of its live vectors
//! ([`octex_search::IdFilter`]), and searches may add a filter of their own.
//! Added vectors wait in a pending list that every search scans exactly
//! (so they are found at once, at full recall) until it passes
//! [`LiveIndex::insert_threshold`] (or [`LiveIndex::flush`] is called); then
//! they are inserted into the index in place ([`crate::insert`]).
//! [`LiveIndex::rebuild`] builds the index again over the live vectors: it
//! reclaims the space of removed vectors and chooses the spacings and key
//! tables for the data as it is now. Vectors an insertion cannot take (inner
//! product, longer than the longest built) stay pending until a rebuild,
//! which runs by itself once they pass [`LiveIndex::pending_limit`]. The
//! built vectors are taken back from the index's rerank vectors (the input
//! for L2 and inner product, the normalised input for cosine; f16 where the
//! index stores f16, which a rebuild keeps).

use std::collections::HashMap;
use std::path::Path;

use octex_index::living::{self, LiveState, Loaded};
use octex_index::{Metric, RerankView, PAD_ID};
use octex_search::{IdFilter, SearchParams};

use crate::{build, BuildError, BuildParams};

/// Where a user id lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// The built index's vector of this id.
    Built(u32),
    /// The pending list's entry.
    Pending(usize),
}

/// Why an add or a search was refused (nothing was changed).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("user id {0} is already in the index")]
    DuplicateId(u64),
    #[error("user id 2^64 - 1 is reserved (searches return it where fewer than k were found)")]
    ReservedId,
    #[error("{ids} ids given for {vectors} vectors")]
    IdCount { ids: usize, vectors: usize },
    #[error("vectors have dimension {got}, the index has {expected}")]
    Dimension { expected: usize, got: usize },
    #[error("vector {row}, coordinate {col} is {value}: vectors must be finite")]
    NotFinite { row: usize, col: usize, value: f32 },
    #[error("vector {row}: {problem:?} (the metric cannot take it)")]
    Vector {
        row: usize,
        problem: octex_index::VectorProblem,
    },
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Search(#[from] octex_search::SearchError),
    #[error(transparent)]
    File(#[from] octex_index::IndexError),
}

/// The share of removed built vectors at which [`LiveIndex::save`] builds
/// the index again over the live ones first, reclaiming their space.
pub const COMPACT_ON_SAVE: f64 = 0.5;

/// Search results with user ids: `k` per query, `u64::MAX` and infinite
/// distances where fewer were found.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveResults {
    pub k: usize,
    pub ids: Vec<u64>,
    pub distances: Vec<f32>,
}

/// A built index with adds, removes and user ids.
pub struct LiveIndex {
    index: octex_search::Index,
    params: BuildParams,
    /// User id of each built vector.
    built_ids: Vec<u64>,
    /// Built vectors not removed.
    live: IdFilter,
    /// Added since the last build: input-space vectors and their ids.
    pending: Vec<f32>,
    pending_ids: Vec<u64>,
    slots: HashMap<u64, Slot>,
    next_id: u64,
}

impl LiveIndex {
    /// A living index over `index` (ids `0..n`); `params` build it again.
    pub fn new(index: octex_search::Index, params: BuildParams) -> Self {
        let n = index.len() as u64;
        let slots = (0..n).map(|i| (i, Slot::Built(i as u32))).collect();
        Self::assemble(index, params, (0..n).collect(), slots)
    }

    /// [`LiveIndex::new`] with the user id of each built vector.
    pub fn with_ids(
        index: octex_search::Index,
        params: BuildParams,
        ids: Vec<u64>,
    ) -> Result<Self, LiveError> {
        if ids.len() != index.len() {
            return Err(LiveError::IdCount {
                ids: ids.len(),
                vectors: index.len(),
            });
        }
        if ids.contains(&u64::MAX) {
            return Err(LiveError::ReservedId);
        }
        let mut slots = HashMap::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            if slots.insert(id, Slot::Built(i as u32)).is_some() {
                return Err(LiveError::DuplicateId(id));
            }
        }
        Ok(Self::assemble(index, params, ids, slots))
    }

    /// A living index over `index` whose vectors have the distinct `ids`
    /// (`slots`: each id's place).
    fn assemble(
        index: octex_search::Index,
        params: BuildParams,
        ids: Vec<u64>,
        slots: HashMap<u64, Slot>,
    ) -> Self {
        let next_id = ids.iter().max().map_or(0, |m| m + 1);
        Self {
            live: IdFilter::all(index.len()),
            index,
            params,
            built_ids: ids,
            pending: Vec::new(),
            pending_ids: Vec::new(),
            slots,
            next_id,
        }
    }

    /// Load an index file written by [`LiveIndex::save`] or a plain index
    /// file (ids `0..n`), validated; `params` build it again.
    pub fn load(path: &Path, params: BuildParams) -> Result<Self, LiveError> {
        let (raw, state) = match living::load_any(path)? {
            Loaded::Plain(raw) => {
                return Ok(Self::new(octex_search::Index::new(raw), params));
            }
            Loaded::Living(raw, state) => (raw, state),
        };
        // `load_any` checked the sizes and that no live id repeats.
        let n = raw.len();
        let mut live = IdFilter::all(n);
        let mut slots = HashMap::with_capacity(n + state.pending_ids.len());
        for (i, &id) in state.built_ids.iter().enumerate() {
            match state.is_removed(i) {
                true => {
                    live.deny(i as u32);
                }
                false => {
                    slots.insert(id, Slot::Built(i as u32));
                }
            }
        }
        for (p, &id) in state.pending_ids.iter().enumerate() {
            slots.insert(id, Slot::Pending(p));
        }
        Ok(Self {
            index: octex_search::Index::new(raw),
            params,
            built_ids: state.built_ids,
            live,
            pending: state.pending,
            pending_ids: state.pending_ids,
            slots,
            next_id: state.next_id,
        })
    }

    /// Write the index and its changes atomically (a crash during the save
    /// leaves the previous file whole), after inserting the pending vectors
    /// ([`LiveIndex::flush`]): a plain index file when
    /// [`LiveIndex::ids_are_positions`], else a living file
    /// ([`octex_index::living`]) that [`LiveIndex::load`] reads back to the
    /// same state. When [`COMPACT_ON_SAVE`] of the built vectors or more are
    /// removed, the index is built again over the live ones first.
    pub fn save(&mut self, path: &Path) -> Result<(), LiveError> {
        self.flush()?;
        let built = self.index.len();
        if built > 0 && (built - self.live.count()) as f64 >= COMPACT_ON_SAVE * built as f64 {
            self.rebuild()?;
        }
        let built = self.index.len();
        if self.ids_are_positions() {
            return Ok(self.index.raw().save(path)?);
        }
        let mut removed = vec![0u64; built.div_ceil(64)];
        for i in 0..built {
            if !self.live.allows(i as u32) {
                removed[i / 64] |= 1 << (i % 64);
            }
        }
        let state = LiveState {
            built_ids: self.built_ids.clone(),
            removed,
            pending_ids: self.pending_ids.clone(),
            pending: self.pending.clone(),
            next_id: self.next_id,
        };
        Ok(living::save_living(path, self.index.raw(), &state)?)
    }

    /// Live vectors (added, not removed).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.index.dim()
    }

    pub fn metric(&self) -> Metric {
        self.index.metric()
    }

    /// Whether the index alone says everything: nothing pending, nothing
    /// removed, and each vector's user id its position (an index file holds
    /// no more than that).
    pub fn ids_are_positions(&self) -> bool {
        self.pending_ids.is_empty()
            && self.live.count() == self.index.len()
            && self
                .built_ids
                .iter()
                .enumerate()
                .all(|(i, &id)| id == i as u64)
    }

    /// The user ids of the live vectors: built ones in position order, then
    /// pending ones.
    pub fn ids(&self) -> Vec<u64> {
        let built = self.live.ids().map(|i| self.built_ids[i as usize]);
        built.chain(self.pending_ids.iter().copied()).collect()
    }

    /// The vector of user id `id` as the index holds it (the normalised
    /// vector for cosine, rounded to f16 where the index stores f16), or
    /// `None` when no live vector has that id.
    pub fn vector(&self, id: u64) -> Option<Vec<f32>> {
        let dim = self.dim();
        match self.slots.get(&id)? {
            Slot::Built(i) => Some(stored_vector(self.index.raw(), *i as usize)),
            Slot::Pending(p) => {
                let v = &self.pending[p * dim..(p + 1) * dim];
                match self.metric() {
                    // Checked at add: a cosine vector has a positive norm.
                    Metric::Cosine => octex_search::knn::cosine_normalised(v, dim).ok(),
                    _ => Some(v.to_vec()),
                }
            }
        }
    }

    /// Vectors waiting to be built into the index.
    pub fn pending(&self) -> usize {
        self.pending_ids.len()
    }

    /// The pending list's size that inserts it into the index at the next
    /// add: 1/64 of the index, at least 1,024 (each insertion copies the
    /// index once; the exact scan every search pays stays small).
    pub fn insert_threshold(&self) -> usize {
        (self.index.len() / 64).max(1024)
    }

    /// The pending list's size, of vectors an insertion cannot take, that
    /// starts a rebuild at the next add: a quarter of the index, at least
    /// 4,096.
    pub fn pending_limit(&self) -> usize {
        (self.index.len() / 4).max(4096)
    }

    /// The built index (without the pending vectors).
    pub fn index(&self) -> &octex_search::Index {
        &self.index
    }

    /// Add `vectors` (`n x dim`) with `ids` (or the next free ids); returns
    /// the ids. A duplicate id, a wrong length or a vector the metric cannot
    /// take refuses the whole batch. Inserts the pending list in place when
    /// it reaches [`LiveIndex::insert_threshold`]; an insertion (or rebuild)
    /// that fails leaves the vectors pending (searched, and inserted at a
    /// later add) and is logged: the add itself has succeeded.
    pub fn add(&mut self, vectors: &[f32], ids: Option<&[u64]>) -> Result<Vec<u64>, LiveError> {
        let dim = self.dim();
        if vectors.len() % dim != 0 {
            return Err(LiveError::Dimension {
                expected: dim,
                got: vectors.len(),
            });
        }
        let n = vectors.len() / dim;
        if let Some(i) = vectors.iter().position(|v| !v.is_finite()) {
            return Err(LiveError::NotFinite {
                row: i / dim,
                col: i % dim,
                value: vectors[i],
            });
        }
        for (row, v) in vectors.chunks_exact(dim).enumerate() {
            self.metric()
                .check_norm(Metric::squared_norm(v))
                .map_err(|problem| LiveError::Vector { row, problem })?;
        }
        let ids: Vec<u64> = match ids {
            Some(ids) if ids.len() != n => {
                return Err(LiveError::IdCount {
                    ids: ids.len(),
                    vectors: n,
                })
            }
            Some(ids) => ids.to_vec(),
            None => (self.next_id..self.next_id + n as u64).collect(),
        };
        if ids.contains(&u64::MAX) {
            return Err(LiveError::ReservedId);
        }
        let mut seen = std::collections::HashSet::with_capacity(n);
        if let Some(&dup) = ids
            .iter()
            .find(|id| self.slots.contains_key(id) || !seen.insert(**id))
        {
            return Err(LiveError::DuplicateId(dup));
        }
        for &id in &ids {
            self.slots.insert(id, Slot::Pending(self.pending_ids.len()));
            self.pending_ids.push(id);
            self.next_id = self.next_id.max(id + 1);
        }
        self.pending.extend_from_slice(vectors);
        if self.pending() >= self.insert_threshold() {
            let outcome = match self.flush() {
                Ok(()) if self.pending() > self.pending_limit() => self.rebuild(),
                done => done,
            };
            if let Err(e) = outcome {
                tracing::warn!(error = %e, pending = self.pending(), "insertion failed; the added vectors stay pending");
            }
        }
        Ok(ids)
    }

    /// Insert the pending vectors into the index in place; those it cannot
    /// take (inner product: longer than the longest built) stay pending. On
    /// an error nothing has changed.
    pub fn flush(&mut self) -> Result<(), LiveError> {
        if self.pending_ids.is_empty() {
            return Ok(());
        }
        let (dim, metric) = (self.dim(), self.metric());
        let raw = self.index.raw();
        let sdim = raw.stored_dim();
        let max2 = (raw.header().max_norm as f64).powi(2);
        let mut stored = Vec::with_capacity(self.pending() * sdim);
        let mut row = vec![0f32; sdim];
        let (mut taken, mut kept) = (Vec::new(), Vec::new());
        for (i, v) in self.pending.chunks_exact(dim).enumerate() {
            let n2 = Metric::squared_norm(v);
            let fits = metric != Metric::InnerProduct || n2 <= max2;
            if fits && metric.prepare_base(v, n2, max2, &mut row).is_ok() {
                stored.extend_from_slice(&row);
                taken.push(i);
            } else {
                kept.push(i);
            }
        }
        if taken.is_empty() {
            return Ok(());
        }
        let n0 = self.index.len();
        let index = crate::insert::insert_stored(self.index.clone(), raw.to_parts(), &stored)?;
        let mut live = IdFilter::all(index.len());
        for i in 0..n0 as u32 {
            if !self.live.allows(i) {
                live.deny(i);
            }
        }
        for (j, &i) in taken.iter().enumerate() {
            let id = self.pending_ids[i];
            self.built_ids.push(id);
            self.slots.insert(id, Slot::Built((n0 + j) as u32));
        }
        let pending: Vec<f32> = kept
            .iter()
            .flat_map(|&i| self.pending[i * dim..(i + 1) * dim].to_vec())
            .collect();
        let pending_ids: Vec<u64> = kept.iter().map(|&i| self.pending_ids[i]).collect();
        for (p, &id) in pending_ids.iter().enumerate() {
            self.slots.insert(id, Slot::Pending(p));
        }
        self.pending = pending;
        self.pending_ids = pending_ids;
        self.live = live;
        self.index = index;
        Ok(())
    }

    /// Remove `ids`; returns how many were in the index (unknown ids are
    /// skipped). From its return on, none of them is a search result.
    pub fn remove(&mut self, ids: &[u64]) -> usize {
        let mut removed = 0;
        for id in ids {
            match self.slots.remove(id) {
                Some(Slot::Built(i)) => {
                    self.live.deny(i);
                    removed += 1;
                }
                Some(Slot::Pending(p)) => {
                    let dim = self.dim();
                    let last = self.pending_ids.len() - 1;
                    self.pending_ids.swap_remove(p);
                    for j in 0..dim {
                        self.pending[p * dim + j] = self.pending[last * dim + j];
                    }
                    self.pending.truncate(last * dim);
                    if p < last {
                        self.slots.insert(self.pending_ids[p], Slot::Pending(p));
                    }
                    removed += 1;
                }
                None => {}
            }
        }
        removed
    }

    /// Build the index again over the live vectors (the built ones still
    /// live and the pending ones); ids are kept.
    pub fn rebuild(&mut self) -> Result<(), LiveError> {
        let dim = self.dim();
        let raw = self.index.raw();
        let mut data = Vec::with_capacity(self.len() * dim);
        let mut ids = Vec::with_capacity(self.len());
        for i in self.live.ids() {
            data.extend(stored_vector(raw, i as usize));
            ids.push(self.built_ids[i as usize]);
        }
        data.extend_from_slice(&self.pending);
        ids.extend_from_slice(&self.pending_ids);
        let built = build(&data, dim, self.metric(), &self.params)?;
        let next_id = self.next_id;
        *self = Self::with_ids(
            octex_search::Index::new(built.index),
            self.params.clone(),
            ids,
        )?;
        self.next_id = next_id;
        Ok(())
    }

    /// The `k` nearest live vectors of each query (`nq x dim`), by user id;
    /// `allowed`, when given, the only user ids that may come back.
    pub fn search(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        allowed: Option<&[u64]>,
    ) -> Result<LiveResults, LiveError> {
        let dim = self.dim();
        if queries.is_empty() || queries.len() % dim != 0 {
            return Err(LiveError::Dimension {
                expected: dim,
                got: queries.len(),
            });
        }
        let nq = queries.len() / dim;
        let mut filter = self.live.clone();
        let mut pending_ok = vec![true; self.pending()];
        if let Some(allowed) = allowed {
            let mut built = IdFilter::none(self.index.len());
            pending_ok.fill(false);
            for id in allowed {
                match self.slots.get(id) {
                    Some(Slot::Built(i)) => {
                        built.allow(*i);
                    }
                    Some(Slot::Pending(p)) => pending_ok[*p] = true,
                    None => {}
                }
            }
            filter.intersect(&built);
        }
        let kb = k.min(self.index.len()).max(1);
        let res = self.index.search_filtered(queries, kb, p, &filter)?;
        let mut ids = vec![u64::MAX; nq * k];
        let mut distances = vec![f32::INFINITY; nq * k];
        let mut row: Vec<(f32, u64)> = Vec::with_capacity(kb + self.pending());
        for q in 0..nq {
            row.clear();
            for (&id, &d) in res.ids(q).iter().zip(res.distances(q)) {
                if id != PAD_ID {
                    row.push((d, self.built_ids[id as usize]));
                }
            }
            let query = &queries[q * dim..(q + 1) * dim];
            for (pi, v) in self.pending.chunks_exact(dim).enumerate() {
                if pending_ok[pi] {
                    row.push((user_distance(self.metric(), query, v), self.pending_ids[pi]));
                }
            }
            row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for (t, &(d, id)) in row.iter().take(k).enumerate() {
                ids[q * k + t] = id;
                distances[q * k + t] = d;
            }
        }
        Ok(LiveResults { k, ids, distances })
    }
}

/// Built vector `i` of `raw` as its rerank vectors hold it, in the input
/// space (the appended coordinate of inner product left out).
pub fn stored_vector(raw: &octex_index::Index, i: usize) -> Vec<f32> {
    let (dim, row) = (raw.input_dim(), i * raw.stored_dim());
    match raw.vectors() {
        RerankView::F32(v) => v[row..row + dim].to_vec(),
        RerankView::F16(v) => v[row..row + dim].iter().map(|x| x.to_f32()).collect(),
    }
}

/// The distance a search reports between a query and a vector, computed
/// exactly: squared L2; `1 - cos` for cosine; `-q.x` for inner product
/// (what `Metric::user_distance` gives from the stored space).
fn user_distance(metric: Metric, q: &[f32], x: &[f32]) -> f32 {
    match metric {
        Metric::L2 => q.iter().zip(x).map(|(a, b)| (a - b) * (a - b)).sum(),
        Metric::Cosine => {
            let (mut dot, mut qq, mut xx) = (0f64, 0f64, 0f64);
            for (&a, &b) in q.iter().zip(x) {
                dot += a as f64 * b as f64;
                qq += a as f64 * a as f64;
                xx += b as f64 * b as f64;
            }
            (1.0 - dot / (qq.sqrt() * xx.sqrt())) as f32
        }
        Metric::InnerProduct => -q.iter().zip(x).map(|(a, b)| a * b).sum::<f32>(),
    }
}
