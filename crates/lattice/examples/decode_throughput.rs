//! E8 decoder throughput on one core: `cargo run --release -p octex-lattice --example decode_throughput`.

use std::time::Instant;

use octex_lattice::{decode_e8, fragment_key, GaussianRng};

fn main() {
    let n = 4_000_000;
    let mut rng = GaussianRng::new(1, 0);
    let pts: Vec<[f32; 8]> = (0..n)
        .map(|_| core::array::from_fn(|_| (rng.normal() * 3.0) as f32))
        .collect();
    for _ in 0..2 {
        let t = Instant::now();
        let mut acc = 0i64;
        for p in &pts {
            let (c, d) = decode_e8(p);
            acc += c[0] as i64 + d as i64;
        }
        let secs = t.elapsed().as_secs_f64();
        let t2 = Instant::now();
        let mut acc2 = 0u64;
        for q in pts.chunks_exact(4) {
            let mut coords = [0i32; 32];
            for (b, p) in q.iter().enumerate() {
                coords[b * 8..b * 8 + 8].copy_from_slice(&decode_e8(p).0);
            }
            acc2 ^= fragment_key(&coords);
        }
        let secs2 = t2.elapsed().as_secs_f64();
        println!(
            "E8 nearest point (f32, one core): {:.1} M points/s; fragment (4 blocks + key): {:.1} M fragments/s   [{acc} {acc2}]",
            n as f64 / secs / 1e6,
            (n / 4) as f64 / secs2 / 1e6
        );
    }
}
