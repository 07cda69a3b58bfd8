//! In-place insertion: new vectors enter a built index without a rebuild.
//!
//! Each new vector gets the next internal id and its rerank vector and
//! sketch row (coded with the index's scales and, for a residual sketch,
//! its nearest centre). In every copy and spacing where its fragment is
//! stored it enters the fragment's ripple at its place by distance to the
//! centre, the farthest entry dropping out, when it is nearer than that
//! entry. Its neighbour row is its `Lt` nearest among the index's search
//! results (the build's pass-2 search, or its deeper pass where a sample of
//! the batch finds less than the build asks of rows) and the other vectors
//! of its batch (exact). It then enters, as a reverse entry, the rows of its
//! first `k_s` neighbours: into the head in distance order where it is
//! nearer than the head's last entry, else at the head's end; the row's last
//! entry drops out. Key tables and spacings stay as built: a vector whose
//! fragment was not stored is reached through its rows.

use half::slice::HalfFloatSliceExt;
use octex_index::{table, Index, IndexParts, RerankVectors, PAD_ID};
use octex_lattice::CopyMap;
use octex_search::knn;
use octex_search::SearchParams;
use rayon::prelude::*;

use crate::check::ROW_CHECK_K;
use crate::params::{default_reverse_entries, ResolvedParams};
use crate::search_rows::{
    DEEP_PASS_BELOW, DEEP_PASS_START_POINTS, DEEP_PASS_WAVES, PASS2_START_POINTS, PASS2_WAVES,
};
use crate::{sketch, sketch_centres, BuildError};

/// New vectors whose searched neighbours are checked against exact ones
/// before a batch is inserted.
pub const INSERT_CHECK_SAMPLE: usize = 128;

/// Most new vectors inserted against one searchable form of the index; a
/// larger batch goes in parts, each searching the index with the parts
/// before it (the batch's exact neighbours are a product of its size
/// squared).
pub const INSERT_BATCH: usize = 8_192;

/// The row layout a built index was made with: `Lt`, the forward head and
/// the reverse-entry source depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertShape {
    pub row_len: usize,
    pub forward_head: usize,
    pub reverse_source: usize,
}

impl InsertShape {
    /// The shape in `parts`' build parameters (indexes written before they
    /// were recorded: half the row is head, the default reverse sources).
    pub fn of(parts: &IndexParts) -> Self {
        let row_len = parts.header.row_len as usize;
        match serde_json::from_str::<ResolvedParams>(&parts.header.build_params) {
            Ok(p) => Self {
                row_len,
                forward_head: p.forward_head.min(row_len),
                reverse_source: p.reverse_source.max(1),
            },
            Err(_) => Self {
                row_len,
                forward_head: row_len / 2,
                reverse_source: default_reverse_entries(row_len).max(1),
            },
        }
    }
}

/// Insert `stored` (`b x sdim`, already in the index's stored space) into
/// `parts` and return the index they make; `index` is `parts`' searchable
/// form. The new vectors take ids `n..n + b` in order.
pub fn insert_stored(
    index: octex_search::Index,
    mut parts: IndexParts,
    stored: &[f32],
) -> Result<octex_search::Index, BuildError> {
    let sdim = parts.header.dim as usize;
    let mut index = index;
    let chunks: Vec<&[f32]> = stored.chunks(INSERT_BATCH * sdim).collect();
    let Some((last, first)) = chunks.split_last() else {
        return Ok(index);
    };
    for chunk in first {
        insert_batch(&index, &mut parts, chunk)?;
        drop(index);
        index = octex_search::Index::new(Index::from_parts(parts.clone())?);
    }
    insert_batch(&index, &mut parts, last)?;
    drop(index);
    // The last batch's parts become the index without a copy.
    Ok(octex_search::Index::new(Index::from_parts(parts)?))
}

