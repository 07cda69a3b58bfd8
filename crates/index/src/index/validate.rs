//! Validation of an index's bytes before any view of them is handed out.
//!
//! A file that loads can be searched on the CPU and the GPU without a panic,
//! a hang or an out-of-bounds read, because `validate` guarantees:
//!
//! - **Framing**: magic, format version, header length and checksum; every
//!   section present once, in order, 64-byte aligned, inside the file, with
//!   its checksum (unless `LoadOptions::verify_checksums` is off); zero
//!   padding between sections; no byte after the last section.
//! - **Header**: every count positive; `n < 2^32 - 1` (ids fit `u32` beside
//!   `PAD_ID`); `dim = metric.stored_dim(input_dim)` (inner product stores one
//!   more); `m <= dim`, `8 b <= m_c <= m`; `b <= MAX_BLOCKS`; the sketch
//!   width a multiple of 16 up to `MAX_SKETCH_WIDTH`; `max_norm` finite and
//!   not negative.
//! - **Sizes**: each section holds exactly the bytes the header implies
//!   (checked multiplications), ripples whole lists.
//! - **Values**: mean, basis, bias, rotation, shifts, sketch scales and rerank
//!   vectors finite; spacings positive, finite and ascending.
//! - **Ids**: every neighbour-row and ripple id `< n` or `PAD_ID`.
//! - **Key tables**: capacity zero or a power of two at least twice the
//!   fragments; slots and ripples inside their arrays; every occupied slot
//!   (key not `EMPTY_KEY`) names a fragment `< fragments`, and exactly
//!   `fragments` slots are occupied, so a lookup always meets a free slot.
//!
//! What a search adds on top (the query, `k`, the parameters) is checked by
//! `octex-search` (`SearchPlan`).

use super::*;
use crate::table::EMPTY_KEY;

impl Index {
    pub(super) fn validate(
        storage: Storage,
        origin: String,
        opts: LoadOptions,
    ) -> Result<Self, IndexError> {
        let w = || origin.clone();
        let bytes = storage.bytes();
        let truncated = |problem: String| IndexError::Truncated {
            where_: w(),
            problem,
        };
        let invalid = |problem: String| IndexError::Invalid {
            where_: w(),
            problem,
        };
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            if bytes.len() < 8 && MAGIC.starts_with(bytes) {
                return Err(truncated(format!("{} bytes", bytes.len())));
            }
            if bytes.starts_with(crate::living::LIVING_MAGIC) {
                return Err(IndexError::LivingFile(w()));
            }
            return Err(IndexError::NotAnIndex(w()));
        }
        let (hbytes, version) =
            framed_header(bytes, OLDEST_FORMAT_VERSION..=FORMAT_VERSION, "", &origin)?;
        let decode = |h: &[u8]| {
            bincode::serde::decode_from_slice::<IndexHeader, _>(h, bincode_config())
                .map(|(header, _)| header)
                .map_err(|e| invalid(format!("header does not decode: {e}")))
        };
        // Versions 2 and 3 lack the last two fields and the last one, each an
        // `Option`: a `None` is one zero byte.
        let missing = FORMAT_VERSION.saturating_sub(version) as usize;
        let header = decode(&[hbytes, &vec![0u8; missing]].concat())?;
        if let Some(r) = header.query_shell {
            if !(r > 0.0 && r <= 1.0) || header.metric != Metric::InnerProduct {
                return Err(invalid(format!(
                    "query shell {r} for {:?} (inner product takes one in (0, 1])",
                    header.metric
                )));
            }
        }
        if header.search_defaults.is_some_and(|d| !d.is_valid()) {
            return Err(invalid(format!(
                "search defaults {:?} out of range",
                header.search_defaults
            )));
        }

