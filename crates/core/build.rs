//! Publishes this crate's source folder to direct dependents
//! (`DEP_OCTEX_CORE_SOURCE`): octex-kernels builds its nvptx kernel crate
//! against the same `octex-core`.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    println!("cargo::metadata=source={dir}");
    println!("cargo::rerun-if-changed=build.rs");
}
