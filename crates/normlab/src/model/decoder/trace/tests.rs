//! The trace is an observer like any other: a pass observed by it computes
//! the same hidden states as an unobserved one, and the trace built from
//! tensors captured at the hook points and handed over later (as a
//! PyTorch model's would be) equals the one filled during the pass.

use super::DecoderTrace;
use crate::kernels::norm::NormKind;
use crate::kernels::rng::Rng;
use crate::model::decoder::{
    Decoder, DecoderConfig, DecoderLayer, GainStore, GatedAct, KvCache, LayerAttention, Matrix,
    RopePairs,
};
use crate::model::hooks::{AttentionPattern, NoObserver, Observer, Pass, QkGeometry};
use crate::nn::{NormRole, Placement};

/// A random two-block sandwich decoder with QK-Norm, grouped-query
/// attention, a sliding window in block 0 and GeGLU.
fn tiny() -> Decoder {
    let (vocab, d, heads, kv_heads, hd, ffn) = (11, 8, 2, 1, 4, 12);
    let mut rng = Rng::new(7);
    let mut m = |r: usize, c: usize| Matrix::dense(rng.normal_vec(r * c, 0.0, 0.4), r, c);
    let layers = (0..2)
        .map(|_| DecoderLayer {
            qkv_bias: None,
            attn_norm: Some(vec![1.1; d]),
            attn_out_norm: Some(vec![0.9; d]),
            qk_norm: Some((vec![1.2; hd], vec![0.8; hd])),
            wq: m(heads * hd, d),
            wk: m(kv_heads * hd, d),
            wv: m(kv_heads * hd, d),
            wo: m(d, heads * hd),
            ffn_norm: Some(vec![1.0; d]),
            ffn_out_norm: Some(vec![1.3; d]),
            gate: Some(m(ffn, d)),
            up: m(ffn, d),
            down: m(d, ffn),
            bias: Default::default(),
        })
        .collect();
    let cfg = DecoderConfig {
        family: "test".into(),
        vocab,
        d,
        layers: 2,
        heads,
        kv_heads,
        head_dim: hd,
        ffn,
        context: 32,
        placement: Placement::Sandwich,
        norm: NormKind::RmsNorm,
        eps: 1e-6,
        gain: GainStore::Plain,
        qk_norm: true,
        qkv_bias: false,
        qk_norm_whole: false,
        rope_scaling: None,
        attn_softcap: None,
        act: GatedAct::GeluTanh,
        emb_scale: (d as f32).sqrt(),
        attn_scale: 0.5,
        attn: vec![
            LayerAttention {
                window: Some(3),
                rope_base: 1e4,
            },
            LayerAttention {
                window: None,
                rope_base: 1e6,
            },
        ],
        rope_pairs: RopePairs::Halves,
        final_softcap: None,
        gpt: Default::default(),
    };
    Decoder {
        cfg,
        emb: m(vocab, d),
        layers,
        final_norm: vec![1.0; d],
        final_norm_bias: None,
        pos: None,
        head: None,
        eos: None,
        bos: None,
        interventions: crate::model::intervene::Interventions::none(),
        quantised_activations: None,
        tokenizer: None,
    }
}

/// A hook call as captured (the tensors copied out of the pass).
#[derive(Debug)]
enum Call {
    Begin(Pass),
    Embedded(Vec<f32>),
    In(usize, usize, Vec<f32>),
    Norm(usize, NormRole, Vec<f32>, usize),
    NormOut(usize, NormRole, Vec<f32>, usize),
    /// Queries and keys already rotated by the pass's RoPE for replay, and
    /// the geometry without its rotation.
    Qk(usize, Vec<f32>, Vec<f32>, [usize; 4], f32, Option<usize>),
    Attn(
        usize,
        usize,
        Vec<f32>,
        usize,
        usize,
        usize,
        Option<usize>,
        f64,
    ),
    Mlp(usize, Vec<f32>),
    Write(usize, usize, Vec<f32>),
    Out(usize, usize, Vec<f32>),
    Final(Vec<f32>),
}

#[derive(Default)]
struct Capture(Vec<Call>);

impl Observer for Capture {
    fn begin(&mut self, p: Pass) {
        self.0.push(Call::Begin(p));
    }
    fn embedded(&mut self, x: &[f32]) {
        self.0.push(Call::Embedded(x.to_vec()));
    }
    fn sublayer_in(&mut self, b: usize, s: usize, x: &[f32]) {
        self.0.push(Call::In(b, s, x.to_vec()));
    }
    fn norm_input(&mut self, b: usize, r: NormRole, x: &[f32], w: usize) {
        self.0.push(Call::Norm(b, r, x.to_vec(), w));
    }
    fn norm_output(&mut self, b: usize, r: NormRole, y: &[f32], w: usize) {
        self.0.push(Call::NormOut(b, r, y.to_vec(), w));
    }
    fn queries_keys(&mut self, b: usize, q: &[f32], k: &[f32], g: &QkGeometry) {
        let (mut rq, mut rk) = (q.to_vec(), k.to_vec());
        (g.rotate)(&mut rq, g.heads);
        (g.rotate)(&mut rk, g.kv_heads);
        let shape = [g.tokens, g.heads, g.kv_heads, g.head_dim];
        self.0.push(Call::Qk(b, rq, rk, shape, g.scale, g.window));
    }
    fn attention(&mut self, p: &AttentionPattern) {
        self.0.push(Call::Attn(
            p.block,
            p.head,
            p.probs.to_vec(),
            p.queries,
            p.keys,
            p.past,
            p.window,
            p.max_logit,
        ));
    }
    fn mlp_hidden(&mut self, b: usize, h: &[f32]) {
        self.0.push(Call::Mlp(b, h.to_vec()));
    }
    fn write(&mut self, b: usize, s: usize, w: &[f32]) {
        self.0.push(Call::Write(b, s, w.to_vec()));
    }
    fn sublayer_out(&mut self, b: usize, s: usize, x: &[f32]) {
        self.0.push(Call::Out(b, s, x.to_vec()));
    }
    fn final_stream(&mut self, x: &[f32]) {
        self.0.push(Call::Final(x.to_vec()));
    }
}