/// One batch of [`insert_stored`], into `parts` (searched through `index`).
fn insert_batch(
    index: &octex_search::Index,
    parts: &mut IndexParts,
    stored: &[f32],
) -> Result<(), BuildError> {
    let sdim = parts.header.dim as usize;
    let n0 = parts.header.n as usize;
    let b = stored.len() / sdim;
    if n0 + b >= PAD_ID as usize {
        return Err(BuildError::TooMany { n: n0 + b });
    }
    let shape = InsertShape::of(parts);
    let lt = shape.row_len;
    let t = std::time::Instant::now();
    let map = index.raw().copy_map();
    let pcs_new = principal(&map, stored);
    let pcs_old = principal_of_index(&map, &parts.vectors, n0);
    append_vectors(&mut parts.vectors, stored);
    append_sketch(&map, parts, &pcs_new);
    let t_pcs = t.elapsed().as_secs_f64();
    insert_into_ripples(&map, parts, &pcs_old, &pcs_new, n0);
    drop(pcs_old);
    let t_ripples = t.elapsed().as_secs_f64();

    // Candidates: the index's search (stored space, squared L2) and the
    // batch itself, exactly. The search is the build's pass 2, or its deeper
    // pass where pass 2 finds less than the build asks of its rows.
    let k = lt.min(n0).max(1);
    let search = |start_points: usize, waves: usize, queries: &[f32]| {
        let p = SearchParams {
            read_depth: parts.header.list_len as usize,
            start_points,
            waves,
            rerank: (2 * lt).max(k).min(n0).max(1),
            wave_rerank: false,
        };
        index
            .search_stored(queries, k, &p)
            .map_err(|source| BuildError::Search {
                stage: "inserting",
                source,
            })
    };
    // The batch's own rows first: where they hold a new vector's neighbours,
    // the index's search need not find them.
    let kb = lt.min(b.saturating_sub(1));
    let (bi, bd) = match kb {
        0 => (Vec::new(), Vec::new()),
        _ => knn::neighbour_rows(stored, sdim, kb, &|_| {}),
    };
    // Which pass, decided on a sample of the batch before the whole searches.
    let picks = crate::pca::sample_rows(b, INSERT_CHECK_SAMPLE, 0x125e);
    let sample: Vec<f32> = picks
        .iter()
        .flat_map(|&q| stored[q * sdim..(q + 1) * sdim].iter().copied())
        .collect();
    let probe = search(PASS2_START_POINTS, PASS2_WAVES, &sample)?;
    let batch = BatchRows {
        stored,
        ids: &bi,
        k: kb,
    };
    let recall = sample_recall(&parts.vectors, n0, &batch, &picks, &probe, sdim);
    let found = if recall < DEEP_PASS_BELOW {
        tracing::debug!(recall, "insertion searches take the deeper pass");
        search(DEEP_PASS_START_POINTS, DEEP_PASS_WAVES, stored)?
    } else {
        search(PASS2_START_POINTS, PASS2_WAVES, stored)?
    };
    let t_search = t.elapsed().as_secs_f64();
    let new_rows: Vec<Vec<(f32, u32)>> = (0..b)
        .into_par_iter()
        .map(|q| {
            let mut c: Vec<(f32, u32)> = Vec::with_capacity(k + kb);
            c.extend(
                found
                    .ids(q)
                    .iter()
                    .zip(found.distances(q))
                    .filter(|(&id, _)| id != PAD_ID)
                    .map(|(&id, &d)| (d, id)),
            );
            if kb > 0 {
                c.extend(
                    bi[q * kb..(q + 1) * kb]
                        .iter()
                        .zip(&bd[q * kb..(q + 1) * kb])
                        .filter(|(&id, _)| id != PAD_ID)
                        .map(|(&id, &d)| (d, n0 as u32 + id)),
                );
            }
            c.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            c.dedup_by_key(|e| e.1);
            c.truncate(lt);
            c
        })
        .collect();
    let t_rows = t.elapsed().as_secs_f64();
    for row in &new_rows {
        parts.rows.extend(
            row.iter()
                .map(|e| e.1)
                .chain(std::iter::repeat(PAD_ID))
                .take(lt),
        );
    }
    parts.header.n = (n0 + b) as u64;

    // Reverse entries: each new vector into the rows of its first k_s
    // neighbours, the nearest offers first.
    let mut offers: Vec<(u32, f32, u32)> = new_rows
        .iter()
        .enumerate()
        .flat_map(|(q, row)| {
            row.iter()
                .take(shape.reverse_source)
                .map(move |&(d, u)| (u, d, (n0 + q) as u32))
        })
        .collect();
    offers.par_sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    let groups: Vec<&[(u32, f32, u32)]> = offers.chunk_by(|a, b| a.0 == b.0).collect();
    let vectors = &parts.vectors;
    let rows = &parts.rows;
    let head = shape.forward_head.min(lt.saturating_sub(1));
    let updated: Vec<(u32, Vec<u32>)> = groups
        .par_iter()
        .map_init(
            || (vec![0f32; sdim], vec![0f32; sdim]),
            |(a, e), g| {
                let u = g[0].0;
                let mut row = rows[u as usize * lt..(u as usize + 1) * lt].to_vec();
                // Only the head's distances place an offer, and only those
                // from its end down to the offer's place are computed.
                stored_vector(vectors, sdim, u, a);
                let mut dist = vec![f32::NAN; head];
                let mut head_dist = |row: &[u32], j: usize, dist: &mut [f32]| {
                    if dist[j].is_nan() {
                        dist[j] = match row[j] {
                            PAD_ID => f32::INFINITY,
                            id => {
                                stored_vector(vectors, sdim, id, e);
                                knn::squared_l2(a, e)
                            }
                        };
                    }
                    dist[j]
                };
                for &(_, d, v) in g.iter() {
                    if row.contains(&v) {
                        continue;
                    }
                    let mut pos = head;
                    while pos > 0 && head_dist(&row, pos - 1, &mut dist) > d {
                        pos -= 1;
                    }
                    offer_at(&mut row, &mut dist, v, d, pos);
                }
                (u, row)
            },
        )
        .collect();
    for (u, row) in updated {
        parts.rows[u as usize * lt..(u as usize + 1) * lt].copy_from_slice(&row);
    }
    tracing::debug!(
        vectors = b,
        pcs_secs = t_pcs,
        ripple_secs = t_ripples - t_pcs,
        search_secs = t_search - t_ripples,
        rows_secs = t_rows - t_search,
        reverse_secs = t.elapsed().as_secs_f64() - t_rows,
        "inserted"
    );
    Ok(())
}

