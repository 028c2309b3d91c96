use normlab_kernels::act;
use std::time::Instant;
fn med<F: FnMut()>(mut f: F) -> f64 {
    f();
    let mut v: Vec<f64> = (0..21)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[10]
}
fn main() {
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    let x: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 - 500.0) * 0.01).collect();
    let mut y = vec![0f32; n];
    let mut dx = vec![0f32; n];
    let mut g = vec![0f32; n];
    let t = med(|| act::gelu_forward(&x, &mut y, &mut g));
    let x2 = y.clone();
    println!(
        "gelu fwd: {:.3} ms = {:.2} ns/elem",
        t * 1e3,
        t * 1e9 / n as f64
    );
    let t = med(|| act::mul(&mut dx, &x2, &g));
    println!(
        "gelu bwd: {:.3} ms = {:.2} ns/elem",
        t * 1e3,
        t * 1e9 / n as f64
    );
    let t = med(|| {
        for v in y.iter_mut().zip(&x) {
            *v.0 = act::exp(*v.1);
        }
    });
    println!(
        "exp (not multiversioned): {:.3} ms = {:.2} ns/elem",
        t * 1e3,
        t * 1e9 / n as f64
    );
    let mut s = vec![0f32; 128 * 128];
    for (i, v) in s.iter_mut().enumerate() {
        *v = (i % 37) as f32 * 0.1;
    }
    let t = med(|| {
        for _ in 0..64 {
            act::causal_softmax(&mut s, 128);
        }
    });
    println!(
        "causal softmax 64 x 128x128: {:.3} ms = {:.2} ns/elem(valid)",
        t * 1e3,
        t * 1e9 / (64.0 * 128.0 * 64.5)
    );
}
