//! Contiguous runs converted between float32 and the half-precision types,
//! vectorised: what `load`/`store` of the iteration engine use whenever a
//! float16 or bfloat16 operand meets a float32 compute type (every half kernel,
//! and `.to(torch.float16)` itself).
//!
//! The element-wise route (`Element::cast`, through double) converts one value at
//! a time, which made `.to(torch.float16)` several times slower than CPU PyTorch
//! (ARCHITECTURE.md, "Measurements"). Here float16 uses the F16C/AVX-512
//! conversion instructions 8 or 16 lanes at a time where the build targets them
//! (the avx2 and avx512 builds), else the `half` crate's slice conversion (which
//! detects F16C at run time); bfloat16 is integer arithmetic the compiler
//! vectorises. Results are bit for bit those of the element-wise route: both round
//! to nearest even, and a NaN stays a quiet NaN with its payload's top bits.
//!
//! Same-type runs of a few KiB (a staging block, a row) are copied by
//! [`copy_elements`], with vector moves rather than `memcpy`: glibc's `memmove` takes
//! `rep movsb` at that size on the AMD EPYC hosts, and an in-place `x.mul_(0.9)` whose
//! blocks were staged that way ran at a third of a plain loop's speed (ARCHITECTURE.md).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::DType;

/// Copies `n` elements of `T` from `src` to `dst` with unaligned vector moves
/// written out (32 bytes a step; see the module documentation for why not `memcpy`).
///
/// # Safety
/// `src` must hold `n` readable elements, `dst` room for `n` writable ones, and the
/// two must not overlap.
#[inline]
pub unsafe fn copy_elements<T: Copy>(src: *const T, dst: *mut T, n: usize) {
    let bytes = n * std::mem::size_of::<T>();
    if bytes == 0 {
        return; // an empty tensor's pointer may be null, which even a 0-byte copy may not take
    }
    let (src, dst) = (src as *const u8, dst as *mut u8);
    #[cfg(target_arch = "x86_64")]
    let done = {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        let full = bytes / 32 * 32;
        let mut j = 0;
        while j < full {
            // SAFETY: caller contract (j + 32 <= bytes); SSE2 is part of x86-64, and the
            // capability builds fuse the pairs into wider moves.
            unsafe {
                let a = _mm_loadu_si128(src.add(j) as *const __m128i);
                let b = _mm_loadu_si128(src.add(j + 16) as *const __m128i);
                _mm_storeu_si128(dst.add(j) as *mut __m128i, a);
                _mm_storeu_si128(dst.add(j + 16) as *mut __m128i, b);
            }
            j += 32;
        }
        full
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    // SAFETY: caller contract; the tail is under 32 bytes.
    unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), bytes - done) };
}

/// Converts `n` contiguous elements of dtype `from` at `src` into `n` of dtype `to`
/// at `dst` when the pair is float32 <-> float16 or float32 <-> bfloat16 and both
/// pointers are aligned to their element type; returns false (having done
/// nothing) for any other pair.
///
/// # Safety
/// `src` must hold `n` readable elements of `from`, `dst` room for `n` writable
/// elements of `to`, and the two must not overlap.
pub unsafe fn contiguous(from: DType, src: *const u8, to: DType, dst: *mut u8, n: usize) -> bool {
    let aligned = |p: usize, dt: DType| p.is_multiple_of(dt.size());
    if !matches!((from, to), (DType::F32, DType::F16 | DType::BF16) | (DType::F16 | DType::BF16, DType::F32))
        || !aligned(src as usize, from)
        || !aligned(dst as usize, to)
    {
        return false;
    }
    // SAFETY: the caller's contract (n elements each side, no overlap); alignment
    // checked above; every bit pattern is a valid f32, f16 and bf16.
    unsafe {
        let (src_f32, dst_f32) = (src as *const f32, dst as *mut f32);
        match (from, to) {
            (DType::F32, DType::F16) => {
                f32_to_f16(std::slice::from_raw_parts(src_f32, n), std::slice::from_raw_parts_mut(dst as *mut f16, n))
            }
            (DType::F32, _) => {
                f32_to_bf16(std::slice::from_raw_parts(src_f32, n), std::slice::from_raw_parts_mut(dst as *mut bf16, n))
            }
            (DType::F16, _) => {
                f16_to_f32(std::slice::from_raw_parts(src as *const f16, n), std::slice::from_raw_parts_mut(dst_f32, n))
            }
            _ => bf16_to_f32(
                std::slice::from_raw_parts(src as *const bf16, n),
                std::slice::from_raw_parts_mut(dst_f32, n),
            ),
        }
    }
    true
}

