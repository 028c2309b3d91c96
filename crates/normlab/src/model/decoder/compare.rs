//! How far one way of holding or applying a decoder's weights (its file's
//! blocks, 8-bit activations) is from another (f32) on the same prompts:
//! the logits of every generation step, and the greedy continuations.

use super::{argmax, Decoder, KvCache};
use crate::error::Result;
use crate::model::hooks::NoObserver;

/// [`deviation`]'s findings.
#[derive(Clone, Debug, PartialEq)]
pub struct PathDeviation {
    /// The largest |logit difference| of any step, as a fraction of that
    /// step's reference logit range (max - min).
    pub max_rel_logit_diff: f64,
    /// Prompts compared.
    pub prompts: usize,
    /// Generation steps compared per prompt.
    pub steps: usize,
    /// Prompts whose greedy continuation (of `steps` tokens, each decoder
    /// on its own) differs from the reference's.
    pub greedy_changed: usize,
}

/// Compare `other` with `reference` (the same model held or applied
/// another way) on `prompts`: each prompt in one pass, then `steps`
/// one-token steps feeding both the reference's greedy token, comparing
/// the logits of the prompt's last position and of every step; then
/// whether `other`'s own greedy continuation differs from those tokens
/// (the reference's greedy continuation).
pub fn deviation(
    reference: &Decoder,
    other: &Decoder,
    prompts: &[Vec<u32>],
    steps: usize,
) -> Result<PathDeviation> {
    let (d, v) = (reference.cfg.d, reference.cfg.vocab);
    if other.cfg.d != d || other.cfg.vocab != v {
        return Err("the two decoders are not the same model".into());
    }
    let (ia, ib) = (&reference.interventions, &other.interventions);
    let mut worst = 0f64;
    let mut changed = 0;
    for ids in prompts.iter().filter(|p| !p.is_empty()) {
        let (mut ca, mut cb) = (KvCache::new(reference), KvCache::new(other));
        let mut ha = reference.forward(ids, ia, &mut ca, &mut NoObserver)?;
        let mut hb = other.forward(ids, ib, &mut cb, &mut NoObserver)?;
        // The reference's greedy tokens, fed to both: its own greedy
        // continuation (no second generation).
        let n = steps.min(reference.cfg.context.saturating_sub(ids.len()));
        let mut own = Vec::with_capacity(n);
        for step in 0..=steps {
            let la = reference.logits_from(&ha[ha.len() - d..], true);
            let lb = other.logits_from(&hb[hb.len() - d..], true);
            let (lo, hi) = la
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| {
                    (l.min(x), h.max(x))
                });
            let range = f64::from(hi - lo).max(f64::MIN_POSITIVE);
            let diff = la
                .iter()
                .zip(&lb)
                .fold(0f64, |m, (a, b)| m.max(f64::from((a - b).abs())));
            worst = worst.max(if diff.is_nan() {
                f64::INFINITY
            } else {
                diff / range
            });
            if step == n {
                break;
            }
            let next = argmax(&la) as u32;
            own.push(next);
            ha = reference.forward(&[next], ia, &mut ca, &mut NoObserver)?;
            hb = other.forward(&[next], ib, &mut cb, &mut NoObserver)?;
        }
        // Greedy decoding stops after the end-of-sequence token.
        if let Some(end) = own.iter().position(|&t| Some(t) == reference.eos) {
            own.truncate(end + 1);
        }
        if n > 0 && own != other.greedy(ids, n)? {
            changed += 1;
        }
    }
    Ok(PathDeviation {
        max_rel_logit_diff: worst,
        prompts: prompts.iter().filter(|p| !p.is_empty()).count(),
        steps,
        greedy_changed: changed,
    })
}
