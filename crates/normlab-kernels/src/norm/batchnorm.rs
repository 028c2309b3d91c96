//! BatchNorm over the rows of a `[rows, d]` batch, kept for the comparison
//! experiments (why language models do not use it): statistics are per
//! feature over all rows, so one row's output depends on the other rows.
//!
//! Training mode normalises with the batch statistics (biased variance) and
//! updates running statistics as PyTorch does:
//! `running = (1 - momentum) * running + momentum * batch`, with the
//! unbiased variance (`n / (n - 1)`; with a single row the running variance
//! is left unchanged). Evaluation mode normalises with the running statistics.
//!
//! Backward (training mode), per feature j over the n rows, with
//! g = dy * gamma:
//!
//! ```text
//! dx     = rstd_j * (g - mean_rows(g) - xhat * mean_rows(g * xhat))
//! dgamma += sum_rows(dy * xhat) ;  dbeta += sum_rows(dy)
//! ```
//!
//! The reductions run over rows in a fixed order with f64 accumulators per
//! feature, vectorised across features; this kernel is single-threaded.

/// BatchNorm's description: gamma and beta per feature, eps 1e-5,
/// statistics per feature over the batch.
pub const SPEC: crate::norm::KindSpec = crate::norm::KindSpec {
    name: "batchnorm",
    aliases: &["bn", "batch_norm"],
    formula: "y = gamma * (x - batch_mean) / sqrt(batch_var + eps) + beta (per feature)",
    default_eps: 1e-5,
    params: &[crate::norm::GAMMA, crate::norm::BETA],
    gain: crate::norm::GainForm::PerFeature { offset: 0.0 },
    row_wise: false,
    elementwise: false,
};

/// A BatchNorm layer's non-learnable state: running statistics, the batch
/// statistics cached for backward and the accumulators (all allocated once).
#[derive(Clone, Debug)]
pub struct BatchNorm {
    /// Feature size.
    pub d: usize,
    /// Added to the variance.
    pub eps: f32,
    /// Running-statistics momentum (PyTorch default 0.1).
    pub momentum: f32,
    /// Running mean per feature (init 0).
    pub running_mean: Vec<f32>,
    /// Running (unbiased) variance per feature (init 1).
    pub running_var: Vec<f32>,
    /// Batch mean per feature from the last training forward.
    pub batch_mean: Vec<f32>,
    /// Batch 1/sqrt(var + eps) per feature from the last training forward.
    pub batch_rstd: Vec<f32>,
    acc: Vec<f64>,
}

impl BatchNorm {
    /// A fresh layer for feature size `d`.
    pub fn new(d: usize, eps: f32) -> BatchNorm {
        BatchNorm {
            d,
            eps,
            momentum: 0.1,
            running_mean: vec![0.0; d],
            running_var: vec![1.0; d],
            batch_mean: vec![0.0; d],
            batch_rstd: vec![0.0; d],
            acc: vec![0.0; 4 * d],
        }
    }

    fn rows(&self, x: &[f32], params: &[f32], out: &[f32]) -> usize {
        let d = self.d;
        assert!(
            d > 0 && x.len().is_multiple_of(d),
            "x length {} is not a multiple of d = {}",
            x.len(),
            d
        );
        assert_eq!(params.len(), 2 * d, "batchnorm params length");
        assert_eq!(out.len(), x.len(), "output length");
        x.len() / d
    }

