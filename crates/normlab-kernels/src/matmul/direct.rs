//! A GEMM micro-kernel that reads its operands where they lie, without
//! packing them, and rounds every element exactly as `matrixmultiply`'s
//! fused-multiply-add kernels do, so that swapping it in changes no bit.
//!
//! `matrixmultiply` (0.3, the AVX-512 and AVX2+FMA kernels) computes each
//! element of `C = alpha A B + beta C` as follows: `k` is cut into blocks
//! of [`KC`] (256) in ascending order; within a block one accumulator
//! starts at +0 and takes `fma(a[i,p], b[p,j], acc)` for ascending `p`; the
//! first block stores `alpha acc` (beta 0) or `c + acc` (beta 1, alpha 1,
//! rounded once), every later block `c + acc` (alpha 1). This kernel does
//! the same per element, so the results are identical bit for bit (a test
//! compares them on many shapes and strides). What differs is the work
//! around it: `matrixmultiply` copies (packs) both operands into aligned
//! panels on every call, which on the models' small matrices (d 64..512)
//! cost a fifth of a training step. Here `A`'s values are broadcast from
//! wherever they are (any strides) and `B`'s rows are read in place where
//! they are contiguous (`b[p, j..j+32]` one load); other `B`s (a Linear's
//! `W^T`) are copied 32 columns by one k-block at a time.
//!
//! Tiles are [`MR`] rows by [`NR`] columns (24 accumulators in AVX-512
//! registers); it runs at the AVX-512 levels only, and [`super::gemm`]
//! keeps `matrixmultiply` elsewhere (AVX2 has too few registers for this
//! tile, and without FMA `matrixmultiply` rounds products separately).
//! Products with at most [`NARROW`] columns run transposed.

use super::mat::Mat;

/// Rows of C per tile.
pub const MR: usize = 12;
/// Columns of C per tile (two 16-float vectors).
pub const NR: usize = 32;
// The row remainders are dispatched up to 11 and columns come in vectors
// of 16. (12 x 32 measured as fast as 6 x 64 or 14 x 32 on the toy and GPT
// products, and faster than 8 x 48.)
const _: () = assert!(MR <= 12 && NR.is_multiple_of(16));
/// The k-block of `matrixmultiply`'s f32 kernels (`S_KC`).
pub const KC: usize = 256;

/// Where a tile reads: A at `a` (row stride `ars`, column stride `acs`), B
/// at `b` (row stride `brs`, [`NR`] contiguous values per row).
#[derive(Clone, Copy)]
struct Src {
    a: *const f32,
    ars: usize,
    acs: usize,
    b: *const f32,
    brs: usize,
}

/// Where a tile's values go: C at `c` (row stride `rsc`), `cols` of the
/// [`NR`] columns kept; `add`: C = C + acc, else C = alpha acc.
#[derive(Clone, Copy)]
struct Out {
    c: *mut f32,
    rsc: usize,
    cols: usize,
    alpha: f32,
    add: bool,
}

/// One tile: `R` rows of A and `kc` rows of B from `src`, into `out`.
/// Written with AVX-512 intrinsics: the accumulators must stay in
/// registers (the portable version compiled to half the throughput in one
/// of two inlining contexts).
///
/// # Safety
/// AVX-512F must be present, and every address the tile reads or writes
/// must be in bounds: A for `R x kc` at its strides, B for `kc` rows of
/// [`NR`] floats, C for `R` rows of `cols` floats.
#[inline(always)]
unsafe fn tile<const R: usize>(kc: usize, src: Src, out: Out) {
    use std::arch::x86_64::*;
    // SAFETY (whole body): the caller guarantees AVX-512F and the ranges.
    unsafe {
        const NV: usize = NR / 16;
        let mut acc = [[_mm512_setzero_ps(); NV]; R];
        for p in 0..kc {
            let bp = src.b.add(p * src.brs);
            let mut bv = [_mm512_setzero_ps(); NV];
            for v in 0..NV {
                bv[v] = _mm512_loadu_ps(bp.add(16 * v));
            }
            let ap = src.a.add(p * src.acs);
            for i in 0..R {
                let av = _mm512_set1_ps(*ap.add(i * src.ars));
                for v in 0..NV {
                    acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
                }
            }
        }
        // Each vector's kept columns (a mask of its low lanes).
        let mut mask = [0 as __mmask16; NV];
        for v in 0..NV {
            let keep = out.cols.saturating_sub(16 * v).min(16);
            mask[v] = ((1u32 << keep) - 1) as u16;
        }
        let al = _mm512_set1_ps(out.alpha);
        for i in 0..R {
            let cr = out.c.add(i * out.rsc);
            for v in 0..NV {
                let cv = cr.add(16 * v);
                let val = if out.add {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mask[v], cv), acc[i][v])
                } else {
                    _mm512_mul_ps(al, acc[i][v])
                };
                _mm512_mask_storeu_ps(cv, mask[v], val);
            }
        }
    }
}

