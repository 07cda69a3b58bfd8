//! The wave search kernel: one query per block. First round (every copy and
//! spacing decoded and looked up at once), `W` waves over the neighbour rows,
//! exact rerank; the visited set and the candidate list in shared memory. Also
//! `fragment_keys`, which decodes with the same code for the builder and tests.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`].

use core::intrinsics::gpu::gpu_launch_sized_workgroup_mem;

use crate::block_sort::*;
use crate::distance::{exact_distance, exact_group_lanes};
use crate::fragments::{find_fragments, fragment_key_of};
use crate::layout::*;
use crate::prims::*;
use crate::sketch::{QueryScale, centre_term_step};
use crate::visit::{Counts, Round};

/// Mark the first `s_max` entries of `buf[..nbest]` whose low word has none
/// of the bits of `skip` expanded and list their ids in `starts`; returns how
/// many (block-uniform).
#[inline(always)]
unsafe fn select_starts<const TH: u32>(
    buf: *mut u64,
    nbest: u32,
    s_max: u32,
    skip: u32,
    starts: *mut u32,
    warp_sums: *mut u32,
) -> u32 {
    let t = tid();
    let (lane, warp) = (t & 31, t >> 5);
    let mut found = 0u32;
    let mut chunk = 0u32;
    while chunk < nbest && found < s_max {
        let i = chunk + t;
        // SAFETY: i < nbest <= buffer length; warp_sums has TH/32 slots.
        unsafe {
            let entry = if i < nbest {
                *buf.add(i as usize)
            } else {
                u64::MAX
            };
            let flag = i < nbest && (entry as u32 & skip) == 0;
            let votes = ballot(flag);
            let below = (votes & ((1u32 << lane) - 1)).count_ones();
            if lane == 0 {
                *warp_sums.add(warp as usize) = votes.count_ones();
            }
            sync();
            let (mut before, mut total) = (0u32, 0u32);
            for wi in 0..TH / 32 {
                let c = *warp_sums.add(wi as usize);
                before += if wi < warp { c } else { 0 };
                total += c;
            }
            let rank = found + before + below;
            if flag && rank < s_max {
                *buf.add(i as usize) = entry | EXPANDED_BIT as u64;
                *starts.add(rank as usize) = entry as u32 & !(EXPANDED_BIT | EXACT_BIT);
            }
            found += total;
            sync();
        }
        chunk += TH;
    }
    found.min(s_max)
}

/// Per-wave rerank: exact distances, one lane group per entry
/// ([`exact_group_lanes`]), of the best `rerank`
/// entries of `buf[..nbest]` that have none yet (they are marked
/// [`EXACT_BIT`] there), appended to the exact list `exact[..nexact]`, which
/// is then sorted and trimmed to `keep`; returns its length and adds the
/// distances computed to `computed`. `slot` is a shared counter.
///
/// # Safety
/// Called by every thread of the block. `buf` holds `nbest` entries, `exact`
/// holds at least `nexact + rerank` entries (a power of two at least that
/// long), `query` holds `ix.dim` values, and every id in `buf` is `< ix.n`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn exact_pass<const TH: u32>(
    ix: &IndexView,
    query: *const f32,
    buf: *mut u64,
    nbest: u32,
    rerank: u32,
    exact: *mut u64,
    nexact: u32,
    keep: u32,
    slot: *mut u32,
    computed: &mut u32,
) -> u32 {
    let t = tid();
    let lanes = exact_group_lanes(ix);
    let (lane, group) = (t % lanes, t / lanes);
    // SAFETY: slot is a shared counter; j < nr <= nbest <= the buffer's
    // length; appended entries stay under nexact + rerank <= rerank_len.
    unsafe {
        if t == 0 {
            *slot = nexact;
        }
        sync();
        let nr = rerank.min(nbest);
        // Block-uniform bounds: every lane reaches the group sum's shuffles.
        let mut first = 0;
        while first < nr {
            let j = first + group;
            let entry = if j < nr { *buf.add(j as usize) } else { 0 };
            let word = entry as u32;
            let todo = j < nr && word & EXACT_BIT == 0;
            // Warps whose entries all have their distance skip the group
            // sum (most of them after the first wave).
            if ballot(todo) == 0 {
                first += TH / lanes;
                continue;
            }
            let d = exact_distance(ix, query, word & !EXPANDED_BIT, todo, lane, lanes);
            if todo && lane == 0 {
                *buf.add(j as usize) = entry | EXACT_BIT as u64;
                let at = add_shared(slot, 1);
                *exact.add(at as usize) = candidate(d, word);
                *computed += 1;
            }
            first += TH / lanes;
        }
        sync();
        let total = core::ptr::read_volatile(slot);
        sort_block::<TH>(exact, total);
        sync();
        total.min(keep)
    }
}

