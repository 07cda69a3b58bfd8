//! The launch-plan table test: every decision of [`GpuLaunchPlan`] for
//! every shape of a grid of devices, indexes, batch sizes, search
//! parameters (a superset of the bench grids) and tuning overrides,
//! digested per group and checked against `launch_table.txt`, so a change
//! of any launch shows here without a device. The table was made by the
//! launch rules as they were before the plan held them (their pure
//! transcription is this file at the commit that added the table).
//! `OCTEX_UPDATE_LAUNCH_TABLE=1` rewrites it, for a change of the rules
//! made on purpose.

use octex_index::{IndexHeader, Metric, VectorDtype};
use octex_kernels::layout::IndexView;
use octex_kernels::DeviceLimits;

use super::launch_plan::{FragmentLookup, GpuLaunchPlan, Products, ProjectionShape};

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
            search_defaults: None,
            query_shell: None,
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

/// The launches [`GpuLaunchPlan`] plans for one batch.
fn planned(
    device: &Device,
    shape: &Shape,
    tuning: &GpuTuning,
    plan: &SearchPlan,
    nq: usize,
) -> Launch {
    let limits = DeviceLimits {
        multiprocessors: device.multiprocessors,
        max_block_smem: device.max_block_smem,
        smem_per_sm: device.smem_per_sm,
        smem_reserved: device.smem_reserved,
    };
    let index = shape.view();
    let width = (shape.copies * 8 * shape.blocks) as usize;
    let projection = ProjectionShape::new(
        shape.dim as usize,
        shape.basis_dim as usize,
        shape.rotation_dim as usize,
        width,
        tuning,
    );
    let p = GpuLaunchPlan::new(&index, plan, nq, &limits, &projection, tuning);
    Launch {
        entry: p.kernel.entry(),
        threads: p.kernel.threads(),
        smem: p.smem as u32,
        hash_slots: p.sizes.hash_slots,
        buf_len: p.sizes.buf_len,
        rerank_len: p.sizes.rerank_len,
        scratch_per_query: p.sizes.scratch_per_query,
        lookup_kernel: p.lookup == FragmentLookup::OwnKernel,
        fused: matches!(p.products, Products::Fused { .. }),
        pcs_stride: p.sizes.pcs_stride,
        z_stride: p.sizes.z_stride,
        z_offset: match p.products {
            Products::Fused { z_offset } => z_offset,
            Products::Two => 0,
        },
    }
}

#[test]
fn the_plan_launches_what_the_table_says() {
    let lines = table(&planned);
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
