//! # octex-placement
//!
//! The tiered placement planner: given the byte size of every part of an
//! index and the memory of the GPUs, the host and the disk, decide where each
//! part lives, whether it is replicated on every GPU or split over them, and
//! what to shrink when the parts every wave reads do not fit the GPUs (the
//! paper's sections 4.3-4.4).
//!
//! The rule, by how often a query reads a part:
//!
//! - **Per-wave parts** (the copies' key tables and ripples, the sketch rows,
//!   the neighbour rows, the small maps) are read thousands of times a query
//!   at random positions: they stay in GPU memory. When they do not fit, the
//!   ripples are cut to their first entries (the nearest to their fragment's
//!   centre) down to 16, then copies are halved down to 8, then the ripples
//!   cut down to 8; only past every shrink do the neighbour rows, then the
//!   sketch, move to host memory (the paper measured 2.6-3.9x less
//!   throughput with rows on the host).
//! - **Rerank vectors** are read `R` times a query: they take the GPU memory
//!   the per-wave parts leave, else host memory, else disk.
//! - **Layouts**: everything replicated on every GPU when the whole index
//!   fits one (each GPU answers its own queries), else split: each GPU holds
//!   `1/G` of the copies and of the sketch and row ranges (read over NVLink
//!   from peers).
//!
//! With no GPU the same rule plans host memory and disk: per-wave parts in
//! memory (shrunk if need be), the rerank vectors in memory or read from the
//! file on demand.
//!
//! Place in the pipeline: after a build (or before one: `cargo xtask plan`
//! predicts the sizes), before loading: a CPU search follows a plan through
//! `octex_index::Index::advise_memory` (`xtask search --host-mem`); the GPU
//! loader does not yet. Pure and dependency-free: sizes in (from
//! `octex_build::placement_sizes`), a [`Plan`] out.

use std::fmt;

pub const GIB: u64 = 1 << 30;

/// Byte sizes of an index's parts, with the copy count and ripple length
/// they were measured at (a shrink scales the ripples and key tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexSizes {
    /// Copies `C`.
    pub copies: u32,
    /// Ripple length `l`.
    pub list_len: u32,
    /// Fragment ripples of all copies.
    pub ripples: u64,
    /// Key tables of all copies.
    pub key_tables: u64,
    /// Sketch rows.
    pub sketch: u64,
    /// Neighbour rows.
    pub rows: u64,
    /// Rerank vectors.
    pub vectors: u64,
    /// Copy maps, basis, scales: replicated wherever the index is searched.
    pub small: u64,
}

impl IndexSizes {
    /// The sizes with `copies` copies of ripples cut to `list_len` entries.
    pub fn shrunk(&self, copies: u32, list_len: u32) -> IndexSizes {
        let scale = |b: u64, num: u64, den: u64| {
            (b as u128 * num as u128).div_ceil(den.max(1) as u128) as u64
        };
        IndexSizes {
            copies,
            list_len,
            ripples: scale(
                self.ripples,
                copies as u64 * list_len as u64,
                self.copies as u64 * self.list_len as u64,
            ),
            key_tables: scale(self.key_tables, copies as u64, self.copies as u64),
            ..*self
        }
    }

    /// Bytes of the copies: key tables and ripples.
    pub fn copy_bytes(&self) -> u64 {
        self.ripples + self.key_tables
    }

    /// Bytes every wave reads: copies, sketch, rows, small maps.
    pub fn per_wave(&self) -> u64 {
        self.copy_bytes() + self.sketch + self.rows + self.small
    }

    pub fn total(&self) -> u64 {
        self.per_wave() + self.vectors
    }
}

/// Where the index will be searched.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Machine {
    /// GPUs (0: a CPU search).
    pub gpus: u32,
    /// Memory of each GPU.
    pub gpu_memory: u64,
    /// Host memory the index may take.
    pub host_memory: u64,
    /// Disk space for parts read from the file (`None`: unbounded).
    pub disk: Option<u64>,
    /// Share of each GPU kept for search buffers, graphs and the CUDA
    /// context. Default 0.1 (the paper's Deep1B: 80.2 of 93 GiB used).
    pub gpu_headroom: f64,
}

