//! The launch-plan table test: every launch decision for every shape of a
//! grid of devices, indexes, batch sizes, search parameters and tuning
//! overrides, digested per group and checked against
//! `launch_table.txt`. The table was made by the launch rules as they were
//! before one plan held them (commit c156ba9, transcribed as pure functions
//! in `rules`), so a change of any launch shows here without a device.
//! `OCTEX_UPDATE_LAUNCH_TABLE=1` rewrites the table.

use octex_index::{IndexHeader, Metric, VectorDtype};
use octex_kernels::layout::IndexView;

use crate::{
    FragmentLookupChoice, GpuTuning, ProjectionChoice, SearchKernelChoice, SearchParams, SearchPlan,
};

/// A device's shared-memory and multiprocessor facts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Device {
    pub name: &'static str,
    pub multiprocessors: u32,
    pub max_block_smem: usize,
    pub smem_per_sm: usize,
    pub smem_reserved: usize,
}

/// H100 SXM (the H200 reports the same), A100 SXM, and an Ada card (L40S).
pub(super) const DEVICES: [Device; 3] = [
    Device {
        name: "h100",
        multiprocessors: 132,
        max_block_smem: 232_448,
        smem_per_sm: 233_472,
        smem_reserved: 1_024,
    },
    Device {
        name: "a100",
        multiprocessors: 108,
        max_block_smem: 166_912,
        smem_per_sm: 167_936,
        smem_reserved: 1_024,
    },
    Device {
        name: "l40s",
        multiprocessors: 142,
        max_block_smem: 101_376,
        smem_per_sm: 102_400,
        smem_reserved: 1_024,
    },
];

/// An index shape: (name, header fields, seeds, residual sketch centres).
pub(super) struct Shape {
    pub name: &'static str,
    pub dim: u32,
    pub basis_dim: u32,
    pub rotation_dim: u32,
    pub copies: u32,
    pub blocks: u32,
    pub spacings: u32,
    pub list_len: u32,
    pub row_len: u32,
    pub sketch_width: u32,
    pub n_seeds: u32,
    pub sketch_centres: u32,
}

/// Shapes like the indexes of the README's sets, the robustness families
/// and the GPU tests.
pub(super) const SHAPES: [Shape; 8] = [
    shape("synth-1m", 128, 128, 32, 32, 4, 2, 16, 64, 80, 256, 0),
    shape("fashion", 784, 160, 32, 32, 4, 3, 16, 64, 64, 256, 0),
    shape("glove-c32", 50, 50, 32, 32, 4, 3, 16, 64, 48, 256, 64),
    shape("glove-c128", 50, 50, 32, 128, 4, 3, 16, 64, 48, 256, 64),
    shape("text-c128", 384, 192, 32, 128, 4, 2, 16, 64, 96, 512, 0),
    shape("fam-64", 64, 64, 24, 32, 3, 4, 16, 32, 64, 128, 0),
    shape("test-small", 24, 24, 16, 8, 2, 2, 8, 16, 24, 32, 0),
    shape(
        "deep-spacings",
        96,
        96,
        64,
        64,
        8,
        8,
        32,
        64,
        96,
        1_024,
        256,
    ),
];

#[allow(clippy::too_many_arguments)]
const fn shape(
    name: &'static str,
    dim: u32,
    basis_dim: u32,
    rotation_dim: u32,
    copies: u32,
    blocks: u32,
    spacings: u32,
    list_len: u32,
    row_len: u32,
    sketch_width: u32,
    n_seeds: u32,
    sketch_centres: u32,
) -> Shape {
    Shape {
        name,
        dim,
        basis_dim,
        rotation_dim,
        copies,
        blocks,
        spacings,
        list_len,
        row_len,
        sketch_width,
        n_seeds,
        sketch_centres,
    }
}

