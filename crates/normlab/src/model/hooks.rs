//! Hook points of a forward pass: the places a pass hands its tensors to an
//! [`Observer`], the way TransformerLens's hook points do. The forward
//! only computes; what is recorded, and every statistic of it, belongs to
//! the observer (`normlab inspect`'s trace, the llm chapter, Python's
//! traces). An observer can equally be fed tensors captured elsewhere
//! (PyTorch forward hooks, say): the points are plain slices.
//!
//! The points, in the order a pre-norm block calls them (a pass over `t`
//! new tokens after `past` cached ones, rows of width `d`):
//!
//! ```text
//! begin(pass)                         once, before the embedding
//! embedded(x)                         the scaled token embeddings
//! per block l, per sublayer s (0 attention, 1 MLP):
//!   sublayer_in(l, s, x)              the stream the sublayer reads
//!   norm_input(l, role, x, width)     every norm's input (In, QkNorm, Out,
//!                                     Post), then
//!   norm_output(l, role, y, width)    its output
//!   queries_keys(l, q, k, geom)       before QK-Norm (when the block has it)
//!   attention(pattern)                per head: probabilities, largest logit
//!   mlp_hidden(l, h)                  act(gate) * up, after any clamp
//!   write(l, s, w)                    what is added to the stream
//!   sublayer_out(l, s, x)             the stream after the add
//! final_stream(x)                     the stream the final norm reads
//! ```
//!
//! A Post-LN encoder (BERT) calls them in its order: `embedded`, the
//! embedding norm (`NormRole::Embedding`, block 0), then per sublayer
//! `sublayer_in`, `write` (the sublayer's output), its Post norm over the
//! sum, `sublayer_out` (the normed stream).

use crate::nn::NormRole;

/// What a pass covers.
#[derive(Clone, Copy, Debug)]
pub struct Pass {
    /// Positions already in the key/value cache.
    pub past: usize,
    /// New tokens in this pass (rows of every stream tensor).
    pub tokens: usize,
    /// Width of the residual stream.
    pub d: usize,
    /// Blocks.
    pub blocks: usize,
    /// Attention heads per block.
    pub heads: usize,
}

/// One head's attention in one block: row i is the query at position
/// `past + i`, column j the key at position j; entries a query does not
/// see (after it, or before its window) are 0.
#[derive(Clone, Copy, Debug)]
pub struct AttentionPattern<'a> {
    /// Block index.
    pub block: usize,
    /// Head index.
    pub head: usize,
    /// Probabilities `[queries, keys]`.
    pub probs: &'a [f32],
    /// Queries (this pass's tokens).
    pub queries: usize,
    /// Keys (every position seen: `past + queries`).
    pub keys: usize,
    /// Positions before this pass.
    pub past: usize,
    /// The layer's attention window (None: full causal attention).
    pub window: Option<usize>,
    /// The largest pre-softmax logit of the head over the keys each query
    /// sees.
    pub max_logit: f64,
}

impl AttentionPattern<'_> {
    /// The keys query `i` sees: `[from, seen)`.
    pub fn seen_by(&self, i: usize) -> (usize, usize) {
        let seen = self.past + i + 1;
        (self.window.map_or(0, |w| seen.saturating_sub(w)), seen)
    }
}

/// The shape of a block's queries and keys, and how RoPE rotates them
/// (for an observer that recomputes logits from the raw ones).
pub struct QkGeometry<'a> {
    /// Queries (and keys) in the pass.
    pub tokens: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: fewer).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// The logits' scale.
    pub scale: f32,
    /// The layer's attention window.
    pub window: Option<usize>,
    /// Rotate `[tokens, heads * head_dim]` rows by RoPE in place, as the
    /// pass rotates its queries (`heads`) and keys (`kv_heads`).
    pub rotate: &'a dyn Fn(&mut [f32], usize),
}

/// Receives a forward pass's tensors at its hook points. Every method
/// does nothing by default; [`Observer::active`] false (as for
/// [`NoObserver`]) lets the pass skip the work that feeds the points.
pub trait Observer {
    /// Whether to call the hooks at all.
    fn active(&self) -> bool {
        true
    }
    /// Whether to keep and hand over each head's probabilities (`queries x
    /// keys` floats per head).
    fn wants_attention(&self) -> bool {
        self.active()
    }
    /// The pass starts.
    fn begin(&mut self, _pass: Pass) {}
    /// The scaled token embeddings `[tokens, d]`.
    fn embedded(&mut self, _x: &[f32]) {}
    /// The stream sublayer `sub` of `block` reads (before its add).
    fn sublayer_in(&mut self, _block: usize, _sub: usize, _x: &[f32]) {}
    /// A norm's input: rows of `width` (QK-Norm normalises each head's
    /// query or key, so its rows are head_dim wide).
    fn norm_input(&mut self, _block: usize, _role: NormRole, _x: &[f32], _width: usize) {}
    /// A norm's output (rows of `width`), right after its input.
    fn norm_output(&mut self, _block: usize, _role: NormRole, _y: &[f32], _width: usize) {}
    /// Queries and keys before QK-Norm (blocks with QK-Norm only).
    fn queries_keys(&mut self, _block: usize, _q: &[f32], _k: &[f32], _geom: &QkGeometry) {}
    /// One head's attention pattern.
    fn attention(&mut self, _pattern: &AttentionPattern) {}
    /// The MLP's hidden activation `act(gate) * up` `[tokens, ffn]`.
    fn mlp_hidden(&mut self, _block: usize, _h: &[f32]) {}
    /// What sublayer `sub` adds to the stream (after its output norm).
    fn write(&mut self, _block: usize, _sub: usize, _w: &[f32]) {}
    /// The stream after sublayer `sub`'s add.
    fn sublayer_out(&mut self, _block: usize, _sub: usize, _x: &[f32]) {}
    /// The stream after the last block, which the final norm reads.
    fn final_stream(&mut self, _x: &[f32]) {}
}

/// The observer that records nothing: a pass with it computes only what
/// inference needs.
pub struct NoObserver;

impl Observer for NoObserver {
    fn active(&self) -> bool {
        false
    }
}
