//! Filtered search: [`IdFilter`], the ids a search may return (a bitset over
//! the index's ids, as Faiss's `IDSelectorBitmap` and CAGRA's bitset
//! filter), and the choice between searching the index with it and scanning
//! the allowed ids exactly ([`FilteredPlan`]).
//!
//! A filtered search routes through every id (the neighbour rows of
//! disallowed vectors still lead to allowed ones) and answers from a second
//! list, the best `R` allowed ids by sketch distance; past `W` it runs more
//! waves while that list is not full, or its k-th distance is outside the
//! best `R` of all and the last wave improved it. Where the allowed ids are
//! few, reading them all costs less than the waves that would find them: the
//! search scans them.

use crate::{SearchError, SearchPlan};

/// The ids a search may return, over an index of `len()` vectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdFilter {
    words: Vec<u64>,
    len: usize,
    count: usize,
}

impl IdFilter {
    /// Every id of an index of `n` vectors allowed.
    pub fn all(n: usize) -> Self {
        let mut words = vec![u64::MAX; n.div_ceil(64)];
        if n % 64 != 0 {
            if let Some(last) = words.last_mut() {
                *last = (1u64 << (n % 64)) - 1;
            }
        }
        Self {
            words,
            len: n,
            count: n,
        }
    }

    /// No id allowed.
    pub fn none(n: usize) -> Self {
        Self {
            words: vec![0; n.div_ceil(64)],
            len: n,
            count: 0,
        }
    }

    /// Only `ids` allowed ([`SearchError::FilterId`] for an id past `n`).
    pub fn from_ids(n: usize, ids: impl IntoIterator<Item = u32>) -> Result<Self, SearchError> {
        let mut f = Self::none(n);
        for id in ids {
            if id as usize >= n {
                return Err(SearchError::FilterId { id, n });
            }
            f.allow(id);
        }
        Ok(f)
    }

    /// The ids whose entry of `mask` is true (`mask.len()` vectors).
    pub fn from_mask(mask: &[bool]) -> Self {
        let mut f = Self::none(mask.len());
        for (id, _) in mask.iter().enumerate().filter(|(_, &m)| m) {
            f.allow(id as u32);
        }
        f
    }

    /// Vectors the filter covers.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ids allowed.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether `id` may be returned (false past the covered ids).
    #[inline]
    pub fn allows(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.len && self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// Allow `id` (an id past the covered ones is ignored); true if it was
    /// not allowed before.
    pub fn allow(&mut self, id: u32) -> bool {
        let i = id as usize;
        if i >= self.len || self.allows(id) {
            return false;
        }
        self.words[i / 64] |= 1 << (i % 64);
        self.count += 1;
        true
    }

    /// Deny `id`; true if it was allowed before.
    pub fn deny(&mut self, id: u32) -> bool {
        if !self.allows(id) {
            return false;
        }
        let i = id as usize;
        self.words[i / 64] &= !(1 << (i % 64));
        self.count -= 1;
        true
    }

    /// Allow only what both filters allow (over the shorter's ids).
    pub fn intersect(&mut self, other: &IdFilter) {
        self.len = self.len.min(other.len);
        self.words.truncate(self.len.div_ceil(64));
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= b;
        }
        if self.len % 64 != 0 {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u64 << (self.len % 64)) - 1;
            }
        }
        self.count = self.words.iter().map(|w| w.count_ones() as usize).sum();
    }

    /// The allowed ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some((wi * 64) as u32 + b)
            })
        })
    }
}

/// How a filtered batch is searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FilteredPlan {
    /// The index's search, answering from the allowed ids met, with at most
    /// this many waves (`W` or more) to fill the answer list.
    Search { max_waves: usize },
    /// An exact scan of the allowed ids.
    Scan,
}

/// Allowed ids a filtered search expects per row entry read, as a share of
/// the filter's share of the index: rows lead to ids already met about half
/// the time.
const FRESH_ROW_SHARE: f64 = 0.5;