/// float32 -> float16, rounding to nearest even.
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(all(target_arch = "x86_64", target_feature = "avx512f"))]
    {
        use std::arch::x86_64::*;
        let (mut s, mut d) = (src.chunks_exact(16), dst.chunks_exact_mut(16));
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: 16 readable floats at `s`, 16 writable halves at `d` (unaligned
            // accesses); the build targets avx512f.
            unsafe {
                let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm512_loadu_ps(s.as_ptr()));
                _mm256_storeu_si256(d.as_mut_ptr() as *mut __m256i, h);
            }
        }
        d.into_remainder().convert_from_f32_slice(s.remainder());
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "f16c", not(target_feature = "avx512f")))]
    {
        use std::arch::x86_64::*;
        let (mut s, mut d) = (src.chunks_exact(8), dst.chunks_exact_mut(8));
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: 8 readable floats at `s`, 8 writable halves at `d` (unaligned
            // accesses); the build targets f16c and avx.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s.as_ptr()));
                _mm_storeu_si128(d.as_mut_ptr() as *mut __m128i, h);
            }
        }
        d.into_remainder().convert_from_f32_slice(s.remainder());
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "f16c")))]
    dst.convert_from_f32_slice(src);
}

/// float16 -> float32 (exact).
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(all(target_arch = "x86_64", target_feature = "avx512f"))]
    {
        use std::arch::x86_64::*;
        let (mut s, mut d) = (src.chunks_exact(16), dst.chunks_exact_mut(16));
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: 16 readable halves at `s`, 16 writable floats at `d` (unaligned
            // accesses); the build targets avx512f.
            unsafe {
                let f = _mm512_cvtph_ps(_mm256_loadu_si256(s.as_ptr() as *const __m256i));
                _mm512_storeu_ps(d.as_mut_ptr(), f);
            }
        }
        s.remainder().convert_to_f32_slice(d.into_remainder());
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "f16c", not(target_feature = "avx512f")))]
    {
        use std::arch::x86_64::*;
        let (mut s, mut d) = (src.chunks_exact(8), dst.chunks_exact_mut(8));
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: 8 readable halves at `s`, 8 writable floats at `d` (unaligned
            // accesses); the build targets f16c and avx.
            unsafe {
                let f = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr() as *const __m128i));
                _mm256_storeu_ps(d.as_mut_ptr(), f);
            }
        }
        s.remainder().convert_to_f32_slice(d.into_remainder());
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "f16c")))]
    src.convert_to_f32_slice(dst);
}

/// float32 -> bfloat16, rounding to nearest even; a NaN becomes a quiet NaN
/// keeping the top of its payload (as `half::bf16::from_f32`).
pub fn f32_to_bf16(src: &[f32], dst: &mut [bf16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        let x = s.to_bits();
        // Round half to even: add 0x7fff plus the lowest kept bit, then truncate.
        let rounded = (x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16) as u16;
        let nan = ((x >> 16) | 0x0040) as u16;
        *d = bf16::from_bits(if x & 0x7fff_ffff > 0x7f80_0000 { nan } else { rounded });
    }
}