/// Row tiles of every height up to [`MR`] over one k-block and one column panel.
///
/// # Safety
/// As [`tile`], for `m` rows.
#[inline(always)]
unsafe fn rows(m: usize, kc: usize, src: Src, out: Out) {
    let mut i = 0;
    macro_rules! go {
        ($r:expr) => {{
            let s = Src {
                a: src.a.wrapping_add(i * src.ars),
                ..src
            };
            let o = Out {
                c: out.c.wrapping_add(i * out.rsc),
                ..out
            };
            unsafe { tile::<$r>(kc, s, o) }
        }};
    }
    while i + MR <= m {
        go!(MR);
        i += MR;
    }
    match m - i {
        0 => {}
        1 => go!(1),
        2 => go!(2),
        3 => go!(3),
        4 => go!(4),
        5 => go!(5),
        6 => go!(6),
        7 => go!(7),
        8 => go!(8),
        9 => go!(9),
        10 => go!(10),
        _ => go!(11),
    }
}

/// B's rows `k0..k0 + kc`, columns `j..j + cols` into `panel` (row stride
/// [`NR`], columns from `cols` on zero), reading along B's shorter stride
/// (a Linear's `W^T` column by column: `W`'s rows).
#[inline(always)]
fn copy_panel(b: Mat, k0: usize, kc: usize, j: usize, cols: usize, panel: &mut [f32; KC * NR]) {
    let (brs, bcs) = (b.rs, b.cs);
    if brs < bcs {
        for q in 0..NR {
            if q < cols {
                let col = &b.data[(j + q) * bcs + k0 * brs..];
                for p in 0..kc {
                    panel[p * NR + q] = col[p * brs];
                }
            } else {
                for p in 0..kc {
                    panel[p * NR + q] = 0.0;
                }
            }
        }
    } else {
        for p in 0..kc {
            let row = &b.data[(k0 + p) * brs + j * bcs..];
            for q in 0..NR {
                panel[p * NR + q] = if q < cols { row[q * bcs] } else { 0.0 };
            }
        }
    }
}

/// Whether [`gemm_direct`] rounds `C = alpha A B (+ C)` as `matrixmultiply`
/// does: alpha 1, or (without accumulating) k within one block.
/// `matrixmultiply` adds later k-blocks as `fma(alpha, acc, c)` in full
/// tiles but `c + alpha * acc` in edge tiles, which no one kernel can match.
pub fn direct_ok(alpha: f32, accumulate: bool, k: usize) -> bool {
    alpha == 1.0 || (!accumulate && k <= KC)
}