/// A batch being inserted: its stored vectors and its rows among
/// themselves (`k` each, batch positions).
struct BatchRows<'a> {
    stored: &'a [f32],
    ids: &'a [u32],
    k: usize,
}

/// Share of the [`ROW_CHECK_K`] exact nearest, among the `n` vectors of the
/// index and the batch (appended to `vectors` after them), of the batch's
/// vectors `picks` that their candidates hold: the search's results `found`
/// (one row per pick) and their rows in the batch.
fn sample_recall(
    vectors: &RerankVectors,
    n: usize,
    batch: &BatchRows,
    picks: &[usize],
    found: &octex_search::SearchResults,
    dim: usize,
) -> f64 {
    let b = batch.stored.len() / dim;
    let k = ROW_CHECK_K.min((n + b).saturating_sub(1));
    if k == 0 || picks.is_empty() {
        return 1.0;
    }
    let sample: Vec<f32> = picks
        .iter()
        .flat_map(|&q| batch.stored[q * dim..(q + 1) * dim].iter().copied())
        .collect();
    let row = |id: usize, out: &mut [f32]| stored_vector(vectors, dim, id as u32, out);
    let selves: Vec<usize> = picks.iter().map(|&q| n + q).collect();
    let (exact, _) = knn::exact_knn_of_rows(
        n + b,
        &row,
        &sample,
        dim,
        k,
        knn::KnnMetric::L2,
        knn::Exclude::Rows(&selves),
        &|_| {},
    );
    let hits: usize = picks
        .iter()
        .zip(exact.chunks_exact(k))
        .enumerate()
        .map(|(i, (&q, truth))| {
            let in_batch = &batch.ids[q * batch.k..(q + 1) * batch.k];
            truth
                .iter()
                .filter(|&&t| match (t as usize).checked_sub(n) {
                    None => found.ids(i).contains(&t),
                    Some(j) => in_batch.contains(&(j as u32)),
                })
                .count()
        })
        .sum();
    hits as f64 / (picks.len() * k) as f64
}

/// Put `v` (at distance `d`) at `pos` of a row whose head has the
/// distances `head_dist` (`NaN` where not computed): later entries move
/// down one place and the last drops out.
fn offer_at(row: &mut [u32], head_dist: &mut [f32], v: u32, d: f32, pos: usize) {
    let (lt, head) = (row.len(), head_dist.len());
    row.copy_within(pos..lt - 1, pos + 1);
    row[pos] = v;
    if pos < head {
        head_dist.copy_within(pos..head - 1, pos + 1);
        head_dist[pos] = d;
    }
}

