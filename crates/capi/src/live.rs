//! Adds, removes and searches by user id (`octex_build::LiveIndex`): ids
//! are `uint64_t` arrays in host memory; vectors and queries are DLPack
//! tensors as elsewhere. From the first add or remove on, the index is
//! searched by [`octex_search_ids`] on the CPU.

use octex_build::{LiveError, LiveIndex};
use octex_search::IdFilter;

use crate::{guard, invalid, read_f32, Failure, OctexIndex, OctexSearchParams, OctexStatus};

/// A living-index error as a C status.
pub(crate) fn failure(e: LiveError) -> Failure {
    match e {
        LiveError::Build(e) => e.into(),
        LiveError::Search(e) => e.into(),
        LiveError::File(e) => e.into(),
        e => invalid(e.to_string()),
    }
}

/// `n` values at `p` (null only when `n` is 0).
///
/// # Safety
/// `p` is null or points to `n` readable values.
unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Failure> {
    match (p.is_null(), n) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(invalid(format!("{what} is null"))),
        // SAFETY: the caller's contract.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(p, n) }),
    }
}

impl OctexIndex {
    fn live_mut(&mut self) -> &mut LiveIndex {
        let shared = &self.shared;
        self.live.get_or_insert_with(|| {
            LiveIndex::new(shared.index().clone(), octex_build::BuildParams::default())
        })
    }
}

/// Add `vectors` (`float32`, `(n, dim)`) with `ids` (`n` values; null: the
/// next free ids). The ids given to the vectors are written to `out_ids`
/// (`n` values) unless it is null. A duplicate id or a vector the metric
/// cannot take refuses the whole call and adds nothing.
///
/// # Safety
/// `index` is a live index not used by another thread during the call;
/// `vectors` is a valid DLTensor; `ids` and `out_ids` are null or hold `n`
/// values.
#[no_mangle]
pub unsafe extern "C" fn octex_add(
    index: *mut OctexIndex,
    vectors: *const crate::DLTensor,
    ids: *const u64,
    out_ids: *mut u64,
) -> OctexStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let ix = unsafe { index.as_mut() }.ok_or_else(|| invalid("index is null"))?;
        // SAFETY: the caller's contract.
        let (values, dim) = unsafe { read_f32(vectors, "vectors", Some(&ix.shared)) }?;
        if dim != ix.shared.index().dim() {
            return Err(invalid(format!(
                "vectors have dimension {dim}, the index {}",
                ix.shared.index().dim()
            )));
        }
        let n = values.len() / dim.max(1);
        // SAFETY: the caller's contract (`n` values when not null).
        let given = (!ids.is_null()).then(|| unsafe { std::slice::from_raw_parts(ids, n) });
        let added = ix.live_mut().add(&values, given).map_err(failure)?;
        if !out_ids.is_null() {
            // SAFETY: the caller's contract: `n` writable values.
            unsafe { std::ptr::copy_nonoverlapping(added.as_ptr(), out_ids, n) };
        }
        Ok(())
    })
}

/// Remove `count` ids; `*removed` (unless null) is how many were in the
/// index. None of them is a search result from the call's return on.
///
/// # Safety
/// `index` is a live index not used by another thread during the call;
/// `ids` holds `count` values; `removed` is null or valid.
#[no_mangle]
pub unsafe extern "C" fn octex_remove(
    index: *mut OctexIndex,
    ids: *const u64,
    count: usize,
    removed: *mut usize,
) -> OctexStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let ix = unsafe { index.as_mut() }.ok_or_else(|| invalid("index is null"))?;
        // SAFETY: the caller's contract.
        let ids = unsafe { slice(ids, count, "ids") }?;
        let n = ix.live_mut().remove(ids);
        // SAFETY: the caller's contract.
        if let Some(r) = unsafe { removed.as_mut() } {
            *r = n;
        }
        Ok(())
    })
}

