//! A round's visits: the visited set (its hash, probes and claims) and
//! [`Round`], which gathers a round's entries (ripple heads, seeds or a
//! wave's rows), claims them in the visited set, and scores the ids first
//! seen against the query's sketch into the candidate buffer.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`].

use crate::distance::sketch_distance;
use crate::layout::*;
use crate::prims::*;
use crate::sketch::QueryScale;

/// Home slot of `id` in a visited set of `slots` slots: with `POW2` (the
/// host sized it as a power of two) the hash's mixed low bits under the
/// mask; else (any count) the high word of the Fibonacci hash times `slots`.
/// The dense and narrow builds take the mask (they only ever get powers of
/// two, and the mask is the cheaper hash), the others the multiply-high.
#[inline(always)]
fn home_slot<const POW2: bool>(id: u32, slots: u32) -> u32 {
    let h = id.wrapping_mul(0x9E37_79B1);
    if POW2 {
        (h ^ (h >> 15)) & (slots - 1)
    } else {
        ((h as u64 * slots as u64) >> 32) as u32
    }
}

/// `slot` moved on by `step` (0 or 1) in a set of `slots` slots, wrapping at
/// the end (branch-free).
#[inline(always)]
fn advance_slot<const POW2: bool>(slot: u32, step: u32, slots: u32) -> u32 {
    let next = slot + step;
    if POW2 {
        next & (slots - 1)
    } else if next == slots {
        0
    } else {
        next
    }
}

/// Compare-and-swap of one visited-set slot: `id` goes in if the slot is
/// empty; returns what the slot held.
///
/// # Safety
/// `slot` is in shared memory unless `global`.
#[inline(always)]
unsafe fn claim(slot: *mut u32, id: u32, global: bool) -> u32 {
    // SAFETY: the caller's contract.
    unsafe {
        if global {
            cas_generic(slot, EMPTY_SLOT, id)
        } else {
            cas_shared(slot, EMPTY_SLOT, id)
        }
    }
}

/// Per-thread work counts, summed into the batch's counters at the end.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) first_round: u32,
    pub(crate) sketch: u32,
    pub(crate) no_fragment: u32,
    pub(crate) row_entries: u32,
    pub(crate) exact: u32,
}

/// Entries a thread loads before it visits them (loads in flight together).
const GATHER: usize = 8;

/// The shared-memory state one round of the search reads and appends to: the
/// query's sketch codes, the visited set, the list of ids first seen in
/// the round, and the candidate buffer with its count.
pub(crate) struct Round<'a> {
    pub(crate) ix: &'a IndexView,
    /// The query's `i16` sketch codes, two per word.
    pub(crate) codes: *const u32,
    pub(crate) scale: QueryScale,
    /// The query's residual sketch table (`SearchSmem::centres`).
    pub(crate) centres: *const f32,
    pub(crate) hash: *mut u32,
    /// Slots of the visited set (`BatchView::hash_slots`).
    pub(crate) slots: u32,
    /// The large arrays are in the global scratch.
    pub(crate) global: bool,
    pub(crate) fresh: *mut u32,
    pub(crate) fresh_count: *mut u32,
    pub(crate) buf: *mut u64,
    pub(crate) count: *mut u32,
}