impl Machine {
    /// `gpus` GPUs of `gpu_memory` each beside `host_memory`, default headroom.
    pub fn new(gpus: u32, gpu_memory: u64, host_memory: u64) -> Self {
        Machine {
            gpus,
            gpu_memory,
            host_memory,
            disk: None,
            gpu_headroom: 0.1,
        }
    }

    /// Bytes of one GPU the index may take.
    pub fn gpu_capacity(&self) -> u64 {
        (self.gpu_memory as f64 * (1.0 - self.gpu_headroom.clamp(0.0, 1.0))) as u64
    }
}

/// The parts a plan places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Copies,
    Sketch,
    Rows,
    Small,
    Vectors,
}

impl Part {
    pub const ALL: [Part; 5] = [
        Part::Copies,
        Part::Sketch,
        Part::Rows,
        Part::Small,
        Part::Vectors,
    ];

    /// Read by every wave (as against once per query by the rerank).
    pub fn per_wave(self) -> bool {
        self != Part::Vectors
    }

    fn bytes(self, s: &IndexSizes) -> u64 {
        match self {
            Part::Copies => s.copy_bytes(),
            Part::Sketch => s.sketch,
            Part::Rows => s.rows,
            Part::Small => s.small,
            Part::Vectors => s.vectors,
        }
    }
}

/// Memory tiers, fastest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Gpu,
    Host,
    Disk,
}

/// How a part on the GPUs is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A whole copy on every GPU.
    Replicated,
    /// `1/G` on each GPU: copies by copy, the rest by row ranges.
    Split,
    /// One copy in host memory or on disk.
    Single,
}

/// Where one part lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub part: Part,
    pub tier: Tier,
    pub layout: Layout,
    /// Bytes of the part (one copy of it).
    pub bytes: u64,
}

/// What a plan cut to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shrink {
    ListLen { from: u32, to: u32 },
    Copies { from: u32, to: u32 },
}

/// Where every part of an index lives on a [`Machine`].
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The sizes after the shrinks.
    pub sizes: IndexSizes,
    pub shrinks: Vec<Shrink>,
    pub placements: Vec<Placement>,
    /// Bytes on each GPU (the busiest one where a split is uneven).
    pub gpu_bytes: u64,
    pub host_bytes: u64,
    pub disk_bytes: u64,
}

impl Plan {
    pub fn placement(&self, part: Part) -> Placement {
        // Every plan places every part once.
        self.placements
            .iter()
            .copied()
            .find(|p| p.part == part)
            .unwrap_or(Placement {
                part,
                tier: Tier::Disk,
                layout: Layout::Single,
                bytes: 0,
            })
    }

    /// A per-wave part outside GPU memory on a machine with GPUs (slow: the
    /// paper measured 2.6-3.9x less throughput with rows on the host).
    pub fn per_wave_off_gpu(&self) -> bool {
        let on_gpus = self.placements.iter().any(|p| p.tier == Tier::Gpu);
        on_gpus
            && self
                .placements
                .iter()
                .any(|p| p.part.per_wave() && p.tier != Tier::Gpu)
    }
}

