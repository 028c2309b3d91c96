//! A small, fast, seedable random number generator (xoshiro256** seeded by
//! SplitMix64) with uniform and normal draws. normlab owns its RNG so that a
//! seed means the same numbers forever, whatever crate versions change.

/// xoshiro256** generator.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
    spare: Option<f64>,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator from a seed (any value, including 0).
    pub fn new(seed: u64) -> Rng {
        let mut st = seed;
        let s = [
            splitmix(&mut st),
            splitmix(&mut st),
            splitmix(&mut st),
            splitmix(&mut st),
        ];
        Rng { s, spare: None }
    }

    /// A generator for a named sub-stream of `seed`, so that e.g. data and
    /// initialisation draws do not shift when one of them changes.
    pub fn derive(seed: u64, stream: &str) -> Rng {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in stream.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        Rng::new(seed ^ h.rotate_left(17))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [0, n) (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Lemire's multiply-shift; the tiny bias is irrelevant here.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Standard normal (Box-Muller, both values used) through std's `ln`,
    /// `sin` and `cos` (the platform's C library on native targets): what
    /// training draws.
    pub fn normal(&mut self) -> f64 {
        self.box_muller(f64::ln, f64::sin, f64::cos)
    }

    /// The same draw through the `libm` crate's `log`, `sin` and `cos`: the
    /// same bits on every target, WebAssembly included, where std's differ
    /// from the C library's in the last bit for a few percent of inputs
    /// (the depth simulator, which the browser build runs too, draws here).
    pub fn normal_portable(&mut self) -> f64 {
        self.box_muller(libm::log, libm::sin, libm::cos)
    }

    fn box_muller(&mut self, ln: fn(f64) -> f64, sin: fn(f64) -> f64, cos: fn(f64) -> f64) -> f64 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        let r = (-2.0 * ln(u1)).sqrt();
        let t = std::f64::consts::TAU * u2;
        self.spare = Some(r * sin(t));
        r * cos(t)
    }

    /// Fill with N(mean, std^2) values.
    pub fn fill_normal(&mut self, out: &mut [f32], mean: f32, std: f32) {
        for v in out {
            *v = mean + std * self.normal() as f32;
        }
    }

    /// A vector of N(mean, std^2) values.
    pub fn normal_vec(&mut self, n: usize, mean: f32, std: f32) -> Vec<f32> {
        let mut v = vec![0.0; n];
        self.fill_normal(&mut v, mean, std);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_portable_normal_is_the_same_draw_to_the_last_bits() {
        // The same uniforms through two libms: equal but for an ulp or two.
        let (mut a, mut b) = (Rng::new(11), Rng::new(11));
        for _ in 0..100_000 {
            let (x, y) = (a.normal(), b.normal_portable());
            assert!(
                (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(1.0),
                "{x} {y}"
            );
        }
    }

    #[test]
    fn same_seed_same_stream_and_sane_moments() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        let mut r = Rng::new(1);
        let v = r.normal_vec(100_000, 0.0, 1.0);
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let s = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(m.abs() < 0.02 && (s - 1.0).abs() < 0.02, "{m} {s}");
        assert_ne!(
            Rng::derive(1, "data").next_u64(),
            Rng::derive(1, "init").next_u64()
        );
    }
}
