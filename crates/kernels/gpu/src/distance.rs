//! The two distances of the wave search, per vector: the sketch estimate
//! (an integer dot product of the query's `i16` codes with the vector's int8
//! row, [`crate::sketch`]) by one thread, and the exact squared L2 distance to
//! the stored vector (f16 or f32) by a group of lanes sized to the row.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`].

use crate::layout::IndexView;
use crate::prims::*;
use crate::sketch::{QueryScale, centre_estimate, estimate};

/// 16-byte chunks of a sketch row loaded before the first is used (96
/// bytes); wider rows are read in further groups of this many.
const SKETCH_CHUNKS: usize = 6;

/// Sketch distance estimate of vector `id` ([`crate::sketch::estimate`]):
/// its row norm minus the query step times the integer dot product of the
/// query's `i16` codes with the row; with a residual sketch
/// ([`crate::sketch::centre_estimate`]) the term and step of its centre from
/// `centres` (the query's table in shared memory). Rows up to 96 bytes are
/// one group whose loads are all issued before the first is used; wider
/// rows continue in further groups.
#[inline(always)]
pub(crate) unsafe fn sketch_distance(
    ix: &IndexView,
    codes: *const u32,
    scale: QueryScale,
    centres: *const f32,
    id: u32,
) -> f32 {
    let w = ix.sketch_width as usize;
    // SAFETY: id < n; rows are w bytes, w a multiple of 16, the section
    // 64-aligned; codes hold w i16 values (w / 2 words), 16-aligned; the
    // norms hold n values.
    unsafe {
        let norm = load_f32_nc((ix.sketch_norms as *const f32).add(id as usize));
        let row = (ix.sketch as *const u8).add(id as usize * w);
        let mut dot = sketch_group(row, codes, 0, w, 0);
        let mut group = 16 * SKETCH_CHUNKS;
        while group < w {
            dot = sketch_group(row, codes, group, w, dot);
            group += 16 * SKETCH_CHUNKS;
        }
        if ix.sketch_centre_count > 0 {
            // SAFETY: ids hold n values below the count; the table holds
            // two values per centre.
            let c = *(ix.sketch_centre_ids as *const u16).add(id as usize) as usize;
            centre_estimate(norm, *centres.add(2 * c), *centres.add(2 * c + 1), dot)
        } else {
            estimate(norm, scale, dot)
        }
    }
}

/// `dot` plus the products of bytes `group .. min(group + 96, w)` of a
/// sketch row with the query's codes: per 4 bytes, two `dp2a`s. The six
/// chunks are written out one by one, so the loaded words stay in registers
/// (a loop over an array of them was not unrolled and went to local memory).
///
/// # Safety
/// `row` holds `w` bytes, `codes` `w` `i16`s, 16-byte aligned.
#[inline(always)]
unsafe fn sketch_group(row: *const u8, codes: *const u32, group: usize, w: usize, dot: i32) -> i32 {
    const _: () = assert!(SKETCH_CHUNKS == 6);
    // SAFETY: the caller's contract; chunks past w are neither read nor summed.
    unsafe {
        let load = |c: usize| {
            if group + 16 * c < w {
                load16_nc(row.add(group + 16 * c))
            } else {
                [0u32; 4]
            }
        };
        let (w0, w1, w2, w3, w4, w5) = (load(0), load(1), load(2), load(3), load(4), load(5));
        // Two partial sums break the chain of dependent dp2a's.
        let mut part = [dot, 0];
        let mut add = |c: usize, words: [u32; 4]| {
            if group + 16 * c < w {
                // Codes of bytes j .. j + 16: 8 words of two i16 each.
                let q = codes.add((group + 16 * c) / 2);
                let (lo, hi) = (load16_shared(q), load16_shared(q.add(4)));
                let qw = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]];
                for (wi, word) in words.iter().enumerate() {
                    let p = &mut part[wi & 1];
                    *p = dp2a::<false>(qw[2 * wi], *word, *p);
                    *p = dp2a::<true>(qw[2 * wi + 1], *word, *p);
                }
            }
        };
        add(0, w0);
        add(1, w1);
        add(2, w2);
        add(3, w3);
        add(4, w4);
        add(5, w5);
        part[0] + part[1]
    }
}

/// Loads each lane of a group issues before it uses the first (one round
/// trip for a row of up to `32 * EXACT_LOADS` words).
const EXACT_LOADS: usize = 4;