/// Offer every new vector (principal coordinates `pcs_new`, `b x m`, ids
/// from `n0`) to the ripple of its fragment in every copy and spacing where
/// that fragment is stored: it takes its place by distance to the
/// fragment's centre, the farthest entry dropping out, when it is nearer
/// than that entry (or the ripple has room). `pcs_old` holds the principal
/// coordinates of the `n0` vectors before.
fn insert_into_ripples(
    map: &CopyMap,
    parts: &mut IndexParts,
    pcs_old: &[f32],
    pcs_new: &[f32],
    n0: usize,
) {
    let (m, cd, nsp) = (map.basis_dim, map.copy_dim(), map.spacings.len());
    let mc = map.rotation_dim().min(m);
    let l = parts.header.list_len as usize;
    let b = pcs_new.len() / m;
    let tables = &parts.tables;
    let (keys, slots) = (&parts.table_keys, &parts.table_slots);
    // Each copy's ripples are one run of the array (tables are copy-major).
    let mut chunks: Vec<&mut [u32]> = Vec::with_capacity(map.copies);
    let mut rest: &mut [u32] = &mut parts.ripples;
    for c in 0..map.copies {
        let end = match c + 1 < map.copies {
            true => tables[(c + 1) * nsp].ripple_base as usize * l,
            false => usize::MAX,
        };
        let start = tables[c * nsp].ripple_base as usize * l;
        let len = end.min(start + rest.len()) - start;
        let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(len);
        chunks.push(chunk);
        rest = tail;
    }
    let pcs_of = |id: u32| -> &[f32] {
        let i = id as usize;
        match i < n0 {
            true => &pcs_old[i * m..(i + 1) * m],
            false => &pcs_new[(i - n0) * m..(i - n0 + 1) * m],
        }
    };
    let total = n0 + b;
    let decode = octex_lattice::decoder::best_decode();
    chunks.into_par_iter().enumerate().for_each_init(
        || vec![u32::MAX; total],
        |slot, (c, chunk)| {
            let rot = crate::ripples::copy_rotation(map, c);
            let base = tables[c * nsp].ripple_base as usize;
            let mut z = vec![0f32; b * cd];
            octex_lattice::copymap::project_rows(pcs_new, m, &rot, &vec![0f32; cd], &mut z, false);
            // Projections of the ripple entries met so far (`slot[id]`: their
            // place in `cache`, in units of `cd`).
            let mut cache: Vec<f32> = Vec::new();
            let mut touched: Vec<u32> = Vec::new();
            let mut coords = [0i32; 64];
            let shift = &map.shifts[c * cd..(c + 1) * cd];
            for s in 0..nsp {
                let e = &tables[c * nsp + s];
                let (so, cap) = (e.slot_offset as usize, e.capacity as usize);
                let inv = 1.0f32 / map.spacings[s];
                for v in 0..b {
                    let d = decode(map, &z[v * cd..(v + 1) * cd], c, s, &mut coords[..cd]);
                    let key = octex_lattice::fragment_key(&coords[..cd]);
                    let Some(ord) = table::lookup(&keys[so..so + cap], &slots[so..so + cap], key)
                    else {
                        continue;
                    };
                    let at = (e.ripple_base as usize - base + ord as usize) * l;
                    let ripple = &mut chunk[at..at + l];
                    // The ripple is nearest first (padding last): the new
                    // vector's place by bisection.
                    let mut dist = |id: u32| -> f32 {
                        if id == PAD_ID {
                            return f32::INFINITY;
                        }
                        if slot[id as usize] == u32::MAX {
                            slot[id as usize] = (cache.len() / cd) as u32;
                            touched.push(id);
                            // Row by row of the rotation (its first `mc` rows
                            // are the copy's): `cd` independent sums.
                            let at = cache.len();
                            cache.resize(at + cd, 0.0);
                            let ze = &mut cache[at..at + cd];
                            for (t, &pt) in pcs_of(id)[..mc].iter().enumerate() {
                                ze.iter_mut()
                                    .zip(&rot[t * cd..(t + 1) * cd])
                                    .for_each(|(z, r)| *z += pt * r);
                            }
                        }
                        let at = slot[id as usize] as usize * cd;
                        (0..cd)
                            .map(|i| {
                                let y = cache[at + i] * inv + shift[i] - coords[i] as f32 * 0.5;
                                y * y
                            })
                            .sum()
                    };
                    let (mut lo, mut hi) = (0, l);
                    while lo < hi {
                        let mid = (lo + hi) / 2;
                        if dist(ripple[mid]) <= d {
                            lo = mid + 1;
                        } else {
                            hi = mid;
                        }
                    }
                    let pos = lo;
                    if pos < l {
                        ripple.copy_within(pos..l - 1, pos + 1);
                        ripple[pos] = (n0 + v) as u32;
                    }
                }
            }
            for id in touched {
                slot[id as usize] = u32::MAX;
            }
        },
    );
}

