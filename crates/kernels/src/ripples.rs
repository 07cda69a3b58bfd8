//! Host side of the GPU ripple builder (`gpu/src/build.rs`): the fragment
//! ripples and key tables of one copy, spacing by spacing, from that copy's
//! projected coordinates in device memory. The same steps as the CPU builder
//! (`octex-build`'s `ripples`): key every vector, sort by (key, centre
//! distance, id), cut the sorted ids into fragments, keep the first `l`
//! members of each, complete short fragments from the coarser spacing, and
//! insert the keys into an open-addressing table.

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, PushKernelArg,
};

use crate::layout::{RippleLevel, PARENT_CANDIDATES};
use crate::pinned::Fetcher;
use crate::sort::{addr, GpuSort, KeyWord};
use crate::{blocks_for, cfg, Gpu, GpuError};

/// One (copy, spacing) table's content, as the CPU builder returns it, plus
/// its key table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelRipples {
    /// Stored fragments' keys, in key order (the fragment ordinals).
    pub keys: Vec<u64>,
    /// `keys.len() x l` ids, nearest to the centre first, padded with `PAD_ID`.
    pub ripples: Vec<u32>,
    /// Open-addressing slots (`EMPTY_KEY` when free) and their ordinals.
    pub slot_keys: Vec<u64>,
    pub slot_ids: Vec<u32>,
    /// Fragments with fewer than `l` members (completed from the parent).
    pub short: usize,
    /// Keys dropped for collisions.
    pub collisions: usize,
}

/// One spacing's device buffers (kept while the next finer spacing is
/// completed from it).
struct Level {
    perm: CudaSlice<u32>,
    frag_start: CudaSlice<u32>,
    frag_size: CudaSlice<u32>,
    ripples: CudaSlice<u32>,
    vec_ord: CudaSlice<u32>,
}

impl Level {
    fn new(gpu: &Gpu, n: usize, l: usize) -> Result<Self, GpuError> {
        Ok(Self {
            perm: gpu.zeros(n)?,
            frag_start: gpu.zeros(n)?,
            frag_size: gpu.zeros(n)?,
            ripples: gpu.zeros(n * l)?,
            vec_ord: gpu.zeros(n)?,
        })
    }

    fn view(&self, s: &CudaStream) -> RippleLevel {
        RippleLevel {
            perm: addr(&self.perm, s),
            frag_start: addr(&self.frag_start, s),
            frag_size: addr(&self.frag_size, s),
            ripples: addr(&self.ripples, s),
            vec_ord: addr(&self.vec_ord, s),
        }
    }
}

