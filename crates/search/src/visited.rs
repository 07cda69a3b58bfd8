//! A small open-addressing set of ids, reused across queries: the
//! de-duplication of a query's candidates. Sized from the most entries one query
//! can see; cleared by walking the slots it filled, not the whole table.

pub struct VisitedSet {
    slots: Vec<u32>,
    mask: usize,
    filled: Vec<u32>,
}

const EMPTY: u32 = u32::MAX;

impl VisitedSet {
    /// A set for up to `max_entries` ids at load <= 0.5.
    pub fn new(max_entries: usize) -> Self {
        let cap = (2 * max_entries.max(8)).next_power_of_two();
        Self {
            slots: vec![EMPTY; cap],
            mask: cap - 1,
            filled: Vec::with_capacity(max_entries),
        }
    }

    /// Insert; true when `id` was not in the set. Ids must not be `u32::MAX`.
    /// Beyond `max_entries` the set grows (correct, slower).
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

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.filled.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.filled.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedups_clears_and_grows() {
        let mut v = VisitedSet::new(4);
        for round in 0..3 {
            for i in 0..100u32 {
                assert!(v.insert(i * 7 + round));
                assert!(!v.insert(i * 7 + round));
            }
            assert_eq!(v.len(), 100);
            v.clear();
            assert!(v.is_empty());
        }
    }
}