/// Lanes that compute one exact distance together: the fewest (a power of
/// two, at most a warp) whose [`EXACT_LOADS`] loads per lane cover a row, so
/// a warp reranks `32 / lanes` candidates at once. Rows are read 16 bytes per
/// load (8 halves or 4 floats) where their length allows it, else 4 bytes
/// (halves of an even dimension), else one value per lane of a whole warp.
/// Depends on the index only, so it is the same in every build and block.
#[inline(always)]
pub(crate) fn exact_group_lanes(ix: &IndexView) -> u32 {
    let dim = ix.dim;
    let words = if ix.vectors_f16 != 0 {
        if dim % 8 == 0 {
            dim / 8
        } else if dim % 2 == 0 {
            dim / 2
        } else {
            return 32;
        }
    } else if dim % 4 == 0 {
        dim / 4
    } else {
        return 32;
    };
    words
        .div_ceil(EXACT_LOADS as u32)
        .next_power_of_two()
        .min(32)
}

/// Exact squared L2 distance of vector `id` to the shared-memory query, by
/// the `lanes` lanes of one group ([`exact_group_lanes`]; `lane` is this
/// lane's place in it). Every lane of the warp calls it (the sum shuffles
/// across the warp); lanes with `valid` false read nothing, and every lane of
/// a group returns its group's sum.
#[inline(always)]
pub(crate) unsafe fn exact_distance(
    ix: &IndexView,
    query: *const f32,
    id: u32,
    valid: bool,
    lane: u32,
    lanes: u32,
) -> f32 {
    let dim = ix.dim as usize;
    let (lane, lanes) = (lane as usize, lanes as usize);
    let mut acc = 0.0f32;
    // SAFETY: id < n when valid; every index below is < dim; the 16- and
    // 4-byte loads are aligned because the section is 64-aligned and the row
    // length in bytes is a multiple of the load width whenever that path is
    // taken.
    unsafe {
        if !valid {
            // No candidate: read nothing, still join the group's sum.
        } else if ix.vectors_f16 != 0 {
            let v = (ix.vectors as *const u16).add(id as usize * dim);
            if dim % 8 == 0 {
                let chunks = dim / 8;
                let mut first = lane;
                while first < chunks {
                    let load = |k: usize| {
                        let c = first + lanes * k;
                        if c < chunks {
                            load16_nc(v.add(8 * c) as *const u8)
                        } else {
                            [0u32; 4]
                        }
                    };
                    let (w0, w1, w2, w3) = (load(0), load(1), load(2), load(3));
                    let mut add = |k: usize, words: [u32; 4]| {
                        let c = first + lanes * k;
                        if c < chunks {
                            for (wi, word) in words.iter().enumerate() {
                                for h in 0..2 {
                                    let x = f16_to_f32((*word >> (16 * h)) as u16);
                                    let d = *query.add(8 * c + 2 * wi + h) - x;
                                    acc += d * d;
                                }
                            }
                        }
                    };
                    add(0, w0);
                    add(1, w1);
                    add(2, w2);
                    add(3, w3);
                    first += EXACT_LOADS * lanes;
                }
            } else if dim % 2 == 0 {
                let v32 = v as *const u32;
                let words = dim / 2;
                let mut first = lane;
                while first < words {
                    let load = |k: usize| {
                        let c = first + lanes * k;
                        if c < words { *v32.add(c) } else { 0 }
                    };
                    let (w0, w1, w2, w3) = (load(0), load(1), load(2), load(3));
                    let mut add = |k: usize, word: u32| {
                        let c = first + lanes * k;
                        if c < words {
                            for h in 0..2 {
                                let d =
                                    *query.add(2 * c + h) - f16_to_f32((word >> (16 * h)) as u16);
                                acc += d * d;
                            }
                        }
                    };
                    add(0, w0);
                    add(1, w1);
                    add(2, w2);
                    add(3, w3);
                    first += EXACT_LOADS * lanes;
                }
            } else {
                let mut j = lane;
                while j < dim {
                    let d = *query.add(j) - f16_to_f32(*v.add(j));
                    acc += d * d;
                    j += lanes;
                }
            }
        } else {
            let v = (ix.vectors as *const f32).add(id as usize * dim);
            if dim % 4 == 0 {
                // As for halves: four loads per lane in flight.
                let chunks = dim / 4;
                let mut first = lane;
                while first < chunks {
                    let load = |k: usize| {
                        let c = first + lanes * k;
                        if c < chunks {
                            load16_nc(v.add(4 * c) as *const u8)
                        } else {
                            [0u32; 4]
                        }
                    };
                    let (w0, w1, w2, w3) = (load(0), load(1), load(2), load(3));
                    let mut add = |k: usize, words: [u32; 4]| {
                        let c = first + lanes * k;
                        if c < chunks {
                            for (i, word) in words.iter().enumerate() {
                                let d = *query.add(4 * c + i) - f32::from_bits(*word);
                                acc += d * d;
                            }
                        }
                    };
                    add(0, w0);
                    add(1, w1);
                    add(2, w2);
                    add(3, w3);
                    first += EXACT_LOADS * lanes;
                }
            } else {
                let mut j = lane;
                while j < dim {
                    let d = *query.add(j) - *v.add(j);
                    acc += d * d;
                    j += lanes;
                }
            }
        }
        group_sum(acc, lanes as u32)
    }
}
