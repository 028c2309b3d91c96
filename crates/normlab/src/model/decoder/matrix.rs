//! The decoder's weight matrices and their products: [`Matrix`] holds a
//! `[rows, cols]` matrix either as dense f32 or as the GGUF file's
//! quantised blocks (a quarter to a sixth of the memory), and applies it in
//! one of two ways.
//!
//! - **f32 activations** ([`Matrix::apply`]): the numbers fixtures,
//!   `inspect` and the book use. Quantised rows are dequantised on the fly:
//!   one row at a time for one-row steps, chunks of rows through the matmul
//!   kernel for many. The f32 values and the arithmetic are those of the
//!   dense matrix, so the bits are the same whichever storage holds it.
//! - **quantised activations** ([`Matrix::apply_quantised`], one-row
//!   steps of quantised matrices): llama.cpp's integer dot products on the
//!   blocks ([`crate::gguf::qdot`]), with 8-bit activations or 16-bit ones
//!   (two 8-bit limbs), for fast generation.

use crate::gguf::qdot::{self, ActBits, LaneKernel, QuantActs, RowScratch};
use crate::gguf::{dequantize_into, GgmlType};
use crate::kernels::matmul::{gemm, linear_forward, Mat};
use crate::kernels::simd;
use rayon::prelude::*;

/// Rows per parallel task of a many-row product: fixed, so results do not
/// depend on the thread count.
const ROWS_PER_TASK: usize = 128;

/// Outputs per parallel task of a one-row product (fixed for the same
/// reason).
const OUTS_PER_TASK: usize = 64;

/// Weight rows dequantised at once for a many-row product of a quantised
/// matrix (bounds its f32 copy: 512 rows of Gemma 3's 640 are 1.3 MB).
const DEQUANT_ROWS: usize = 512;

/// How a matrix is stored.
#[derive(Clone, Debug)]
enum Store {
    /// f32 values, row-major.
    Dense(Vec<f32>),
    /// The file's blocks, row-major: each row is whole blocks.
    Quant { ty: GgmlType, bytes: Vec<u8> },
}

/// A `[rows, cols]` row-major weight matrix (PyTorch's Linear layout,
/// `[out, in]`), applied as `y = x W^T`.
#[derive(Clone, Debug)]
pub struct Matrix {
    store: Store,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
}

impl Matrix {
    /// A dense f32 matrix (`data.len() == rows * cols`).
    pub fn dense(data: Vec<f32>, rows: usize, cols: usize) -> Matrix {
        assert_eq!(data.len(), rows * cols, "Matrix::dense: {rows} x {cols}");
        Matrix {
            store: Store::Dense(data),
            rows,
            cols,
        }
    }

    /// A matrix kept in `ty`'s blocks (None: a row is not whole blocks, or
    /// `bytes` is not `rows` rows).
    pub fn quantised(ty: GgmlType, bytes: Vec<u8>, rows: usize, cols: usize) -> Option<Matrix> {
        let (per, bs) = ty.block();
        let whole =
            cols.is_multiple_of(per) && Some(bytes.len()) == (cols / per * bs).checked_mul(rows);
        whole.then_some(Matrix {
            store: Store::Quant { ty, bytes },
            rows,
            cols,
        })
    }

    /// The storage type (F32 for dense).
    pub fn storage(&self) -> GgmlType {
        match &self.store {
            Store::Dense(_) => GgmlType::F32,
            Store::Quant { ty, .. } => *ty,
        }
    }

    /// Bytes the values take in memory.
    pub fn resident_bytes(&self) -> usize {
        match &self.store {
            Store::Dense(d) => d.len() * 4,
            Store::Quant { bytes, .. } => bytes.len(),
        }
    }

    /// Row `i` as f32 into `out` (`cols` long): an embedding lookup.
    pub fn row_into(&self, i: usize, out: &mut [f32]) {
        let c = self.cols;
        match &self.store {
            Store::Dense(d) => out.copy_from_slice(&d[i * c..(i + 1) * c]),
            Store::Quant { ty, bytes } => {
                let rb = bytes.len() / self.rows;
                dequantize_into(*ty, &bytes[i * rb..(i + 1) * rb], out);
            }
        }
    }