/// Zero a shared counter between barriers.
#[inline(always)]
unsafe fn reset_counter(c: *mut u32) {
    sync();
    if tid() == 0 {
        // SAFETY: a shared counter.
        unsafe { core::ptr::write_volatile(c, 0) };
    }
    sync();
}

/// Select the best `keep` of the appended candidates, sorted at the front
/// ([`select_smallest`]); returns how many. The first round appends many
/// more than `keep` (1,500 or so against 192 at C = 128, S = 64, W = 3); a
/// wave appends its new entries to the kept list, and the last wave (without
/// per-wave rerank) keeps only the rerank's `R`.
///
/// Selecting in every round (rather than sorting the whole buffer with
/// [`sort_block`]) is one code path for every wave and spills less.
#[inline(always)]
unsafe fn sort_and_trim<const TH: u32>(buf: *mut u64, count: *mut u32, keep: u32) -> u32 {
    sync();
    // SAFETY: count is a shared counter; buf holds `n` entries.
    unsafe {
        let n = core::ptr::read_volatile(count);
        sync();
        select_smallest::<TH>(buf, n, selection_run(keep));
        let nbest = n.min(keep);
        if tid() == 0 {
            core::ptr::write_volatile(count, nbest);
        }
        sync();
        nbest
    }
}

/// Exact squared distance of the vector of buffer entry `key` (the same for
/// every thread), measured by the first lane group and shared through the
/// shared slot `slot`; all threads call it.
///
/// # Safety
/// `key`'s low word is an id below `ix.n` (flags aside), `query` holds the
/// stored-space query and `slot` is a shared counter no other thread reads
/// or writes until the barrier inside.
#[inline(always)]
unsafe fn exact_of_entry<const TH: u32>(
    ix: &IndexView,
    query: *const f32,
    key: u64,
    slot: *mut u32,
) -> f32 {
    let t = tid();
    // SAFETY: `key` is a buffer entry (an id below n); `slot` is this block's
    // shared counter, read by no one else.
    unsafe {
        if t < 32 {
            let lanes = exact_group_lanes(ix);
            let id = key as u32 & !(EXPANDED_BIT | EXACT_BIT);
            let d = exact_distance(ix, query, id, t < lanes, t % lanes, lanes);
            if t == 0 {
                core::ptr::write_volatile(slot, d.to_bits());
            }
        }
        sync();
        f32::from_bits(core::ptr::read_volatile(slot))
    }
}

/// The wave search of one query per block (`BLOCK_THREADS` threads; dynamic
/// shared memory as `SearchSmem` lays it out), for batches whose large
/// arrays fit in shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn wave_search(index: IndexView, batch: BatchView) {
    // SAFETY: the host's contract, as for the body.
    unsafe { wave_search_body::<false, T, false>(index, batch) }
}

/// [`wave_search`] compiled for four blocks per multiprocessor (64
/// registers a thread instead of 80), for batches whose shared memory lets
/// four fit: the host picks it.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn wave_search_dense(index: IndexView, batch: BatchView) {
    // SAFETY: the host's contract, as for the body.
    unsafe { wave_search_body::<false, T, true>(index, batch) }
}

/// [`wave_search`] with blocks of `NARROW_BLOCK_THREADS` threads, for small
/// per-query work: twice as many queries share a multiprocessor, so the
/// latency of one query's chain of phases hides behind the others'.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn wave_search_narrow(index: IndexView, batch: BatchView) {
    // SAFETY: the host's contract, as for the body, launched with
    // NARROW_BLOCK_THREADS threads.
    unsafe { wave_search_body::<false, NARROW_BLOCK_THREADS, true>(index, batch) }
}

