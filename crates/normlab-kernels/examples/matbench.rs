//! Throughput of the toy net's Linear products (hot cache), for tuning.
use normlab_kernels::matmul::{linear_backward, linear_forward};
use std::time::Instant;
fn med<F: FnMut()>(mut f: F) -> f64 {
    f();
    let mut v: Vec<f64> = (0..51)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..10 {
                f();
            }
            t.elapsed().as_secs_f64() / 10.0
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[25]
}
fn main() {
    let rows = 512;
    for (din, dout) in [(64, 64), (64, 128), (128, 64), (64, 256), (256, 64)] {
        let x = vec![0.5f32; rows * din];
        let w = vec![0.25f32; din * dout];
        let b = vec![0.1f32; dout];
        let mut y = vec![0f32; rows * dout];
        let mut dw = vec![0f32; din * dout];
        let mut dx = vec![0f32; rows * din];
        let fl = 2.0 * (rows * din * dout) as f64;
        let t = med(|| linear_forward(&x, &w, Some(&b), rows, din, dout, &mut y));
        let tw = med(|| linear_backward(&x, &w, &y, rows, din, dout, &mut dw, None, None, false));
        let tx = med(|| {
            linear_backward(
                &x,
                &w,
                &y,
                rows,
                din,
                dout,
                &mut dw,
                None,
                Some(&mut dx),
                false,
            )
        }) - tw;
        println!(
            "{rows}x{din}->{dout}: fwd {:.1} GF/s, dW {:.1} GF/s, dx {:.1} GF/s",
            fl / t / 1e9,
            fl / tw / 1e9,
            fl / tx / 1e9
        );
    }
}
