//! mHC, manifold-constrained hyper-connections (DeepSeek 2025, arXiv
//! 2512.24880) in transformers' DeepSeek V4 form: n parallel streams whose
//! read, write and mixing weights are computed per token from the streams,
//! the mixing projected towards a doubly stochastic matrix (Sinkhorn), and
//! a learned head collapsing the streams. The arithmetic is `nn/mhc.rs`.

use super::hc::{check_streams, stream_knob};
use super::{ResidualOption, StreamSim, StreamsPlan, SublayerPlan};
use crate::model::ModelConfig;
use crate::nn::mhc::SINKHORN_ITERS;

/// The most Sinkhorn iterations `--mhc-sinkhorn` takes.
pub const MAX_ITERS: usize = 100;

/// The declaration.
pub const MHC: ResidualOption = ResidualOption {
    name: "mhc",
    title: "mHC (manifold-constrained hyper-connections)",
    paper: "DeepSeek 2025",
    summary: "n parallel streams, per-token read/write weights, Sinkhorn-projected mixing",
    active: |c| c.mhc.is_some(),
    validate: |c: &ModelConfig| {
        let Some(n) = c.mhc else {
            if c.mhc_sinkhorn.is_some() {
                return Err("--mhc-sinkhorn needs --mhc N (the number of streams, e.g. 4)".into());
            }
            return Ok(());
        };
        if c.hc.is_some() {
            return Err("--mhc and --hc are two designs of the n streams; choose one".into());
        }
        if let Some(t) = c.mhc_sinkhorn {
            if !(1..=MAX_ITERS).contains(&t) {
                return Err(format!("--mhc-sinkhorn takes 1 to {MAX_ITERS} (got {t})"));
            }
        }
        check_streams("--mhc", n, c)
    },
    apply: |c, p: &mut SublayerPlan| {
        p.hyper = c.mhc.map(|n| StreamsPlan::Mhc {
            n,
            iters: c.mhc_sinkhorn.unwrap_or(SINKHORN_ITERS),
        })
    },
    sim: Some(stream_knob(
        "mHC with n streams at transformers' init (per-token weights from a small random map; Sinkhorn mixing near uniform 1/n)",
        |v| format!("mHC n={v}"),
        StreamSim::Manifold,
    )),
    example: |c| c.mhc = Some(4),
    convert_refusal: Some("n parallel streams have no single-stream LayerNorm/RMSNorm equivalent"),
};

#[cfg(test)]
mod tests {
    use super::super::{plan, StreamsPlan};
    use crate::model::ModelConfig;

    #[test]
    fn plans_streams_and_refuses_what_it_cannot_combine_with() {
        let mut c = ModelConfig::gpt();
        c.mhc = Some(4);
        assert_eq!(
            plan(&c, 1, 0).hyper,
            Some(StreamsPlan::Mhc { n: 4, iters: 20 })
        );
        assert!(c.validate().is_ok());
        c.hc = Some(4);
        assert!(c.validate().unwrap_err().to_string().contains("choose one"));
        c.hc = None;
        c.mhc_sinkhorn = Some(0);
        assert!(c.validate().unwrap_err().to_string().contains("1 to 100"));
        c.mhc = None;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("needs --mhc"));
        c.mhc_sinkhorn = None;
        c.mhc = Some(3);
        c.residual = false;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--no-residual"));
    }
}