/// [`wave_search`] with blocks of `LATENCY_BLOCK_THREADS` threads, for
/// batches of at most one query per multiprocessor (batch 1 and 100 on an
/// H200): every round, sort and rerank of a query is spread over four times
/// the threads of the 256-thread builds, which would leave most of each
/// multiprocessor idle.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn wave_search_latency(index: IndexView, batch: BatchView) {
    // SAFETY: the host's contract, as for the body, launched with
    // LATENCY_BLOCK_THREADS threads.
    unsafe { wave_search_body::<false, LATENCY_BLOCK_THREADS, false>(index, batch) }
}

/// [`wave_search`] for batches that spill (`BatchView::scratch_per_query >
/// 0`): the large arrays in the global scratch.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn wave_search_spilled(index: IndexView, batch: BatchView) {
    // SAFETY: the host's contract, as for the body.
    unsafe { wave_search_body::<true, T, false>(index, batch) }
}

/// The search of one query per block of `TH` threads (a multiple of 32, at
/// most `LATENCY_BLOCK_THREADS`: the warp-sum slots). `POW2`: the visited set
/// is a power of two (the dense and narrow builds, which the host gives no
/// other), hashed under a mask ([`home_slot`]). `SPILLED` is a constant so
/// that, in the shared-memory kernel, every pointer provably points to shared memory
/// and compiles to shared-memory instructions (a run-time choice made them
/// generic loads and stores).
#[inline(always)]
unsafe fn wave_search_body<const SPILLED: bool, const TH: u32, const POW2: bool>(
    index: IndexView,
    batch: BatchView,
) {
    // SAFETY: the host passes valid views; every access below stays inside the
    // sizes they describe.
    unsafe {
        let ix = index;
        let bt = batch;
        let qi = bid();
        let lay = SearchSmem::new(&ix, &bt);
        if qi >= bt.nq || lay.spilled != SPILLED {
            return;
        }
        let t = tid();
        let base = gpu_launch_sized_workgroup_mem::<u64>() as *mut u8;
        // The large arrays: in shared memory, or in this query's slice of the
        // global scratch when the batch spills.
        let large = if SPILLED {
            (bt.scratch as *mut u8).add(qi as usize * bt.scratch_per_query as usize)
        } else {
            base
        };
        let ctr = base.add(lay.counters as usize) as *mut u32;
        let buf = large.add(lay.buf as usize) as *mut u64;
        let exact = large.add(lay.exact as usize) as *mut u64;
        let hash = large.add(lay.hash as usize) as *mut u32;
        let codes = base.add(lay.qs as usize) as *mut i16;
        let query = base.add(lay.query as usize) as *mut f32;
        let hits = base.add(lay.hits as usize) as *mut u32;
        let starts = base.add(lay.starts as usize) as *mut u32;
        let count = ctr.add(CTR_COUNT);
        let w = ix.sketch_width;
        let m = ix.basis_dim;
        let mut counts = Counts::default();

        // Load the query and clear the visited set.
        let mut i = t;
        while i < SearchSmem::COUNTERS {
            *ctr.add(i as usize) = 0;
            i += TH;
        }
        i = t;
        while i < bt.hash_slots {
            *hash.add(i as usize) = EMPTY_SLOT;
            i += TH;
        }
        i = t;
        while i < ix.dim {
            *query.add(i as usize) = *(bt.queries as *const f32).add((qi * ix.dim + i) as usize);
            i += TH;
        }

        if bt.stop_after == STOP_AFTER_INIT {
            sync();
            return;
        }
        // First round: every (copy, spacing) decoded and looked up at once
        // (here, or by `query_fragments` before this kernel); per copy, the
        // finest spacing whose fragment is stored.
        let nsp = ix.spacings;
        let hits_by_spacing = base.add(lay.hits_by_spacing as usize) as *mut u32;
        let found = FragmentLookupLayout::new(bt.nq, ix.copies).hits as usize;
        // (Not read when the view has no buffer: wrapping, as it may be null.)
        let found = (bt.frag_hits as *const u32).wrapping_add(found + (qi * ix.copies) as usize);
        if bt.frag_hits == 0 {
            find_fragments::<TH>(&ix, &bt, qi, hits_by_spacing);
        }
        let fresh = large.add(lay.fresh as usize) as *mut u32;
        let fresh_count = ctr.add(CTR_FRESH);
        sync();
        // The query's sketch coordinates times the scales, `a_j`
        // ([`crate::sketch`]): their largest magnitude sets the code step.
        let sketch_a = |j: u32| {
            let pc = if j < m {
                *(bt.pcs as *const f32).add((qi * bt.pcs_stride + j) as usize)
                    - *(ix.basis_bias as *const f32).add(j as usize)
            } else {
                0.0
            };
            pc * *(ix.sketch_scales as *const f32).add(j as usize)
        };
        let mut amax = 0.0f32;
        let mut j = t;
        while j < w {
            amax = amax.max(sketch_a(j).abs());
            j += TH;
        }
        if amax > 0.0 {
            max_shared(ctr.add(CTR_QUERY_AMAX), amax.to_bits());
        }
        let mut c = t;
        while c < ix.copies {
            let mut hit = u32::MAX;
            if bt.frag_hits != 0 {
                hit = *found.add(c as usize);
            }
            let mut sp = 0;
            while bt.frag_hits == 0 && sp < nsp && hit == u32::MAX {
                hit = *hits_by_spacing.add((c * nsp + sp) as usize);
                sp += 1;
            }
            counts.no_fragment += (hit == u32::MAX) as u32;
            *hits.add(c as usize) = hit;
            c += TH;
        }
        sync();
        if bt.stop_after == STOP_AFTER_LOOKUP {
            return;
        }

        // Gather the first `r` ids of every ripple found, de-duplicated, scored.
        let r = bt.read_depth;
        let l = ix.list_len as u64;
        let ripples = ix.ripples as *const u32;
        let load_ripple = |copy: u32, place: u32| {
            let frag = *hits.add(copy as usize);
            if frag == u32::MAX {
                PAD_ID
            } else {
                *ripples.add((frag as u64 * l + place as u64) as usize)
            }
        };
        // The codes are written here and first read after the barrier inside
        // `visit_and_score` (between its gather and its scoring).
        let scale = QueryScale::new(
            f32::from_bits(core::ptr::read_volatile(ctr.add(CTR_QUERY_AMAX))),
            w,
        );
        let mut j = t;
        while j < w {
            *codes.add(j as usize) = scale.code(sketch_a(j), w);
            j += TH;
        }
        // The residual sketch's table: per centre its term (summed in the
        // order the CPU sums it) and step; first read after the same barrier.
        let centres = base.add(lay.centres as usize) as *mut f32;
        let mut c = t;
        while c < ix.sketch_centre_count {
            let centre = (ix.sketch_centres as *const f32).add((c * w) as usize);
            let mut term = 0.0f32;
            let mut j = 0;
            while j < w {
                let pc = if j < m {
                    *(bt.pcs as *const f32).add((qi * bt.pcs_stride + j) as usize)
                        - *(ix.basis_bias as *const f32).add(j as usize)
                } else {
                    0.0
                };
                term = centre_term_step(term, *centre.add(j as usize), pc);
                j += 1;
            }
            *centres.add(2 * c as usize) = term;
            *centres.add(2 * c as usize + 1) =
                scale.two_step * *(ix.sketch_centre_scales as *const f32).add(c as usize);
            c += TH;
        }
        let round = Round {
            ix: &ix,
            codes: codes as *const u32,
            scale,
            centres: centres as *const f32,
            hash,
            slots: bt.hash_slots,
            global: SPILLED,
            fresh,
            fresh_count,
            buf,
            count,
        };
        let mut first_round = 0;
        round.visit_and_score::<TH, POW2>(
            ix.copies * r,
            r,
            load_ripple,
            &mut first_round,
            u32::MAX,
            &mut counts,
        );
        counts.first_round = first_round;
        sync();
        let found = core::ptr::read_volatile(count);
        // The seeds follow a first round of too few ids (the count decides,
        // before any sort), or one whose nearest candidate, the first of the
        // sorted buffer, lies far out: it keeps its `S - 1` nearest then.
        let mut seeded = visits_seeds(found, bt.start_points, 0.0, ix.far_seed_distance);
        let mut measured = seeded;
        let mut nbest;
        loop {
            if seeded {
                reset_counter(fresh_count);
                let seeds = ix.seeds as *const u32;
                let mut unused = 0;
                let load_seed = |e: u32, _: u32| *seeds.add(e as usize);
                round.visit_and_score::<TH, POW2>(
                    ix.n_seeds,
                    1,
                    load_seed,
                    &mut unused,
                    u32::MAX,
                    &mut counts,
                );
            }
            nbest = sort_and_trim::<TH>(buf, count, bt.keep);
            // No far distance (inner product): the nearest cannot decide.
            if measured || nbest == 0 || ix.far_seed_distance == f32::INFINITY {
                break;
            }
            measured = true;
            let nearest = exact_of_entry::<TH>(&ix, query, *buf, ctr.add(CTR_NEAREST));
            if !visits_seeds(found, bt.start_points, nearest, ix.far_seed_distance) {
                break;
            }
            seeded = true;
            if t == 0 {
                core::ptr::write_volatile(count, nbest.min(bt.start_points - 1));
            }
            sync();
        }
        if bt.stop_after == STOP_AFTER_FIRST_ROUND {
            return;
        }

        // Waves. With per-wave rerank, the start points are the best
        // unexpanded entries by exact distance, topped up by sketch order
        // from the entries without one.
        let lt = ix.row_len;
        let rows = ix.rows as *const u32;
        let wave_rerank = bt.wave_rerank != 0;
        let mut nexact = 0u32;
        let mut wave = 0;
        while wave < bt.waves {
            let mut ns = 0;
            if wave_rerank {
                nexact = exact_pass::<TH>(
                    &ix,
                    query,
                    buf,
                    nbest,
                    bt.rerank,
                    exact,
                    nexact,
                    bt.keep,
                    ctr.add(CTR_EXACT_LIST),
                    &mut counts.exact,
                );
                ns = select_starts::<TH>(
                    exact,
                    nexact,
                    bt.start_points,
                    EXPANDED_BIT,
                    starts,
                    ctr.add(CTR_WARP_SUMS),
                );
            }
            if ns < bt.start_points {
                ns += select_starts::<TH>(
                    buf,
                    nbest,
                    bt.start_points - ns,
                    EXPANDED_BIT | EXACT_BIT,
                    starts.add(ns as usize),
                    ctr.add(CTR_WARP_SUMS),
                );
            }
            if ns == 0 {
                break;
            }
            let threshold = if nbest >= bt.keep {
                (*buf.add(bt.keep as usize - 1) >> 32) as u32
            } else {
                u32::MAX
            };
            reset_counter(fresh_count);
            let load_row = |start: u32, place: u32| {
                let u = *starts.add(start as usize);
                *rows.add((u as u64 * lt as u64 + place as u64) as usize)
            };
            let mut row_entries = 0;
            round.visit_and_score::<TH, POW2>(
                ns * lt,
                lt,
                load_row,
                &mut row_entries,
                threshold,
                &mut counts,
            );
            counts.row_entries += row_entries;
            // After the last wave (without per-wave rerank) only the
            // rerank's best `rerank` are read.
            let last = !wave_rerank && wave + 1 == bt.waves;
            let keep = if last {
                bt.rerank.min(bt.keep)
            } else {
                bt.keep
            };
            nbest = sort_and_trim::<TH>(buf, count, keep);
            wave += 1;
        }

        if bt.stop_after == STOP_AFTER_WAVES {
            return;
        }

        // Exact rerank of the best R, one lane group per candidate (per-wave mode:
        // of the best R not yet reranked; the answer is the exact list's head).
        let nr = if wave_rerank {
            nexact = exact_pass::<TH>(
                &ix,
                query,
                buf,
                nbest,
                bt.rerank,
                exact,
                nexact,
                bt.keep,
                ctr.add(CTR_EXACT_LIST),
                &mut counts.exact,
            );
            nexact
        } else {
            let nr = bt.rerank.min(nbest);
            let lanes = exact_group_lanes(&ix);
            let (lane, group) = (t % lanes, t / lanes);
            let mut first = 0;
            while first < nr {
                let j = first + group;
                let id = if j < nr {
                    (*buf.add(j as usize) as u32) & !EXPANDED_BIT
                } else {
                    0
                };
                let d = exact_distance(&ix, query, id, j < nr, lane, lanes);
                if j < nr && lane == 0 {
                    *exact.add(j as usize) = candidate(d, id);
                    counts.exact += 1;
                }
                first += TH / lanes;
            }
            sync();
            sort_block::<TH>(exact, nr);
            nr
        };
        let mut j = t;
        while j < bt.k {
            let o = (qi * bt.k + j) as usize;
            if j < nr {
                let v = *exact.add(j as usize);
                *(bt.out_ids as *mut u32).add(o) = v as u32 & !EXPANDED_BIT;
                *(bt.out_dists as *mut f32).add(o) = f32_from_order_key((v >> 32) as u32);
            } else {
                *(bt.out_ids as *mut u32).add(o) = PAD_ID;
                *(bt.out_dists as *mut f32).add(o) = f32::INFINITY;
            }
            j += TH;
        }

        // Work counters: per thread into shared memory, then one add per block.
        add_shared(ctr.add(CTR_FIRST_ROUND), counts.first_round);
        add_shared(ctr.add(CTR_SKETCH), counts.sketch);
        add_shared(ctr.add(CTR_NO_FRAGMENT), counts.no_fragment);
        add_shared(ctr.add(CTR_ROW_ENTRIES), counts.row_entries);
        add_shared(ctr.add(CTR_EXACT), counts.exact);
        sync();
        if t == 0 {
            let stats = bt.stats as *mut u64;
            add_global_u64(
                stats.add(STAT_FIRST_ROUND_ENTRIES),
                *ctr.add(CTR_FIRST_ROUND) as u64,
            );
            add_global_u64(
                stats.add(STAT_COPIES_WITHOUT_FRAGMENT),
                *ctr.add(CTR_NO_FRAGMENT) as u64,
            );
            add_global_u64(
                stats.add(STAT_SKETCH_DISTANCES),
                *ctr.add(CTR_SKETCH) as u64,
            );
            add_global_u64(stats.add(STAT_EXACT_DISTANCES), *ctr.add(CTR_EXACT) as u64);
            add_global_u64(stats.add(STAT_SEEDED_QUERIES), seeded as u64);
            add_global_u64(
                stats.add(STAT_ROW_ENTRIES),
                *ctr.add(CTR_ROW_ENTRIES) as u64,
            );
        }
    }
}

