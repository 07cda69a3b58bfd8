//! Fragment key tables: one open-addressing hash table per (copy, spacing).
//!
//! Decision: open addressing with linear probing at load factor <= 0.5, capacity a
//! power of two, slot = `key & (capacity - 1)` (keys are already strong hashes).
//! A lookup costs ~1.5 probes on average, each one 8-byte read, and needs no
//! directory: the GPU kernel runs the same loop. Each slot holds the key (`u64`,
//! [`EMPTY_KEY`] when unused) and, in a parallel `u32` array, the fragment's ordinal
//! within its table; the fragment's ripple is `list_len` ids at
//! `ripples[(ripple_base + ordinal) * list_len ..]`, padded with [`PAD_ID`].

pub use octex_lattice::EMPTY_KEY;

/// Id that pads short ripples and neighbour rows.
pub const PAD_ID: u32 = u32::MAX;

/// Where one (copy, spacing) table lives in the flat arrays.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TableEntry {
    /// First slot of this table in the key and slot arrays.
    pub slot_offset: u64,
    /// Slots (a power of two, at least twice the fragments; 0 for an empty table).
    pub capacity: u64,
    /// First fragment of this table in the ripple array (in units of ripples).
    pub ripple_base: u64,
    /// Stored fragments.
    pub fragments: u64,
}

/// Capacity for `fragments` keys at load <= 0.5.
pub fn table_capacity(fragments: usize) -> usize {
    if fragments == 0 {
        0
    } else {
        (2 * fragments).next_power_of_two()
    }
}

/// Insert distinct `keys` (ordinal = position) into fresh slot arrays.
pub fn build_table(keys: &[u64]) -> (Vec<u64>, Vec<u32>) {
    let cap = table_capacity(keys.len());
    let mut slot_keys = vec![EMPTY_KEY; cap];
    let mut slot_ids = vec![u32::MAX; cap];
    let mask = cap.wrapping_sub(1);
    for (i, &k) in keys.iter().enumerate() {
        debug_assert_ne!(k, EMPTY_KEY);
        let mut s = (k as usize) & mask;
        while slot_keys[s] != EMPTY_KEY {
            debug_assert_ne!(slot_keys[s], k, "duplicate key");
            s = (s + 1) & mask;
        }
        slot_keys[s] = k;
        slot_ids[s] = i as u32;
    }
    (slot_keys, slot_ids)
}

/// Find `key` in one table's slots; the fragment ordinal if stored.
#[inline]
pub fn lookup(slot_keys: &[u64], slot_ids: &[u32], key: u64) -> Option<u32> {
    let cap = slot_keys.len();
    if cap == 0 {
        return None;
    }
    let mask = cap - 1;
    let mut s = (key as usize) & mask;
    // Load <= 0.5 guarantees an empty slot, so the loop ends; the bound keeps a
    // corrupted table from spinning.
    for _ in 0..cap {
        let k = slot_keys[s];
        if k == key {
            return Some(slot_ids[s]);
        }
        if k == EMPTY_KEY {
            return None;
        }
        s = (s + 1) & mask;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_found_and_others_are_not() {
        let keys: Vec<u64> = (0..1000u64)
            .map(|i| octex_lattice::key::fmix64(i + 1))
            .collect();
        let (sk, si) = build_table(&keys);
        assert!(sk.len() >= 2000 && sk.len().is_power_of_two());
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(lookup(&sk, &si, k), Some(i as u32));
        }
        for i in 5000..6000u64 {
            assert_eq!(lookup(&sk, &si, octex_lattice::key::fmix64(i)), None);
        }
        assert_eq!(lookup(&[], &[], 5), None);
    }
}