/// Bytes a scan reads per byte the search reads for the same cost: a scan
/// streams contiguous vectors, the search reads scattered sketch rows, key
/// slots and neighbour rows (each a cache miss).
const SCAN_BYTES_PER_SEARCH_BYTE: f64 = 4.0;

impl FilteredPlan {
    /// The plan for `plan` over an index of `n` vectors of `dim` stored
    /// coordinates (`vector_bytes` each) and sketch rows of `sketch_width`
    /// bytes, `allowed` of them allowed. The `k` nearest allowed ids are
    /// about the `k / share` nearest of all, so the search may run up to
    /// `W / share` waves (at least enough to meet `R` allowed ids, at most
    /// [`crate::MAX_WAVES`]; it stops earlier once a wave improves nothing);
    /// a scan of the allowed vectors replaces it where it reads less than
    /// [`SCAN_BYTES_PER_SEARCH_BYTE`] times what those waves would.
    pub fn new(
        plan: &SearchPlan,
        n: usize,
        allowed: usize,
        vector_bytes: usize,
        sketch_width: usize,
        row_len: usize,
        copies: usize,
    ) -> Self {
        let p = &plan.params;
        if allowed == 0 || n == 0 {
            return FilteredPlan::Scan;
        }
        let share = allowed as f64 / n as f64;
        let first = (copies * plan.read_depth) as f64 * share;
        let per_wave = (p.start_points * row_len) as f64 * share * FRESH_ROW_SHARE;
        let want = p.rerank.max(plan.k) as f64;
        let to_fill = ((want - first).max(0.0) / per_wave.max(1e-9)).ceil();
        let to_reach = (p.waves.max(1) as f64 / share).ceil();
        let waves = to_fill.max(to_reach).max(p.waves as f64);
        if waves > crate::MAX_WAVES as f64 {
            return FilteredPlan::Scan;
        }
        let waves = waves as usize;
        // The search stops well before its cap once a wave improves nothing:
        // its cost is taken at `W (1 + ln(1 / share))` waves (docs/RESULTS.md,
        // "Decisions").
        let expected = (p.waves.max(1) as f64 * (1.0 - share.ln())).min(waves as f64);
        let entries =
            copies * plan.read_depth + (expected * (p.start_points * row_len) as f64) as usize;
        let search_bytes = (entries * sketch_width + p.rerank * vector_bytes) as f64;
        let scan_bytes = (allowed * vector_bytes) as f64;
        if scan_bytes <= SCAN_BYTES_PER_SEARCH_BYTE * search_bytes {
            FilteredPlan::Scan
        } else {
            FilteredPlan::Search { max_waves: waves }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_count_what_they_allow() {
        for n in [0, 1, 63, 64, 65, 130] {
            let all = IdFilter::all(n);
            assert_eq!(all.count(), n);
            assert_eq!(all.ids().count(), n);
            assert!(!all.allows(n as u32));
            let mut some = IdFilter::from_ids(n, (0..n as u32).step_by(3)).unwrap();
            assert_eq!(some.count(), n.div_ceil(3));
            assert_eq!(
                some.ids().collect::<Vec<_>>(),
                (0..n as u32).step_by(3).collect::<Vec<_>>()
            );
            let mask: Vec<bool> = (0..n).map(|i| i % 2 == 0).collect();
            let even = IdFilter::from_mask(&mask);
            some.intersect(&even);
            assert!(some.ids().all(|id| id % 6 == 0));
            assert_eq!(some.count(), some.ids().count());
            assert!(!some.deny(1));
            if n > 0 {
                assert!(some.deny(0));
                assert!(!some.allows(0));
                assert!(some.allow(0));
                assert!(!some.allow(0));
            }
        }
        assert!(matches!(
            IdFilter::from_ids(10, [3, 10]),
            Err(SearchError::FilterId { id: 10, n: 10 })
        ));
    }
}