/// `keys[(v * copies + c) * spacings + s]` and `dists[..]`: the fragment key and
/// centre distance of vector `v` (projections `z`, `n x width`) in copy `c` at
/// spacing `s`. One thread per (vector, copy, spacing).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fragment_keys(
    index: *const IndexView,
    z: *const f32,
    n: u32,
    keys: *mut u64,
    dists: *mut f32,
) {
    // SAFETY: the host sizes keys/dists as n * copies * spacings.
    unsafe {
        let ix = *index;
        let per_vector = ix.copies * ix.spacings;
        let g = bid() as u64 * T as u64 + tid() as u64;
        if g >= n as u64 * per_vector as u64 {
            return;
        }
        let v = (g / per_vector as u64) as u32;
        let rest = (g % per_vector as u64) as u32;
        let (c, s) = (rest / ix.spacings, rest % ix.spacings);
        let cd = 8 * ix.blocks;
        let zc = z.add(v as usize * ix.width as usize + (c * cd) as usize);
        let shift = (ix.shifts as *const f32).add((c * cd) as usize);
        let inv = *(ix.inv_spacings as *const f32).add(s as usize);
        let (k, d) = fragment_key_of(zc, shift, inv, ix.blocks);
        *keys.add(g as usize) = k;
        *dists.add(g as usize) = d;
    }
}
