//! Normalization kinds and the fused row-wise kernels' common contract.
//!
//! Layout: `x`, `y`, `dy`, `dx` are row-major `[rows, d]`; statistics are
//! per row over the last dimension (one token's feature vector). Every
//! row-wise kind caches [`STATS`] floats per row in `stats` (interleaved:
//! `stats[r * STATS + k]`), so backward never recomputes a reduction over x
//! that forward already did:
//!
//! | kind | stats\[0] | stats\[1] | stats\[2] |
//! |---|---|---|---|
//! | layernorm | mean, high part (f32) | mean, low part (mean - high) | rstd = 1/sqrt(var + eps) |
//! | rmsnorm, zrmsnorm | 0 | 0 | rstd = 1/sqrt(mean(x^2) + eps) |
//! | scalenorm | 1 if the norm was clamped to eps, else 0 | 0 | 1/max(‖x‖, eps) |
//! | none | 0 | 0 | 1 |
//! | dyt, derf | 0 (`nn::Norm` writes the row's saturated share here on diagnosed passes) | 0 | 1 |
//!
//! Parameters of one norm live in one flat slice, in this order
//! (see [`NormKind::num_params`]): layernorm `[gamma(d), beta(d)]`, rmsnorm
//! `[gamma(d)]`, zrmsnorm `[w(d)]` (gain is `1 + w`), scalenorm `[g]`,
//! batchnorm `[gamma(d), beta(d)]`, none `[]`. Gradients use the same layout
//! and are **accumulated** (`+=`), input gradients are **written**.
//!
//! Work is split into chunks of whole rows whose size depends only on
//! `(rows, d)`, never on the thread count; parameter gradients are summed per
//! chunk into caller-provided scratch and the chunks are then added in
//! order. So results are bit-identical for any number of threads (`chunks.rs`).
//!
//! A row whose variance (or mean square) plus eps is exactly zero, which
//! only happens with `eps = 0` on a constant (or zero) row, gets `rstd = 0`:
//! its normalised value is defined as 0 and its input gradient as 0, a
//! finite, documented result instead of 0/0.

pub mod batchnorm;
mod chunks;
mod kind;
pub mod layernorm;
pub mod lowp;
pub mod pointwise;
pub mod rmsnorm;
pub mod scalenorm;
pub mod spec;
pub mod tanh;

use crate::simd::Elem;

pub use batchnorm::BatchNorm;
pub use chunks::{backward_scratch_len, sequential, stats_len, Chunks};
use chunks::{check_shapes, for_chunks, for_chunks_backward};
pub use kind::{NormKind, UnknownNormKind};
pub use spec::{GainForm, KindSpec, ParamInit, ParamLen, ParamRole, ParamSpec, BETA, GAMMA, STATS};

/// Forward of a row-wise norm: writes `y` and the per-row `stats`. The
/// storage type `T` of `x` and `y` is f32, bf16 or f16 (see [`lowp`]);
/// parameters and statistics are f32 whatever it is.
///
/// Panics on mismatched lengths, and for [`NormKind::BatchNorm`], whose
/// statistics are per feature and which has its own state ([`BatchNorm`]).
pub fn forward<T: Elem>(
    kind: NormKind,
    d: usize,
    eps: f32,
    x: &[T],
    params: &[f32],
    y: &mut [T],
    stats: &mut [f32],
) {
    check_shapes(kind, d, x, params, y, stats);
    let stream = crate::simd::should_stream(y, d);
    with_forward_rows(kind, d, eps, params, stream, &mut |rows| {
        for_chunks(d, x, y, stats, rows)
    });
}

/// Hand `run` the kind's forward over one chunk of rows (the f32 kernel
/// every storage type goes through), with its parameters bound.
fn with_forward_rows<T: Elem>(
    kind: NormKind,
    d: usize,
    eps: f32,
    params: &[f32],
    stream: bool,
    run: &mut dyn FnMut(&ForwardRows<T>),
) {
    match kind {
        NormKind::LayerNorm => {
            let (gamma, beta) = params.split_at(d);
            run(&|x, y, s| layernorm::forward_rows(d, eps, stream, x, gamma, beta, y, s))
        }
        NormKind::RmsNorm | NormKind::ZRmsNorm => {
            let offset = zero_centred_offset(kind);
            run(&|x, y, s| rmsnorm::forward_rows(d, eps, offset, stream, x, params, y, s))
        }
        NormKind::ScaleNorm => {
            let g = params[0];
            run(&|x, y, s| {
                lowp::via_f32(d, x, y, s, &|x, y, s, _| {
                    scalenorm::forward_rows(d, eps, g, x, y, s)
                })
            })
        }
        NormKind::Dyt | NormKind::Derf => {
            let f = squash(kind);
            run(&|x, y, s| {
                lowp::via_f32(d, x, y, s, &|x, y, s, in_place| {
                    pointwise::forward_rows(d, f, stream && in_place, x, params, y, s)
                })
            })
        }
        NormKind::None => run(&|x, y, s| {
            y.copy_from_slice(x);
            for st in s.chunks_exact_mut(STATS) {
                st.copy_from_slice(&[0.0, 0.0, 1.0]);
            }
        }),
        NormKind::BatchNorm => panic!("batchnorm statistics are per feature: use norm::BatchNorm"),
    }
}