/// Vector `id` of the rerank vectors, as f32.
fn stored_vector(vectors: &RerankVectors, sdim: usize, id: u32, out: &mut [f32]) {
    let at = id as usize * sdim;
    match vectors {
        RerankVectors::F32(v) => out.copy_from_slice(&v[at..at + sdim]),
        RerankVectors::F16(v) => v[at..at + sdim].convert_to_f32_slice(out),
    }
}

/// Append `stored` to the rerank vectors in their precision.
fn append_vectors(vectors: &mut RerankVectors, stored: &[f32]) {
    match vectors {
        RerankVectors::F32(v) => v.extend_from_slice(stored),
        RerankVectors::F16(v) => v.extend(stored.iter().map(|&x| half::f16::from_f32(x))),
    }
}

/// Principal coordinates (`b x m`) of stored rows.
fn principal(map: &CopyMap, stored: &[f32]) -> Vec<f32> {
    let mut pcs = vec![0f32; stored.len() / map.dim * map.basis_dim];
    map.principal(stored, &mut pcs, true);
    pcs
}

/// Principal coordinates of the first `n` rerank vectors.
fn principal_of_index(map: &CopyMap, vectors: &RerankVectors, n: usize) -> Vec<f32> {
    const CHUNK: usize = 4096;
    let (d, m) = (map.dim, map.basis_dim);
    let mut pcs = vec![0f32; n * m];
    pcs.par_chunks_mut(CHUNK * m)
        .enumerate()
        .for_each_init(Vec::new, |rows, (i, out)| {
            let r0 = i * CHUNK;
            let rn = out.len() / m;
            rows.resize(rn * d, 0f32);
            match vectors {
                RerankVectors::F32(v) => rows.copy_from_slice(&v[r0 * d..(r0 + rn) * d]),
                RerankVectors::F16(v) => v[r0 * d..(r0 + rn) * d].convert_to_f32_slice(rows),
            }
            map.principal(rows, out, false);
        });
    pcs
}

/// Append the sketch rows (and residual centres) of vectors with principal
/// coordinates `pcs` to `parts`, by the scales and centres it was built with.
fn append_sketch(map: &CopyMap, parts: &mut IndexParts, pcs: &[f32]) {
    let (m, w) = (map.basis_dim, parts.header.sketch_width as usize);
    let coords: Vec<f32> = pcs
        .chunks_exact(m)
        .flat_map(|r| (0..w).map(move |j| if j < m { r[j] } else { 0.0 }))
        .collect();
    if parts.sketch_centre_scales.is_empty() {
        parts
            .sketch
            .extend(sketch::encode(&coords, &parts.sketch_scales));
    } else {
        let centres = sketch_centres::Centres {
            centres: parts.sketch_centres.clone(),
            scales: parts.sketch_scales.clone(),
            centre_scales: parts.sketch_centre_scales.clone(),
        };
        let ids = sketch_centres::assign(&coords, w, &centres.centres);
        parts
            .sketch
            .extend(sketch_centres::encode(&coords, w, &centres, &ids));
        parts.sketch_centre_ids.extend(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offer_takes_its_place_and_the_last_entry_drops_out() {
        let mut row = vec![1, 2, 3, 4, 5];
        let mut head = vec![1.0, 2.0, 3.0];
        offer_at(&mut row, &mut head, 9, 1.5, 1);
        assert_eq!(row, [1, 9, 2, 3, 4]);
        assert_eq!(head, [1.0, 1.5, 2.0]);
        // At the head's end: the head's distances stay.
        offer_at(&mut row, &mut head, 8, 7.0, 3);
        assert_eq!(row, [1, 9, 2, 8, 3]);
        assert_eq!(head, [1.0, 1.5, 2.0]);
    }
}
