//! Matrix multiplication: `matrixmultiply` (single-threaded, with its
//! AVX-512/AVX2 kernels picked at run time), or at the AVX-512 levels
//! normlab's unpacked kernel [`direct`] that rounds every element exactly as
//! `matrixmultiply` does (normlab parallelises above both on fixed splits,
//! so results never depend on the thread count or on the path); plus the
//! three products a Linear layer needs, in PyTorch's weight layout
//! `W: [out, in]`.

#[cfg(target_arch = "x86_64")]
pub mod direct;
mod mat;
#[cfg(target_arch = "x86_64")]
pub use direct::{direct_ok, gemm_direct};
pub use mat::Mat;

/// `C = alpha * A B + beta * C` with `C` row-major `[a.rows, b.cols]` at row
/// stride `rsc`. With `beta == 0`, C's previous contents are ignored (even NaN).
/// At the AVX-512 levels, products with beta 0 or 1 that it rounds alike
/// ([`direct_ok`]: all of the models') run through [`gemm_direct`]:
/// no packing, the same bits as `matrixmultiply`, which does the rest.
pub fn gemm(alpha: f32, a: Mat, b: Mat, beta: f32, c: &mut [f32], rsc: usize) {
    assert_eq!(
        a.cols, b.rows,
        "gemm: inner dimensions {} vs {}",
        a.cols, b.rows
    );
    let (m, k, n) = (a.rows, a.cols, b.cols);
    a.check("gemm A");
    b.check("gemm B");
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * rsc + n <= c.len(), "gemm: C too short");
    if k == 0 {
        for r in 0..m {
            for v in &mut c[r * rsc..r * rsc + n] {
                *v = if beta == 0.0 { 0.0 } else { *v * beta };
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if (beta == 0.0 || beta == 1.0)
        && direct_ok(alpha, beta == 1.0, k)
        && crate::simd::level() >= crate::simd::Level::Avx512
        && !packed_only()
    {
        // SAFETY: the level and direct_ok just checked; the views, C and
        // the inner dimension checked above; m, n, k > 0.
        unsafe { direct::run(alpha, a, b, beta == 1.0, c, rsc) };
        return;
    }
    sgemm(alpha, a, b, beta, c, rsc);
}

/// Whether `NORMLAB_GEMM=matrixmultiply` asks every product through
/// `matrixmultiply` (read once; for comparing speed, the bits are the same).
pub fn packed_only() -> bool {
    static PACKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PACKED.get_or_init(|| std::env::var("NORMLAB_GEMM").is_ok_and(|v| v == "matrixmultiply"))
}

/// `matrixmultiply::sgemm` on checked views (see [`gemm`]).
fn sgemm(alpha: f32, a: Mat, b: Mat, beta: f32, c: &mut [f32], rsc: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    // SAFETY: every index the views and C can touch was bounds-checked by
    // `gemm`, the only caller.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr(),
            b.rs as isize,
            b.cs as isize,
            beta,
            c.as_mut_ptr(),
            rsc as isize,
            1,
        );
    }
}

/// Linear forward: `y[rows, out] = x[rows, in] W^T (+ b)`, W `[out, in]`.
pub fn linear_forward(
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    rows: usize,
    d_in: usize,
    d_out: usize,
    y: &mut [f32],
) {
    assert_eq!(x.len(), rows * d_in, "linear x");
    assert_eq!(w.len(), d_out * d_in, "linear w");
    assert_eq!(y.len(), rows * d_out, "linear y");
    gemm(
        1.0,
        Mat::rows(x, rows, d_in),
        Mat::rows(w, d_out, d_in).t(),
        0.0,
        y,
        d_out,
    );
    if let Some(b) = b {
        assert_eq!(b.len(), d_out, "linear b");
        add_bias_rows(y, b);
    }
}

