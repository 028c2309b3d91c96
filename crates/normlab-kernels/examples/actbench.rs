//! Micro-benchmarks for tuning (not the project's benchmark commands, which
//! are `normlab bench`): the elementwise kernels (`N` elements, default 2^20)
//! and the toy net's Linear products on hot caches.
//! `cargo run --release -p normlab-kernels --example actbench`
use normlab_kernels::act;
use normlab_kernels::matmul::{linear_backward, linear_forward};
use std::time::Instant;

/// Median seconds per call of `f` over 21 timings of 10 calls each.
fn med<F: FnMut()>(mut f: F) -> f64 {
    f();
    let mut v: Vec<f64> = (0..21)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..10 {
                f();
            }
            t.elapsed().as_secs_f64() / 10.0
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[10]
}

fn main() {
    if std::env::var_os("GEMM_ONLY").is_none() {
        elementwise();
        toy_linears();
    }
    #[cfg(target_arch = "x86_64")]
    direct_vs_packed();
}

#[cfg(target_arch = "x86_64")]
/// `gemm_direct` against `matrixmultiply::sgemm` on the models' products
/// (the same bits), interleaved over 5 rounds: (name, m, k, n, A transposed).
fn direct_vs_packed() {
    let shapes = [
        ("toy dx 512x256->64", 512, 256, 64, false),
        ("toy dx 512x64->256", 512, 64, 256, false),
        ("toy dW 64x512->256", 64, 512, 256, true),
        ("toy dW 256x512->64", 256, 512, 64, true),
        ("toy fwd 512x64->256", 512, 64, 256, false),
        ("toy fwd 512x256->64", 512, 256, 64, false),
        ("gpt dx 2048x512->128", 2048, 512, 128, false),
        ("gpt dx 2048x128->512", 2048, 128, 512, false),
        ("gpt dW 128x2048->512", 128, 2048, 512, true),
        ("gpt dW 512x2048->128", 512, 2048, 128, true),
    ];
    for (name, m, k, n, ta) in shapes {
        // Forward products read B = W^T (strided); the rest row-major B.
        let tb = name.contains("fwd");
        let (rsb, csb) = if tb { (1, k) } else { (n, 1) };
        let a: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i % 7) as f32 - 3.0) * 0.1).collect();
        let mut c = vec![0f32; m * n];
        let (rsa, csa) = if ta { (1, m) } else { (k, 1) };
        let fl = 2.0 * (m * k * n) as f64;
        let (mut tp, mut td) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            tp.push(med(|| unsafe {
                matrixmultiply::sgemm(
                    m,
                    k,
                    n,
                    1.0,
                    a.as_ptr(),
                    rsa as isize,
                    csa as isize,
                    b.as_ptr(),
                    rsb as isize,
                    csb as isize,
                    0.0,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                )
            }));
            td.push(med(|| {
                let av = normlab_kernels::matmul::Mat {
                    data: &a,
                    rows: m,
                    cols: k,
                    rs: rsa,
                    cs: csa,
                };
                let bv = normlab_kernels::matmul::Mat {
                    data: &b,
                    rows: k,
                    cols: n,
                    rs: rsb,
                    cs: csb,
                };
                normlab_kernels::matmul::gemm_direct(1.0, av, bv, false, &mut c, n)
            }));
        }
        tp.sort_by(f64::total_cmp);
        td.sort_by(f64::total_cmp);
        println!(
            "{name:28}: packed {:6.1} GF/s, direct {:6.1} GF/s (direct/packed {:.2}x, range {:.2}-{:.2})",
            fl / tp[2] / 1e9,
            fl / td[2] / 1e9,
            tp[2] / td[2],
            tp[0] / td[4],
            tp[4] / td[0]
        );
    }
}

fn elementwise() {
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
        "gelu bwd (dy * gelu'): {:.3} ms = {:.2} ns/elem",
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

/// Toy Linear shapes: 512 rows, widths 64..256.
fn toy_linears() {
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