/// Hand the captured calls to `obs`, as a driver holding tensors from
/// elsewhere would (the queries and keys come pre-rotated: its rotation is
/// the identity).
fn replay(calls: &[Call], obs: &mut impl Observer) {
    let identity = |_: &mut [f32], _: usize| {};
    for c in calls {
        match c {
            Call::Begin(p) => obs.begin(*p),
            Call::Embedded(x) => obs.embedded(x),
            Call::In(b, s, x) => obs.sublayer_in(*b, *s, x),
            Call::Norm(b, r, x, w) => obs.norm_input(*b, *r, x, *w),
            Call::NormOut(b, r, y, w) => obs.norm_output(*b, *r, y, *w),
            Call::Qk(b, q, k, [t, h, kvh, hd], scale, window) => obs.queries_keys(
                *b,
                q,
                k,
                &QkGeometry {
                    tokens: *t,
                    heads: *h,
                    kv_heads: *kvh,
                    head_dim: *hd,
                    scale: *scale,
                    window: *window,
                    rotate: &identity,
                },
            ),
            Call::Attn(block, head, probs, queries, keys, past, window, max_logit) => obs
                .attention(&AttentionPattern {
                    block: *block,
                    head: *head,
                    probs,
                    queries: *queries,
                    keys: *keys,
                    past: *past,
                    window: *window,
                    max_logit: *max_logit,
                }),
            Call::Mlp(b, h) => obs.mlp_hidden(*b, h),
            Call::Write(b, s, w) => obs.write(*b, *s, w),
            Call::Out(b, s, x) => obs.sublayer_out(*b, *s, x),
            Call::Final(x) => obs.final_stream(x),
        }
    }
}

#[test]
fn observing_a_pass_changes_nothing_it_computes() {
    let m = tiny();
    let ids = [1, 4, 2, 9, 0, 3, 7];
    let plain = m.hidden(&ids).unwrap();
    let mut tr = DecoderTrace::keeping_streams();
    assert_eq!(m.observe(&ids, &mut tr).unwrap(), plain);
    assert_eq!(tr.rms_in.len(), 2);
    assert_eq!(tr.sublayers.len(), 4);
    assert_eq!(tr.streams.len(), 3);
    assert_eq!(tr.streams[2], plain);
    // Over a key/value cache too: the prompt, then one token at a time.
    let mut cache = KvCache::new(&m);
    let mut cached = m
        .forward(&ids[..4], &m.interventions, &mut cache, &mut NoObserver)
        .unwrap();
    for &id in &ids[4..] {
        let mut t = DecoderTrace::default();
        cached.extend(
            m.forward(&[id], &m.interventions, &mut cache, &mut t)
                .unwrap(),
        );
        assert_eq!(t.max_at.len(), 2);
    }
    for (a, b) in cached.iter().zip(&plain) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
}

#[test]
fn a_trace_from_tensors_captured_at_the_hook_points_equals_the_live_one() {
    let m = tiny();
    let ids = [3, 1, 4, 1, 5, 9, 2, 6];
    let mut live = DecoderTrace::keeping_streams();
    m.observe(&ids, &mut live).unwrap();
    let mut cap = Capture::default();
    m.observe(&ids, &mut cap).unwrap();
    // The points in the documented order, for each block.
    let kinds: Vec<String> = cap
        .0
        .iter()
        .map(|c| format!("{c:?}").split('(').next().unwrap().to_string())
        .collect();
    let block: Vec<&str> = [
        "In", "Norm", "NormOut", "Qk", "Norm", "NormOut", "Norm", "NormOut", "Attn", "Attn",
        "Norm", "NormOut", "Write", "Out", "In", "Norm", "NormOut", "Mlp", "Norm", "NormOut",
        "Write", "Out",
    ]
    .to_vec();
    let mut want = vec!["Begin", "Embedded"];
    want.extend(&block);
    want.extend(&block);
    want.push("Final");
    assert_eq!(kinds, want);
    let mut replayed = DecoderTrace::keeping_streams();
    replay(&cap.0, &mut replayed);
    assert_eq!(format!("{replayed:?}"), format!("{live:?}"));
    // The QK-Norm effect is measured (the raw logits differ from the
    // normed ones), and the sliding window of block 0 shows in the sink's
    // uniform share.
    assert!(live.attn_max_logit_raw.iter().all(|v| v.is_finite()));
    assert!(live.attn_sink_uniform[0] < live.attn_sink_uniform[1]);
}