/// `C = alpha A B` (`accumulate`: `C + alpha A B`; see [`direct_ok`]) for
/// views A `[m, k]` and B `[k, n]` at any strides, C row-major at row
/// stride `rsc`; every element rounded as `matrixmultiply`'s FMA kernels
/// round it (module doc). B panels are read in place where B's rows are
/// contiguous, else copied 32 columns by one k-block at a time. Needs the
/// AVX-512 level ([`crate::simd::level`]); [`super::gemm`] calls it where
/// it applies.
pub fn gemm_direct(alpha: f32, a: Mat, b: Mat, accumulate: bool, c: &mut [f32], rsc: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "gemm_direct: inner dimensions {k} vs {}", b.rows);
    assert!(
        direct_ok(alpha, accumulate, k),
        "gemm_direct: alpha {alpha} (k {k}) rounds differently"
    );
    assert!(
        crate::simd::level() >= crate::simd::Level::Avx512,
        "gemm_direct needs AVX-512"
    );
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    a.check("gemm_direct A");
    b.check("gemm_direct B");
    assert!((m - 1) * rsc + n <= c.len(), "gemm_direct: C too short");
    // SAFETY: every condition of `run` checked above.
    unsafe { run(alpha, a, b, accumulate, c, rsc) };
}

/// [`gemm_direct`] without its checks, for [`super::gemm`], which has made
/// them already.
///
/// # Safety
/// The AVX-512 level, [`direct_ok`], `a.cols == b.rows`, m, k, n > 0, and
/// the views and C in bounds.
pub(super) unsafe fn run(alpha: f32, a: Mat, b: Mat, accumulate: bool, c: &mut [f32], rsc: usize) {
    let mut panel = PANEL.take().unwrap_or_else(|| Box::new([0.0; KC * NR]));
    let (m, n) = (a.rows, b.cols);
    if n <= NARROW && m >= NR {
        // Narrow: C^T = alpha B^T A^T into a scratch (see [`NARROW`]).
        let mut t = NARROW_C.take();
        t.resize(m * n, 0.0);
        if accumulate {
            transposed(c, rsc, m, n, &mut t, true);
        }
        // SAFETY: forwarded from the caller; the transposed views cover
        // the same elements as the checked ones, and `t` holds n x m.
        unsafe { direct_blocks(alpha, b.t(), a.t(), accumulate, &mut t, m, &mut panel) };
        transposed(c, rsc, m, n, &mut t, false);
        NARROW_C.set(t);
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { direct_blocks(alpha, a, b, accumulate, c, rsc, &mut panel) };
    }
    PANEL.set(Some(panel));
}

/// Products with at most this many columns (a projection onto a few
/// outputs, such as hyper-connections' coefficient maps) run transposed,
/// `C^T = alpha B^T A^T` into a scratch copied back: a tile is [`NR`]
/// columns wide, so n columns would pay for NR, while transposed A's rows
/// fill the tiles. Every element is the same chain of the same fused
/// multiply-adds (`fma(b, a, acc)` is `fma(a, b, acc)`) in the same k
/// order, so the bits are those of the untransposed product.
pub const NARROW: usize = 8;

/// The first `n` columns of C's `m` rows (row stride `rsc`) copied into
/// the n x m transpose `t` (`into_t`), or back from it.
fn transposed(c: &mut [f32], rsc: usize, m: usize, n: usize, t: &mut [f32], into_t: bool) {
    for (r, cr) in c.chunks_mut(rsc).take(m).enumerate() {
        for (j, v) in cr[..n].iter_mut().enumerate() {
            if into_t {
                t[j * m + r] = *v;
            } else {
                *v = t[j * m + r];
            }
        }
    }
}

