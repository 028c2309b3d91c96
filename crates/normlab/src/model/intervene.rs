//! Interventions: what flows through a forward pass, changed on purpose at
//! its hook points (`hooks.rs`), the way TransformerLens's hooks may return
//! a changed tensor. The lessons' causes are tested this way on real
//! models: a massive activation set to zero or to its mean (Sun et al.
//! 2024), attention to the first token removed (Gu et al. 2024), every norm
//! run as another kind (C21) or without eps (C8), the final norm left out
//! (C20), the SwiGLU clamp put into a model trained without it (C24).
//!
//! An [`Edit`] changes a stream-shaped tensor at a [`Point`] of some blocks,
//! at some positions and channels: zero, scale, set to a value, or set to
//! its mean (over held-out text, measured by a first pass: [`Change::Mean`]
//! is resolved into per-(block, position, channel) values before the pass
//! it changes). A [`Knockout`] removes the attention of every query to some
//! key positions in some blocks, the rest of each row renormalised. The
//! forward applies them in order at each point, before any observer sees
//! the tensor, so a report describes the changed model.
//!
//! On the command line (`normlab inspect --intervene`), an edit reads
//! `POINT[:BLOCKS][@POSITIONS][#CHANNELS]=CHANGE`, e.g.
//! `resid_post:2-29@0#1415,2533=zero` or `resid_post@0=mean`, and a
//! knockout `POSITIONS[:BLOCKS]` (`--knockout 0`).

use crate::error::Result;
use crate::kernels::norm::NormKind;
use std::collections::BTreeMap;
use std::fmt;

/// A hook point whose tensor an edit changes (TransformerLens's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Point {
    /// `hook_embed`: the embeddings (scaled, positions added), which block
    /// 0 reads (block index ignored).
    Embed,
    /// `blocks.L.hook_resid_pre`: the stream block L reads.
    ResidPre,
    /// `blocks.L.hook_attn_out`: what the attention adds (after its output
    /// norm).
    AttnOut,
    /// `blocks.L.hook_resid_mid`: the stream after the attention's add.
    ResidMid,
    /// `blocks.L.mlp.hook_post`: the MLP's hidden activation (`act(gate) *
    /// up`), which the down projection reads; rows of the MLP's width.
    MlpPost,
    /// `blocks.L.hook_mlp_out`: what the MLP adds.
    MlpOut,
    /// `blocks.L.hook_resid_post`: the stream after the block.
    ResidPost,
}

impl Point {
    /// Every point, in the order a block passes them.
    pub const ALL: [Point; 7] = [
        Point::Embed,
        Point::ResidPre,
        Point::AttnOut,
        Point::ResidMid,
        Point::MlpPost,
        Point::MlpOut,
        Point::ResidPost,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Point::Embed => "embed",
            Point::ResidPre => "resid_pre",
            Point::AttnOut => "attn_out",
            Point::ResidMid => "resid_mid",
            Point::MlpPost => "mlp_post",
            Point::MlpOut => "mlp_out",
            Point::ResidPost => "resid_post",
        }
    }
}

/// Which blocks, positions or channels: all, or a sorted list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sel {
    /// Every one.
    All,
    /// These (sorted, no repeats).
    Only(Vec<usize>),
}

impl Sel {
    /// Whether `i` is selected.
    pub fn has(&self, i: usize) -> bool {
        match self {
            Sel::All => true,
            Sel::Only(v) => v.binary_search(&i).is_ok(),
        }
    }

    /// The selected indices below `n`.
    pub fn below(&self, n: usize) -> Vec<usize> {
        match self {
            Sel::All => (0..n).collect(),
            Sel::Only(v) => v.iter().copied().filter(|&i| i < n).collect(),
        }
    }

    /// The largest index selected (None: all).
    pub fn max(&self) -> Option<usize> {
        match self {
            Sel::All => None,
            Sel::Only(v) => v.last().copied(),
        }
    }

    /// Parse `3`, `2-29`, `1,4,7`, `0-3,9` or `*`.
    pub fn parse(s: &str, what: &str) -> Result<Sel> {
        let s = s.trim();
        if s == "*" || s.is_empty() {
            return Ok(Sel::All);
        }
        let num = |w: &str| -> Result<usize> {
            w.trim()
                .parse::<usize>()
                .map_err(|_| format!("{what}: '{w}' is not an index (a number from 0)").into())
        };
        let mut v = Vec::new();
        for part in s.split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if b < a || b - a >= 1 << 20 {
                        return Err(
                            format!("{what}: '{part}' is not a range a-b with a <= b").into()
                        );
                    }
                    v.extend(a..=b);
                }
                None => v.push(num(part)?),
            }
        }
        v.sort_unstable();
        v.dedup();
        Ok(Sel::Only(v))
    }
}