crate::multiversion! {
    /// `y[r, j] += b[j]` for every row (an explicit loop: a per-row memcpy of
    /// the bias costs a library call per row on small layers).
    pub fn add_bias_rows(y: &mut [f32], b: &[f32]) {
        for yr in y.chunks_exact_mut(b.len()) {
            for (v, &bv) in yr.iter_mut().zip(b) {
                *v += bv;
            }
        }
    }
}

/// Linear backward. Accumulates `dw += dy^T x` and `db += sum_rows(dy)`;
/// writes `dx = dy W` (or adds it when `accumulate_dx`), if `dx` is given.
#[allow(clippy::too_many_arguments)]
pub fn linear_backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    rows: usize,
    d_in: usize,
    d_out: usize,
    dw: &mut [f32],
    db: Option<&mut [f32]>,
    dx: Option<&mut [f32]>,
    accumulate_dx: bool,
) {
    assert_eq!(dy.len(), rows * d_out, "linear dy");
    gemm(
        1.0,
        Mat::rows(dy, rows, d_out).t(),
        Mat::rows(x, rows, d_in),
        1.0,
        dw,
        d_in,
    );
    if let Some(db) = db {
        add_column_sums(dy, d_out, db);
    }
    if let Some(dx) = dx {
        assert_eq!(dx.len(), rows * d_in, "linear dx");
        let beta = if accumulate_dx { 1.0 } else { 0.0 };
        gemm(
            1.0,
            Mat::rows(dy, rows, d_out),
            Mat::rows(w, d_out, d_in),
            beta,
            dx,
            d_in,
        );
    }
}

crate::multiversion! {
    /// `acc[j] += sum_r m[r, j]` for a row-major `[rows, cols]` matrix (rows
    /// summed in order; vectorised across columns).
    pub fn add_column_sums(m: &[f32], cols: usize, acc: &mut [f32]) {
        assert_eq!(acc.len(), cols);
        for row in m.chunks_exact(cols) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
            }
        }
        c
    }

    #[test]
    fn linear_matches_naive_products() {
        let mut rng = Rng::new(3);
        let (rows, din, dout) = (37, 19, 23);
        let x = rng.normal_vec(rows * din, 0.0, 1.0);
        let w = rng.normal_vec(dout * din, 0.0, 1.0);
        let b = rng.normal_vec(dout, 0.0, 1.0);
        let mut y = vec![f32::NAN; rows * dout];
        linear_forward(&x, &w, Some(&b), rows, din, dout, &mut y);
        let wt: Vec<f32> = (0..din * dout)
            .map(|i| w[(i % dout) * din + i / dout])
            .collect();
        let want = naive(&x, &wt, rows, din, dout);
        for (i, (&a, &e)) in y.iter().zip(&want).enumerate() {
            assert!(
                (a as f64 - e - b[i % dout] as f64).abs() < 1e-4,
                "{a} vs {e}"
            );
        }
        let dy = rng.normal_vec(rows * dout, 0.0, 1.0);
        let mut dw = vec![0.5; dout * din];
        let mut db = vec![0.25; dout];
        let mut dx = vec![f32::NAN; rows * din];
        linear_backward(
            &x,
            &w,
            &dy,
            rows,
            din,
            dout,
            &mut dw,
            Some(&mut db),
            Some(&mut dx),
            false,
        );
        let dyt: Vec<f32> = (0..rows * dout)
            .map(|i| dy[(i % rows) * dout + i / rows])
            .collect();
        let want_dw = naive(&dyt, &x, dout, rows, din);
        for (&a, &e) in dw.iter().zip(&want_dw) {
            assert!((a as f64 - 0.5 - e).abs() < 1e-4);
        }
        let want_dx = naive(&dy, &w, rows, dout, din);
        for (&a, &e) in dx.iter().zip(&want_dx) {
            assert!((a as f64 - e).abs() < 1e-4);
        }
        for j in 0..dout {
            let s: f64 = (0..rows).map(|r| dy[r * dout + j] as f64).sum();
            assert!((db[j] as f64 - 0.25 - s).abs() < 1e-4);
        }
    }
}