/// Search by user id, on the CPU: the `k` nearest of each query (`float32`,
/// `(nq, dim)`) among the ids in `allowed` (`n_allowed` values; null: all),
/// written to `ids` (`nq * k` values, `UINT64_MAX` where fewer exist) and
/// `distances` (`nq * k`, infinity there). Before any add or remove the
/// user ids are the positions. `params` null: the defaults.
///
/// # Safety
/// `index` is a live index not used by another thread during the call;
/// `queries` is a valid DLTensor; `allowed` holds `n_allowed` values (or is
/// null); `ids` and `distances` hold `nq * k` writable values.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn octex_search_ids(
    index: *mut OctexIndex,
    queries: *const crate::DLTensor,
    k: usize,
    params: *const OctexSearchParams,
    allowed: *const u64,
    n_allowed: usize,
    ids: *mut u64,
    distances: *mut f32,
) -> OctexStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let ix = unsafe { index.as_mut() }.ok_or_else(|| invalid("index is null"))?;
        // SAFETY: the caller's contract.
        let p = unsafe { crate::params_or_default(params, ix.current()) };
        // SAFETY: the caller's contract.
        let (values, dim) = unsafe { read_f32(queries, "queries", Some(&ix.shared)) }?;
        let allowed = match allowed.is_null() {
            true => None,
            // SAFETY: the caller's contract.
            false => Some(unsafe { slice(allowed, n_allowed, "allowed") }?),
        };
        // SAFETY: the caller's contract: nq * k writable values each.
        unsafe { search_ids(ix, &values, dim, k, &p, allowed, ids, distances) }
    })
}

/// [`octex_search_ids`] with the ids that may come back given as a bitset,
/// as cuVS's `filters.from_bitset`: a 1-d `uint32` DLTensor (host or CUDA
/// memory) whose bit `i % 32` of word `i / 32` is set when id `i` may be
/// returned (user ids after an add or remove, else positions).
///
/// # Safety
/// As [`octex_search_ids`]; `bitset` is a valid DLTensor.
#[no_mangle]
pub unsafe extern "C" fn octex_search_bitset(
    index: *mut OctexIndex,
    queries: *const crate::DLTensor,
    k: usize,
    params: *const OctexSearchParams,
    bitset: *const crate::DLTensor,
    ids: *mut u64,
    distances: *mut f32,
) -> OctexStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let ix = unsafe { index.as_mut() }.ok_or_else(|| invalid("index is null"))?;
        // SAFETY: the caller's contract.
        let p = unsafe { crate::params_or_default(params, ix.current()) };
        // SAFETY: the caller's contract.
        let (values, dim) = unsafe { read_f32(queries, "queries", Some(&ix.shared)) }?;
        // SAFETY: the caller's contract.
        let words = unsafe { crate::read_words(bitset, "bitset", &ix.shared) }?;
        let allowed: Vec<u64> = words
            .iter()
            .enumerate()
            .flat_map(|(w, &bits)| {
                (0..32u64)
                    .filter(move |b| bits >> b & 1 == 1)
                    .map(move |b| w as u64 * 32 + b)
            })
            .collect();
        // SAFETY: the caller's contract: nq * k writable values each.
        unsafe { search_ids(ix, &values, dim, k, &p, Some(&allowed), ids, distances) }
    })
}

/// The search of [`octex_search_ids`] and [`octex_search_bitset`], its
/// results written to `ids` and `distances`.
///
/// # Safety
/// `ids` and `distances` hold `nq * k` writable values (`nq` the rows of
/// `values`), or are null (refused).
#[allow(clippy::too_many_arguments)]
unsafe fn search_ids(
    ix: &OctexIndex,
    values: &[f32],
    dim: usize,
    k: usize,
    p: &octex_search::SearchParams,
    allowed: Option<&[u64]>,
    ids: *mut u64,
    distances: *mut f32,
) -> crate::Outcome {
    if ids.is_null() || distances.is_null() {
        return Err(invalid("ids and distances must not be null"));
    }
    let (found_ids, found_dists) = match &ix.live {
        Some(live) => {
            let res = live.search(values, k, p, allowed).map_err(failure)?;
            (res.ids, res.distances)
        }
        None => {
            let index = ix.shared.index();
            let batch = octex_search::Queries::new(values, dim)?;
            let res = match allowed {
                Some(a) => {
                    let n = index.len() as u64;
                    let inside = a.iter().filter(|&&id| id < n).map(|&id| id as u32);
                    let filter = IdFilter::from_ids(index.len(), inside)?;
                    index.search_filtered(batch.values(), k, p, &filter)?
                }
                None => index.search_queries(batch, k, p)?,
            };
            let pad = |id: u32| match id {
                octex_index::PAD_ID => u64::MAX,
                id => id as u64,
            };
            (res.ids.iter().map(|&i| pad(i)).collect(), res.distances)
        }
    };
    let nq = values.len() / dim.max(1);
    if found_ids.len() != nq * k {
        return Err(invalid("internal: result size"));
    }
    // SAFETY: the caller's contract: nq * k writable values each.
    unsafe {
        std::ptr::copy_nonoverlapping(found_ids.as_ptr(), ids, nq * k);
        std::ptr::copy_nonoverlapping(found_dists.as_ptr(), distances, nq * k);
    }
    Ok(())
}
