//! The GPU sort builder: one copy's fragments, member ripples and key tables,
//! spacing by spacing, from that copy's projected coordinates in device
//! memory. The same steps as the CPU builder ([`crate::ripples`]): key every
//! vector, sort by (key, centre distance, id), cut the sorted ids into
//! fragments, keep the first `l` members of each, complete short fragments
//! from the coarser spacing, and insert the keys into an open-addressing
//! table sized by the index's own rule. The kernels and their launchers are
//! `octex_kernels::{BuilderKernels, GpuSort}`; this module owns the buffers
//! and the order of the launches. [`crate::gpu_ripples`] replaces the member
//! ripples by the paper's nearest-to-centre lists before they are fetched.

use std::sync::Arc;
use std::time::Instant;

use octex_index::table::table_capacity;
use octex_kernels::builder::{Segments, TakenFragments};
use octex_kernels::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};
use octex_kernels::layout::{RippleLevel, SORT_TILE};
use octex_kernels::pinned::Fetcher;
use octex_kernels::sort::KeyWord;
use octex_kernels::{device_address, BuilderKernels, Gpu, GpuError, GpuSort};

/// One (copy, spacing) table's content, as the CPU builder returns it, plus
/// its key table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelRipples {
    /// Stored fragments' keys, in key order (the fragment ordinals).
    pub keys: Vec<u64>,
    /// `keys.len() x l` ids, nearest to the centre first, padded with `PAD_ID`.
    pub ripples: Vec<u32>,
    /// Each stored fragment's member nearest to its centre.
    pub anchors: Vec<u32>,
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

    /// The addresses `complete_short` reads.
    fn view(&self, s: &CudaStream) -> RippleLevel {
        RippleLevel {
            perm: device_address(&self.perm, s),
            frag_start: device_address(&self.frag_start, s),
            frag_size: device_address(&self.frag_size, s),
            ripples: device_address(&self.ripples, s),
            vec_ord: device_address(&self.vec_ord, s),
        }
    }
}

/// Per-vector and per-fragment scratch of one spacing.
struct Scratch {
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
}

/// Builds the ripples of one copy at a time for `n` vectors (device memory:
/// [`GpuRippleBuilder::device_bytes`], about `(140 + 8 l) n` bytes).
pub struct GpuRippleBuilder {
    stream: Arc<CudaStream>,
    n: usize,
    l: usize,
    sort: GpuSort,
    kernels: BuilderKernels,
    scratch: Scratch,
    levels: [Level; 2],
    fetcher: Fetcher,
    /// Seconds per step over all copies when profiling (see [`Self::profile`]).
    stages: Option<(Instant, Vec<(&'static str, f64)>)>,
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
        let sort = 12 * n + 4 * 256 * n.div_ceil(SORT_TILE as usize);
        own + 2 * level + sort
    }

    /// Buffers for `n` vectors and ripples of `list_len` ids.
    pub fn new(gpu: &Gpu, n: usize, list_len: usize) -> Result<Self, GpuError> {
        if n == 0 || n >= Self::MAX_VECTORS || list_len == 0 || list_len > Self::MAX_LIST_LEN {
            return Err(GpuError::Unsupported(format!(
                "GPU ripples need 0 < n < 2^30 and 0 < list_len <= 1024 (n = {n}, l = {list_len})"
            )));
        }
        let cap = table_capacity(n);
        Ok(Self {
            stream: gpu.stream().clone(),
            n,
            l: list_len,
            sort: GpuSort::new(gpu, n)?,
            kernels: BuilderKernels::new(gpu)?,
            scratch: Scratch {
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
            },
            levels: [Level::new(gpu, n, list_len)?, Level::new(gpu, n, list_len)?],
            stages: None,
            fetcher: Fetcher::new(gpu)?,
        })
    }

    /// Time every step (synchronising after each, which costs a little
    /// overlap); [`Self::profile`] returns the seconds per step.
    pub fn set_profiling(&mut self, on: bool) {
        self.stages = on.then(|| (Instant::now(), Vec::new()));
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
            *t = Instant::now();
            match acc.iter_mut().find(|a| a.0 == name) {
                Some(a) => a.1 += secs,
                None => acc.push((name, secs)),
            }
        }
        Ok(())
    }

