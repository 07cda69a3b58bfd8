//! Builds the kernels in `gpu/` to PTX for `nvptx64-nvidia-cuda` with the pinned
//! nightly (`-Zbuild-std=core`, linked by `llvm-bitcode-linker`) and puts the
//! PTX into `OUT_DIR` for `include_str!`.
//!
//! Falls back to the committed `ptx/octex_kernels.ptx` when the nightly or the
//! linker is missing, or when `OCTEX_PTX_PREBUILT=1`, so a stable-only machine
//! still builds. `OCTEX_PTX_ORIGIN` tells the crate which one it got; a test
//! compares a fresh build with the committed file.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

/// The nightly the kernels are built with (`.ci/run` installs it).
const KERNEL_TOOLCHAIN: &str = "nightly-2026-05-20";
const PTX_NAME: &str = "octex_kernels.ptx";

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    let gpu = manifest.join("gpu");
    let committed = manifest.join("ptx").join(PTX_NAME);
    let dst = out.join(PTX_NAME);
    // octex-core's source folder (its build script publishes it), which the
    // kernel crate depends on: the same files the host compiles.
    let core = PathBuf::from(env::var("DEP_OCTEX_CORE_SOURCE").expect("octex-core sets it"));
    for p in [
        gpu.join("src"),
        gpu.join("kernels.toml"),
        manifest.join("ptx"),
    ] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-changed={}", core.join("src").display());
    for v in ["OCTEX_KERNEL_TOOLCHAIN", "OCTEX_PTX_PREBUILT"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let origin = if env::var("OCTEX_PTX_PREBUILT").as_deref() == Ok("1") {
        fs::copy(&committed, &dst).expect("copy the committed PTX");
        "committed"
    } else {
        match build_ptx(&gpu, &core, &out) {
            Ok(p) => {
                fs::copy(p, &dst).expect("copy the built PTX");
                "built"
            }
            Err(e) => {
                let why = e.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
                println!("cargo:warning=octex-kernels: using the committed PTX ({why})");
                fs::copy(&committed, &dst).expect("copy the committed PTX");
                "committed"
            }
        }
    };
    println!("cargo:rustc-env=OCTEX_PTX_ORIGIN={origin}");
}

fn sysroot(mut cmd: Command) -> Option<PathBuf> {
    let o = cmd.args(["--print", "sysroot"]).output().ok()?;
    o.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

/// `llvm-bitcode-linker` of the nightly, else of the toolchain running us.
fn bitcode_linker(toolchain: &str) -> Option<PathBuf> {
    let host = env::var("HOST").ok()?;
    let in_sysroot = |s: PathBuf| {
        s.join("lib/rustlib")
            .join(&host)
            .join("bin/self-contained/llvm-bitcode-linker")
    };
    let mut nightly = Command::new("rustup");
    nightly
        .args(["run", toolchain, "rustc"])
        .env_remove("RUSTUP_TOOLCHAIN");
    let current = Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into()));
    [sysroot(nightly), sysroot(current)]
        .into_iter()
        .flatten()
        .map(in_sysroot)
        .find(|p| p.is_file())
}

/// The kernel crate's manifest (`gpu/kernels.toml` with its paths filled
/// in), written to `out/kernel-crate/Cargo.toml`.
fn kernel_manifest(gpu: &Path, core: &Path, out: &Path) -> Result<PathBuf, String> {
    let template = fs::read_to_string(gpu.join("kernels.toml"))
        .map_err(|e| format!("cannot read gpu/kernels.toml: {e}"))?;
    let path = |p: &Path| p.display().to_string().replace('\\', "/");
    let text = template
        .replace("@SRC@", &path(&gpu.join("src/lib.rs")))
        .replace("@CORE@", &path(core));
    let dir = out.join("kernel-crate");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let manifest = dir.join("Cargo.toml");
    fs::write(&manifest, text).map_err(|e| format!("cannot write {}: {e}", manifest.display()))?;
    Ok(manifest)
}

fn build_ptx(gpu: &Path, core: &Path, out: &Path) -> Result<PathBuf, String> {
    let manifest = kernel_manifest(gpu, core, out)?;
    let toolchain = env::var("OCTEX_KERNEL_TOOLCHAIN").unwrap_or_else(|_| KERNEL_TOOLCHAIN.into());
    let linker = bitcode_linker(&toolchain).ok_or_else(|| {
        format!("no llvm-bitcode-linker for {toolchain} (rustup component add llvm-bitcode-linker)")
    })?;
    let target_dir = out.join("nvptx");
    let flags = [
        "-Ctarget-cpu=sm_90".to_string(),
        "-Ctarget-feature=+ptx80".into(),
        format!("-Clinker={}", linker.display()),
    ]
    .join("\x1f");
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        &toolchain,
        "cargo",
        "build",
        "--release",
        "--target",
        "nvptx64-nvidia-cuda",
    ])
    .args(["-Zbuild-std=core", "--manifest-path"])
    .arg(&manifest)
    .arg("--target-dir")
    .arg(&target_dir);
    // The inner build must not inherit the outer cargo's configuration.
    for (k, _) in env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        let cargo_var = k.starts_with("CARGO_")
            && k != "CARGO_HOME"
            && !k.starts_with("CARGO_NET")
            && !k.starts_with("CARGO_REGISTRIES");
        let outer = [
            "CARGO",
            "RUSTC",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "RUSTFLAGS",
            "RUSTDOCFLAGS",
            "RUSTUP_TOOLCHAIN",
            "TARGET",
            "HOST",
            "OUT_DIR",
            "OPT_LEVEL",
            "PROFILE",
            "DEBUG",
            "NUM_JOBS",
            "RUSTC_LINKER",
        ]
        .contains(&k.as_str());
        if cargo_var || outer {
            cmd.env_remove(&k);
        }
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags);
    // Capture the child's output: its stdout must not reach cargo's protocol.
    let o = cmd
        .output()
        .map_err(|e| format!("cannot run rustup: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let ptx = target_dir.join("nvptx64-nvidia-cuda/release/octex_kernels_gpu.ptx");
    if ptx.is_file() {
        Ok(ptx)
    } else {
        Err(format!("the build left no {}", ptx.display()))
    }
}
