//! Seeded Gaussian and uniform draws on ChaCha8, so that a build is reproducible
//! from its seed on every platform (no platform `libm` in the sampling path but
//! `ln`, `sqrt`, `cos`, which are correctly rounded enough for a seed to give the
//! same map; the tests check it).

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// A reproducible source of uniform and standard normal numbers.
pub struct GaussianRng {
    rng: ChaCha8Rng,
    spare: Option<f64>,
}

impl GaussianRng {
    /// A generator for `seed`, on its own `stream` (so that, e.g., copy 7's draws
    /// do not depend on how many draws copy 6 made).
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        Self { rng, spare: None }
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        self.spare = Some(r * t.sin());
        r * t.cos()
    }

    /// A raw 64-bit word.
    pub fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }
}