    /// Sort the ids of level `cur` by key (and centre distance, then id, when
    /// `by_distance`), then cut them into fragments: `heads` (scanned) and
    /// `starts` (`F + 1` values). Returns `F`.
    fn sort_and_cut(&mut self, g: &Gpu, cur: usize, by_distance: bool) -> Result<usize, GpuError> {
        let n = self.n;
        let sc = &mut self.scratch;
        let key_words = [KeyWord::U64Low(&sc.keys), KeyWord::U64High(&sc.keys)];
        let all_words = [KeyWord::U32(&sc.dists), key_words[0], key_words[1]];
        let words: &[KeyWord] = if by_distance { &all_words } else { &key_words };
        let perm = &mut self.levels[cur].perm;
        self.sort.sort_ids(perm, n, words)?;
        self.kernels
            .segment_heads(g, perm, &sc.keys, &mut sc.heads)?;
        self.sort.scan(&mut sc.heads, n)?;
        let fragments = self.sort.read(&sc.heads, n)? as usize;
        self.kernels
            .segment_starts(g, perm, &sc.keys, &sc.heads, &mut sc.starts)?;
        Ok(fragments)
    }

    /// The sizes of the populated fragments of the projected vectors `z`
    /// (`n x 8 blocks`) at one spacing (what the spacing choice probes).
    pub fn fragment_sizes(
        &mut self,
        g: &Gpu,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacing: f32,
    ) -> Result<Vec<u32>, GpuError> {
        let sc = &mut self.scratch;
        let inv = 1.0 / spacing;
        self.kernels.ripple_keys(
            g,
            z,
            blocks,
            shift,
            inv,
            &mut sc.keys,
            &mut sc.checks,
            &mut sc.dists,
        )?;
        let fragments = self.sort_and_cut(g, 0, false)?;
        let mut st = vec![0u32; fragments + 1];
        self.stream
            .memcpy_dtoh(&self.scratch.starts.slice(..fragments + 1), &mut st)?;
        Ok(st.windows(2).map(|w| w[1] - w[0]).collect())
    }