/// Why no plan exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// Even shrunk to the least copies and shortest ripples, with rows and
    /// sketch on the host, the index needs more than the machine has.
    DoesNotFit {
        needed: u64,
        available: u64,
        tier: Tier,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::DoesNotFit {
                needed,
                available,
                tier,
            } => write!(
                f,
                "the index needs {:.1} GiB of {tier:?} memory at its smallest, the machine has {:.1} GiB",
                *needed as f64 / GIB as f64,
                *available as f64 / GIB as f64
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// Least ripple length and copies a shrink goes to.
pub const MIN_LIST_LEN: u32 = 8;
pub const MIN_COPIES: u32 = 8;
/// Ripple length the first shrinks stop at (the paper's billion-scale
/// ripples: 16 entries cost 0.0012 recall against 32).
pub const FIRST_LIST_LEN: u32 = 16;

/// The shrink steps in order, starting with none: ripples halved down to
/// [`FIRST_LIST_LEN`], copies halved down to [`MIN_COPIES`], ripples halved
/// down to [`MIN_LIST_LEN`]. Values already below a floor stay.
pub fn shrink_steps(copies: u32, list_len: u32) -> Vec<(u32, u32)> {
    let mut steps = vec![(copies, list_len)];
    let (mut c, mut l) = (copies, list_len);
    while l / 2 >= FIRST_LIST_LEN {
        l /= 2;
        steps.push((c, l));
    }
    while c / 2 >= MIN_COPIES {
        c /= 2;
        steps.push((c, l));
    }
    while l / 2 >= MIN_LIST_LEN {
        l /= 2;
        steps.push((c, l));
    }
    steps
}

/// The plan for `sizes` on `machine` (see the crate's rule).
pub fn plan(sizes: &IndexSizes, machine: &Machine) -> Result<Plan, PlanError> {
    if machine.gpus == 0 {
        return plan_host(sizes, machine);
    }
    let g = machine.gpus as u64;
    let cap = machine.gpu_capacity();
    // Bytes one GPU holds of `b` split over the GPUs (ripples by copy, rows
    // by range: the busiest GPU holds the rounded-up share).
    let share = |b: u64| b.div_ceil(g);
    let per_gpu_split =
        |s: &IndexSizes| share(s.copy_bytes()) + share(s.sketch) + share(s.rows) + s.small;
    let vectors_home = |s: &IndexSizes, gpu_used: u64, split: bool| -> Option<Tier> {
        let on_gpu = if split { share(s.vectors) } else { s.vectors };
        if gpu_used + on_gpu <= cap {
            Some(Tier::Gpu)
        } else if s.vectors <= machine.host_memory {
            Some(Tier::Host)
        } else if machine.disk.is_none_or(|d| s.vectors <= d) {
            Some(Tier::Disk)
        } else {
            None
        }
    };
    for (c, l) in shrink_steps(sizes.copies, sizes.list_len) {
        let s = sizes.shrunk(c, l);
        // Replicated when the whole index (vectors included) fits one GPU.
        if s.total() <= cap {
            return Ok(assemble(sizes, s, Layout::Replicated, &[], Tier::Gpu, g));
        }
        let used = per_gpu_split(&s);
        if used <= cap {
            match vectors_home(&s, used, g > 1) {
                Some(tier) => return Ok(assemble(sizes, s, Layout::Split, &[], tier, g)),
                None => return Err(too_big(s.vectors, machine, Tier::Disk)),
            }
        }
    }
    // Past every shrink: rows, then the sketch, to host memory.
    let s = shrink_steps(sizes.copies, sizes.list_len)
        .last()
        .map_or(*sizes, |&(c, l)| sizes.shrunk(c, l));
    for off in [&[Part::Rows][..], &[Part::Rows, Part::Sketch]] {
        let host: u64 = off.iter().map(|p| p.bytes(&s)).sum();
        let used = per_gpu_split(&s) - off.iter().map(|p| share(p.bytes(&s))).sum::<u64>();
        if used <= cap && host <= machine.host_memory {
            let left = machine.host_memory - host;
            let vectors = if used + share(s.vectors) <= cap && g > 1 || used + s.vectors <= cap {
                Tier::Gpu
            } else if s.vectors <= left {
                Tier::Host
            } else if machine.disk.is_none_or(|d| s.vectors <= d) {
                Tier::Disk
            } else {
                return Err(too_big(s.vectors, machine, Tier::Disk));
            };
            return Ok(assemble(sizes, s, Layout::Split, off, vectors, g));
        }
    }
    let least_on_gpus = per_gpu_split(&s) - share(s.rows) - share(s.sketch);
    if least_on_gpus > cap {
        Err(too_big(least_on_gpus, machine, Tier::Gpu))
    } else {
        Err(too_big(s.rows + s.sketch, machine, Tier::Host))
    }
}

/// A CPU search: per-wave parts in host memory (shrunk if need be), the
/// vectors beside them or on disk.
fn plan_host(sizes: &IndexSizes, machine: &Machine) -> Result<Plan, PlanError> {
    let mut smallest = *sizes;
    for (c, l) in shrink_steps(sizes.copies, sizes.list_len) {
        let s = sizes.shrunk(c, l);
        smallest = s;
        if s.per_wave() > machine.host_memory {
            continue;
        }
        let tier = if s.total() <= machine.host_memory {
            Tier::Host
        } else if machine.disk.is_none_or(|d| s.vectors <= d) {
            Tier::Disk
        } else {
            return Err(too_big(s.vectors, machine, Tier::Disk));
        };
        return Ok(assemble(sizes, s, Layout::Single, &[], tier, 0));
    }
    Err(too_big(smallest.per_wave(), machine, Tier::Host))
}

fn too_big(needed: u64, machine: &Machine, tier: Tier) -> PlanError {
    let available = match tier {
        Tier::Gpu => machine.gpu_capacity(),
        Tier::Host => machine.host_memory,
        Tier::Disk => machine.disk.unwrap_or(u64::MAX),
    };
    PlanError::DoesNotFit {
        needed,
        available,
        tier,
    }
}

/// The plan of sizes `s` (shrunk from `from`): per-wave parts in `layout`
/// on the GPUs (host memory with `g = 0`) but those in `on_host`, the
/// vectors in `vectors`.
fn assemble(
    from: &IndexSizes,
    s: IndexSizes,
    layout: Layout,
    on_host: &[Part],
    vectors: Tier,
    g: u64,
) -> Plan {
    let mut shrinks = Vec::new();
    if s.list_len != from.list_len {
        shrinks.push(Shrink::ListLen {
            from: from.list_len,
            to: s.list_len,
        });
    }
    if s.copies != from.copies {
        shrinks.push(Shrink::Copies {
            from: from.copies,
            to: s.copies,
        });
    }
    let home = if g == 0 { Tier::Host } else { Tier::Gpu };
    let placements: Vec<Placement> = Part::ALL
        .iter()
        .map(|&part| {
            let tier = match part {
                Part::Vectors => vectors,
                p if on_host.contains(&p) => Tier::Host,
                _ => home,
            };
            let layout = match (tier, part) {
                (Tier::Gpu, Part::Small) => Layout::Replicated,
                (Tier::Gpu, _) if g > 1 => layout,
                (Tier::Gpu, _) => Layout::Replicated,
                _ => Layout::Single,
            };
            Placement {
                part,
                tier,
                layout,
                bytes: part.bytes(&s),
            }
        })
        .collect();
    let sum = |tier: Tier| -> u64 {
        placements
            .iter()
            .filter(|p| p.tier == tier)
            .map(|p| match p.layout {
                Layout::Split => p.bytes.div_ceil(g.max(1)),
                _ => p.bytes,
            })
            .sum()
    };
    Plan {
        sizes: s,
        shrinks,
        gpu_bytes: sum(Tier::Gpu),
        host_bytes: sum(Tier::Host),
        disk_bytes: sum(Tier::Disk),
        placements,
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = |b: u64| b as f64 / GIB as f64;
        writeln!(
            f,
            "{:<8} {:<5} {:<11} {:>10}",
            "part", "tier", "layout", "GiB"
        )?;
        for p in &self.placements {
            let name = match p.part {
                Part::Copies => "copies",
                Part::Sketch => "sketch",
                Part::Rows => "rows",
                Part::Small => "maps",
                Part::Vectors => "vectors",
            };
            writeln!(
                f,
                "{name:<8} {:<5} {:<11} {:>10.2}",
                format!("{:?}", p.tier).to_lowercase(),
                format!("{:?}", p.layout).to_lowercase(),
                gib(p.bytes)
            )?;
        }
        for s in &self.shrinks {
            match s {
                Shrink::ListLen { from, to } => {
                    writeln!(f, "shrink: ripples {from} -> {to} entries")?
                }
                Shrink::Copies { from, to } => writeln!(f, "shrink: copies {from} -> {to}")?,
            }
        }
        if self.placements.iter().any(|p| p.tier == Tier::Gpu) {
            write!(f, "per GPU {:.2} GiB, ", gib(self.gpu_bytes))?;
        }
        write!(
            f,
            "host {:.2} GiB, disk {:.2} GiB",
            gib(self.host_bytes),
            gib(self.disk_bytes)
        )?;
        if self.per_wave_off_gpu() {
            write!(
                f,
                "\nwarning: a part every wave reads is off the GPUs (2.6-3.9x slower in the paper)"
            )?;
        }
        Ok(())
    }
}

/// A byte size as written on a command line: `80e9`, `80GB`, `93GiB`,
/// `512MiB`, `1.5TB` or plain bytes.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a byte size (e.g. 80e9, 80GB, 93GiB)"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => GIB as f64,
        "tib" => GIB as f64 * 1024.0,
        other => return Err(format!("unknown unit '{other}' in '{text}'")),
    };
    let bytes = value * scale;
    if !(0.0..1.8e19).contains(&bytes) {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests;