impl fmt::Display for Sel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sel::All => f.write_str("all"),
            Sel::Only(v) => {
                let mut parts: Vec<String> = Vec::new();
                let mut i = 0;
                while i < v.len() {
                    let mut j = i;
                    while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
                        j += 1;
                    }
                    parts.push(if j > i {
                        format!("{}-{}", v[i], v[j])
                    } else {
                        v[i].to_string()
                    });
                    i = j + 1;
                }
                f.write_str(&parts.join(","))
            }
        }
    }
}

/// What an edit does to the values it selects.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Set to 0.
    Zero,
    /// Multiply by a factor.
    Scale(f32),
    /// Set to a value.
    Value(f32),
    /// Set to each value's mean over held-out text (Sun et al.'s "mean"
    /// ablation), once measured: per (block, position, channel).
    Mean(Option<BTreeMap<(usize, usize, usize), f32>>),
}

/// One edit of a stream-shaped tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Edit {
    /// Where.
    pub point: Point,
    /// In which blocks (ignored at [`Point::Embed`]).
    pub blocks: Sel,
    /// At which positions (absolute: a pass after cached tokens counts
    /// from 0 at the first token).
    pub positions: Sel,
    /// In which channels.
    pub channels: Sel,
    /// What to do.
    pub change: Change,
}

impl Edit {
    /// Parse `POINT[:BLOCKS][@POSITIONS][#CHANNELS]=CHANGE`, CHANGE one of
    /// `zero`, `mean`, `xF` (scale by F) or a number (set to it).
    pub fn parse(s: &str) -> Result<Edit> {
        let bad = |m: &str| -> Result<Edit> {
            Err(format!("--intervene '{s}': {m} (POINT[:BLOCKS][@POSITIONS][#CHANNELS]=CHANGE, e.g. resid_post:2-29@0#1415=zero; points: {}; changes: zero, mean, xF, a number)",
                Point::ALL.map(Point::name).join(", ")).into())
        };
        let Some((target, change)) = s.split_once('=') else {
            return bad("no '='");
        };
        let change = match change.trim() {
            "zero" => Change::Zero,
            "mean" => Change::Mean(None),
            c => match c.strip_prefix('x') {
                Some(f) => match f.parse::<f32>() {
                    Ok(f) if f.is_finite() => Change::Scale(f),
                    _ => return bad("a scale xF needs a finite number F"),
                },
                None => match c.parse::<f32>() {
                    Ok(v) if v.is_finite() => Change::Value(v),
                    _ => return bad(&format!("unknown change '{c}'")),
                },
            },
        };
        let (rest, channels) = match target.split_once('#') {
            Some((r, c)) => (r, Sel::parse(c, "channels")?),
            None => (target, Sel::All),
        };
        let (rest, positions) = match rest.split_once('@') {
            Some((r, p)) => (r, Sel::parse(p, "positions")?),
            None => (rest, Sel::All),
        };
        let (point, blocks) = match rest.split_once(':') {
            Some((p, b)) => (p, Sel::parse(b, "blocks")?),
            None => (rest, Sel::All),
        };
        let Some(point) = Point::ALL.into_iter().find(|p| p.name() == point.trim()) else {
            return bad(&format!("unknown point '{}'", point.trim()));
        };
        Ok(Edit {
            point,
            blocks,
            positions,
            channels,
            change,
        })
    }

    /// Whether it acts at `point` of `block`.
    fn at(&self, point: Point, block: usize) -> bool {
        self.point == point && (point == Point::Embed || self.blocks.has(block))
    }

    /// Apply to `x` (`[rows, width]`, row r at position `past + r`).
    fn apply(&self, block: usize, past: usize, width: usize, x: &mut [f32]) {
        let rows = x.len() / width.max(1);
        for r in 0..rows {
            let pos = past + r;
            if !self.positions.has(pos) {
                continue;
            }
            let row = &mut x[r * width..(r + 1) * width];
            for c in self.channels.below(width) {
                row[c] = match &self.change {
                    Change::Zero => 0.0,
                    Change::Scale(f) => row[c] * f,
                    Change::Value(v) => *v,
                    Change::Mean(Some(m)) => m.get(&(block, pos, c)).copied().unwrap_or(row[c]),
                    Change::Mean(None) => row[c],
                };
            }
        }
    }
}

impl fmt::Display for Edit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let change = match &self.change {
            Change::Zero => "set to 0".to_string(),
            Change::Scale(v) => format!("scaled by {v}"),
            Change::Value(v) => format!("set to {v}"),
            Change::Mean(_) => "set to its mean over the held-out text".to_string(),
        };
        let blocks = if self.point == Point::Embed {
            String::new()
        } else {
            format!(" of blocks {}", self.blocks)
        };
        write!(
            f,
            "{}{blocks} at positions {}, channels {}: {change}",
            self.point.name(),
            self.positions,
            self.channels
        )
    }
}

