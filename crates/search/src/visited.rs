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

    /// Append to `fresh` the ids of `ids` not yet in the set, inserting them
    /// (an id repeated within `ids` is appended once). Without a branch on
    /// each id's membership for the bitset, which a query's rows make
    /// unpredictable.
    #[inline]
    pub fn insert_new(&mut self, ids: &[u32], fresh: &mut Vec<u32>) {
        match self {
            VisitedSet::Bits { words, touched } => {
                let start = fresh.len();
                fresh.resize(start + ids.len(), 0);
                let mut len = start;
                for &id in ids {
                    let w = (id >> 6) as usize;
                    let bit = 1u64 << (id & 63);
                    let old = words[w];
                    if old == 0 {
                        touched.push(w as u32);
                    }
                    words[w] = old | bit;
                    fresh[len] = id;
                    len += usize::from(old & bit == 0);
                }
                fresh.truncate(len);
            }
            VisitedSet::Hash(h) => {
                for &id in ids {
                    if h.insert(id) {
                        fresh.push(id);
                    }
                }
            }
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

    impl VisitedSet {
        fn insert(&mut self, id: u32) -> bool {
            let mut fresh = Vec::new();
            self.insert_new(&[id], &mut fresh);
            !fresh.is_empty()
        }
    }

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

    /// The batch insert appends what one-at-a-time inserts would, in order,
    /// repeats within a batch included, on both sets.
    #[test]
    fn batch_insert_appends_what_single_inserts_would() {
        let batches: [&[u32]; 3] = [
            &[5, 9, 5, 700, 64, 9],
            &[9, 63, 64, 65, 999],
            &[0, 0, 999, 1],
        ];
        let mut single = VisitedSet::new(1_000, 4);
        let mut want = Vec::new();
        for b in batches {
            want.extend(b.iter().copied().filter(|&id| single.insert(id)));
        }
        assert_eq!(want, [5, 9, 700, 64, 63, 65, 999, 0, 1]);
        for mut set in [VisitedSet::new(1_000, 4), VisitedSet::Hash(HashSet::new(4))] {
            let mut got = vec![42];
            for b in batches {
                set.insert_new(b, &mut got);
            }
            assert_eq!(got[1..], want[..]);
            set.clear();
            assert!(set.insert(5), "clear left 5 in the set");
        }
    }
}
