//! Sun et al.'s mean ablation, measured: the value a `mean` edit sets at
//! each (block, position, channel) it selects is that value's mean over
//! held-out windows, each starting at position 0, run through the model
//! with every other intervention in place. An [`Observer`] collects them at
//! the edits' hook points.

use super::Decoder;
use crate::error::Result;
use crate::model::hooks::Observer;
use crate::model::intervene::{Change, Edit, Interventions, Point};
use std::collections::BTreeMap;

/// Sums and counts per (edit, block, position, channel).
struct MeanAt<'a> {
    edits: Vec<(usize, &'a Edit)>,
    d: usize,
    ffn: usize,
    sums: BTreeMap<(usize, usize, usize, usize), (f64, usize)>,
}

impl MeanAt<'_> {
    fn add(&mut self, point: Point, block: usize, x: &[f32]) {
        let width = if point == Point::MlpPost {
            self.ffn
        } else {
            self.d
        };
        let rows = x.len() / width;
        for &(i, e) in self.edits.iter().filter(|(_, e)| e.point == point) {
            if point != Point::Embed && !e.blocks.has(block) {
                continue;
            }
            for pos in e.positions.below(rows) {
                for c in e.channels.below(width) {
                    let s = self.sums.entry((i, block, pos, c)).or_insert((0.0, 0));
                    s.0 += f64::from(x[pos * width + c]);
                    s.1 += 1;
                }
            }
        }
    }
}

impl Observer for MeanAt<'_> {
    fn wants_attention(&self) -> bool {
        false
    }
    fn embedded(&mut self, x: &[f32]) {
        self.add(Point::Embed, 0, x);
    }
    fn sublayer_in(&mut self, block: usize, sub: usize, x: &[f32]) {
        if sub == 0 {
            self.add(Point::ResidPre, block, x);
        }
    }
    fn mlp_hidden(&mut self, block: usize, h: &[f32]) {
        self.add(Point::MlpPost, block, h);
    }
    fn write(&mut self, block: usize, sub: usize, w: &[f32]) {
        let p = if sub == 0 {
            Point::AttnOut
        } else {
            Point::MlpOut
        };
        self.add(p, block, w);
    }
    fn sublayer_out(&mut self, block: usize, sub: usize, x: &[f32]) {
        let p = if sub == 0 {
            Point::ResidMid
        } else {
            Point::ResidPost
        };
        self.add(p, block, x);
    }
}

impl Decoder {
    /// Measure every unmeasured `mean` edit of the model's interventions
    /// over `ids` in windows of `window` tokens (each from position 0), the
    /// other interventions in place; a value no window reaches (a position
    /// beyond every window) is left as it flows.
    pub fn resolve_means(&mut self, ids: &[u32], window: usize) -> Result<()> {
        let windows: Vec<Vec<u32>> = ids.chunks(window.max(1)).map(<[u32]>::to_vec).collect();
        self.resolve_means_over(&windows)
    }

    /// [`Decoder::resolve_means`] over these sequences (each a pass from
    /// position 0).
    pub fn resolve_means_over(&mut self, windows: &[Vec<u32>]) -> Result<()> {
        if !self.interventions.needs_means() {
            return Ok(());
        }
        let iv = &self.interventions;
        // The pass that measures runs without the edits it measures.
        let others = Interventions {
            edits: iv
                .edits
                .iter()
                .filter(|e| !matches!(e.change, Change::Mean(None)))
                .cloned()
                .collect(),
            ..iv.clone()
        };
        let mut obs = MeanAt {
            edits: iv
                .edits
                .iter()
                .enumerate()
                .filter(|(_, e)| matches!(e.change, Change::Mean(None)))
                .collect(),
            d: self.cfg.d,
            ffn: self.cfg.ffn,
            sums: BTreeMap::new(),
        };
        for w in windows.iter().filter(|w| !w.is_empty()) {
            self.hidden_with(w, &others, &mut obs)?;
        }
        let mut means: Vec<BTreeMap<(usize, usize, usize), f32>> =
            vec![BTreeMap::new(); iv.edits.len()];
        for ((i, b, p, c), (sum, n)) in obs.sums {
            means[i].insert((b, p, c), (sum / n as f64) as f32);
        }
        for (e, m) in self.interventions.edits.iter_mut().zip(means) {
            if matches!(e.change, Change::Mean(None)) {
                e.change = Change::Mean(Some(m));
            }
        }
        Ok(())
    }
}
