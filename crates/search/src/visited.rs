//! The de-duplication of a query's candidates, reused across queries.
//!
//! Decision: a dense bitset over all ids when the index holds at most
//! [`BITSET_MAX_IDS`] vectors (`n / 8` bytes per thread: 49 KB for GloVe-50, in
//! L2), where a test-and-set is a shift and a mask; an open-addressing hash set
//! sized from the most entries one query can see above that. Both clear only what
//! the query touched.

/// Largest index searched with the bitset (2 MiB of bits per thread).
pub const BITSET_MAX_IDS: usize = 16 << 20;

pub enum VisitedSet {
    Bits { words: Vec<u64>, touched: Vec<u32> },
    Hash(HashSet),
}

impl VisitedSet {
    /// A set for ids below `n`, expecting up to `max_entries` per query.
    pub fn new(n: usize, max_entries: usize) -> Self {
        if n <= BITSET_MAX_IDS {
            VisitedSet::Bits {
                words: vec![0; n.div_ceil(64)],
                touched: Vec::with_capacity(max_entries),
            }
        } else {
            VisitedSet::Hash(HashSet::new(max_entries))
        }
    }

    /// Insert; true when `id` was not in the set.
    #[inline]
    pub fn insert(&mut self, id: u32) -> bool {
        match self {
            VisitedSet::Bits { words, touched } => {
                let w = (id >> 6) as usize;
                let bit = 1u64 << (id & 63);
                let old = words[w];
                if old & bit != 0 {
                    return false;
                }
                if old == 0 {
                    touched.push(w as u32);
                }
                words[w] = old | bit;
                true
            }
            VisitedSet::Hash(h) => h.insert(id),
        }
    }

    pub fn clear(&mut self) {
        match self {
            VisitedSet::Bits { words, touched } => {
                for &w in touched.iter() {
                    words[w as usize] = 0;
                }
                touched.clear();
            }
            VisitedSet::Hash(h) => h.clear(),
        }
    }
}

/// Open-addressing set of ids for indexes too large for the bitset.
pub struct HashSet {
    slots: Vec<u32>,
    mask: usize,
    filled: Vec<u32>,
}

const EMPTY: u32 = u32::MAX;

impl HashSet {
    /// A set for up to `max_entries` ids at load <= 0.5 (it grows beyond).
    pub fn new(max_entries: usize) -> Self {
        let cap = (2 * max_entries.max(8)).next_power_of_two();
        Self {
            slots: vec![EMPTY; cap],
            mask: cap - 1,
            filled: Vec::with_capacity(max_entries),
        }
    }

    /// Insert; true when `id` was not in the set. Ids must not be `u32::MAX`.
    #[inline]
    pub fn insert(&mut self, id: u32) -> bool {
        if 2 * self.filled.len() >= self.slots.len() {
            self.grow();
        }
        let mut s = (id.wrapping_mul(0x9E37_79B1) as usize) & self.mask;
        loop {
            let v = self.slots[s];
            if v == id {
                return false;
            }
            if v == EMPTY {
                self.slots[s] = id;
                self.filled.push(s as u32);
                return true;
            }
            s = (s + 1) & self.mask;
        }
    }

    fn grow(&mut self) {
        let ids: Vec<u32> = self
            .filled
            .iter()
            .map(|&s| self.slots[s as usize])
            .collect();
        let cap = self.slots.len() * 2;
        self.slots = vec![EMPTY; cap];
        self.mask = cap - 1;
        self.filled.clear();
        for id in ids {
            self.insert(id);
        }
    }

    pub fn clear(&mut self) {
        for &s in &self.filled {
            self.slots[s as usize] = EMPTY;
        }
        self.filled.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sets_dedup_clear_and_agree() {
        let mut bits = VisitedSet::new(1_000, 4);
        let mut hash = VisitedSet::Hash(HashSet::new(4));
        for round in 0..3u32 {
            for i in 0..100u32 {
                let id = (i * 7 + round) % 1_000;
                assert!(bits.insert(id));
                assert!(hash.insert(id));
                assert!(!bits.insert(id));
                assert!(!hash.insert(id));
            }
            bits.clear();
            hash.clear();
            assert!(bits.insert(round) && hash.insert(round));
            bits.clear();
            hash.clear();
        }
    }
}