thread_local! {
    /// A panel of B copied by [`copy_panel`] (per thread, so that small
    /// products, such as attention's per head, neither allocate nor clear
    /// 32 KiB per call).
    static PANEL: std::cell::Cell<Option<Box<[f32; KC * NR]>>> = const { std::cell::Cell::new(None) };
    /// A narrow product's transposed C ([`NARROW`]; per thread, kept
    /// between calls).
    static NARROW_C: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// [`gemm_direct`]'s loops: k-blocks, then 32-column panels of B (in place
/// or copied into `panel`), then row tiles.
///
/// # Safety
/// AVX-512F must be present and the views in bounds (m, k, n > 0).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn direct_blocks(
    alpha: f32,
    a: Mat,
    b: Mat,
    accumulate: bool,
    c: &mut [f32],
    rsc: usize,
    panel: &mut [f32; KC * NR],
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let (ap, bp, cp) = (a.data.as_ptr(), b.data.as_ptr(), c.as_mut_ptr());
    for (kb, k0) in (0..k).step_by(KC).enumerate() {
        let kc = KC.min(k - k0);
        let a0 = ap.wrapping_add(k0 * a.cs);
        for j in (0..n).step_by(NR) {
            let cols = NR.min(n - j);
            let out = Out {
                c: cp.wrapping_add(j),
                rsc,
                cols,
                alpha,
                add: accumulate || kb > 0,
            };
            // B's panel in place where its rows are contiguous, else copied.
            let (bpanel, brs) = if cols == NR && b.cs == 1 {
                (bp.wrapping_add(k0 * b.rs + j), b.rs)
            } else {
                copy_panel(b, k0, kc, j, cols, panel);
                (panel.as_ptr(), NR)
            };
            let src = Src {
                a: a0,
                ars: a.rs,
                acs: a.cs,
                b: bpanel,
                brs,
            };
            // SAFETY: the caller's checks of the views and C (or `panel`,
            // kc rows of NR) bound every address the tiles touch.
            unsafe { rows(m, kc, src, out) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sgemm;
    use super::*;
    use crate::rng::Rng;

    /// `gemm_direct` against `matrixmultiply` (through the same checked
    /// views), bit for bit: every shape class (tiles full and partial, k
    /// over one and several blocks, column tails), A and B row-major and
    /// transposed, C wider than n, beta 0 (C full of NaN) with alpha 1 and
    /// (k within one block) others, beta 1 with alpha 1.
    #[test]
    fn same_bits_as_matrixmultiply() {
        // gemm_direct is AVX-512 code (gemm uses it only there).
        if crate::simd::level() < crate::simd::Level::Avx512 {
            eprintln!("no AVX-512 here: gemm_direct is never used; skipped");
            return;
        }
        let mut rng = Rng::new(11);
        let shapes = [
            (1, 1, 1),
            (12, 256, 32),
            (13, 257, 33),
            (37, 19, 23),
            (64, 512, 64),
            (512, 64, 256),
            (25, 600, 70),
            (5, 3, 100),
            // Narrow products (transposed, `NARROW`): a map onto n + 2 = 6
            // outputs, one output, up to NARROW, k over a block.
            (64, 128, 6),
            (70, 128, 1),
            (33, 300, 8),
            (100, 512, 4),
        ];
        for &(m, k, n) in &shapes {
            for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
                for (alpha, beta) in [(1.0f32, 0.0f32), (1.0, 1.0), (0.125, 0.0), (-0.3, 0.0)] {
                    if !direct_ok(alpha, beta == 1.0, k) {
                        continue;
                    }
                    let a = rng.normal_vec(m * k, 0.0, 1.0);
                    let b = rng.normal_vec(k * n, 0.0, 1.0);
                    let rsc = n + 3;
                    let init: Vec<f32> = if beta == 0.0 {
                        vec![f32::NAN; m * rsc]
                    } else {
                        rng.normal_vec(m * rsc, 0.0, 1.0)
                    };
                    let av = if trans_a {
                        Mat::rows(&a, k, m).t()
                    } else {
                        Mat::rows(&a, m, k)
                    };
                    let bv = if trans_b {
                        Mat::rows(&b, n, k).t()
                    } else {
                        Mat::rows(&b, k, n)
                    };
                    let mut want = init.clone();
                    sgemm(alpha, av, bv, beta, &mut want, rsc);
                    let mut got = init.clone();
                    gemm_direct(alpha, av, bv, beta == 1.0, &mut got, rsc);
                    for r in 0..m {
                        for j in 0..rsc {
                            let (g, w) = (got[r * rsc + j], want[r * rsc + j]);
                            assert!(
                                g.to_bits() == w.to_bits() || (j >= n && g.is_nan() && w.is_nan()),
                                "{m}x{k}x{n} trans {trans_a}/{trans_b} alpha {alpha} beta {beta}: C[{r},{j}] {g} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}
