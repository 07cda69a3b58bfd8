//! `cargo xtask kernel-report`: the registers, stack and spills of each
//! `wave_search` build, as `ptxas -v` compiles the module the driver loads
//! (the PTX with each build's launch bounds, `octex_kernels::bounded_ptx`).
//!
//! The builds run at 64 or 80 registers a thread, and the search body spills
//! a few hundred bytes in each; a change anywhere in it moves those spills,
//! and measured as much as the change itself (docs/RESULTS.md). This shows
//! the spills on a machine without a GPU. `ptxas` comes from `--ptxas`,
//! `$OCTEX_PTXAS`, the `PATH`, or `scripts/fetch-ptxas.sh` (CUDA's
//! `nvidia-cuda-nvcc` wheel from PyPI, into `target/ptxas/`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

#[derive(clap::Args)]
pub struct KernelReportArgs {
    /// The ptxas to run.
    #[arg(long)]
    ptxas: Option<PathBuf>,
    /// The GPU architecture to compile for.
    #[arg(long, default_value = "sm_90")]
    arch: String,
    /// Where the bounded PTX and ptxas's output go.
    #[arg(long, default_value = "target/kernel-report")]
    out: PathBuf,
}

/// What `ptxas -v` says of one entry.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EntryReport {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

pub fn run(args: KernelReportArgs) -> Result<()> {
    let ptxas = find_ptxas(args.ptxas.as_deref())?;
    std::fs::create_dir_all(&args.out)?;
    let ptx = args.out.join("octex_kernels.bounded.ptx");
    std::fs::write(&ptx, octex_kernels::bounded_ptx())?;
    let output = Command::new(&ptxas)
        .arg(format!("-arch={}", args.arch))
        .arg("-v")
        .arg(&ptx)
        .arg("-o")
        .arg(args.out.join("octex_kernels.cubin"))
        .output()
        .with_context(|| format!("running {}", ptxas.display()))?;
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    std::fs::write(args.out.join("ptxas.log"), &log)?;
    if !output.status.success() {
        bail!("ptxas failed ({}):\n{log}", output.status);
    }
    let entries = parse_ptxas(&log);
    println!(
        "{} on {} ({}), launch bounds as the driver loads them:",
        ptxas.display(),
        args.arch,
        ptx.display()
    );
    println!(
        "{:<22} {:>7} {:>10} {:>9} {:>6} {:>7} {:>10} {:>12}",
        "build", "threads", "blocks/SM", "registers", "cap", "stack", "spill st", "spill ld"
    );
    for k in octex_kernels::SearchKernel::ALL {
        let (entry, threads, blocks) = (k.entry(), k.threads(), k.blocks_per_sm());
        let Some(e) = entries.iter().find(|e| e.name == entry) else {
            bail!("ptxas said nothing of {entry}");
        };
        let cap = (65536 / (threads * blocks)).min(255) & !7;
        println!(
            "{:<22} {threads:>7} {blocks:>10} {:>9} {cap:>6} {:>7} {:>10} {:>12}",
            e.name, e.registers, e.stack_bytes, e.spill_store_bytes, e.spill_load_bytes
        );
    }
    let other: Vec<_> = entries
        .iter()
        .filter(|e| !e.name.starts_with("wave_search") && e.spill_store_bytes > 0)
        .map(|e| format!("{} ({} B)", e.name, e.spill_store_bytes))
        .collect();
    if !other.is_empty() {
        println!("other kernels that spill: {}", other.join(", "));
    }
    Ok(())
}

/// `--ptxas`, `$OCTEX_PTXAS`, `ptxas` on the `PATH`, or the one
/// `scripts/fetch-ptxas.sh` unpacks.
fn find_ptxas(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    if let Ok(p) = std::env::var("OCTEX_PTXAS") {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("ptxas"))
            .find(|p| p.is_file())
    }) {
        return Ok(p);
    }
    let fetched = PathBuf::from("target/ptxas/bin/ptxas");
    if fetched.is_file() {
        return Ok(fetched);
    }
    bail!("no ptxas: run scripts/fetch-ptxas.sh (CUDA's compiler from PyPI), or pass --ptxas / set OCTEX_PTXAS")
}

/// The per-entry lines of `ptxas -v`: "Compiling entry function 'NAME'",
/// then "N bytes stack frame, S bytes spill stores, L bytes spill loads" and
/// "Used R registers".
pub fn parse_ptxas(log: &str) -> Vec<EntryReport> {
    let number_before = |line: &str, word: &str| -> Option<u32> {
        let at = line.find(word)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut entries: Vec<EntryReport> = Vec::new();
    // The function whose properties the next stack line gives: the entry's
    // own, or a device function's (panic helpers), which are not counted.
    let mut properties_of = String::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            entries.push(EntryReport {
                name,
                ..Default::default()
            });
            continue;
        }
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            properties_of = rest.trim().to_string();
            continue;
        }
        let Some(e) = entries.last_mut() else {
            continue;
        };
        if line.contains("bytes stack frame") {
            if properties_of == e.name {
                e.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                e.spill_store_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
                e.spill_load_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
            }
        } else if line.contains("Used ") && line.contains("registers") {
            e.registers = number_before(line, "registers").unwrap_or(0);
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as ptxas 13.5 prints them.
    const LOG: &str = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'wave_search_narrow' for 'sm_90'
ptxas info    : Function properties for wave_search_narrow
    160 bytes stack frame, 308 bytes spill stores, 460 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 160 bytes cumulative stack size
ptxas info    : Compile time = 1020.004 ms
ptxas info    : Function properties for _RNvNtCsbSE61zFgCyu_4core9panicking9panic_fmt
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'iota' for 'sm_90'
ptxas info    : Function properties for iota
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers
";

    #[test]
    fn reads_registers_and_spills_of_each_entry() {
        let e = parse_ptxas(LOG);
        assert_eq!(
            e,
            vec![
                EntryReport {
                    name: "wave_search_narrow".into(),
                    registers: 64,
                    stack_bytes: 160,
                    spill_store_bytes: 308,
                    spill_load_bytes: 460
                },
                EntryReport {
                    name: "iota".into(),
                    registers: 6,
                    ..Default::default()
                }
            ]
        );
    }

    #[test]
    fn every_search_build_has_its_bounds_in_the_loaded_module() {
        let ptx = octex_kernels::bounded_ptx();
        for k in octex_kernels::SearchKernel::ALL {
            let (entry, threads, blocks) = (k.entry(), k.threads(), k.blocks_per_sm());
            let at = ptx.find(&format!(".entry {entry}(")).expect(entry);
            let body = at + ptx[at..].find("\n{").unwrap();
            let head = &ptx[at..body];
            assert!(
                head.contains(&format!(".maxntid {threads}, 1, 1\n.minnctapersm {blocks}")),
                "{entry}"
            );
        }
    }
}
