//! Fragment keys.
//!
//! A fragment is the tuple of the `b` E8 points a projected vector rounds to. Its
//! exact name is the `8b` doubled integer coordinates; the index stores a 64-bit
//! **key** hashed from them, and the builder compares a second, independent 64-bit
//! **check** word to detect two different fragments that share a key (such keys
//! are dropped at build time, so a lookup never returns a foreign fragment's list).
//!
//! The key is never [`EMPTY_KEY`], which marks an unused slot in the key tables.

/// The key value that marks an empty slot of an open-addressing key table.
pub const EMPTY_KEY: u64 = u64::MAX;

const KEY_SEED: u64 = 0x243F_6A88_85A3_08D3;
const CHECK_SEED: u64 = 0x1319_8A2E_0370_7344;

/// MurmurHash3's 64-bit finaliser: a bijection with full avalanche.
#[inline(always)]
pub const fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

/// The hash chain of [`fragment_key`] fed one coordinate pair at a time, so a
/// decoder can hash blocks as it produces them (the GPU kernels do).
#[derive(Clone, Copy, Debug)]
pub struct KeyHasher {
    h: u64,
}

impl KeyHasher {
    /// A chain over `len` doubled coordinates.
    #[inline(always)]
    pub const fn new(seed: u64, len: usize) -> Self {
        Self {
            h: seed ^ (len as u64),
        }
    }

    /// The chain for fragment keys.
    #[inline(always)]
    pub const fn for_key(len: usize) -> Self {
        Self::new(KEY_SEED, len)
    }

    /// The chain for check words (see [`FragmentKey::check`]).
    #[inline(always)]
    pub const fn for_check(len: usize) -> Self {
        Self::new(CHECK_SEED, len)
    }

    /// Feed coordinates `2i` and `2i + 1` (`hi = 0` past an odd end).
    #[inline(always)]
    pub fn push_pair(&mut self, lo: i32, hi: i32) {
        let word = (lo as u32 as u64) | ((hi as u32 as u64) << 32);
        self.h = fmix64(self.h ^ word).wrapping_add(0x9E37_79B9_7F4A_7C15);
    }

    #[inline(always)]
    pub fn finish(self) -> u64 {
        fmix64(self.h)
    }

    /// The final key (never [`EMPTY_KEY`]).
    #[inline(always)]
    pub fn finish_key(self) -> u64 {
        let k = self.finish();
        if k == EMPTY_KEY {
            EMPTY_KEY - 1
        } else {
            k
        }
    }
}

#[inline(always)]
fn hash_coords(seed: u64, doubled: &[i32]) -> u64 {
    let mut h = KeyHasher::new(seed, doubled.len());
    for pair in doubled.chunks(2) {
        h.push_pair(pair[0], pair.get(1).copied().unwrap_or(0));
    }
    h.finish()
}

/// The 64-bit key of the fragment with these doubled coordinates (`8b` of them).
#[inline]
pub fn fragment_key(doubled: &[i32]) -> u64 {
    let mut h = KeyHasher::for_key(doubled.len());
    for pair in doubled.chunks(2) {
        h.push_pair(pair[0], pair.get(1).copied().unwrap_or(0));
    }
    h.finish_key()
}

/// Key and check word of one fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FragmentKey {
    /// What the index stores and looks up.
    pub key: u64,
    /// An independent hash of the same coordinates: two fragments with equal
    /// `key` and different `check` are a key collision.
    pub check: u64,
}

impl FragmentKey {
    pub fn from_doubled(doubled: &[i32]) -> Self {
        Self {
            key: fragment_key(doubled),
            check: hash_coords(CHECK_SEED, doubled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn keys_differ_for_neighbouring_fragments_and_check_separates() {
        let mut seen: HashMap<u64, Vec<i32>> = HashMap::new();
        let mut base = [0i32; 32];
        let mut collisions = 0;
        for a in -6..6 {
            for b in -6..6 {
                for c in -3..3 {
                    base[0] = 2 * a;
                    base[9] = 2 * b;
                    base[31] = 2 * c + 1;
                    let k = FragmentKey::from_doubled(&base);
                    assert_ne!(k.key, EMPTY_KEY);
                    if let Some(prev) = seen.insert(k.key, base.to_vec()) {
                        if prev != base.to_vec() {
                            collisions += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(collisions, 0);
        // The check word is independent of the key.
        let x = FragmentKey::from_doubled(&[2; 32]);
        let y = FragmentKey::from_doubled(&[2; 32]);
        assert_eq!(x, y);
        assert_ne!(x.key, x.check);
    }

    #[test]
    fn single_coordinate_change_flips_about_half_the_bits() {
        let a = fragment_key(&[0; 32]);
        let mut v = [0; 32];
        v[17] = 2;
        let b = fragment_key(&v);
        let flipped = (a ^ b).count_ones();
        assert!((16..=48).contains(&flipped), "{flipped} bits flipped");
    }
}
