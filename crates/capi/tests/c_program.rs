//! Compiles `tests/c/test_octex.c` against the committed header and this
//! crate's shared library, runs it, and requires every C check to hold (the
//! program prints "N passed, M failed"). `cargo test` builds only the rlib a
//! test links, so the test first asks cargo for the cdylib (the same
//! profile and target folder: everything but the final link is built).
use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_c_test_program_passes() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // target/<profile>/deps/this-test -> target/<profile>, where the cdylib is.
    let exe = std::env::current_exe().unwrap();
    let lib_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    let release = lib_dir.file_name().is_some_and(|n| n == "release");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--lib", "--manifest-path"])
        .arg(manifest.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(lib_dir.parent().unwrap());
    if release {
        cargo.arg("--release");
    }
    let built = cargo.output().expect("run cargo");
    assert!(
        built.status.success(),
        "cargo build of the cdylib failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(
        lib_dir.join("liboctex_capi.so").exists() || lib_dir.join("liboctex_capi.dylib").exists(),
        "no liboctex_capi shared library in {}",
        lib_dir.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("test_octex");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg(manifest.join("tests/c/test_octex.c"))
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-loctex_capi", "-lm", "-o"])
        .arg(&bin)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&bin).arg(tmp.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(
        run.status.success() && stdout.contains(" 0 failed"),
        "the C checks failed"
    );
}