impl Round<'_> {
    /// Visit entries `0..total`, which come in lists of `per` (entry `e` is
    /// `load(e / per, e % per)`, an id or `PAD_ID`), in passes of up to
    /// `GATHER` entries per thread with all loads issued first, and list the
    /// ids not seen before in `fresh`; then, after a barrier, score the fresh
    /// ids and append those whose key beats `threshold`. `seen` counts the
    /// entries read. All threads of the block call it, with `fresh_count` zero.
    ///
    /// A pass takes the fewest slots per thread (1, 2, 4 or 8, each a build of
    /// [`Round::gather_pass`]) that holds the entries left: the code of unused
    /// slots runs all the same, and probe steps run until the slowest of a
    /// warp's `32 G` claims settles, so fewer slots a pass take fewer steps.
    #[inline(always)]
    pub(crate) unsafe fn visit_and_score<const TH: u32, const POW2: bool>(
        &self,
        total: u32,
        per: u32,
        load: impl Fn(u32, u32) -> u32,
        seen: &mut u32,
        threshold: u32,
        counts: &mut Counts,
    ) {
        let t = tid();
        let mut base = 0;
        while base < total {
            // Block-uniform: every thread takes the same build.
            let left = total - base;
            // SAFETY: the caller's contract, passed on.
            unsafe {
                base += if left > 4 * TH {
                    self.gather_pass::<TH, POW2, GATHER>(base, total, per, &load, seen)
                } else if left > 2 * TH {
                    self.gather_pass::<TH, POW2, 4>(base, total, per, &load, seen)
                } else if left > TH {
                    self.gather_pass::<TH, POW2, 2>(base, total, per, &load, seen)
                } else {
                    self.gather_pass::<TH, POW2, 1>(base, total, per, &load, seen)
                };
            }
        }
        sync();
        // One row a thread: rounds hold a few hundred fresh ids, so scoring
        // two rows a thread idles half the threads (measured slower).
        // SAFETY: the counter is complete after the barrier; i < n <= fresh_len;
        // pushes stay under buf_len (sizes).
        unsafe {
            let n = core::ptr::read_volatile(self.fresh_count);
            let mut i = t;
            while i < n {
                let id = *self.fresh.add(i as usize);
                let d = sketch_distance(self.ix, self.codes, self.scale, self.centres, id);
                counts.sketch += 1;
                if f32_order_key(d) < threshold {
                    let pos = add_shared(self.count, 1);
                    *self.buf.add(pos as usize) = candidate(d, id);
                }
                i += TH;
            }
        }
    }

    /// One pass of [`Round::visit_and_score`] over entries `base ..
    /// base + G TH` (those below `total`), `G` per thread, `TH` apart;
    /// returns `G TH`.
    #[inline(always)]
    unsafe fn gather_pass<const TH: u32, const POW2: bool, const G: usize>(
        &self,
        base: u32,
        total: u32,
        per: u32,
        load: &impl Fn(u32, u32) -> u32,
        seen: &mut u32,
    ) -> u32 {
        let t = tid();
        // A thread's entries are TH apart: one division gives the first
        // one's list and place, and each next one steps by TH's (a division
        // by the run-time `per` for every gather slot was a chain of a dozen
        // instructions in front of each load).
        // (`per` is at least 1 wherever `total` is not 0: the host refuses a
        // read depth of 0, and rows are never empty; where `total` is 0, no
        // pass runs.)
        let (list_step, place_step) = (TH / per, TH % per);
        let mut ids = [PAD_ID; G];
        let first = base + t;
        let (mut list, mut place) = (first / per, first % per);
        for (g, id) in ids.iter_mut().enumerate() {
            let e = first + g as u32 * TH;
            if e < total {
                *id = load(list, place);
            }
            place += place_step;
            let carry = place >= per;
            list += list_step + carry as u32;
            place -= if carry { per } else { 0 };
        }
        // Every thread claims the home slots of its GATHER ids at once, so
        // the compare-and-swaps' latencies overlap; an id whose slot holds
        // another id probes the next slot in the next step. The steps run in
        // lock step across the warp (the loop's condition is a ballot), so
        // the warp stays converged: per-thread probe loops, taken by a third
        // of the ids at the set's load, split warps into groups of two or
        // three threads that ran the rest of the round apart. Padding ids claim nothing: they
        // all share one home slot, and their atomics on it once serialised
        // the first round. Index loops, not `for id in ids`: the array's
        // by-value iterator went to local memory.
        // SAFETY: shared pointers of the layout (or the query's scratch
        // when spilled); fresh holds every id a round can see (fresh_len);
        // slots stay below the set's length.
        unsafe {
            let mut slot = [0u32; G];
            let mut pending = 0u32;
            for g in 0..G {
                if ids[g] != PAD_ID {
                    *seen += 1;
                    slot[g] = home_slot::<POW2>(ids[g], self.slots);
                    pending |= 1 << g;
                }
            }
            let mut fresh_ids = 0u32;
            // A full set (the sizes make it unreachable) ends the probing
            // after every slot was tried: what is left counts as seen.
            let mut step = 0;
            while ballot(pending != 0) != 0 && step < self.slots {
                let mut prev = [EMPTY_SLOT; G];
                for g in 0..G {
                    if pending & (1 << g) != 0 {
                        prev[g] = claim(self.hash.add(slot[g] as usize), ids[g], self.global);
                    }
                }
                for g in 0..G {
                    let inserted = prev[g] == EMPTY_SLOT;
                    let settled = inserted || prev[g] == ids[g];
                    let bit = pending & (1 << g);
                    fresh_ids |= if inserted { bit } else { 0 };
                    pending &= if settled { !bit } else { !0 };
                    slot[g] = advance_slot::<POW2>(slot[g], (!settled) as u32, self.slots);
                }
                step += 1;
            }
            // One append per thread for all its new ids.
            if fresh_ids != 0 {
                let mut p = add_shared(self.fresh_count, fresh_ids.count_ones());
                for g in 0..G {
                    if fresh_ids & (1 << g) != 0 {
                        *self.fresh.add(p as usize) = ids[g];
                        p += 1;
                    }
                }
            }
        }
        G as u32 * TH
    }
}