    /// Training-mode forward: normalise with this batch's statistics, cache
    /// them for backward and update the running statistics.
    pub fn forward_train(&mut self, x: &[f32], params: &[f32], y: &mut [f32]) {
        let rows = self.rows(x, params, y);
        let d = self.d;
        if rows == 0 {
            return;
        }
        let (s1, rest) = self.acc.split_at_mut(d);
        let s2 = &mut rest[..d];
        s1.fill(0.0);
        s2.fill(0.0);
        let k = &x[..d];
        for xr in x.chunks_exact(d) {
            for j in 0..d {
                let v = xr[j] as f64 - k[j] as f64;
                s1[j] += v;
                s2[j] += v * v;
            }
        }
        let n = rows as f64;
        let m = self.momentum as f64;
        for j in 0..d {
            let m1 = s1[j] / n;
            let mean = k[j] as f64 + m1;
            let var = (s2[j] / n - m1 * m1).max(0.0);
            let denom = var + self.eps as f64;
            self.batch_mean[j] = mean as f32;
            self.batch_rstd[j] = if denom > 0.0 {
                (1.0 / denom.sqrt()) as f32
            } else if denom == 0.0 {
                0.0
            } else {
                f32::NAN
            };
            self.running_mean[j] = ((1.0 - m) * self.running_mean[j] as f64 + m * mean) as f32;
            if rows > 1 {
                let unbiased = var * n / (n - 1.0);
                self.running_var[j] =
                    ((1.0 - m) * self.running_var[j] as f64 + m * unbiased) as f32;
            }
        }
        let (gamma, beta) = params.split_at(d);
        normalize(d, x, &self.batch_mean, &self.batch_rstd, gamma, beta, y);
    }

    /// Evaluation-mode forward with the running statistics (rows independent).
    pub fn forward_eval(&mut self, x: &[f32], params: &[f32], y: &mut [f32]) {
        self.rows(x, params, y);
        let d = self.d;
        let (mean, rstd) = self.acc.split_at_mut(d);
        for j in 0..d {
            mean[j] = self.running_mean[j] as f64;
            rstd[j] = 1.0 / (self.running_var[j] as f64 + self.eps as f64).sqrt();
        }
        let (gamma, beta) = params.split_at(d);
        for (xr, yr) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
            for j in 0..d {
                yr[j] = ((xr[j] as f64 - mean[j]) * rstd[j]) as f32 * gamma[j] + beta[j];
            }
        }
    }

    /// Training-mode backward: writes `dx`, accumulates `dparams`
    /// (`[dgamma(d), dbeta(d)]`). Uses the statistics of the last
    /// [`forward_train`](Self::forward_train) on the same `x`.
    pub fn backward(
        &mut self,
        x: &[f32],
        dy: &[f32],
        params: &[f32],
        dx: &mut [f32],
        dparams: &mut [f32],
    ) {
        let rows = self.rows(x, params, dx);
        assert_eq!(dy.len(), x.len(), "dy length");
        assert_eq!(dparams.len(), 2 * self.d, "dparams length");
        let d = self.d;
        if rows == 0 {
            return;
        }
        let gamma = &params[..d];
        let (sg, rest) = self.acc.split_at_mut(d);
        let (sgx, rest) = rest.split_at_mut(d);
        let (sdyx, sdy) = rest.split_at_mut(d);
        sg.fill(0.0);
        sgx.fill(0.0);
        sdyx.fill(0.0);
        sdy.fill(0.0);
        let (mean, rstd) = (&self.batch_mean, &self.batch_rstd);
        for (xr, dyr) in x.chunks_exact(d).zip(dy.chunks_exact(d)) {
            for j in 0..d {
                let xhat = (xr[j] - mean[j]) * rstd[j];
                let g = dyr[j] * gamma[j];
                sg[j] += g as f64;
                sgx[j] += (g * xhat) as f64;
                sdyx[j] += (dyr[j] * xhat) as f64;
                sdy[j] += dyr[j] as f64;
            }
        }
        let n = rows as f64;
        for j in 0..d {
            dparams[j] += sdyx[j] as f32;
            dparams[d + j] += sdy[j] as f32;
            sg[j] /= n;
            sgx[j] /= n;
        }
        for ((xr, dyr), dxr) in x
            .chunks_exact(d)
            .zip(dy.chunks_exact(d))
            .zip(dx.chunks_exact_mut(d))
        {
            for j in 0..d {
                let xhat = (xr[j] - mean[j]) * rstd[j];
                let g = dyr[j] * gamma[j];
                dxr[j] = rstd[j] * ((g - sg[j] as f32) - xhat * sgx[j] as f32);
            }
        }
    }
}

fn normalize(
    d: usize,
    x: &[f32],
    mean: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    beta: &[f32],
    y: &mut [f32],
) {
    for (xr, yr) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        for j in 0..d {
            yr[j] = (xr[j] - mean[j]) * rstd[j] * gamma[j] + beta[j];
        }
    }
}
