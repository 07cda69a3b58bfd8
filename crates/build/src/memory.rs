//! The memory an index may take: the budget that the default build
//! parameters are fitted to ([`crate::BuildParams::memory_budget`]).

use octex_search::Backend;
use serde::{Deserialize, Serialize};

/// Share of the GPU's memory an index may take by default: the rest holds
/// the search's batch buffers, its scratch and cuBLAS's workspace.
pub const GPU_SHARE: f64 = 0.8;
/// Share of the host's memory an index may take by default when it will be
/// searched on the CPU.
pub const HOST_SHARE: f64 = 0.5;

/// Bytes an index may take, and where the number came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryBudget {
    pub bytes: u64,
    /// For example "80% of GPU 0's 139.8 GiB", or "set by the caller".
    pub source: String,
}

impl MemoryBudget {
    /// A budget the caller set.
    pub fn explicit(bytes: u64) -> Self {
        Self {
            bytes,
            source: "set by the caller".into(),
        }
    }

    /// The default for an index built with `backend`, which is where it will
    /// be searched: [`GPU_SHARE`] of GPU 0's memory when the backend resolves
    /// to the GPU, else [`HOST_SHARE`] of the host's (`MemTotal`). `None`
    /// when neither can be read (no budget: the defaults stay as they are).
    pub fn for_backend(backend: Backend) -> Option<Self> {
        if backend.resolve().ok() == Some(Backend::Gpu) {
            if let Some(total) = gpu_total_memory() {
                return Some(Self::share(total, GPU_SHARE, "GPU 0's"));
            }
        }
        host_total_memory().map(|total| Self::share(total, HOST_SHARE, "the host's"))
    }

    fn share(total: u64, share: f64, what: &str) -> Self {
        Self {
            bytes: (total as f64 * share) as u64,
            source: format!(
                "{:.0}% of {what} {:.1} GiB",
                share * 100.0,
                total as f64 / (1u64 << 30) as f64
            ),
        }
    }
}

#[cfg(feature = "gpu")]
fn gpu_total_memory() -> Option<u64> {
    octex_kernels::total_memory(0).ok().map(|b| b as u64)
}

#[cfg(not(feature = "gpu"))]
fn gpu_total_memory() -> Option<u64> {
    None
}

/// `MemTotal` of `/proc/meminfo` in bytes (Linux); `None` elsewhere.
fn host_total_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_budget_is_half_its_memory() {
        let b = MemoryBudget::for_backend(Backend::Cpu).expect("Linux has /proc/meminfo");
        let total = host_total_memory().unwrap();
        assert_eq!(b.bytes, (total as f64 * HOST_SHARE) as u64);
        assert!(b.source.contains("50% of the host's"), "{}", b.source);
    }
}
