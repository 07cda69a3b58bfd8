//! Typed launchers of the builder's kernels (`gpu/src/build.rs`): fragment
//! keys of a copy, the segment kernels that cut sorted ids into fragments and
//! take their ripples, completion of short fragments, key-table inserts, the
//! int8 sketch and f16 rounding. Each launcher checks the sizes its kernel
//! relies on and launches once; the algorithm that strings them together
//! (one copy's ripples, spacing by spacing) lives in `octex-build`
//! (`gpu_sort_builder`).

use cudarc::driver::{CudaFunction, CudaSlice, CudaView, CudaViewMut, PushKernelArg};

use crate::layout::{RippleLevel, PARENT_CANDIDATES};
use crate::{blocks_for, cfg, Gpu, GpuError, Layout};

/// The builder's kernels, loaded once.
pub struct BuilderKernels {
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

/// Where `ripple_take` writes each stored fragment: its key, its first
/// sorted position, its member count and its first `l` members.
pub struct TakenFragments<'a> {
    pub keys: &'a mut CudaSlice<u64>,
    pub start: &'a mut CudaSlice<u32>,
    pub size: &'a mut CudaSlice<u32>,
    pub ripples: &'a mut CudaSlice<u32>,
}

/// One spacing's sorted vectors and their cut into fragments, as the segment
/// kernels read them: `perm` (`n` ids sorted by key), `keys` and `checks`
/// (`n`, by id), `heads` (`n + 1`, scanned: fragment ordinal of each sorted
/// position) and `starts` (`fragments + 1` first positions).
#[derive(Clone, Copy)]
pub struct Segments<'a> {
    pub perm: &'a CudaSlice<u32>,
    pub keys: &'a CudaSlice<u64>,
    pub heads: &'a CudaSlice<u32>,
    pub starts: &'a CudaSlice<u32>,
    pub fragments: usize,
}

impl Segments<'_> {
    fn n(&self) -> usize {
        self.perm.len()
    }

    fn check(&self) {
        let n = self.n();
        assert!(self.keys.len() >= n && self.heads.len() > n && self.starts.len() > self.fragments);
    }
}