/// Attention to some key positions removed in some blocks: each query's
/// weights on them set to 0 and the rest renormalised to sum to 1 (a
/// query that saw nothing else attends nowhere).
#[derive(Clone, Debug, PartialEq)]
pub struct Knockout {
    /// The key positions.
    pub keys: Sel,
    /// In which blocks.
    pub blocks: Sel,
}

impl Knockout {
    /// Parse `POSITIONS[:BLOCKS]`, e.g. `0` or `0:3,5`.
    pub fn parse(s: &str) -> Result<Knockout> {
        let (keys, blocks) = match s.split_once(':') {
            Some((k, b)) => (k, Sel::parse(b, "--knockout blocks")?),
            None => (s, Sel::All),
        };
        let keys = Sel::parse(keys, "--knockout positions")?;
        if keys == Sel::All {
            return Err(format!(
                "--knockout '{s}': name the key positions (POSITIONS[:BLOCKS], e.g. 0): removing every key leaves no attention"
            )
            .into());
        }
        Ok(Knockout { keys, blocks })
    }
}

impl fmt::Display for Knockout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attention to positions {} removed in blocks {} (each row renormalised)",
            self.keys, self.blocks
        )
    }
}

/// Everything a pass changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interventions {
    /// Edits, applied in order at their points.
    pub edits: Vec<Edit>,
    /// Attention removed.
    pub knockouts: Vec<Knockout>,
    /// Every block norm and the final norm run as this kind, keeping gain
    /// and bias (QK-Norm stays the model's): C21's swap.
    pub norm_kind: Option<NormKind>,
    /// Every norm's eps, QK-Norm's included (C8: a tiny eps takes it out).
    pub eps: Option<f32>,
    /// The final norm left out (C20).
    pub no_final_norm: bool,
    /// The SwiGLU clamp put into every feed-forward: the gate projection to
    /// at most the limit, the up projection to [-limit, limit] (DeepSeek
    /// V4's form; GeGLU alike).
    pub ffn_clamp: Option<f32>,
}

impl Interventions {
    /// Nothing changed.
    pub fn none() -> Interventions {
        Interventions::default()
    }

    /// Whether nothing is changed.
    pub fn is_empty(&self) -> bool {
        *self == Interventions::default()
    }

    /// Apply the edits at `point` of `block` to `x` (`[rows, width]`).
    pub fn edit(&self, point: Point, block: usize, past: usize, width: usize, x: &mut [f32]) {
        for e in self.edits.iter().filter(|e| e.at(point, block)) {
            e.apply(block, past, width, x);
        }
    }

    /// Whether any edit acts at `point` (of any block).
    pub fn edits_at(&self, point: Point) -> bool {
        self.edits.iter().any(|e| e.point == point)
    }

    /// Remove the knocked-out keys of `block` from one query's weights
    /// `row[from..seen]` (`row[j]` the weight on key position j) and
    /// renormalise the rest.
    pub fn knock_out(&self, block: usize, row: &mut [f32], from: usize, seen: usize) {
        let mut any = false;
        for k in self.knockouts.iter().filter(|k| k.blocks.has(block)) {
            for j in k.keys.below(seen).into_iter().filter(|&j| j >= from) {
                row[j] = 0.0;
                any = true;
            }
        }
        if any {
            let z: f32 = row[from..seen].iter().sum();
            if z > 0.0 {
                row[from..seen].iter_mut().for_each(|p| *p /= z);
            }
        }
    }

    /// Whether any knockout acts in `block`.
    pub fn knocks(&self, block: usize) -> bool {
        self.knockouts.iter().any(|k| k.blocks.has(block))
    }

    /// The blocks, positions or channels named beyond the model: an
    /// error naming the first (`layers` blocks, stream width `d`, MLP
    /// width `ffn`).
    pub fn check(&self, layers: usize, d: usize, ffn: usize) -> Result<()> {
        for e in &self.edits {
            let width = if e.point == Point::MlpPost { ffn } else { d };
            if let Some(b) = e.blocks.max().filter(|&b| b >= layers) {
                return Err(format!(
                    "--intervene {}: block {b} is beyond the model's {layers} blocks",
                    e.point.name()
                )
                .into());
            }
            if let Some(c) = e.channels.max().filter(|&c| c >= width) {
                return Err(format!(
                    "--intervene {}: channel {c} is beyond its width {width}",
                    e.point.name()
                )
                .into());
            }
        }
        for k in &self.knockouts {
            if let Some(b) = k.blocks.max().filter(|&b| b >= layers) {
                return Err(
                    format!("--knockout: block {b} is beyond the model's {layers} blocks").into(),
                );
            }
        }
        if let Some(e) = self.eps {
            if !(e.is_finite() && e > 0.0) {
                return Err(format!("eps must be a positive number (got {e})").into());
            }
        }
        if let Some(l) = self.ffn_clamp {
            if !(l.is_finite() && l > 0.0) {
                return Err(format!("--ffn-clamp must be a positive number (got {l})").into());
            }
        }
        Ok(())
    }

