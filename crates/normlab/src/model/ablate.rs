//! Removing a block from a trained model, as depth-use and residual-routing
//! measure "how much does the loss rise when block l is skipped": the same
//! parameters, every other block kept with its place-dependent settings.
//! With n streams the block's mixing goes with it. With Attention
//! Residuals a removed block is no source: a slot that no remaining
//! sublayer has written when a sublayer (or the head) reads it is left out
//! of that read's softmax, rather than read as an empty slot with score 0.

use super::Model;
use crate::error::Result;
use crate::nn::{Residual, StreamHead};

impl Model {
    /// This model without block `l` (panics when `l` is out of range); an
    /// error for an AttnRes bank of more than 128 slots, whose sources the
    /// mask cannot name.
    pub fn without_block(&self, l: usize) -> Result<Model> {
        if let Some(StreamHead::Depth(h)) = &self.stream_head {
            if h.at.slots > 128 {
                return Err(format!(
                    "skipping a block of AttnRes with {} slots is not supported (at most 128: use larger --attnres blocks)",
                    h.at.slots
                )
                .into());
            }
        }
        let mut m = self.clone();
        m.blocks.remove(l);
        // Slots written so far, bottom to top (slot 0, the embedding,
        // always holds a source).
        let mut written: u128 = 1;
        let absent_below = |reads: usize, written: u128| -> u128 {
            (0..reads.min(128))
                .filter(|&i| (written >> i) & 1 == 0)
                .fold(0, |a, i| a | (1 << i))
        };
        for b in &mut m.blocks {
            for s in [&mut b.mix, &mut b.mlp] {
                if let Residual::Depth(a) = &mut s.res {
                    a.at.absent = absent_below(a.at.reads, written);
                    if a.at.own < 128 {
                        written |= 1 << a.at.own;
                    }
                }
            }
        }
        if let Some(StreamHead::Depth(h)) = &mut m.stream_head {
            h.at.absent = absent_below(h.at.reads, written);
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Model, ModelConfig};
    use crate::nn::{Residual, StreamHead};

    fn depth_reads(m: &Model) -> Vec<(usize, u128)> {
        m.sublayers()
            .filter_map(|s| match &s.res {
                Residual::Depth(a) => Some((a.at.reads, a.at.absent)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_removed_blocks_slots_are_no_source() {
        // 4 blocks = 8 sublayers in slot blocks of 3: slots 1..3 hold
        // sublayers 0-2, 3-5, 6-7.
        let mut c = ModelConfig::gpt();
        c.layers = 4;
        c.attnres = Some(3);
        let m = Model::new(&c).unwrap();
        assert!(depth_reads(&m).iter().all(|&(_, a)| a == 0));
        // Without block 1 (sublayers 2 and 3): slot 1 keeps sublayers 0-1,
        // slot 2 loses its first two sublayers, so sublayer 4 (now the
        // third of the model) reads slot 2 before anything is in it.
        let w = m.without_block(1).unwrap();
        let reads = depth_reads(&w);
        assert_eq!(reads.len(), 6);
        // Sublayer 4 reads slots 0..3; slot 2 is empty there.
        assert_eq!(reads[2], (3, 0b100));
        // Sublayer 5 reads slot 2 after sublayer 4 wrote it.
        assert_eq!(reads[3], (3, 0));
        let Some(StreamHead::Depth(h)) = &w.stream_head else {
            panic!("AttnRes head");
        };
        assert_eq!(h.at.absent, 0);
        // Without blocks 2 and 3 (sublayers 4-7), slot 3 is never written:
        // the head leaves it out.
        let w = m.without_block(3).unwrap().without_block(2).unwrap();
        let Some(StreamHead::Depth(h)) = &w.stream_head else {
            panic!("AttnRes head");
        };
        assert_eq!(h.at.absent, 0b1000);
    }

    #[test]
    fn skipping_an_empty_slot_changes_the_mix_and_nothing_else_does() {
        // A plain model loses only the block.
        let mut c = ModelConfig::gpt();
        c.layers = 3;
        let m = Model::new(&c).unwrap();
        assert_eq!(m.without_block(1).unwrap().blocks.len(), 2);
        // AttnRes with one slot per block: the loss without block 1 differs
        // from the same model reading block 1's empty slot with score 0.
        c.attnres = Some(2);
        let m = Model::new(&c).unwrap();
        let params = m.init_params(1);
        let mut params = params.to_vec();
        // Non-zero queries so that the mix is not the plain average.
        for s in m.sublayers() {
            if let Residual::Depth(a) = &s.res {
                for (i, v) in a.query.get_mut(&mut params).iter_mut().enumerate() {
                    *v = ((i % 7) as f32 - 3.0) * 0.3;
                }
            }
        }
        let loss = |m: &Model| {
            let mut ws = m.workspace(2, 8);
            for (i, t) in ws.tokens.iter_mut().enumerate() {
                *t = (i * 31 % 256) as u32;
            }
            for (i, t) in ws.targets.iter_mut().enumerate() {
                *t = (i * 17 % 256) as u32;
            }
            m.forward(&params, &mut ws)
        };
        let masked = m.without_block(1).unwrap();
        let mut unmasked = m.clone();
        unmasked.blocks.remove(1);
        let (a, b) = (loss(&masked), loss(&unmasked));
        assert!(a.is_finite() && b.is_finite());
        assert_ne!(a, b, "a masked slot is left out of the softmax");
    }
}