/// Builds the ripples of one copy at a time for `n` vectors (device memory:
/// [`GpuRippleBuilder::device_bytes`], about `(140 + 8 l) n` bytes).
pub struct GpuRippleBuilder {
    stream: std::sync::Arc<CudaStream>,
    n: usize,
    l: usize,
    sort: GpuSort,
    f: Kernels,
    keys: CudaSlice<u64>,
    checks: CudaSlice<u64>,
    dists: CudaSlice<u32>,
    heads: CudaSlice<u32>,
    starts: CudaSlice<u32>,
    bad: CudaSlice<u32>,
    keep: CudaSlice<u32>,
    frag_keys: CudaSlice<u64>,
    short_list: CudaSlice<u32>,
    stats: CudaSlice<u32>,
    slot_keys: CudaSlice<u64>,
    slot_ids: CudaSlice<u32>,
    levels: [Level; 2],
    fetcher: Fetcher,
    /// Seconds per step over all copies when profiling (see [`Self::profile`]).
    stages: Option<(std::time::Instant, Vec<(&'static str, f64)>)>,
}

struct Kernels {
    ripple_keys: CudaFunction,
    segment_heads: CudaFunction,
    segment_starts: CudaFunction,
    segment_collisions: CudaFunction,
    fragment_keep: CudaFunction,
    ripple_take: CudaFunction,
    vector_fragments: CudaFunction,
    complete_short: CudaFunction,
    table_insert: CudaFunction,
    table_canonical: CudaFunction,
}

impl GpuRippleBuilder {
    /// Vectors one builder takes at most (ids times `list_len` stay in range).
    pub const MAX_VECTORS: usize = 1 << 30;
    /// Longest ripple one builder takes.
    pub const MAX_LIST_LEN: usize = 1024;

    /// Device bytes [`GpuRippleBuilder::new`] allocates for `n` vectors (its
    /// buffers, two spacings' levels, the sort's scratch and the slots).
    pub fn device_bytes(n: usize, list_len: usize) -> usize {
        let level = 4 * n * (4 + list_len);
        let own = n * (8 + 8 + 4 + 4 + 4 + 4 + 4 + 8 + 4) + 12 * table_capacity(n);
        let sort = 12 * n + 4 * 256 * n.div_ceil(crate::layout::SORT_TILE as usize);
        own + 2 * level + sort
    }

    /// Buffers for `n` vectors and ripples of `list_len` ids.
    pub fn new(gpu: &Gpu, n: usize, list_len: usize) -> Result<Self, GpuError> {
        if n == 0 || n >= Self::MAX_VECTORS || list_len == 0 || list_len > Self::MAX_LIST_LEN {
            return Err(GpuError::Unsupported(format!(
                "GPU ripples need 0 < n < 2^30 and 0 < list_len <= 1024 (n = {n}, l = {list_len})"
            )));
        }
        let f = |s: &str| gpu.function(s);
        let cap = table_capacity(n);
        Ok(Self {
            stream: gpu.stream().clone(),
            n,
            l: list_len,
            sort: GpuSort::new(gpu, n)?,
            f: Kernels {
                ripple_keys: f("ripple_keys")?,
                segment_heads: f("segment_heads")?,
                segment_starts: f("segment_starts")?,
                segment_collisions: f("segment_collisions")?,
                fragment_keep: f("fragment_keep")?,
                ripple_take: f("ripple_take")?,
                vector_fragments: f("vector_fragments")?,
                complete_short: f("complete_short")?,
                table_insert: f("table_insert")?,
                table_canonical: f("table_canonical")?,
            },
            keys: gpu.zeros(n)?,
            checks: gpu.zeros(n)?,
            dists: gpu.zeros(n)?,
            heads: gpu.zeros(n + 1)?,
            starts: gpu.zeros(n + 1)?,
            bad: gpu.zeros(n)?,
            keep: gpu.zeros(n + 1)?,
            frag_keys: gpu.zeros(n)?,
            short_list: gpu.zeros(n)?,
            stats: gpu.zeros(2)?,
            slot_keys: gpu.zeros(cap)?,
            slot_ids: gpu.zeros(cap)?,
            levels: [Level::new(gpu, n, list_len)?, Level::new(gpu, n, list_len)?],
            stages: None,
            fetcher: Fetcher::new(gpu)?,
        })
    }

    /// Time every step (synchronising after each, which costs a little
    /// overlap); [`Self::profile`] returns the seconds per step.
    pub fn set_profiling(&mut self, on: bool) {
        self.stages = on.then(|| (std::time::Instant::now(), Vec::new()));
    }

    /// Seconds per step so far (empty unless profiling).
    pub fn profile(&self) -> Vec<(&'static str, f64)> {
        self.stages
            .as_ref()
            .map(|s| s.1.clone())
            .unwrap_or_default()
    }

    fn stage(&mut self, name: &'static str) -> Result<(), GpuError> {
        if let Some((t, acc)) = &mut self.stages {
            self.stream.synchronize()?;
            let secs = t.elapsed().as_secs_f64();
            *t = std::time::Instant::now();
            match acc.iter_mut().find(|a| a.0 == name) {
                Some(a) => a.1 += secs,
                None => acc.push((name, secs)),
            }
        }
        Ok(())
    }

    /// Key, check word and centre distance of every vector (`z`, `shift`:
    /// device addresses of the copy's projection and shifts).
    fn key_vectors(
        &self,
        z: u64,
        blocks: usize,
        shift: u64,
        inv_spacing: f32,
    ) -> Result<(), GpuError> {
        let s = &self.stream;
        let (n32, b32) = (self.n as u32, blocks as u32);
        let (keys, checks, dists) = (
            addr(&self.keys, s),
            addr(&self.checks, s),
            addr(&self.dists, s),
        );
        let mut b = s.launch_builder(&self.f.ripple_keys);
        b.arg(&z)
            .arg(&n32)
            .arg(&b32)
            .arg(&shift)
            .arg(&inv_spacing)
            .arg(&keys)
            .arg(&checks)
            .arg(&dists);
        // SAFETY: z holds n x 8 blocks values, shift 8 blocks; outputs n each.
        unsafe { b.launch(cfg(blocks_for(self.n as u64)?, 0)) }?;
        Ok(())
    }

    /// Sort the ids of level `cur` by key (and centre distance, then id, when
    /// `by_distance`), then cut them into fragments: `heads` (scanned) and
    /// `starts` (`F + 1` values). Returns `F`.
    fn sort_and_cut(&mut self, cur: usize, by_distance: bool) -> Result<usize, GpuError> {
        let n = self.n;
        let key_words = [KeyWord::U64Low(&self.keys), KeyWord::U64High(&self.keys)];
        let all_words = [KeyWord::U32(&self.dists), key_words[0], key_words[1]];
        let words: &[KeyWord] = if by_distance { &all_words } else { &key_words };
        self.sort.sort_ids(&mut self.levels[cur].perm, n, words)?;
        let s = self.stream.clone();
        let (perm, keys) = (addr(&self.levels[cur].perm, &s), addr(&self.keys, &s));
        let (heads, starts) = (addr(&self.heads, &s), addr(&self.starts, &s));
        let (n32, grid_n) = (n as u32, blocks_for(n as u64)?);
        let mut b = s.launch_builder(&self.f.segment_heads);
        b.arg(&perm).arg(&n32).arg(&keys).arg(&heads);
        // SAFETY: perm, keys, heads hold n values.
        unsafe { b.launch(cfg(grid_n, 0)) }?;
        self.sort.scan(&mut self.heads, n)?;
        let fragments = self.sort.read(&self.heads, n)? as usize;
        let mut b = s.launch_builder(&self.f.segment_starts);
        b.arg(&perm).arg(&n32).arg(&keys).arg(&heads).arg(&starts);
        // SAFETY: starts holds n + 1 >= fragments + 1 values.
        unsafe { b.launch(cfg(grid_n, 0)) }?;
        Ok(fragments)
    }

    /// The sizes of the populated fragments of the projected vectors `z`
    /// (`n x 8 blocks`) at one spacing (what the spacing choice probes).
    pub fn fragment_sizes(
        &mut self,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacing: f32,
    ) -> Result<Vec<u32>, GpuError> {
        assert!(z.len() >= self.n * 8 * blocks && shift.len() >= 8 * blocks);
        let z_a = {
            let (p, _g) = z.device_ptr(&self.stream);
            p
        };
        self.key_vectors(z_a, blocks, addr(shift, &self.stream), 1.0 / spacing)?;
        let fragments = self.sort_and_cut(0, false)?;
        let mut st = vec![0u32; fragments + 1];
        self.stream
            .memcpy_dtoh(&self.starts.slice(..fragments + 1), &mut st)?;
        Ok(st.windows(2).map(|w| w[1] - w[0]).collect())
    }

    /// The ripples of one copy at every spacing (finest first, as the index
    /// stores them): `z` is the copy's projection (`n x 8 blocks`), `shift`
    /// its `8 blocks` shifts, `spacings` ascending, `pmin` the smallest stored
    /// fragment.
    pub fn build_copy(
        &mut self,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacings: &[f32],
        pmin: usize,
    ) -> Result<Vec<LevelRipples>, GpuError> {
        let mut out = vec![LevelRipples::default(); spacings.len()];
        self.build_copy_with(z, blocks, shift, spacings, pmin, &mut |sp, level| {
            out[sp] = level.to_host()?;
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Self::build_copy`], handing each spacing's results to `sink` as they
    /// are ready (coarsest spacing first), to fetch straight into their
    /// destination.
    pub fn build_copy_with(
        &mut self,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacings: &[f32],
        pmin: usize,
        sink: &mut dyn FnMut(usize, &mut LevelOut) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (n, l) = (self.n, self.l);
        let cd = 8 * blocks;
        assert!(z.len() >= n * cd && shift.len() >= cd);
        let s = self.stream.clone();
        let (n32, l32, b32, pmin32) = (n as u32, l as u32, blocks as u32, pmin.max(1) as u32);
        let grid_n = blocks_for(n as u64)?;
        let (z_a, shift_a) = {
            let (p, _g) = z.device_ptr(&s);
            (p, addr(shift, &s))
        };
        let (keys, checks) = (addr(&self.keys, &s), addr(&self.checks, &s));
        let (heads, starts, bad, keep) = (
            addr(&self.heads, &s),
            addr(&self.starts, &s),
            addr(&self.bad, &s),
            addr(&self.keep, &s),
        );
        let (frag_keys, short_list, stats) = (
            addr(&self.frag_keys, &s),
            addr(&self.short_list, &s),
            addr(&self.stats, &s),
        );
        let mut parent: Option<usize> = None;
        for sp in (0..spacings.len()).rev() {
            let cur = parent.map_or(0, |p| 1 - p);
            let inv = 1.0f32 / spacings[sp];
            self.key_vectors(z_a, blocks, shift_a, inv)?;
            self.stage("keys")?;
            let fragments = self.sort_and_cut(cur, true)?;
            self.stage("sort_cut")?;
            let lv = self.levels[cur].view(&s);
            let perm = lv.perm;
            let f32n = fragments as u32;
            let grid_f = blocks_for(fragments as u64)?;
            s.memset_zeros(&mut self.bad.slice_mut(..fragments.max(1)))?;
            s.memset_zeros(&mut self.stats)?;
            let mut b = s.launch_builder(&self.f.segment_collisions);
            b.arg(&perm)
                .arg(&n32)
                .arg(&keys)
                .arg(&checks)
                .arg(&heads)
                .arg(&starts)
                .arg(&bad);
            // SAFETY: bad holds one value per fragment.
            unsafe { b.launch(cfg(grid_n, 0)) }?;
            let mut b = s.launch_builder(&self.f.fragment_keep);
            b.arg(&starts)
                .arg(&f32n)
                .arg(&pmin32)
                .arg(&bad)
                .arg(&keep)
                .arg(&stats);
            // SAFETY: keep holds n + 1 values, stats 2.
            unsafe { b.launch(cfg(grid_f, 0)) }?;
            self.sort.scan(&mut self.keep, fragments)?;
            let stored = self.sort.read(&self.keep, fragments)? as usize;
            let mut b = s.launch_builder(&self.f.ripple_take);
            b.arg(&perm)
                .arg(&keys)
                .arg(&starts)
                .arg(&f32n)
                .arg(&pmin32)
                .arg(&bad)
                .arg(&keep)
                .arg(&l32)
                .arg(&frag_keys)
                .arg(&lv.frag_start)
                .arg(&lv.frag_size)
                .arg(&lv.ripples)
                .arg(&short_list)
                .arg(&stats);
            // SAFETY: per-fragment outputs hold n >= stored values (ripples n x l).
            unsafe { b.launch(cfg(grid_f, 0)) }?;
            let mut b = s.launch_builder(&self.f.vector_fragments);
            b.arg(&perm)
                .arg(&n32)
                .arg(&keys)
                .arg(&heads)
                .arg(&starts)
                .arg(&bad)
                .arg(&pmin32)
                .arg(&keep)
                .arg(&lv.vec_ord);
            // SAFETY: vec_ord holds n values.
            unsafe { b.launch(cfg(grid_n, 0)) }?;
            self.stage("segments")?;
            let mut st = [0u32; 2];
            s.memcpy_dtoh(&self.stats, &mut st)?;
            let (collisions, short) = (st[0] as usize, st[1] as usize);
            if short > 0 {
                let pv = parent.map(|p| self.levels[p].view(&s)).unwrap_or_default();
                let smem = 4 * (cd + 2 * (l + l.max(PARENT_CANDIDATES as usize)) + 1);
                let spacing = spacings[sp];
                let (level_arg, parent_arg) = (crate::Layout(lv), crate::Layout(pv));
                let mut b = s.launch_builder(&self.f.complete_short);
                b.arg(&z_a)
                    .arg(&b32)
                    .arg(&shift_a)
                    .arg(&inv)
                    .arg(&spacing)
                    .arg(&l32)
                    .arg(&short_list)
                    .arg(&level_arg)
                    .arg(&parent_arg);
                // SAFETY: short_list holds `short` stored ordinals; the levels'
                // buffers are sized for n vectors; shared memory as documented.
                unsafe { b.launch(cfg(short as u32, smem as u32)) }?;
            }
            self.stage("complete")?;
            let cap = table_capacity(stored);
            let (sk, si) = (addr(&self.slot_keys, &s), addr(&self.slot_ids, &s));
            if cap > 0 {
                // Free slots: EMPTY_KEY and ordinal u32::MAX, as the CPU's tables.
                self.sort.fill_words(sk, 2 * cap as u64, u32::MAX)?;
                self.sort.fill_words(si, cap as u64, u32::MAX)?;
                let mask = cap as u64 - 1;
                let st32 = stored as u32;
                let mut b = s.launch_builder(&self.f.table_insert);
                b.arg(&frag_keys).arg(&st32).arg(&sk).arg(&si).arg(&mask);
                // SAFETY: the slots hold cap >= 2 * stored values.
                unsafe { b.launch(cfg(blocks_for(stored as u64)?, 0)) }?;
                let mut b = s.launch_builder(&self.f.table_canonical);
                b.arg(&sk).arg(&si).arg(&mask);
                // SAFETY: as above.
                unsafe { b.launch(cfg(blocks_for(cap as u64)?, 0)) }?;
            }
            self.stage("table")?;
            let level_bufs = &mut self.levels[cur];
            let mut level = LevelOut {
                stored,
                capacity: cap,
                short,
                collisions,
                keys: self.frag_keys.slice(..stored),
                perm: level_bufs.perm.slice(..),
                frag_start: level_bufs.frag_start.slice(..stored),
                ripples: level_bufs.ripples.slice_mut(..stored * l),
                slot_keys: self.slot_keys.slice(..cap),
                slot_ids: self.slot_ids.slice(..cap),
                fetcher: &mut self.fetcher,
                stream: &s,
            };
            sink(sp, &mut level)?;
            self.stage("download")?;
            parent = Some(cur);
        }
        Ok(())
    }
}

/// Slots of a key table for `fragments` keys: the same rule as
/// `octex_index::table::table_capacity` (this crate sits below the index
/// crate; a test in `octex-build` checks that the two agree).
pub fn table_capacity(fragments: usize) -> usize {
    if fragments == 0 {
        0
    } else {
        (2 * fragments).next_power_of_two()
    }
}

/// The int8 sketch of `n` vectors from their principal coordinates (`pcs`,
/// `n x m`): coordinate `j < min(w, m)` times `inv_scales[j]`, rounded half
/// away from zero, clamped to ±127; zero beyond `m`. `out` holds `n x w`.
pub fn sketch_encode(
    gpu: &Gpu,
    pcs: &CudaView<f32>,
    (n, m, w): (usize, usize, usize),
    inv_scales: &CudaSlice<f32>,
    out: &mut CudaSlice<i8>,
) -> Result<(), GpuError> {
    assert!(pcs.len() >= n * m && inv_scales.len() >= w && out.len() >= n * w);
    let f = gpu.function("sketch_encode")?;
    let (n32, m32, w32) = (n as u32, m as u32, w as u32);
    let mut b = gpu.stream().launch_builder(&f);
    b.arg(pcs)
        .arg(&n32)
        .arg(&m32)
        .arg(&w32)
        .arg(inv_scales)
        .arg(out);
    // SAFETY: sizes asserted above.
    unsafe { b.launch(cfg(blocks_for((n * w) as u64)?, 0)) }?;
    Ok(())
}

/// One spacing's results in device memory, for [`GpuRippleBuilder::build_copy_with`]'s
/// sink to fetch.
pub struct LevelOut<'a> {
    /// Stored fragments.
    pub stored: usize,
    /// Slots of the key table.
    pub capacity: usize,
    /// Fragments with fewer than `l` members (completed from the parent).
    pub short: usize,
    /// Keys dropped for collisions.
    pub collisions: usize,
    keys: CudaView<'a, u64>,
    perm: CudaView<'a, u32>,
    frag_start: CudaView<'a, u32>,
    ripples: CudaViewMut<'a, u32>,
    slot_keys: CudaView<'a, u64>,
    slot_ids: CudaView<'a, u32>,
    fetcher: &'a mut Fetcher,
    stream: &'a CudaStream,
}

impl<'a> LevelOut<'a> {
    /// Ids in the ripples (`stored x l`).
    pub fn ripple_len(&self) -> usize {
        self.ripples.len()
    }

    /// Every vector sorted by (key, centre distance, id) at this spacing, and
    /// each stored fragment's first position in it (`stored` values): the
    /// first member of fragment `f` is `perm[frag_start[f]]`.
    pub fn members(&self) -> (&CudaView<'_, u32>, &CudaView<'_, u32>) {
        (&self.perm, &self.frag_start)
    }

    /// The ripples in device memory (`stored x l` ids, by ordinal), for a
    /// caller that replaces them (the nearest-to-centre rule) before fetching.
    pub fn ripples_mut(&mut self) -> &mut CudaViewMut<'a, u32> {
        &mut self.ripples
    }

    /// Everything of this spacing fetched to the host.
    pub fn to_host(&mut self) -> Result<LevelRipples, GpuError> {
        let mut r = LevelRipples {
            keys: vec![0; self.stored],
            ripples: vec![0; self.ripples.len()],
            slot_keys: vec![0; self.capacity],
            slot_ids: vec![0; self.capacity],
            short: self.short,
            collisions: self.collisions,
        };
        self.fetch_keys(&mut r.keys)?;
        self.fetch_ripples(&mut r.ripples)?;
        self.fetch_table(&mut r.slot_keys, &mut r.slot_ids)?;
        Ok(r)
    }

    /// The stored fragments' keys (`stored` values).
    pub fn fetch_keys(&mut self, dst: &mut [u64]) -> Result<(), GpuError> {
        self.fetcher.fetch(&self.keys, dst, self.stream)
    }

    /// The ripples (`stored x l` ids).
    pub fn fetch_ripples(&mut self, dst: &mut [u32]) -> Result<(), GpuError> {
        self.fetcher
            .fetch(&self.ripples.as_view(), dst, self.stream)
    }

    /// The key table's slots (`capacity` keys and ordinals).
    pub fn fetch_table(&mut self, keys: &mut [u64], ids: &mut [u32]) -> Result<(), GpuError> {
        self.fetcher.fetch(&self.slot_keys, keys, self.stream)?;
        self.fetcher.fetch(&self.slot_ids, ids, self.stream)
    }
}

/// `dst[i]` = `src[i]` rounded to f16 (to nearest even), as bits.
pub fn to_f16(gpu: &Gpu, src: &CudaView<f32>, dst: &mut CudaSlice<u16>) -> Result<(), GpuError> {
    assert!(dst.len() >= src.len());
    let f = gpu.function("to_f16")?;
    let n = src.len() as u64;
    let mut b = gpu.stream().launch_builder(&f);
    b.arg(src).arg(&n).arg(dst);
    // SAFETY: src has n values, dst at least n.
    unsafe { b.launch(cfg(blocks_for(n)?, 0)) }?;
    Ok(())
}