impl Shape {
    pub fn header(&self) -> IndexHeader {
        IndexHeader {
            crate_version: String::new(),
            metric: Metric::L2,
            n: 1_000_000,
            input_dim: self.dim,
            dim: self.dim,
            basis_dim: self.basis_dim,
            rotation_dim: self.rotation_dim,
            copies: self.copies,
            blocks: self.blocks,
            spacings: self.spacings,
            list_len: self.list_len,
            min_fragment: 1,
            sketch_width: self.sketch_width,
            row_len: self.row_len,
            vector_dtype: VectorDtype::F32,
            max_norm: 0.0,
            seed: 0,
            build_params: String::new(),
            sections: Vec::new(),
        }
    }

    pub fn view(&self) -> IndexView {
        IndexView {
            n: 1_000_000,
            dim: self.dim,
            copies: self.copies,
            blocks: self.blocks,
            spacings: self.spacings,
            list_len: self.list_len,
            row_len: self.row_len,
            sketch_width: self.sketch_width,
            basis_dim: self.basis_dim,
            width: self.copies * 8 * self.blocks,
            n_seeds: self.n_seeds,
            sketch_centre_count: self.sketch_centres,
            ..IndexView::default()
        }
    }
}

/// What one batch launches: the decisions the table records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Launch {
    /// Entry of the `wave_search` build and its threads per block.
    pub entry: &'static str,
    pub threads: u32,
    pub smem: u32,
    pub hash_slots: u32,
    pub buf_len: u32,
    pub rerank_len: u32,
    pub scratch_per_query: u32,
    /// The fragment lookup runs in its own kernel.
    pub lookup_kernel: bool,
    /// One fused product (else two).
    pub fused: bool,
    pub pcs_stride: u32,
    pub z_stride: u32,
    /// Where the projections start in a fused product's rows.
    pub z_offset: u32,
}

impl Launch {
    fn line(&self) -> String {
        format!("{self:?}")
    }
}

/// The tuning overrides the table covers (default first).
pub(super) fn tunings() -> Vec<(&'static str, GpuTuning)> {
    let t = GpuTuning::default;
    vec![
        ("default", t()),
        (
            "kernel-wide",
            GpuTuning {
                search_kernel: Some(SearchKernelChoice::Wide),
                ..t()
            },
        ),
        (
            "kernel-dense",
            GpuTuning {
                search_kernel: Some(SearchKernelChoice::Dense),
                ..t()
            },
        ),
        (
            "kernel-narrow",
            GpuTuning {
                search_kernel: Some(SearchKernelChoice::Narrow),
                ..t()
            },
        ),
        (
            "kernel-latency",
            GpuTuning {
                search_kernel: Some(SearchKernelChoice::Latency),
                ..t()
            },
        ),
        (
            "latency-small-only",
            GpuTuning {
                latency_build_small_batches_only: true,
                ..t()
            },
        ),
        (
            "lookup-in-search",
            GpuTuning {
                fragment_lookup: Some(FragmentLookupChoice::InSearch),
                ..t()
            },
        ),
        (
            "lookup-own",
            GpuTuning {
                fragment_lookup: Some(FragmentLookupChoice::OwnKernel),
                ..t()
            },
        ),
        (
            "slots-0.5",
            GpuTuning {
                visited_slots_per_entry: Some(0.5),
                ..t()
            },
        ),
        (
            "slots-2",
            GpuTuning {
                visited_slots_per_entry: Some(2.0),
                ..t()
            },
        ),
        (
            "products-two",
            GpuTuning {
                projection: Some(ProjectionChoice::Two),
                ..t()
            },
        ),
        (
            "products-fused",
            GpuTuning {
                projection: Some(ProjectionChoice::Fused),
                ..t()
            },
        ),
        (
            "unpadded",
            GpuTuning {
                unpadded_principal_columns: true,
                ..t()
            },
        ),
    ]
}

/// (S, W, R, r) values of a parameter grid.
type Grid<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize]);