    /// `y[n, rows] = x[n, cols] W^T` with f32 activations (the same bits
    /// for either storage).
    pub fn apply(&self, x: &[f32], n: usize, y: &mut [f32]) {
        let (d_in, d_out) = (self.cols, self.rows);
        assert_eq!(x.len(), n * d_in, "Matrix::apply x");
        assert_eq!(y.len(), n * d_out, "Matrix::apply y");
        match &self.store {
            Store::Dense(w) => linear(x, w, n, d_in, d_out, y),
            Store::Quant { ty, bytes } if n == 1 => {
                let rb = bytes.len() / d_out;
                y.par_chunks_mut(OUTS_PER_TASK)
                    .zip(bytes.par_chunks(OUTS_PER_TASK * rb))
                    .for_each(|(yc, wc)| {
                        let mut row = vec![0f32; d_in];
                        for (yj, w) in yc.iter_mut().zip(wc.chunks_exact(rb)) {
                            dequantize_into(*ty, w, &mut row);
                            *yj = simd::dot(x, &row, &[], &[]) as f32;
                        }
                    });
            }
            Store::Quant { ty, bytes } => {
                let rb = bytes.len() / d_out;
                let mut w = vec![0f32; DEQUANT_ROWS.min(d_out) * d_in];
                for (c, chunk) in bytes.chunks(DEQUANT_ROWS * rb).enumerate() {
                    let rows = chunk.len() / rb;
                    let w = &mut w[..rows * d_in];
                    w.par_chunks_mut(d_in)
                        .zip(chunk.par_chunks(rb))
                        .for_each(|(o, b)| dequantize_into(*ty, b, o));
                    let j0 = c * DEQUANT_ROWS;
                    let w = &*w;
                    y.par_chunks_mut(ROWS_PER_TASK * d_out)
                        .zip(x.par_chunks(ROWS_PER_TASK * d_in))
                        .for_each(|(yc, xc)| {
                            let r = xc.len() / d_in;
                            gemm(
                                1.0,
                                Mat::rows(xc, r, d_in),
                                Mat::rows(w, rows, d_in).t(),
                                0.0,
                                &mut yc[j0..],
                                d_out,
                            )
                        });
                }
            }
        }
    }

    /// `y[rows] = x[cols] W^T` for one row, with `x` quantised to `bits`
    /// per block when the matrix is quantised (llama.cpp's dot products);
    /// a dense matrix, or a type without them, takes [`Matrix::apply`].
    pub fn apply_quantised(&self, x: &[f32], bits: ActBits, y: &mut [f32]) {
        let Store::Quant { ty, bytes } = &self.store else {
            return self.apply(x, 1, y);
        };
        let Some(a) = QuantActs::new(*ty, x, bits) else {
            return self.apply(x, 1, y);
        };
        assert_eq!(y.len(), self.rows, "Matrix::apply_quantised y");
        let rb = bytes.len() / self.rows;
        let kernel = LaneKernel::best();
        y.par_chunks_mut(OUTS_PER_TASK)
            .zip(bytes.par_chunks(OUTS_PER_TASK * rb))
            .for_each(|(yc, wc)| {
                let mut s = RowScratch::default();
                for (yj, w) in yc.iter_mut().zip(wc.chunks_exact(rb)) {
                    *yj = qdot::row_dot(kernel, *ty, w, &a, &mut s);
                }
            });
    }
}

/// `y = x W^T` in row blocks over rayon's current pool. One row (a
/// generation step) is a matrix-vector product: each output is one dot
/// product with a row of W, read once and straight from memory, where the
/// matmul kernel would first copy (pack) all of W.
fn linear(x: &[f32], w: &[f32], rows: usize, d_in: usize, d_out: usize, y: &mut [f32]) {
    if rows == 1 {
        y.par_chunks_mut(OUTS_PER_TASK)
            .zip(w.par_chunks(OUTS_PER_TASK * d_in))
            .for_each(|(yc, wc)| dot_rows(x, wc, yc));
        return;
    }
    y.par_chunks_mut(ROWS_PER_TASK * d_out)
        .zip(x.par_chunks(ROWS_PER_TASK * d_in))
        .for_each(|(yc, xc)| linear_forward(xc, w, None, xc.len() / d_in, d_in, d_out, yc));
}

