//! The living index file: a built index with what adds and removes changed
//! since it was built (user ids, removed vectors, vectors not yet inserted).
//!
//! ```text
//! offset 0   magic  "OCTEXLIV"                      8 bytes
//!        8   living format version (u32 LE)         [`LIVING_VERSION`]
//!       12   header length (u32 LE)
//!       16   header checksum (xxh3-64, u64 LE)
//!       24   header: bincode (standard config) of [`LivingHeader`]
//!   then     the sections of [`LivingSection::ALL`], each at a multiple of
//!            64 bytes with its xxh3-64 checksum in the header, then the
//!            built index's own file image ([`crate::format`]) at a multiple
//!            of 64 bytes, to the end of the file.
//! ```
//!
//! An index file without adds or removes stays a plain index file;
//! [`load_any`] reads both. Writes are atomic ([`crate::atomic`]), so a crash
//! during a save leaves the previous file whole. Loading validates the frame,
//! the checksums, the sizes, that pending vectors are finite, and that no
//! user id is live twice; the embedded index is validated as any index file
//! (and memory-mapped in place).

use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;

use memmap2::Mmap;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::atomic::write_atomically;
use crate::format::{align_up, bincode_config, framed_header, PREAMBLE_LEN, SECTION_ALIGN};
use crate::{Index, IndexError, LoadOptions};

/// First bytes of a living index file.
pub const LIVING_MAGIC: &[u8; 8] = b"OCTEXLIV";
/// Version of the living layout this crate reads and writes.
pub const LIVING_VERSION: u32 = 1;

/// The state beside the built index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveState {
    /// User id of each built vector (`n`).
    pub built_ids: Vec<u64>,
    /// Removed built vectors: bit `i % 64` of word `i / 64` (`ceil(n / 64)`
    /// words).
    pub removed: Vec<u64>,
    /// User ids of the vectors not yet inserted.
    pub pending_ids: Vec<u64>,
    /// Those vectors, in the input space (`pending_ids.len() x input_dim`).
    pub pending: Vec<f32>,
    /// The id the next add without ids starts from.
    pub next_id: u64,
}

impl LiveState {
    /// Whether built vector `i` was removed.
    pub fn is_removed(&self, i: usize) -> bool {
        self.removed
            .get(i / 64)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
}

/// The sections of a living file, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LivingSection {
    BuiltIds,
    Removed,
    PendingIds,
    Pending,
}

impl LivingSection {
    pub const ALL: [LivingSection; 4] = [
        LivingSection::BuiltIds,
        LivingSection::Removed,
        LivingSection::PendingIds,
        LivingSection::Pending,
    ];

    fn bytes(self, s: &LiveState) -> &[u8] {
        match self {
            LivingSection::BuiltIds => bytemuck::cast_slice(&s.built_ids),
            LivingSection::Removed => bytemuck::cast_slice(&s.removed),
            LivingSection::PendingIds => bytemuck::cast_slice(&s.pending_ids),
            LivingSection::Pending => bytemuck::cast_slice(&s.pending),
        }
    }
}

/// Place and checksum of a part of a living file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivingEntry {
    pub offset: u64,
    pub len: u64,
    pub checksum: u64,
}

/// Everything in a living file but its arrays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LivingHeader {
    pub crate_version: String,
    pub next_id: u64,
    /// One entry per [`LivingSection::ALL`].
    pub sections: Vec<LivingEntry>,
    /// The embedded index file (its checksums are its own: `checksum` 0).
    pub index: LivingEntry,
}

/// What [`load_any`] found.
pub enum Loaded {
    /// A plain index file.
    Plain(Index),
    /// A living index file.
    Living(Index, LiveState),
}

