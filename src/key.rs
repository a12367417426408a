//! Stable key hashing: which partition a key goes to, the same in every run.

use std::hash::{Hash, Hasher};

/// FNV-1a, 64-bit: stable across runs and processes (unlike `std`'s randomly seeded hasher), so a
/// key always maps to the same partition.
struct Fnv1a(u64);

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// The stable hash of a key.
pub(crate) fn hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = Fnv1a(0xcbf2_9ce4_8422_2325);
    key.hash(&mut h);
    h.finish()
}

/// The partition for a key hash: the hash is mixed (splitmix64's finalizer, since FNV's low bits
/// are weak for short keys) and scaled onto `0..partitions` with a multiply, not a modulo.
pub(crate) fn partition(hash: u64, partitions: u32) -> u32 {
    let mut z = hash;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    ((u128::from(z) * u128::from(partitions)) >> 64) as u32
}
