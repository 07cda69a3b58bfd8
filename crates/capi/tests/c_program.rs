//! Compiles `tests/c/test_octex.c` against the committed header and the
//! shared library cargo just built, runs it, and requires every C check to
//! hold (the program prints "N passed, M failed").
use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_c_test_program_passes() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // target/<profile>/deps/this-test -> target/<profile>, where the cdylib is.
    let exe = std::env::current_exe().unwrap();
    let lib_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
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
