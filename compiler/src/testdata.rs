//! Deterministic pseudo-random inputs for tests and for the tuner's correctness check, with
//! no dependency: SplitMix64. Weight blocks get well-scaled f16 scales (random bytes would
//! give NaN/Inf scales) and random quant bits.

use half::f16;

use crate::dequant::WeightFormat;

/// SplitMix64: tiny, fast and good enough for test data.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }
}

/// `len` activations uniform in [-1, 1).
pub fn random_activations(len: usize, seed: u64) -> Vec<f32> {
    let mut r = SplitMix64::new(seed);
    (0..len).map(|_| r.uniform(-1.0, 1.0)).collect()
}

fn put_f16(bytes: &mut [u8], at: usize, v: f32) {
    bytes[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Raw GGUF bytes of an n×k tensor in `format` with random contents of realistic scale
/// (dequantized weights roughly within ±0.1).
pub fn random_weights(format: WeightFormat, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let mut r = SplitMix64::new(seed);
    let blocks = n * k / format.block_elems() as usize;
    let bb = format.block_bytes() as usize;
    let mut out = vec![0u8; blocks * bb];
    for block in out.chunks_mut(bb) {
        match format {
            WeightFormat::F32 => block.copy_from_slice(&r.uniform(-0.1, 0.1).to_le_bytes()),
            WeightFormat::F16 => put_f16(block, 0, r.uniform(-0.1, 0.1)),
            // The high half of the f32: every bf16 bit pattern in range, truncated.
            WeightFormat::BF16 => {
                block.copy_from_slice(&(r.uniform(-0.1, 0.1).to_bits() >> 16).to_le_bytes()[..2])
            }
            WeightFormat::Q8_0 => {
                put_f16(block, 0, r.uniform(0.0002, 0.001));
                block[2..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::Q5_0 => {
                put_f16(block, 0, r.uniform(0.002, 0.006));
                block[2..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
                put_f16(block, 0, r.uniform(0.003, 0.006));
                put_f16(block, 2, r.uniform(-0.1, -0.04));
                block[4..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::Q4_0 => {
                put_f16(block, 0, r.uniform(0.004, 0.012));
                block[2..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::Q5K => {
                put_f16(block, 0, r.uniform(0.0001, 0.0003));
                put_f16(block, 2, r.uniform(0.0002, 0.0008));
                block[4..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::Q4K => {
                put_f16(block, 0, r.uniform(0.0002, 0.0006));
                put_f16(block, 2, r.uniform(0.0002, 0.0008));
                block[4..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::IQ4NL => {
                put_f16(block, 0, r.uniform(0.0004, 0.0009));
                block[2..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::IQ4XS => {
                // Sub-block scales d·(ls - 32) with ls random in 0..64.
                put_f16(block, 0, r.uniform(0.00001, 0.00003));
                block[2..].iter_mut().for_each(|b| *b = r.byte());
            }
            WeightFormat::Q6K => {
                block[..208].iter_mut().for_each(|b| *b = r.byte());
                put_f16(block, 208, r.uniform(0.00002, 0.00006));
            }
        }
    }
    out
}