        // Sections: present once each, in order, aligned, inside the file.
        if header.sections.len() != SectionKind::ALL.len() {
            return Err(invalid(format!(
                "{} sections, expected {}",
                header.sections.len(),
                SectionKind::ALL.len()
            )));
        }
        let mut ranges: [Range<usize>; SectionKind::ALL.len()] = Default::default();
        let mut prev_end = PREAMBLE_LEN + hbytes.len();
        for (i, (entry, kind)) in header.sections.iter().zip(SectionKind::ALL).enumerate() {
            if entry.kind != kind {
                return Err(invalid(format!(
                    "section {i} is {:?}, expected {kind:?}",
                    entry.kind
                )));
            }
            let start = entry.offset as usize;
            let end = start
                .checked_add(entry.len as usize)
                .ok_or_else(|| invalid(format!("{kind:?} overflows")))?;
            if start % SECTION_ALIGN != 0 || start < prev_end {
                return Err(invalid(format!("{kind:?} at offset {start} is misplaced")));
            }
            // The alignment padding before a section is zeros, as written: no
            // byte of a valid file lies outside the header and the checksums.
            if bytes[prev_end..start.min(bytes.len())]
                .iter()
                .any(|&b| b != 0)
            {
                return Err(invalid(format!("the padding before {kind:?} is not zero")));
            }
            if end > bytes.len() {
                return Err(truncated(format!(
                    "{kind:?} ends at byte {end}, file has {}",
                    bytes.len()
                )));
            }
            if opts.verify_checksums && xxh3_64(&bytes[start..end]) != entry.checksum {
                return Err(IndexError::Checksum {
                    where_: w(),
                    part: format!("{kind:?}"),
                });
            }
            ranges[i] = start..end;
            prev_end = end;
        }
        if bytes.len() != prev_end {
            return Err(invalid(format!(
                "{} bytes follow the last section",
                bytes.len() - prev_end
            )));
        }

        // Sizes implied by the header.
        let h = &header;
        let n = h.n as usize;
        let dim = h.dim as usize;
        let width = h.width();
        let sw = h.sketch_width as usize;
        let m = h.basis_dim as usize;
        let mc = h.rotation_dim as usize;
        if m == 0 || m > dim || mc < 8 * h.blocks as usize || mc > m {
            return Err(invalid(format!("basis of {m} and rotation of {mc} directions do not fit dimension {dim} and {} blocks", h.blocks)));
        }
        if n == 0
            || dim == 0
            || h.copies == 0
            || h.blocks == 0
            || h.spacings == 0
            || h.list_len == 0
            || sw == 0
            || h.row_len == 0
        {
            return Err(invalid("a count in the header is zero".into()));
        }
        if n >= PAD_ID as usize {
            return Err(invalid(format!("{n} vectors exceed the u32 id space")));
        }
        // Shapes the search engines are built for (fixed-size buffers, SIMD
        // and GPU loops), and the metric's stored dimension.
        let input_dim = h.input_dim as usize;
        if input_dim == 0 || h.metric.stored_dim(input_dim) != dim {
            return Err(invalid(format!(
                "metric {} with input dimension {input_dim} stores {} dimensions, the header says {dim}",
                h.metric,
                h.metric.stored_dim(input_dim)
            )));
        }
        if h.blocks > MAX_BLOCKS {
            return Err(invalid(format!(
                "{} blocks per copy, at most {MAX_BLOCKS} are supported",
                h.blocks
            )));
        }
        if sw % 16 != 0 || sw > MAX_SKETCH_WIDTH as usize {
            return Err(invalid(format!(
                "sketch width {sw} is not a multiple of 16 up to {MAX_SKETCH_WIDTH}"
            )));
        }
        if !(h.max_norm.is_finite() && h.max_norm >= 0.0) {
            return Err(invalid(format!(
                "max_norm {} is not a finite norm",
                h.max_norm
            )));
        }
        let vsize = match h.vector_dtype {
            VectorDtype::F16 => 2,
            VectorDtype::F32 => 4,
        };
        let tables_n = h.copies as usize * h.spacings as usize;
        let expect =
            |kind: SectionKind, elems: Option<usize>, esize: usize| -> Result<usize, IndexError> {
                let len = ranges[kind as usize].len();
                match elems {
                    Some(e) if e.checked_mul(esize) == Some(len) => Ok(e),
                    Some(e) => Err(invalid(format!(
                        "{kind:?} holds {len} bytes, expected {}",
                        e.saturating_mul(esize)
                    ))),
                    None if len % esize == 0 => Ok(len / esize),
                    None => Err(invalid(format!(
                        "{kind:?} holds {len} bytes, not a multiple of {esize}"
                    ))),
                }
            };
        use SectionKind::*;
        expect(Mean, Some(dim), 4)?;
        expect(Basis, dim.checked_mul(m), 4)?;
        expect(BasisBias, Some(m), 4)?;
        expect(Rotation, mc.checked_mul(width), 4)?;
        expect(Shifts, Some(width), 4)?;
        expect(Spacings, Some(h.spacings as usize), 4)?;
        expect(SketchScales, Some(sw), 4)?;
        expect(Sketch, n.checked_mul(sw), 1)?;
        expect(Rows, n.checked_mul(h.row_len as usize), 4)?;
        expect(Tables, Some(tables_n), std::mem::size_of::<TableEntry>())?;
        let slots = expect(TableKeys, None, 8)?;
        expect(TableSlots, Some(slots), 4)?;
        let ripple_ids = expect(Ripples, None, 4)?;
        if ripple_ids % h.list_len as usize != 0 {
            return Err(invalid("ripples are not whole lists".into()));
        }
        let fragments = ripple_ids / h.list_len as usize;
        expect(Vectors, n.checked_mul(dim), vsize)?;
        let centres = expect(SketchCentreScales, None, 4)?;
        if centres > MAX_SKETCH_CENTRES {
            return Err(invalid(format!(
                "{centres} sketch centres, at most {} are supported",
                MAX_SKETCH_CENTRES
            )));
        }
        expect(SketchCentres, centres.checked_mul(sw), 4)?;
        expect(SketchCentreIds, Some(if centres > 0 { n } else { 0 }), 2)?;

