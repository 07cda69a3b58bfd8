//! Merging shards' answers in C (`octex_build::merge_topk`): each shard's
//! answer is `nq x k_s` ids (`uint64_t`, `UINT64_MAX` where missing) and
//! distances in host memory.

use octex_build::{merge_topk, Order, ShardAnswer};

use crate::{guard, invalid, OctexStatus};

/// The `k` best of each of `nq` queries over `parts` answers: `ids[p]` and
/// `distances[p]` hold `nq * ks[p]` values each. Written to `out_ids` and
/// `out_distances` (`nq * k` each): nearest first (smallest distance, or
/// largest when `descending` is not 0), ties by id, an id once, padded with
/// `UINT64_MAX` and infinity (minus infinity when descending).
///
/// # Safety
/// `ids`, `distances` and `ks` hold `parts` values; each `ids[p]` and
/// `distances[p]` points to `nq * ks[p]` readable values; `out_ids` and
/// `out_distances` to `nq * k` writable ones.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn octex_merge_topk(
    ids: *const *const u64,
    distances: *const *const f32,
    ks: *const usize,
    parts: usize,
    nq: usize,
    k: usize,
    descending: i32,
    out_ids: *mut u64,
    out_distances: *mut f32,
) -> OctexStatus {
    guard(|| {
        if ids.is_null() || distances.is_null() || ks.is_null() || parts == 0 {
            return Err(invalid(
                "ids, distances and ks must hold at least one answer",
            ));
        }
        if out_ids.is_null() || out_distances.is_null() || k == 0 {
            return Err(invalid(
                "out_ids and out_distances must not be null, k at least 1",
            ));
        }
        // SAFETY: the caller's contract: `parts` values each.
        let (ids, distances, ks) = unsafe {
            (
                std::slice::from_raw_parts(ids, parts),
                std::slice::from_raw_parts(distances, parts),
                std::slice::from_raw_parts(ks, parts),
            )
        };
        let mut answers = Vec::with_capacity(parts);
        for p in 0..parts {
            let len = nq
                .checked_mul(ks[p])
                .ok_or_else(|| invalid("nq * ks overflows"))?;
            if len > 0 && (ids[p].is_null() || distances[p].is_null()) {
                return Err(invalid(format!("answer {p} is null")));
            }
            // SAFETY: the caller's contract: `nq * ks[p]` values each (none
            // read when the length is 0).
            let (i, d) = unsafe {
                match len {
                    0 => (&[][..], &[][..]),
                    _ => (
                        std::slice::from_raw_parts(ids[p], len),
                        std::slice::from_raw_parts(distances[p], len),
                    ),
                }
            };
            answers.push(ShardAnswer {
                ids: i,
                distances: d,
                k: ks[p],
            });
        }
        let order = if descending != 0 {
            Order::Descending
        } else {
            Order::Ascending
        };
        let (m, d) = merge_topk(&answers, nq, k, order);
        // SAFETY: the caller's contract: `nq * k` writable values each.
        unsafe {
            std::ptr::copy_nonoverlapping(m.as_ptr(), out_ids, m.len());
            std::ptr::copy_nonoverlapping(d.as_ptr(), out_distances, d.len());
        }
        Ok(())
    })
}
