//! Generates `octex.h` from the `extern "C"` items with cbindgen (config in
//! `cbindgen.toml`) into `OUT_DIR`; a test compares it with the committed
//! `include/octex.h` (`OCTEX_UPDATE_HEADER=1` rewrites that). Also compiles
//! the C test program `tests/c/test_octex.c` against the committed header
//! into a static library that only the `c_program` test links (no
//! `rustc-link-lib` here: the library itself does not take it).
use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("crates/capi/cbindgen.toml parses");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write_to_file(out.join("octex.h"));
    println!("cargo:rerun-if-changed=tests/c");
    println!("cargo:rerun-if-changed=include");
    cc::Build::new()
        .file(crate_dir.join("tests/c/test_octex.c"))
        .include(crate_dir.join("include"))
        .std("c99")
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Werror")
        .cargo_metadata(false)
        .compile("octex_c_test");
    println!("cargo:rustc-link-search=native={}", out.display());
}
