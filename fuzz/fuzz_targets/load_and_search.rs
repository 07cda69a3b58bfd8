//! Load an index from arbitrary bytes and, when it loads, search it: no input
//! may panic, hang or read out of bounds.
//!
//! The first input byte chooses the mode. Bit 0: verify checksums (off lets
//! corruption reach the validator). Bit 1: the rest of the input is a whole
//! file; otherwise it is a list of 5-byte edits (offset `u32` LE, value) of
//! the small valid index in `seeds/small.octex`, an offset past its end
//! truncating there: most inputs then stay close enough to a valid file to
//! exercise the validator's later checks and the search.
#![no_main]

use libfuzzer_sys::fuzz_target;
use octex_index::{Index as RawIndex, LoadOptions};
use octex_search::{Index, SearchParams};

static SEED: &[u8] = include_bytes!("../seeds/small.octex");

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let opts = LoadOptions {
        verify_checksums: mode & 1 == 1,
    };
    let bytes = if mode & 2 == 2 {
        rest.to_vec()
    } else {
        let mut b = SEED.to_vec();
        for edit in rest.chunks_exact(5) {
            let at = u32::from_le_bytes([edit[0], edit[1], edit[2], edit[3]]) as usize;
            let at = at % (SEED.len() + 64);
            if at < b.len() {
                b[at] = edit[4];
            } else {
                b.truncate(at.min(b.len()));
            }
        }
        b
    };
    let Ok(raw) = RawIndex::from_bytes(&bytes, opts) else {
        return;
    };
    let index = Index::new(raw);
    let dim = index.dim();
    let queries: Vec<f32> = (0..4 * dim)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3)
        .collect();
    for p in [
        SearchParams::default(),
        SearchParams {
            read_depth: 64,
            start_points: 4,
            waves: 1,
            rerank: 4,
            wave_rerank: false,
        },
    ] {
        let _ = index.search(&queries, 10.min(index.len()), &p);
        let _ = index.search_one(&queries[..dim], 1, &p);
    }
});