        let index = Self {
            storage,
            header,
            ranges,
            origin,
        };
        // Values every search trusts: finite floats, ids in range, tables in bounds.
        let finite = |kind: SectionKind, v: &[f32]| -> Result<(), IndexError> {
            if v.iter().all(|x| x.is_finite()) {
                Ok(())
            } else {
                Err(index.invalid(format!("{kind:?} holds a non-finite value")))
            }
        };
        finite(Mean, index.mean())?;
        finite(Basis, index.basis())?;
        finite(BasisBias, index.basis_bias())?;
        finite(Rotation, index.rotation())?;
        finite(Shifts, index.shifts())?;
        finite(SketchScales, index.sketch_scales())?;
        finite(SketchCentres, index.sketch_centres())?;
        if !index
            .sketch_centre_scales()
            .iter()
            .all(|&g| g > 0.0 && g.is_finite())
        {
            return Err(
                index.invalid("a sketch centre's scale is not a positive finite number".into())
            );
        }
        if index
            .sketch_centre_ids()
            .iter()
            .any(|&c| c as usize >= centres)
        {
            return Err(index.invalid(format!("a sketch centre id is not below {centres}")));
        }
        if !index.spacings().windows(2).all(|p| p[0] < p[1])
            || index
                .spacings()
                .iter()
                .any(|&s| !(s > 0.0 && s.is_finite()))
        {
            return Err(index.invalid("spacings must be positive and ascending".into()));
        }
        let ids_ok = |v: &[u32]| {
            v.par_chunks(1 << 20)
                .all(|c| c.iter().all(|&id| (id as usize) < n || id == PAD_ID))
        };
        if !ids_ok(index.rows()) {
            return Err(index.invalid("a neighbour row holds an id out of range".into()));
        }
        if !ids_ok(index.ripples()) {
            return Err(index.invalid("a ripple holds an id out of range".into()));
        }
        let vectors_finite = match index.vectors() {
            RerankView::F32(v) => v
                .par_chunks(1 << 20)
                .all(|c| c.iter().all(|x| x.is_finite())),
            RerankView::F16(v) => v
                .par_chunks(1 << 20)
                .all(|c| c.iter().all(|x| x.is_finite())),
        };
        if !vectors_finite {
            return Err(index.invalid("a rerank vector holds a non-finite value".into()));
        }
        for (t, e) in index.tables().iter().enumerate() {
            let cap = e.capacity as usize;
            let ok = (cap == 0 || cap.is_power_of_two())
                && (e.slot_offset as usize)
                    .checked_add(cap)
                    .is_some_and(|end| end <= slots)
                && (e.ripple_base as usize)
                    .checked_add(e.fragments as usize)
                    .is_some_and(|end| end <= fragments)
                && (e.fragments as usize) * 2 <= cap;
            if !ok {
                return Err(index.invalid(format!("key table {t} is out of bounds")));
            }
            // An occupied slot (any key but EMPTY_KEY) names a stored fragment
            // of this table, and exactly `fragments` slots are occupied: a
            // lookup reads only in-range ripples and always meets a free slot.
            let range = e.slot_offset as usize..e.slot_offset as usize + cap;
            let (keys, ids) = (
                &index.table_keys()[range.clone()],
                &index.table_slots()[range],
            );
            let mut occupied = 0u64;
            for (&k, &s) in keys.iter().zip(ids) {
                if k != EMPTY_KEY {
                    occupied += 1;
                    if s as u64 >= e.fragments {
                        return Err(index.invalid(format!(
                            "key table {t} names fragment {s} of {}",
                            e.fragments
                        )));
                    }
                }
            }
            if occupied != e.fragments {
                return Err(index.invalid(format!(
                    "key table {t} holds {occupied} keys for {} fragments",
                    e.fragments
                )));
            }
        }
        Ok(index)
    }

    pub(super) fn invalid(&self, problem: String) -> IndexError {
        IndexError::Invalid {
            where_: self.origin.clone(),
            problem,
        }
    }
}
