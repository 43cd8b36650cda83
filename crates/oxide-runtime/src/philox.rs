//! Philox4x32-10, the counter-based random bit generator of Salmon, Moraes,
//! Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC '11).
//! Constants and round function from that paper (section 5.2) and its
//! reference implementation Random123; PyTorch's CUDA generator uses the same
//! engine.
//!
//! A generator state is a 64-bit key (the seed) and a 128-bit counter; each
//! counter value maps to 128 independent-looking bits. torch-oxide uses the
//! counter as (generator offset + element index), so every element's random
//! bits depend only on seed, offset and its index: the same seed gives the
//! same numbers whatever the thread count or chunking.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9; // golden ratio
const W1: u32 = 0xBB67_AE85; // sqrt(3) - 1

/// One Philox4x32 bijection keyed by a 64-bit seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Philox4x32 {
    key: [u32; 2],
}

#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

impl Philox4x32 {
    /// The engine for `seed` (low word first, as Random123 and PyTorch order the key).
    pub fn new(seed: u64) -> Philox4x32 {
        Philox4x32 { key: [seed as u32, (seed >> 32) as u32] }
    }

    /// Ten rounds of Philox4x32 on `counter`.
    #[inline]
    pub fn bijection(&self, counter: [u32; 4]) -> [u32; 4] {
        let mut c = counter;
        let mut k = self.key;
        for round in 0..10 {
            if round > 0 {
                k[0] = k[0].wrapping_add(W0);
                k[1] = k[1].wrapping_add(W1);
            }
            let (hi0, lo0) = mulhilo(M0, c[0]);
            let (hi1, lo1) = mulhilo(M1, c[2]);
            c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
        }
        c
    }

    /// The 128 bits of block `index` (a 128-bit counter whose low 64 bits are `index`).
    #[inline]
    pub fn block(&self, index: u64) -> [u32; 4] {
        self.bijection([index as u32, (index >> 32) as u32, 0, 0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_key(key: [u32; 2]) -> Philox4x32 {
        Philox4x32::new(key[0] as u64 | (key[1] as u64) << 32)
    }

    // Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
    #[test]
    fn known_answers() {
        assert_eq!(with_key([0, 0]).bijection([0, 0, 0, 0]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(
            with_key([u32::MAX, u32::MAX]).bijection([u32::MAX; 4]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            with_key([0xa4093822, 0x299f31d0]).bijection([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344]),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn blocks_differ_by_index_and_seed() {
        let p = Philox4x32::new(42);
        assert_ne!(p.block(0), p.block(1));
        assert_ne!(p.block(0), Philox4x32::new(43).block(0));
        assert_eq!(p.block(7), Philox4x32::new(42).block(7));
    }
}
