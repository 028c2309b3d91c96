//! A normalization layer of any row-wise kind, over the fused kernels.

use crate::kernels::buf::AlignedBuf;
use crate::kernels::norm::{self, NormKind, ParamRole};
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};

/// A norm over feature size `d`.
#[derive(Clone, Debug)]
pub struct Norm {
    /// Kind (never BatchNorm inside models).
    pub kind: NormKind,
    /// Feature size.
    pub d: usize,
    /// eps.
    pub eps: f32,
    /// All its parameters as one contiguous slice (gamma then beta).
    pub p: ParamRef,
    /// Tensor-name prefix (`transformer.h.0.ln_1`).
    pub name: String,
}

/// Per-row statistics and reduction scratch for one norm in one shard.
#[derive(Clone, Debug)]
pub struct NormCache {
    /// `[rows, STATS]` from the last forward.
    pub stats: Vec<f32>,
    scratch: Vec<f32>,
    /// Diagnose the next forwards: for the point-wise kinds (dyt, derf),
    /// write each row's share of saturated inputs (|alpha x + s| > 2) into
    /// `stats[r * STATS]` (a second pass over x, so only when asked).
    pub diagnose: bool,
}

impl Norm {
    /// Register the kind's tensors as `{name}.{suffix}` (`weight`, and
    /// `bias` for kinds with one), contiguous, in the kind's order.
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        kind: NormKind,
        d: usize,
        eps: f32,
        block: Option<usize>,
    ) -> Norm {
        assert!(
            kind.is_row_wise(),
            "batchnorm cannot be used inside a model"
        );
        let mut range: Option<std::ops::Range<usize>> = None;
        for (i, (spec, _)) in kind.param_ranges(d).enumerate() {
            let role = match spec.role {
                ParamRole::Gain => ParamKind::NormGain,
                ParamRole::Bias => ParamKind::NormBias,
                ParamRole::Slope | ParamRole::Shift => ParamKind::NormScalar,
            };
            let (tensor, shape, init) = (
                format!("{name}.{}", spec.suffix),
                [spec.len(d)],
                Init::Const(spec.init_value(d)),
            );
            let r = if i == 0 {
                layout.add(tensor, &shape, role, block, init)
            } else {
                layout.add_packed(tensor, &shape, role, block, init)
            };
            range = Some(range.map_or(r.0.clone(), |a| a.start..r.0.end));
        }
        Norm {
            kind,
            d,
            eps,
            p: ParamRef(range.unwrap_or_default()),
            name: name.to_string(),
        }
    }

    /// The tensor of `role` (gain or bias), if the kind has one.
    pub fn param(&self, role: ParamRole) -> Option<ParamRef> {
        self.kind
            .param_range(role, self.d)
            .map(|r| ParamRef(self.p.0.start + r.start..self.p.0.start + r.end))
    }

    /// Buffers for `rows` rows.
    pub fn cache(&self, rows: usize) -> NormCache {
        NormCache {
            stats: vec![0.0; norm::stats_len(rows)],
            scratch: vec![0.0; norm::backward_scratch_len(self.kind, rows, self.d)],
            diagnose: false,
        }
    }

    /// `y = Norm(x)`.
    pub fn forward(&self, params: &[f32], x: &[f32], y: &mut [f32], c: &mut NormCache) {
        norm::forward(
            self.kind,
            self.d,
            self.eps,
            x,
            self.p.get(params),
            y,
            &mut c.stats,
        );
        if c.diagnose {
            self.saturation(params, x, &mut c.stats);
        }
    }

    /// Each row's share of inputs in the saturated region of a point-wise
    /// kind, into `stats[r * STATS]` (nothing for other kinds).
    fn saturation(&self, params: &[f32], x: &[f32], stats: &mut [f32]) {
        use norm::pointwise::SATURATED;
        let Some(alpha) = self.param(ParamRole::Slope) else {
            return;
        };
        let alpha = alpha.get(params)[0];
        let s = self
            .param(ParamRole::Shift)
            .map_or(0.0, |p| p.get(params)[0]);
        for (xr, st) in x
            .chunks_exact(self.d)
            .zip(stats.chunks_exact_mut(norm::STATS))
        {
            let sat = xr
                .iter()
                .filter(|&&v| (alpha * v + s).abs() > SATURATED)
                .count();
            st[0] = sat as f32 / self.d as f32;
        }
    }

    /// Write `dx`, accumulate the parameter gradients.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dy: &[f32],
        dx: &mut [f32],
        c: &mut NormCache,
    ) {
        norm::backward(
            self.kind,
            self.d,
            x,
            dy,
            self.p.get(params),
            &c.stats,
            dx,
            self.p.get_mut(grads),
            &mut c.scratch,
        );
    }
}

/// Root-mean-square of a buffer (f64 accumulation).
pub fn rms(v: &[f32]) -> f64 {
    (crate::params::sum_squares(v) / v.len().max(1) as f64).sqrt()
}

/// An aligned buffer of `n` zeros (shorthand used by the caches).
pub fn buf(n: usize) -> AlignedBuf {
    AlignedBuf::zeros(n)
}

/// Mean L2 norm of the rows of a `[rows, d]` matrix.
pub fn mean_row_norm(x: &[f32], d: usize) -> f64 {
    let rows = x.len() / d;
    x.chunks_exact(d)
        .map(|r| crate::params::sum_squares(r).sqrt())
        .sum::<f64>()
        / rows.max(1) as f64
}

/// The rows of `x` normalised by `kind` with its initial parameters and
/// default eps (an allocating convenience for experiments).
pub fn normalise_rows(kind: NormKind, d: usize, x: &[f32]) -> Vec<f32> {
    let mut p = vec![0.0; kind.num_params(d)];
    kind.init_params(d, &mut p);
    let mut y = vec![0.0; x.len()];
    let mut st = vec![0.0; norm::stats_len(x.len() / d)];
    norm::forward(kind, d, kind.default_eps(), x, &p, &mut y, &mut st);
    y
}