/// A kind's forward over one chunk of rows: `(x, y, stats)`.
pub(crate) type ForwardRows<'a, T> = dyn Fn(&[T], &mut [T], &mut [f32]) + Sync + 'a;

/// A kind's backward over one chunk of rows: `(x, dy, stats, dx, partial
/// parameter gradients)`.
pub(crate) type BackwardRows<'a, T> = dyn Fn(&[T], &[T], &[f32], &mut [T], &mut [f32]) + Sync + 'a;

/// The squashing function of a point-wise kind.
fn squash(kind: NormKind) -> pointwise::Squash {
    match kind {
        NormKind::Derf => pointwise::Squash::Erf,
        _ => pointwise::Squash::Tanh,
    }
}

/// The gain offset of the RMSNorm kernels: 1 for zero-centred (gain 1 + w).
fn zero_centred_offset(kind: NormKind) -> f32 {
    match kind.spec().gain {
        GainForm::PerFeature { offset } => offset,
        _ => 0.0,
    }
}

/// Backward of a row-wise norm: writes `dx`, accumulates `dparams` (x, dy
/// and dx in the storage type `T`, as for [`forward`]).
/// `stats` must be what [`forward`] wrote for the same `x`; `scratch` must
/// hold at least [`backward_scratch_len`] floats.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Elem>(
    kind: NormKind,
    d: usize,
    x: &[T],
    dy: &[T],
    params: &[f32],
    stats: &[f32],
    dx: &mut [T],
    dparams: &mut [f32],
    scratch: &mut [f32],
) {
    check_shapes(kind, d, x, params, dx, stats);
    let stream = crate::simd::should_stream(dx, d);
    assert_eq!(dy.len(), x.len(), "dy length");
    let np = kind.num_params(d);
    with_backward_rows(kind, d, params, stream, &mut |rows| {
        for_chunks_backward(d, np, x, dy, stats, dx, dparams, scratch, rows)
    });
}

/// Hand `run` the kind's backward over one chunk of rows (the f32 kernel
/// every storage type goes through), with its parameters bound.
fn with_backward_rows<T: Elem>(
    kind: NormKind,
    d: usize,
    params: &[f32],
    stream: bool,
    run: &mut dyn FnMut(&BackwardRows<T>),
) {
    match kind {
        NormKind::LayerNorm => {
            let gamma = &params[..d];
            run(&|x, dy, s, dx, p| {
                let (pg, pb) = p.split_at_mut(d);
                layernorm::backward_rows(d, stream, x, dy, gamma, s, dx, pg, pb)
            })
        }
        NormKind::RmsNorm | NormKind::ZRmsNorm => {
            let offset = zero_centred_offset(kind);
            run(&|x, dy, s, dx, p| {
                rmsnorm::backward_rows(d, offset, stream, x, dy, params, s, dx, p)
            })
        }
        NormKind::ScaleNorm => {
            let g = params[0];
            run(&|x, dy, s, dx, p| {
                lowp::via_f32_backward(d, x, dy, s, dx, p, &|x, dy, s, dx, p, _| {
                    scalenorm::backward_rows(d, g, x, dy, s, dx, p)
                })
            })
        }
        NormKind::Dyt | NormKind::Derf => {
            let f = squash(kind);
            run(&|x, dy, s, dx, p| {
                lowp::via_f32_backward(d, x, dy, s, dx, p, &|x, dy, _, dx, p, in_place| {
                    pointwise::backward_rows(d, f, stream && in_place, x, dy, params, dx, p)
                })
            })
        }
        NormKind::None => run(&|_, dy, _, dx, _| dx.copy_from_slice(dy)),
        NormKind::BatchNorm => panic!("batchnorm statistics are per feature: use norm::BatchNorm"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names_round_trip() {
        for k in NormKind::ALL {
            assert_eq!(k.name().parse::<NormKind>().unwrap(), k);
        }
        let e = "foo".parse::<NormKind>().unwrap_err().to_string();
        assert!(
            e.contains("unknown norm kind 'foo'") && e.contains("rmsnorm"),
            "{e}"
        );
    }

    #[test]
    fn all_lists_every_kind_once_with_a_distinct_name() {
        for (i, k) in NormKind::ALL.iter().enumerate() {
            assert_eq!(k.position(), i, "{k} is not at its position in ALL");
        }
        let names: std::collections::HashSet<&str> =
            NormKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), NormKind::ALL.len());
    }

    #[test]
    fn chunking_depends_on_shape_only() {
        let c = Chunks::new(8192, 1024);
        assert_eq!(c.rows_per_chunk, 64);
        assert_eq!(c.count, 128);
        let c = Chunks::new(3, 7);
        assert_eq!((c.rows_per_chunk, c.count), (3, 1));
        let c = Chunks::new(0, 7);
        assert_eq!(c.count, 0);
    }
}