/// Write `index` and `state` as a living file, atomically.
pub fn save_living(path: &Path, index: &Index, state: &LiveState) -> Result<(), IndexError> {
    check_state(index, state).map_err(|problem| IndexError::Invalid {
        where_: String::new(),
        problem,
    })?;
    let image = index.as_bytes();
    let sums: Vec<u64> = LivingSection::ALL
        .iter()
        .map(|s| xxh3_64(s.bytes(state)))
        .collect();
    let mut header = LivingHeader {
        crate_version: env!("CARGO_PKG_VERSION").to_string(),
        next_id: state.next_id,
        sections: vec![
            LivingEntry {
                offset: 0,
                len: 0,
                checksum: 0
            };
            LivingSection::ALL.len()
        ],
        index: LivingEntry {
            offset: 0,
            len: image.len() as u64,
            checksum: 0,
        },
    };
    // Offsets change the header's encoded length: iterate until stable.
    let header_bytes = loop {
        let bytes = bincode::serde::encode_to_vec(&header, bincode_config()).map_err(|e| {
            IndexError::Invalid {
                where_: String::new(),
                problem: format!("living header does not encode: {e}"),
            }
        })?;
        let mut off = align_up(PREAMBLE_LEN + bytes.len());
        let mut changed = false;
        for ((entry, kind), &checksum) in header
            .sections
            .iter_mut()
            .zip(LivingSection::ALL)
            .zip(&sums)
        {
            let len = kind.bytes(state).len() as u64;
            let new = LivingEntry {
                offset: off as u64,
                len,
                checksum,
            };
            changed |= new != *entry;
            *entry = new;
            off = align_up(off + len as usize);
        }
        changed |= header.index.offset != off as u64;
        header.index.offset = off as u64;
        if !changed {
            break bytes;
        }
    };
    let write = |w: &mut std::io::BufWriter<std::fs::File>| -> std::io::Result<()> {
        use std::io::Write;
        w.write_all(LIVING_MAGIC)?;
        w.write_all(&LIVING_VERSION.to_le_bytes())?;
        w.write_all(&(header_bytes.len() as u32).to_le_bytes())?;
        w.write_all(&xxh3_64(&header_bytes).to_le_bytes())?;
        w.write_all(&header_bytes)?;
        let mut at = PREAMBLE_LEN + header_bytes.len();
        let zeros = [0u8; SECTION_ALIGN];
        let parts = LivingSection::ALL
            .iter()
            .map(|s| s.bytes(state))
            .chain(std::iter::once(image));
        for (bytes, start) in parts.zip(
            header
                .sections
                .iter()
                .chain(std::iter::once(&header.index))
                .map(|e| e.offset as usize),
        ) {
            w.write_all(&zeros[..start - at])?;
            w.write_all(bytes)?;
            at = start + bytes.len();
        }
        Ok(())
    };
    write_atomically(path, write).map_err(|source| IndexError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Load a plain or a living index file, fully validated.
pub fn load_any(path: &Path) -> Result<Loaded, IndexError> {
    let io = |source| IndexError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: read-only private map; octex replaces files by rename and never
    // writes one in place; every part is validated before it is read as data.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    if map.len() < 8 || &map[..8] != LIVING_MAGIC {
        drop(map);
        return Index::load(path).map(Loaded::Plain);
    }
    let origin = format!("{}: ", path.display());
    let (header, ranges) = frame(&map, &origin)?;
    let part = |i: usize| &map[ranges[i].clone()];
    // Every section holds whole 8-byte ids or words (4-byte values for the
    // pending vectors).
    for (i, kind) in LivingSection::ALL.iter().enumerate() {
        let size = if *kind == LivingSection::Pending {
            4
        } else {
            8
        };
        if part(i).len() % size != 0 {
            return Err(IndexError::Invalid {
                where_: origin,
                problem: format!("{kind:?} holds {} bytes, not whole values", part(i).len()),
            });
        }
    }
    // Copies (the map need not align a section for u64 reads).
    let words = |b: &[u8]| -> Vec<u64> { bytemuck::pod_collect_to_vec(b) };
    let state = LiveState {
        built_ids: words(part(0)),
        removed: words(part(1)),
        pending_ids: words(part(2)),
        pending: bytemuck::pod_collect_to_vec(part(3)),
        next_id: header.next_id,
    };
    let image = header.index.offset as usize..map.len();
    let index = Index::from_mapped_part(map, image, origin.clone(), LoadOptions::default())?;
    check_state(&index, &state).map_err(|problem| IndexError::Invalid {
        where_: origin,
        problem,
    })?;
    Ok(Loaded::Living(index, state))
}

/// The header and section ranges of a living file's bytes, checked: frame,
/// header checksum, section order, alignment, bounds, zero padding and
/// checksums; the index image from its offset to the end.
fn frame(bytes: &[u8], origin: &str) -> Result<(LivingHeader, Vec<Range<usize>>), IndexError> {
    let truncated = |problem: String| IndexError::Truncated {
        where_: origin.to_string(),
        problem,
    };
    let invalid = |problem: String| IndexError::Invalid {
        where_: origin.to_string(),
        problem,
    };
    let (hbytes, _) = framed_header(bytes, LIVING_VERSION..=LIVING_VERSION, "living ", origin)?;
    let (header, _): (LivingHeader, usize) =
        bincode::serde::decode_from_slice(hbytes, bincode_config())
            .map_err(|e| invalid(format!("living header does not decode: {e}")))?;
    if header.sections.len() != LivingSection::ALL.len() {
        return Err(invalid(format!(
            "{} living sections, expected {}",
            header.sections.len(),
            LivingSection::ALL.len()
        )));
    }
    let mut ranges = Vec::with_capacity(LivingSection::ALL.len());
    let mut prev_end = PREAMBLE_LEN + hbytes.len();
    let entries = header.sections.iter().chain(std::iter::once(&header.index));
    let names = LivingSection::ALL.iter().map(|k| format!("{k:?}"));
    for (entry, name) in entries.zip(names.chain(std::iter::once("index".to_string()))) {
        let start = entry.offset as usize;
        let end = start
            .checked_add(entry.len as usize)
            .ok_or_else(|| invalid(format!("{name} overflows")))?;
        if start % SECTION_ALIGN != 0 || start < prev_end {
            return Err(invalid(format!("{name} at offset {start} is misplaced")));
        }
        if end > bytes.len() {
            return Err(truncated(format!(
                "{name} ends at byte {end}, file has {}",
                bytes.len()
            )));
        }
        if bytes[prev_end..start].iter().any(|&b| b != 0) {
            return Err(invalid(format!("the padding before {name} is not zero")));
        }
        if name != "index" && xxh3_64(&bytes[start..end]) != entry.checksum {
            return Err(IndexError::Checksum {
                where_: origin.to_string(),
                part: name,
            });
        }
        ranges.push(start..end);
        prev_end = end;
    }
    if prev_end != bytes.len() {
        return Err(invalid(format!(
            "{} bytes follow the index",
            bytes.len() - prev_end
        )));
    }
    Ok((header, ranges))
}

/// Why `state` does not fit `index`, if it does not: sizes, finite pending
/// vectors, no removal bit past `n`, no live user id twice.
fn check_state(index: &Index, s: &LiveState) -> Result<(), String> {
    let n = index.len();
    let dim = index.input_dim();
    if s.built_ids.len() != n {
        return Err(format!(
            "{} user ids for {n} built vectors",
            s.built_ids.len()
        ));
    }
    if s.removed.len() != n.div_ceil(64) {
        return Err(format!(
            "{} removal words for {n} built vectors",
            s.removed.len()
        ));
    }
    if n % 64 != 0 && s.removed.last().is_some_and(|w| w >> (n % 64) != 0) {
        return Err("removal bits past the built vectors".into());
    }
    if s.pending.len() != s.pending_ids.len() * dim {
        return Err(format!(
            "{} pending values for {} pending vectors of dimension {dim}",
            s.pending.len(),
            s.pending_ids.len()
        ));
    }
    if let Some(i) = s.pending.iter().position(|v| !v.is_finite()) {
        return Err(format!("pending vector {} is not finite", i / dim.max(1)));
    }
    let mut seen = HashSet::with_capacity(n + s.pending_ids.len());
    let live_built = (0..n).filter(|&i| !s.is_removed(i)).map(|i| s.built_ids[i]);
    for id in live_built.chain(s.pending_ids.iter().copied()) {
        if !seen.insert(id) {
            return Err(format!("user id {id} is live twice"));
        }
        if id == u64::MAX || id >= s.next_id {
            return Err(format!(
                "user id {id} is not below the next id {}",
                s.next_id
            ));
        }
    }
    Ok(())
}
