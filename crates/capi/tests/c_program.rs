//! Runs the C test program `tests/c/test_octex.c` (compiled by build.rs
//! against the committed header, with `-Wall -Wextra -Werror`) in this test
//! binary, where the `octex_*` symbols come from the crate under test. Every
//! C check must hold (it prints "N passed, M failed" and returns nonzero on
//! a failure).
use std::ffi::{c_char, c_int, CString};

#[link(name = "octex_c_test", kind = "static")]
extern "C" {
    fn octex_c_test_main(argc: c_int, argv: *const *const c_char) -> c_int;
}

// Link the crate under test so that the C code's octex_* calls resolve.
use octex_capi as _;

#[test]
fn the_c_test_program_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        CString::new("test_octex").unwrap(),
        CString::new(tmp.path().to_str().unwrap()).unwrap(),
    ];
    let argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    // SAFETY: argv holds two NUL-terminated strings that outlive the call.
    let failed = unsafe { octex_c_test_main(2, argv.as_ptr()) };
    assert_eq!(failed, 0, "C checks failed (see the FAILED lines above)");
}