    /// The ripples of one copy at every spacing (finest first, as the index
    /// stores them): `z` is the copy's projection (`n x 8 blocks`), `shift`
    /// its `8 blocks` shifts, `spacings` ascending, `pmin` the smallest stored
    /// fragment.
    pub fn build_copy(
        &mut self,
        g: &Gpu,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacings: &[f32],
        pmin: usize,
    ) -> Result<Vec<LevelRipples>, GpuError> {
        let mut out = vec![LevelRipples::default(); spacings.len()];
        self.build_copy_with(g, z, blocks, shift, spacings, pmin, &mut |sp, level| {
            out[sp] = level.to_host()?;
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Self::build_copy`], handing each spacing's results to `sink` as they
    /// are ready (coarsest spacing first), to fetch straight into their
    /// destination.
    #[allow(clippy::too_many_arguments)]
    pub fn build_copy_with(
        &mut self,
        g: &Gpu,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacings: &[f32],
        pmin: usize,
        sink: &mut dyn FnMut(usize, &mut LevelOut) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (n, l) = (self.n, self.l);
        assert!(z.len() >= n * 8 * blocks && shift.len() >= 8 * blocks);
        let s = self.stream.clone();
        let mut parent: Option<usize> = None;
        for sp in (0..spacings.len()).rev() {
            let cur = parent.map_or(0, |p| 1 - p);
            let sc = &mut self.scratch;
            let k = &self.kernels;
            let inv = 1.0f32 / spacings[sp];
            k.ripple_keys(
                g,
                z,
                blocks,
                shift,
                inv,
                &mut sc.keys,
                &mut sc.checks,
                &mut sc.dists,
            )?;
            self.stage("keys")?;
            let fragments = self.sort_and_cut(g, cur, true)?;
            self.stage("sort_cut")?;
            let (sc, k) = (&mut self.scratch, &self.kernels);
            let lv = &mut self.levels[cur];
            let seg = Segments {
                perm: &lv.perm,
                keys: &sc.keys,
                heads: &sc.heads,
                starts: &sc.starts,
                fragments,
            };
            s.memset_zeros(&mut sc.bad.slice_mut(..fragments.max(1)))?;
            s.memset_zeros(&mut sc.stats)?;
            k.segment_collisions(g, seg, &sc.checks, &mut sc.bad)?;
            k.fragment_keep(g, seg, pmin, &sc.bad, &mut sc.keep, &mut sc.stats)?;
            self.sort.scan(&mut sc.keep, fragments)?;
            let stored = self.sort.read(&sc.keep, fragments)? as usize;
            let taken = TakenFragments {
                keys: &mut sc.frag_keys,
                start: &mut lv.frag_start,
                size: &mut lv.frag_size,
                ripples: &mut lv.ripples,
            };
            k.ripple_take(
                g,
                seg,
                pmin,
                &sc.bad,
                &sc.keep,
                l,
                taken,
                &mut sc.short_list,
                &mut sc.stats,
            )?;
            k.vector_fragments(g, seg, &sc.bad, pmin, &sc.keep, &mut lv.vec_ord)?;
            self.stage("segments")?;
            let (sc, k) = (&mut self.scratch, &self.kernels);
            let [a, b] = &mut self.levels;
            let (lv, pv) = if cur == 0 { (a, b) } else { (b, a) };
            let mut st = [0u32; 2];
            s.memcpy_dtoh(&sc.stats, &mut st)?;
            let (collisions, short) = (st[0] as usize, st[1] as usize);
            if short > 0 {
                let this = lv.view(&s);
                let parent_view = match parent {
                    Some(_) => pv.view(&s),
                    None => RippleLevel::default(),
                };
                // SAFETY: both levels' buffers are sized for the n vectors of
                // z and ripples of l; short_list holds `short` stored ordinals.
                unsafe {
                    k.complete_short(
                        g,
                        z,
                        blocks,
                        shift,
                        spacings[sp],
                        l,
                        (&sc.short_list, short),
                        this,
                        parent_view,
                    )
                }?;
            }
            self.stage("complete")?;
            let cap = table_capacity(stored);
            if cap > 0 {
                let sc = &mut self.scratch;
                let (mut sk, mut si) =
                    (sc.slot_keys.slice_mut(..cap), sc.slot_ids.slice_mut(..cap));
                // Free slots: EMPTY_KEY and ordinal u32::MAX, as the CPU's tables.
                self.sort.fill_ones(&mut sk)?;
                self.sort.fill_ones(&mut si)?;
                self.kernels
                    .table_insert(g, &sc.frag_keys, stored, &mut sk, &mut si)?;
            }
            self.stage("table")?;
            let (sc, lv) = (&self.scratch, &mut self.levels[cur]);
            let mut level = LevelOut {
                stored,
                capacity: cap,
                short,
                collisions,
                keys: sc.frag_keys.slice(..stored),
                perm: lv.perm.slice(..),
                frag_start: lv.frag_start.slice(..stored),
                ripples: lv.ripples.slice_mut(..stored * l),
                slot_keys: sc.slot_keys.slice(..cap),
                slot_ids: sc.slot_ids.slice(..cap),
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
            anchors: vec![0; self.stored],
            slot_keys: vec![0; self.capacity],
            slot_ids: vec![0; self.capacity],
            short: self.short,
            collisions: self.collisions,
        };
        self.fetch_keys(&mut r.keys)?;
        self.fetch_ripples(&mut r.ripples)?;
        self.fetch_anchors(&mut r.anchors)?;
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

    /// A member of each stored fragment, its nearest to the centre
    /// (`stored` ids, `perm[frag_start[f]]`), into `dst`: the anchors the
    /// ripples through the rows decode centres from.
    pub fn fetch_anchors(&mut self, dst: &mut [u32]) -> Result<(), GpuError> {
        let mut starts = vec![0u32; self.frag_start.len()];
        let mut perm = vec![0u32; self.perm.len()];
        self.fetcher
            .fetch(&self.frag_start, &mut starts, self.stream)?;
        self.fetcher.fetch(&self.perm, &mut perm, self.stream)?;
        for (a, &s) in dst.iter_mut().zip(&starts) {
            *a = perm[s as usize];
        }
        Ok(())
    }

    /// The key table's slots (`capacity` keys and ordinals).
    pub fn fetch_table(&mut self, keys: &mut [u64], ids: &mut [u32]) -> Result<(), GpuError> {
        self.fetcher.fetch(&self.slot_keys, keys, self.stream)?;
        self.fetcher.fetch(&self.slot_ids, ids, self.stream)
    }
}