/// bfloat16 -> float32 (exact).
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((s.to_bits() as u32) << 16);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_elements_copies_every_length_and_nothing_beyond() {
        for n in [0usize, 1, 7, 8, 9, 31, 32, 33, 1000, 1024] {
            let src: Vec<u8> = (0..n + 40).map(|i| (i * 7 + 3) as u8).collect();
            let mut dst = vec![0xAAu8; n + 40];
            // SAFETY: both buffers hold n + 40 bytes; the copy starts at offset 1 (unaligned).
            unsafe { copy_elements(src.as_ptr().add(1), dst.as_mut_ptr().add(1), n) };
            assert_eq!(&dst[1..n + 1], &src[1..n + 1], "n = {n}");
            assert!(dst[0] == 0xAA && dst[n + 1..].iter().all(|&b| b == 0xAA), "n = {n}: wrote outside");
            let wide: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
            let mut out = vec![0f64; n];
            // SAFETY: n elements each.
            unsafe { copy_elements(wide.as_ptr(), out.as_mut_ptr(), n) };
            assert_eq!(out, wide);
        }
    }

    /// Every float16 and bfloat16 bit pattern, and float32 values around every
    /// rounding boundary (ties, overflow, subnormals, NaN payloads), against the
    /// element-wise conversions of the `half` crate.
    fn samples() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect();
        v.extend((0..=u16::MAX).map(|b| bf16::from_bits(b).to_f32()));
        let edges: Vec<u32> = (0..=u16::MAX as u32).map(|b| b << 16).collect();
        for e in edges {
            for d in [0x7fffu32, 0x8000, 0x8001, 0x1000, 0xffff, 0x0fff, 0x1fff, 0x2000, 0x2001] {
                v.push(f32::from_bits(e | d));
            }
        }
        v.extend([65504.0, 65519.99, 65520.0, 1e-8, 5.96e-8, 2.98e-8, 2.99e-8, f32::MAX, f32::MIN_POSITIVE]);
        v
    }

    #[test]
    fn float16_matches_elementwise_both_ways() {
        let src = samples();
        let mut h = vec![f16::ZERO; src.len()];
        f32_to_f16(&src, &mut h);
        for (i, (&s, &got)) in src.iter().zip(&h).enumerate() {
            let want = f16::from_f32(s);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{i}: {s:e}");
        }
        let halves: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut back = vec![0f32; halves.len()];
        f16_to_f32(&halves, &mut back);
        for (h, f) in halves.iter().zip(&back) {
            assert!(f.to_bits() == h.to_f32().to_bits() || (f.is_nan() && h.is_nan()), "{h:?}");
        }
    }

    #[test]
    fn bfloat16_matches_elementwise_both_ways() {
        let src = samples();
        let mut b = vec![bf16::ZERO; src.len()];
        f32_to_bf16(&src, &mut b);
        for (&s, &got) in src.iter().zip(&b) {
            assert_eq!(got.to_bits(), bf16::from_f32(s).to_bits(), "{s:e} ({:#x})", s.to_bits());
        }
        let halves: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let mut back = vec![0f32; halves.len()];
        bf16_to_f32(&halves, &mut back);
        for (h, f) in halves.iter().zip(&back) {
            // A NaN keeps its bits (c10's bfloat16 -> float is the bare shift; the
            // `half` crate quiets a signalling NaN instead).
            assert!(f.to_bits() == h.to_f32().to_bits() || (h.is_nan() && f.to_bits() == (h.to_bits() as u32) << 16));
        }
    }

    #[test]
    fn odd_lengths_convert_every_element() {
        for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 33] {
            let src: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 3.0).collect();
            let mut h = vec![f16::ZERO; n];
            f32_to_f16(&src, &mut h);
            let mut back = vec![f32::NAN; n];
            f16_to_f32(&h, &mut back);
            for i in 0..n {
                assert_eq!(h[i], f16::from_f32(src[i]));
                assert_eq!(back[i], h[i].to_f32());
            }
        }
    }
}