crate::kernels::multiversion! {
    /// `y[j] = x . w[j]` for the rows of `w` (accumulated in f64), the
    /// next row prefetched while one is summed.
    fn dot_rows(x: &[f32], w: &[f32], y: &mut [f32]) {
        let d = x.len();
        for (j, yj) in y.iter_mut().enumerate() {
            let row = &w[j * d..(j + 1) * d];
            let next = w.get((j + 1) * d..(j + 2) * d).unwrap_or(&[]);
            *yj = simd::dot(x, row, &[], next) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::rng::Rng;

    /// A random Q4_K matrix (scales kept small and finite).
    fn q4k(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        let mut b: Vec<u8> = (0..rows * cols / 256 * 144)
            .map(|_| (rng.next_u64() >> 32) as u8)
            .collect();
        for blk in b.chunks_exact_mut(144) {
            blk[..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            blk[2..4].copy_from_slice(&half::f16::from_f32(0.002).to_le_bytes());
        }
        b
    }

    /// f32 activations give the dense matrix's bits from either storage,
    /// one row or many (more rows than one dequantised chunk and one task).
    #[test]
    fn quantised_storage_gives_the_dense_bits() {
        let (rows, cols) = (DEQUANT_ROWS + 70, 512);
        let bytes = q4k(rows, cols, 5);
        let mut dense = vec![0f32; rows * cols];
        dequantize_into(GgmlType::Q4K, &bytes, &mut dense);
        let d = Matrix::dense(dense, rows, cols);
        let q = Matrix::quantised(GgmlType::Q4K, bytes, rows, cols).unwrap();
        assert_eq!(q.resident_bytes() * 4 * 256, d.resident_bytes() * 144);
        let mut rng = Rng::new(9);
        for n in [1, 3, ROWS_PER_TASK + 5] {
            let x = rng.normal_vec(n * cols, 0.0, 1.0);
            let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            d.apply(&x, n, &mut a);
            q.apply(&x, n, &mut b);
            assert!(
                a.iter().zip(&b).all(|(u, v)| u.to_bits() == v.to_bits()),
                "n = {n}"
            );
        }
        let (mut r1, mut r2) = (vec![0f32; cols], vec![0f32; cols]);
        d.row_into(rows - 1, &mut r1);
        q.row_into(rows - 1, &mut r2);
        assert_eq!(r1, r2);
    }

    /// The quantised-activation paths do not depend on the thread count,
    /// stay close to the f32 one, and 16 bits are much closer than 8.
    #[test]
    fn quantised_activations_are_thread_independent_and_close() {
        let (rows, cols) = (300, 768);
        let q = Matrix::quantised(GgmlType::Q4K, q4k(rows, cols, 6), rows, cols).unwrap();
        let x = Rng::new(4).normal_vec(cols, 0.0, 1.0);
        let mut exact = vec![0f32; rows];
        q.apply(&x, 1, &mut exact);
        let range = exact.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = |bits: ActBits| {
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut y = vec![0f32; rows];
                pool.install(|| q.apply_quantised(&x, bits, &mut y));
                y
            };
            let one = run(1);
            assert_eq!(one, run(3), "{bits:?}");
            one.iter()
                .zip(&exact)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        };
        let (w8, w16) = (worst(ActBits::Eight), worst(ActBits::Sixteen));
        assert!(w8 < 0.02 * range, "{w8} vs range {range}");
        assert!(w16 > 0.0 && w16 < w8 / 50.0, "16 bits {w16}, 8 bits {w8}");
        assert!(Matrix::quantised(GgmlType::Q4K, vec![0; 10], 1, 256).is_none());
        assert!(Matrix::quantised(GgmlType::Q4K, vec![0; 144], 1, 128).is_none());
    }
}
