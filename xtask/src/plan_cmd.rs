//! `cargo xtask plan`: where each part of an index would live on a machine
//! (`octex-placement`), for a built index or one predicted from `n` and `D`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use octex_build::{BuildParams, SizeEstimate};
use octex_placement::{parse_bytes, plan, Machine, GIB};
use octex_search::Backend;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// A built index (its section sizes).
    #[arg(long, conflicts_with_all = ["n", "dim"])]
    pub index: Option<PathBuf>,
    /// Vectors of a predicted index (`1e9` allowed).
    #[arg(long, value_parser = parse_count)]
    pub n: Option<u64>,
    /// Dimension of a predicted index.
    #[arg(long)]
    pub dim: Option<usize>,
    /// Build parameters of a predicted index (default: the GPU build's).
    #[arg(long)]
    pub copies: Option<usize>,
    #[arg(long)]
    pub list_len: Option<usize>,
    #[arg(long)]
    pub min_fragment: Option<usize>,
    #[arg(long)]
    pub sketch_width: Option<usize>,
    #[arg(long)]
    pub row_len: Option<usize>,
    /// GPUs (0: a CPU search).
    #[arg(long, default_value_t = 1)]
    pub gpus: u32,
    /// Memory of each GPU (`80e9`, `80GB`, `141GB`, `93GiB`).
    #[arg(long, default_value = "80GB", value_parser = parse_bytes)]
    pub gpu_mem: u64,
    /// Host memory the index may take.
    #[arg(long, default_value = "512GB", value_parser = parse_bytes)]
    pub host_mem: u64,
    /// Disk space for parts read from the file (default: unbounded).
    #[arg(long, value_parser = parse_bytes)]
    pub disk: Option<u64>,
    /// Share of each GPU kept for search buffers.
    #[arg(long, default_value_t = 0.1)]
    pub gpu_headroom: f64,
}

fn parse_count(text: &str) -> Result<u64, String> {
    let v: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a count"))?;
    if !(1.0..4.3e9).contains(&v) || v.fract() != 0.0 {
        return Err(format!("'{text}': a count from 1 to 2^32 - 2"));
    }
    Ok(v as u64)
}

pub fn run(args: PlanArgs) -> Result<()> {
    let (what, sizes) = match (&args.index, args.n, args.dim) {
        (Some(path), _, _) => {
            let index = octex_index::Index::load(path)?;
            let h = index.header();
            (
                format!("{} ({} x {})", path.display(), h.n, h.input_dim),
                octex_build::placement_sizes(&index),
            )
        }
        (None, Some(n), Some(dim)) => {
            let params = BuildParams {
                backend: Backend::Gpu,
                copies: args.copies,
                list_len: args.list_len,
                min_fragment: args.min_fragment,
                sketch_width: args.sketch_width,
                row_len: args.row_len,
                ..Default::default()
            };
            let p = params.resolve(n as usize, dim);
            let s = SizeEstimate::typical(&p);
            (
                format!(
                    "predicted {n} x {dim} (C={} l={} pmin={} w={} Lt={})",
                    p.copies, p.list_len, p.min_fragment, p.sketch_width, p.row_len
                ),
                s.for_placement(p.copies as u32, p.list_len as u32),
            )
        }
        _ => bail!("give --index, or --n and --dim"),
    };
    let machine = Machine {
        disk: args.disk,
        gpu_headroom: args.gpu_headroom,
        ..Machine::new(args.gpus, args.gpu_mem, args.host_mem)
    };
    println!(
        "{what}: {:.2} GiB in all ({:.2} GiB read every wave)",
        sizes.total() as f64 / GIB as f64,
        sizes.per_wave() as f64 / GIB as f64
    );
    let gpus = match machine.gpus {
        0 => "no GPU (a CPU search)".to_string(),
        g => format!(
            "{g} GPU(s) of {:.1} GiB ({:.1} GiB usable each)",
            machine.gpu_memory as f64 / GIB as f64,
            machine.gpu_capacity() as f64 / GIB as f64
        ),
    };
    println!(
        "on {gpus}, host {:.1} GiB{}",
        machine.host_memory as f64 / GIB as f64,
        match machine.disk {
            Some(d) => format!(", disk {:.1} GiB", d as f64 / GIB as f64),
            None => String::new(),
        }
    );
    println!("{}", plan(&sizes, &machine)?);
    Ok(())
}