/// Search parameters: every (S, W, R, r) of a superset of the bench grids,
/// with and without per-wave rerank; tuning overrides take a subset.
pub(super) fn params(full: bool) -> Vec<SearchParams> {
    let s_all: &[usize] = &[
        1, 8, 12, 16, 20, 24, 30, 32, 40, 48, 64, 80, 96, 128, 192, 256, 512,
    ];
    let s_few: &[usize] = &[8, 16, 32, 64, 96, 128, 256, 512];
    let (ss, ws, rs, ds): Grid = if full {
        (
            s_all,
            &[1, 2, 3, 4, 5, 6],
            &[16, 24, 32, 64, 128, 256],
            &[4, 6, 8, 12, 16],
        )
    } else {
        (s_few, &[1, 3, 4, 6], &[16, 128], &[8, 16])
    };
    let wr: &[bool] = if full { &[false, true] } else { &[false] };
    let mut out = Vec::new();
    for &start_points in ss {
        for &waves in ws {
            for &rerank in rs {
                for &read_depth in ds {
                    for &wave_rerank in wr {
                        out.push(SearchParams {
                            read_depth,
                            start_points,
                            waves,
                            rerank,
                            wave_rerank,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Batch sizes: the latency and throughput ends and the edges of the
/// per-multiprocessor rules of `device`.
pub(super) fn batch_sizes(device: &Device) -> Vec<usize> {
    let sm = device.multiprocessors as usize;
    let mut v = vec![
        1,
        2,
        100,
        sm - 1,
        sm,
        sm + 1,
        4 * sm,
        8 * sm - 1,
        8 * sm,
        2_000,
        10_000,
    ];
    v.sort_unstable();
    v.dedup();
    v
}

/// FNV-1a over the lines of one group.
fn digest(lines: impl Iterator<Item = String>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for line in lines {
        for b in line.bytes().chain([b'\n']) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The table's lines, one per (device, shape, tuning, k, batch size): the
/// digest of the launches over the group's parameters and a count of each
/// build, lookup and product path.
pub(super) fn table(
    launch: &dyn Fn(&Device, &Shape, &GpuTuning, &SearchPlan, usize) -> Launch,
) -> Vec<String> {
    let mut lines = Vec::new();
    let full = params(true);
    let few = params(false);
    for device in &DEVICES {
        for shape in &SHAPES {
            let header = shape.header();
            for (tname, tuning) in tunings() {
                let (grid, ks): (&[SearchParams], &[usize]) = if tname == "default" {
                    (&full, &[10])
                } else {
                    (&few, &[10])
                };
                let ks: Vec<usize> = if tname == "default" {
                    vec![1, 10, 100]
                } else {
                    ks.to_vec()
                };
                for &k in &ks {
                    // Batch sizes with the same launches share a line.
                    let mut rows: Vec<(String, Vec<usize>)> = Vec::new();
                    for nq in batch_sizes(device) {
                        let launches: Vec<Launch> = grid
                            .iter()
                            .filter_map(|p| SearchPlan::new(&header, p, k).ok())
                            .map(|plan| launch(device, shape, &tuning, &plan, nq))
                            .collect();
                        let mut counts = std::collections::BTreeMap::new();
                        for l in &launches {
                            *counts.entry(l.entry).or_insert(0u32) += 1;
                        }
                        let lookups = launches.iter().filter(|l| l.lookup_kernel).count();
                        let fused = launches.iter().filter(|l| l.fused).count();
                        let row = format!(
                            "{:016x} {counts:?} lookup-kernel {lookups} fused {fused} of {}",
                            digest(launches.iter().map(Launch::line)),
                            launches.len()
                        );
                        match rows.iter_mut().find(|(r, _)| *r == row) {
                            Some((_, sizes)) => sizes.push(nq),
                            None => rows.push((row, vec![nq])),
                        }
                    }
                    for (row, sizes) in rows {
                        let sizes: Vec<String> = sizes.iter().map(usize::to_string).collect();
                        lines.push(format!(
                            "{} {} {tname} k{k} nq {}: {row}",
                            device.name,
                            shape.name,
                            sizes.join(",")
                        ));
                    }
                }
            }
        }
    }
    lines
}

/// The launch rules before the plan (commit c156ba9: `batch_view`,
/// `FragmentLookup::for_batch` and `visited_slots_per_entry` of
/// `search/gpu/batch.rs`, `Gpu::wave_search`'s choice of build and
/// `Gpu::wide_search_blocks` of the kernels crate, `Projection`'s choice
/// of products), with the device's attributes passed in.
mod rules {
    use super::{Device, Launch, Shape};
    use crate::{
        FragmentLookupChoice, GpuTuning, ProjectionChoice, SearchKernelChoice, SearchPlan,
    };
    use octex_kernels::layout::{
        fused_pc_cols, BatchView, FragmentLookupLayout, IndexView, SearchSmem, BLOCK_THREADS,
        LATENCY_BLOCK_THREADS, MAX_HASH_SLOTS, MAX_LOOKUP_SPACINGS, MAX_SPILL_HASH_SLOTS,
        NARROW_BLOCK_THREADS,
    };

    const SEARCH_BLOCKS_PER_SM: u32 = 3;
    const DENSE_SEARCH_BLOCKS_PER_SM: u32 = 4;
    const NARROW_SEARCH_BLOCKS_PER_SM: u32 = 8;
    const LATENCY_SEARCH_BLOCKS_PER_SM: u32 = 1;
    const LATENCY_MIN_ROUND_IDS: u32 = 2048;
    const VISITED_SLOT_STEP: u32 = 32;
    const SPARE_SMEM_SLOTS_PER_ENTRY: f32 = 4.0;
    const FUSED_EXTRA_MULTIPLY_ADDS: usize = 1 << 26;

    #[derive(Clone, Copy, PartialEq)]
    enum SearchKernel {
        Wide,
        Dense,
        Narrow,
        Latency,
    }

    struct Gpu {
        max_smem: usize,
        dense_max_smem: usize,
        narrow_max_smem: usize,
        narrow_min_batch: u32,
        latency_max_batch: u32,
        one_block_latency: bool,
        smem_per_sm: usize,
        smem_reserved: usize,
        multiprocessors: u32,
        forced_search_kernel: Option<SearchKernel>,
    }

    impl Gpu {
        fn open(d: &Device, tuning: &GpuTuning) -> Self {
            let fitting =
                |blocks: u32| (d.smem_per_sm / blocks as usize).saturating_sub(d.smem_reserved);
            Gpu {
                max_smem: d.max_block_smem,
                dense_max_smem: fitting(DENSE_SEARCH_BLOCKS_PER_SM),
                narrow_max_smem: fitting(NARROW_SEARCH_BLOCKS_PER_SM),
                narrow_min_batch: d.multiprocessors * NARROW_SEARCH_BLOCKS_PER_SM,
                latency_max_batch: d.multiprocessors * LATENCY_SEARCH_BLOCKS_PER_SM,
                one_block_latency: !tuning.latency_build_small_batches_only,
                smem_per_sm: d.smem_per_sm,
                smem_reserved: d.smem_reserved,
                multiprocessors: d.multiprocessors,
                forced_search_kernel: tuning.search_kernel.map(|k| match k {
                    SearchKernelChoice::Wide => SearchKernel::Wide,
                    SearchKernelChoice::Dense => SearchKernel::Dense,
                    SearchKernelChoice::Narrow => SearchKernel::Narrow,
                    SearchKernelChoice::Latency => SearchKernel::Latency,
                }),
            }
        }

        fn wide_search_blocks(&self, smem: usize) -> Option<u32> {
            if smem <= self.dense_max_smem {
                return None;
            }
            if smem > self.max_smem {
                return Some(0);
            }
            let fit = self.smem_per_sm / (smem + self.smem_reserved);
            Some((fit as u32).min(SEARCH_BLOCKS_PER_SM))
        }

        fn wave_search(&self, index: &IndexView, batch: &BatchView) -> (&'static str, u32) {
            let smem = SearchSmem::new(index, batch).total as usize;
            if batch.scratch_per_query > 0 {
                return ("wave_search_spilled", BLOCK_THREADS);
            }
            let nq = batch.nq;
            let round_ids = SearchSmem::fresh_len(index, batch);
            let one_block = nq <= self.latency_max_batch
                || (self.one_block_latency && self.wide_search_blocks(smem) == Some(1));
            let fitting = if one_block && round_ids >= LATENCY_MIN_ROUND_IDS {
                SearchKernel::Latency
            } else if smem <= self.narrow_max_smem && nq >= self.narrow_min_batch {
                SearchKernel::Narrow
            } else if smem <= self.dense_max_smem {
                SearchKernel::Dense
            } else {
                SearchKernel::Wide
            };
            let chosen = match self.forced_search_kernel.unwrap_or(fitting) {
                SearchKernel::Dense | SearchKernel::Narrow
                    if !batch.hash_slots.is_power_of_two() =>
                {
                    SearchKernel::Wide
                }
                k => k,
            };
            match chosen {
                SearchKernel::Wide => ("wave_search", BLOCK_THREADS),
                SearchKernel::Dense => ("wave_search_dense", BLOCK_THREADS),
                SearchKernel::Narrow => ("wave_search_narrow", NARROW_BLOCK_THREADS),
                SearchKernel::Latency => ("wave_search_latency", LATENCY_BLOCK_THREADS),
            }
        }
    }

    struct Projection {
        fused: bool,
        two: bool,
        fused_max_batch: usize,
        pc_cols: usize,
    }

    impl Projection {
        fn upload(shape: &Shape, tuning: &GpuTuning) -> Self {
            let (dim, mc) = (shape.dim as usize, shape.rotation_dim as usize);
            let width = (shape.copies * 8 * shape.blocks) as usize;
            let fused_max_batch = match tuning.projection {
                Some(ProjectionChoice::Two) if dim > mc => 0,
                Some(ProjectionChoice::Fused) => usize::MAX,
                _ => {
                    if dim <= mc {
                        usize::MAX
                    } else {
                        FUSED_EXTRA_MULTIPLY_ADDS / (width.max(1) * (dim - mc))
                    }
                }
            };
            let pc_cols = if tuning.unpadded_principal_columns {
                shape.basis_dim as usize
            } else {
                fused_pc_cols(shape.basis_dim) as usize
            };
            Projection {
                fused: fused_max_batch > 0,
                two: fused_max_batch < usize::MAX,
                fused_max_batch,
                pc_cols,
            }
        }
        fn fused_for(&self, nq: usize) -> bool {
            self.fused && nq <= self.fused_max_batch
        }
        fn two_for(&self, nq: usize) -> bool {
            !self.fused_for(nq) && self.two
        }
        fn pcs_stride(&self, ix: &IndexView, nq: usize) -> u32 {
            if self.fused_for(nq) {
                self.pc_cols as u32 + ix.width
            } else {
                ix.basis_dim
            }
        }
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Rounding {
        PowerOfTwo,
        Step,
    }

    fn visited_slots(entries: u32, per_entry: f32, max: u32, rounding: Rounding) -> u32 {
        let want = (entries as f64 * per_entry as f64).ceil().min(max as f64) as u32;
        let want = want.max(64);
        match rounding {
            Rounding::PowerOfTwo => want.next_power_of_two().min(max),
            Rounding::Step => want.next_multiple_of(VISITED_SLOT_STEP).min(max),
        }
    }

    fn lookup_words(nq: usize, copies: u32) -> Option<usize> {
        let items = u32::try_from(nq).ok()?.checked_mul(copies)?;
        items.checked_mul(3)?.checked_add(MAX_LOOKUP_SPACINGS)?;
        Some(FragmentLookupLayout::new(nq as u32, copies).words as usize)
    }

    fn lookup_kernel(
        nq: usize,
        index: &IndexView,
        gpu: &Gpu,
        forced: Option<FragmentLookupChoice>,
    ) -> bool {
        if !FragmentLookupLayout::takes(index.spacings, 8 * index.blocks)
            || lookup_words(nq, index.copies).is_none()
        {
            return false;
        }
        match forced {
            Some(FragmentLookupChoice::InSearch) => false,
            Some(FragmentLookupChoice::OwnKernel) => true,
            None => nq > gpu.multiprocessors as usize,
        }
    }

    pub(super) fn launch(
        device: &Device,
        shape: &Shape,
        tuning: &GpuTuning,
        plan: &SearchPlan,
        nq: usize,
    ) -> Launch {
        let s = Gpu::open(device, tuning);
        let projection = Projection::upload(shape, tuning);
        let ix = &shape.view();
        let (p, k) = (&plan.params, plan.k);
        let r = plan.read_depth as u32;
        let (start_points, waves, row_len) = (p.start_points as u32, p.waves as u32, ix.row_len);
        let keep = plan.keep as u32;
        let first = SearchSmem::first_round_ids(ix, r, start_points);
        let buf_len = first.max(keep + start_points * row_len);
        let entries = ix.copies * r + ix.n_seeds + waves * start_points * row_len;
        let slots = |per_entry: f32| {
            visited_slots(entries, per_entry, MAX_HASH_SLOTS, Rounding::PowerOfTwo)
        };
        let per_entry =
            tuning
                .visited_slots_per_entry
                .unwrap_or(if nq <= s.multiprocessors as usize {
                    SPARE_SMEM_SLOTS_PER_ENTRY
                } else {
                    1.0
                });
        let two_products = projection.two_for(nq);
        let pcs_stride = projection.pcs_stride(ix, nq);
        let lookup = lookup_kernel(nq, ix, &s, tuning.fragment_lookup);
        let mut view = BatchView {
            pcs_stride,
            z_stride: if two_products { ix.width } else { pcs_stride },
            frag_hits: lookup as u64,
            nq: nq as u32,
            k: k as u32,
            read_depth: r,
            start_points,
            waves,
            rerank: p.rerank as u32,
            keep,
            hash_slots: slots(per_entry),
            buf_len,
            rerank_len: if p.wave_rerank {
                keep + p.rerank as u32
            } else {
                p.rerank as u32
            },
            wave_rerank: p.wave_rerank as u32,
            ..BatchView::default()
        };
        let smem = |v: &BatchView| SearchSmem::new(ix, v).total as usize;
        let mut one_slot_per_entry = per_entry == 1.0;
        if per_entry > 1.0 && smem(&view) > s.max_smem {
            view.hash_slots = slots(1.0);
            one_slot_per_entry = true;
        }
        if one_slot_per_entry {
            let tight = BatchView {
                hash_slots: visited_slots(entries, 1.0, MAX_HASH_SLOTS, Rounding::Step),
                ..view
            };
            if let (Some(before), Some(after)) = (
                s.wide_search_blocks(smem(&view)),
                s.wide_search_blocks(smem(&tight)),
            ) {
                if before <= 1 && after > before {
                    view = tight;
                }
            }
        }
        if smem(&view) > s.max_smem {
            view.hash_slots = visited_slots(entries, 1.0, MAX_SPILL_HASH_SLOTS, Rounding::Step);
            view.scratch_per_query = 1;
            view.scratch_per_query = SearchSmem::new(ix, &view).large;
        }
        let (entry, threads) = s.wave_search(ix, &view);
        Launch {
            entry,
            threads,
            smem: smem(&view) as u32,
            hash_slots: view.hash_slots,
            buf_len: view.buf_len,
            rerank_len: view.rerank_len,
            scratch_per_query: view.scratch_per_query,
            lookup_kernel: lookup,
            fused: !two_products,
            pcs_stride: view.pcs_stride,
            z_stride: view.z_stride,
            z_offset: if two_products {
                0
            } else {
                projection.pc_cols as u32
            },
        }
    }
}

#[test]
fn launch_table_is_the_rules_before_the_plan() {
    let lines = table(&rules::launch);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu/launch_table.txt");
    let text = lines.join("\n") + "\n";
    if std::env::var_os("OCTEX_UPDATE_LAUNCH_TABLE").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    for (got, want) in text.lines().zip(want.lines()) {
        assert_eq!(got, want);
    }
    assert_eq!(text.lines().count(), want.lines().count());
}