impl BuilderKernels {
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let f = |s: &str| gpu.function(s);
        Ok(Self {
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
        })
    }

    /// Key, check word and centre distance of each of the `n` vectors of `z`
    /// (`n x 8 blocks`, shifted by `shift`) at `1 / inv_spacing`.
    #[allow(clippy::too_many_arguments)]
    pub fn ripple_keys(
        &self,
        gpu: &Gpu,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        inv_spacing: f32,
        keys: &mut CudaSlice<u64>,
        checks: &mut CudaSlice<u64>,
        dists: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let n = keys.len();
        assert!(z.len() >= n * 8 * blocks && shift.len() >= 8 * blocks);
        assert!(checks.len() >= n && dists.len() >= n);
        let (n32, b32) = (n as u32, blocks as u32);
        let mut b = gpu.stream().launch_builder(&self.ripple_keys);
        b.arg(z)
            .arg(&n32)
            .arg(&b32)
            .arg(shift)
            .arg(&inv_spacing)
            .arg(keys)
            .arg(checks)
            .arg(dists);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        Ok(())
    }

    /// `heads[i]` = 1 where sorted position `i` starts a new key (to be
    /// scanned into fragment ordinals).
    pub fn segment_heads(
        &self,
        gpu: &Gpu,
        perm: &CudaSlice<u32>,
        keys: &CudaSlice<u64>,
        heads: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let n = perm.len();
        assert!(keys.len() >= n && heads.len() >= n);
        let n32 = n as u32;
        let mut b = gpu.stream().launch_builder(&self.segment_heads);
        b.arg(perm).arg(&n32).arg(keys).arg(heads);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        Ok(())
    }

    /// The first sorted position of every fragment (`starts`, `fragments + 1`
    /// values, the last one `n`), from the scanned heads.
    pub fn segment_starts(
        &self,
        gpu: &Gpu,
        perm: &CudaSlice<u32>,
        keys: &CudaSlice<u64>,
        heads: &CudaSlice<u32>,
        starts: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let n = perm.len();
        assert!(keys.len() >= n && heads.len() > n && starts.len() > n);
        let n32 = n as u32;
        let mut b = gpu.stream().launch_builder(&self.segment_starts);
        b.arg(perm).arg(&n32).arg(keys).arg(heads).arg(starts);
        // SAFETY: sizes asserted above (starts holds n + 1 >= fragments + 1).
        unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        Ok(())
    }

    /// `bad[f]` = 1 where fragment `f` holds two check words (a key
    /// collision). `bad` holds `fragments` zeroed values.
    pub fn segment_collisions(
        &self,
        gpu: &Gpu,
        seg: Segments,
        checks: &CudaSlice<u64>,
        bad: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        seg.check();
        let n = seg.n();
        assert!(checks.len() >= n && bad.len() >= seg.fragments);
        let n32 = n as u32;
        let mut b = gpu.stream().launch_builder(&self.segment_collisions);
        b.arg(seg.perm)
            .arg(&n32)
            .arg(seg.keys)
            .arg(checks)
            .arg(seg.heads)
            .arg(seg.starts)
            .arg(bad);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        Ok(())
    }

    /// `keep[f]` = 1 for the fragments stored (at least `pmin` members, no
    /// collision); `stats` (2 zeroed counters) gains collisions and short ones.
    pub fn fragment_keep(
        &self,
        gpu: &Gpu,
        seg: Segments,
        pmin: usize,
        bad: &CudaSlice<u32>,
        keep: &mut CudaSlice<u32>,
        stats: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        seg.check();
        assert!(bad.len() >= seg.fragments && keep.len() > seg.fragments && stats.len() >= 2);
        let (f32n, pmin32) = (seg.fragments as u32, pmin.max(1) as u32);
        let mut b = gpu.stream().launch_builder(&self.fragment_keep);
        b.arg(seg.starts)
            .arg(&f32n)
            .arg(&pmin32)
            .arg(bad)
            .arg(keep)
            .arg(stats);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(seg.fragments as u64)?, 0)) }?;
        Ok(())
    }

    /// Each stored fragment's key, position, size and first `l` members (by
    /// the scanned `keep`); short fragments' ordinals go to `short_list`.
    #[allow(clippy::too_many_arguments)]
    pub fn ripple_take(
        &self,
        gpu: &Gpu,
        seg: Segments,
        pmin: usize,
        bad: &CudaSlice<u32>,
        keep: &CudaSlice<u32>,
        l: usize,
        out: TakenFragments,
        short_list: &mut CudaSlice<u32>,
        stats: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        seg.check();
        let n = seg.n();
        assert!(bad.len() >= seg.fragments && keep.len() > seg.fragments && stats.len() >= 2);
        assert!(out.keys.len() >= n && out.start.len() >= n && out.size.len() >= n);
        assert!(out.ripples.len() >= n * l && short_list.len() >= n);
        let (f32n, pmin32, l32) = (seg.fragments as u32, pmin.max(1) as u32, l as u32);
        let mut b = gpu.stream().launch_builder(&self.ripple_take);
        b.arg(seg.perm)
            .arg(seg.keys)
            .arg(seg.starts)
            .arg(&f32n)
            .arg(&pmin32)
            .arg(bad)
            .arg(keep)
            .arg(&l32)
            .arg(out.keys)
            .arg(out.start)
            .arg(out.size)
            .arg(out.ripples)
            .arg(short_list)
            .arg(stats);
        // SAFETY: per-fragment outputs hold n >= stored values (ripples n x l).
        unsafe { b.launch(cfg(blocks_for(seg.fragments as u64)?, 0)) }?;
        Ok(())
    }

    /// The stored fragment ordinal of every vector (`NO_FRAGMENT` when its
    /// fragment is not stored), into `vec_ord` (`n`).
    pub fn vector_fragments(
        &self,
        gpu: &Gpu,
        seg: Segments,
        bad: &CudaSlice<u32>,
        pmin: usize,
        keep: &CudaSlice<u32>,
        vec_ord: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        seg.check();
        let n = seg.n();
        assert!(bad.len() >= seg.fragments && keep.len() > seg.fragments && vec_ord.len() >= n);
        let (n32, pmin32) = (n as u32, pmin.max(1) as u32);
        let mut b = gpu.stream().launch_builder(&self.vector_fragments);
        b.arg(seg.perm)
            .arg(&n32)
            .arg(seg.keys)
            .arg(seg.heads)
            .arg(seg.starts)
            .arg(bad)
            .arg(&pmin32)
            .arg(keep)
            .arg(vec_ord);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        Ok(())
    }

    /// Complete the `short` fragments listed in `short_list` to `l` members
    /// from the coarser spacing's fragments (`parent`; all-zero for none),
    /// nearest to the fragment's centre first.
    ///
    /// # Safety
    /// `this` and `parent` hold addresses of live buffers sized for the `n`
    /// vectors of `z` and ripples of `l` (as the caller's levels are), and
    /// `short_list` holds `short` stored ordinals of `this`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn complete_short(
        &self,
        gpu: &Gpu,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacing: f32,
        l: usize,
        (short_list, short): (&CudaSlice<u32>, usize),
        this: RippleLevel,
        parent: RippleLevel,
    ) -> Result<(), GpuError> {
        let cd = 8 * blocks;
        assert!(shift.len() >= cd && short_list.len() >= short);
        let smem = 4 * (cd + 2 * (l + l.max(PARENT_CANDIDATES as usize)) + 1);
        let (b32, l32, inv) = (blocks as u32, l as u32, 1.0f32 / spacing);
        let (this, parent) = (Layout(this), Layout(parent));
        let mut b = gpu.stream().launch_builder(&self.complete_short);
        b.arg(z)
            .arg(&b32)
            .arg(shift)
            .arg(&inv)
            .arg(&spacing)
            .arg(&l32)
            .arg(short_list)
            .arg(&this)
            .arg(&parent);
        // SAFETY: the caller's contract; shared memory as the kernel lays it out.
        unsafe { b.launch(cfg(short as u32, smem as u32)) }?;
        Ok(())
    }

    /// Insert the first `count` of `keys` into the open-addressing table
    /// (`slot_keys`, `slot_ids`: a power of two at least `2 count`, filled
    /// with `EMPTY_KEY` and `u32::MAX`), then put each probe chain in the
    /// canonical order the CPU's tables have.
    pub fn table_insert(
        &self,
        gpu: &Gpu,
        keys: &CudaSlice<u64>,
        count: usize,
        slot_keys: &mut CudaViewMut<u64>,
        slot_ids: &mut CudaViewMut<u32>,
    ) -> Result<(), GpuError> {
        let cap = slot_keys.len();
        assert!(cap.is_power_of_two() && cap >= 2 * count && slot_ids.len() >= cap);
        assert!(keys.len() >= count);
        let (mask, c32) = (cap as u64 - 1, count as u32);
        let mut b = gpu.stream().launch_builder(&self.table_insert);
        b.arg(keys)
            .arg(&c32)
            .arg(&mut *slot_keys)
            .arg(&mut *slot_ids)
            .arg(&mask);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(count as u64)?, 0)) }?;
        let mut b = gpu.stream().launch_builder(&self.table_canonical);
        b.arg(slot_keys).arg(slot_ids).arg(&mask);
        // SAFETY: as above.
        unsafe { b.launch(cfg(blocks_for(cap as u64)?, 0)) }?;
        Ok(())
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