    /// One line per change, for a report's head (empty: none).
    pub fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self.edits.iter().map(|e| e.to_string()).collect();
        out.extend(self.knockouts.iter().map(|k| k.to_string()));
        if let Some(k) = self.norm_kind {
            out.push(format!(
                "every norm but QK-Norm run as {k}, keeping gain and bias"
            ));
        }
        if let Some(e) = self.eps {
            out.push(format!("every norm's eps set to {e:e}"));
        }
        if self.no_final_norm {
            out.push("the final norm left out".into());
        }
        if let Some(l) = self.ffn_clamp {
            out.push(format!("every feed-forward's gate clamped to at most {l} and its up projection to [-{l}, {l}]"));
        }
        out
    }

    /// Whether a mean edit is still unmeasured.
    pub fn needs_means(&self) -> bool {
        self.edits
            .iter()
            .any(|e| matches!(e.change, Change::Mean(None)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_parse_and_apply() {
        let e = Edit::parse("resid_post:2-4,7@0#1,3=zero").unwrap();
        assert_eq!(e.point, Point::ResidPost);
        assert_eq!(e.blocks, Sel::Only(vec![2, 3, 4, 7]));
        assert_eq!(e.positions, Sel::Only(vec![0]));
        assert_eq!(e.channels, Sel::Only(vec![1, 3]));
        assert_eq!(
            e.to_string(),
            "resid_post of blocks 2-4,7 at positions 0, channels 1,3: set to 0"
        );
        let iv = Interventions {
            edits: vec![e],
            ..Interventions::default()
        };
        let mut x: Vec<f32> = (0..8).map(|v| v as f32 + 1.0).collect();
        // Block 3, a pass after 0 cached tokens: row 0 (position 0) changes.
        iv.edit(Point::ResidPost, 3, 0, 4, &mut x);
        assert_eq!(x, [1.0, 0.0, 3.0, 0.0, 5.0, 6.0, 7.0, 8.0]);
        // Block 5 is not selected; after 1 cached token, row 0 is position 1.
        let mut y: Vec<f32> = (0..8).map(|v| v as f32).collect();
        iv.edit(Point::ResidPost, 5, 0, 4, &mut y);
        iv.edit(Point::ResidPost, 3, 1, 4, &mut y);
        assert_eq!(y, (0..8).map(|v| v as f32).collect::<Vec<_>>());
        assert_eq!(
            Edit::parse("mlp_out=x0.5").unwrap().change,
            Change::Scale(0.5)
        );
        assert_eq!(
            Edit::parse("embed@0=2.5").unwrap().change,
            Change::Value(2.5)
        );
        for bad in [
            "resid=zero",
            "resid_post",
            "resid_post=x",
            "resid_post:3-1=zero",
            "resid_post:a=zero",
            "resid_post=inf",
        ] {
            assert!(Edit::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_knockout_renormalises_the_rest() {
        let iv = Interventions {
            knockouts: vec![Knockout::parse("0:1").unwrap()],
            ..Interventions::default()
        };
        let mut row = [0.5f32, 0.25, 0.25, 0.0];
        iv.knock_out(0, &mut row, 0, 3);
        assert_eq!(row, [0.5, 0.25, 0.25, 0.0], "block 0 is not knocked out");
        iv.knock_out(1, &mut row, 0, 3);
        assert_eq!(row, [0.0, 0.5, 0.5, 0.0]);
        // A query that sees only position 0 attends nowhere.
        let mut first = [1.0f32, 0.0];
        iv.knock_out(1, &mut first, 0, 1);
        assert_eq!(first, [0.0, 0.0]);
        assert!(Knockout::parse("*").is_err());
    }

    #[test]
    fn checks_name_what_is_beyond_the_model() {
        let iv = Interventions {
            edits: vec![Edit::parse("resid_post:30=zero").unwrap()],
            ..Interventions::default()
        };
        assert!(iv
            .check(30, 8, 16)
            .unwrap_err()
            .to_string()
            .contains("block 30"));
        let iv = Interventions {
            edits: vec![Edit::parse("mlp_post#16=zero").unwrap()],
            ..Interventions::default()
        };
        assert!(iv
            .check(2, 32, 16)
            .unwrap_err()
            .to_string()
            .contains("channel 16"));
        assert!(iv.check(2, 8, 32).is_ok());
    }
}
