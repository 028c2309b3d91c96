//! The pretrained families as trainable models (`model/pretrained.rs`):
//! every tiny family of the fixtures, lowered into normlab's one block
//! description, gives the decoder's logits (within 1e-5 of the largest), and
//! its gradients pass finite differences.

use normlab::model::decoder::Decoder;
use normlab::model::pretrained::lower;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every tiny family: the Hugging Face folders (f32 and bf16), Gemma 3's,
/// the GGUF files.
fn tiny_models() -> Vec<(String, Decoder)> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures().join("hf_tiny"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.push(fixtures().join("gemma3_tiny"));
    dirs.sort();
    for d in dirs {
        out.push((d.display().to_string(), Decoder::load_hf(&d).unwrap()));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures().join("gguf_tiny"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        out.push((f.display().to_string(), Decoder::load(&f).unwrap()));
    }
    out
}

#[test]
fn every_tiny_family_lowered_gives_the_decoders_logits() {
    let models = tiny_models();
    assert!(models.len() >= 28, "{} models", models.len());
    for (name, dec) in &models {
        let ids: Vec<u32> = (0..20)
            .map(|i| ((i * 7 + 3) % dec.cfg.vocab) as u32)
            .collect();
        let want = dec.logits(&ids).unwrap();
        let (model, params) = lower(dec, ids.len()).unwrap();
        let mut ws = model.workspace(1, ids.len());
        ws.tokens.copy_from_slice(&ids);
        let got = model.forward_logits(&params, &mut ws).to_vec();
        let top = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!("{name}: {:.1e}", worst / top);
        assert!(
            worst <= 1e-5 * top,
            "{name}: logits differ by {worst} (largest {top})"
        );
    }
}

/// The gradients of every tiny family (float32 folders) against torch
/// autograd on transformers' own model (scripts/gen_pretrained_grads.py):
/// the mean cross-entropy of 20 next-token predictions, every parameter's
/// gradient within 1e-4 of its tensor's largest |value|. The torch
/// gradients are read with the weights' own loader (written under the
/// weights' names), so fused, transposed and zero-centred tensors are laid
/// out exactly as the weights are.
#[test]
fn every_tiny_familys_gradients_match_torch_autograd() {
    use normlab::kernels::norm::ParamRole;
    use normlab::nn::Op;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures().join("hf_tiny"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("grads.safetensors").exists())
        .collect();
    dirs.push(fixtures().join("gemma3_tiny"));
    dirs.sort();
    assert!(dirs.len() >= 13, "{} folders with gradients", dirs.len());
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let dec = Decoder::load_hf(&dir).unwrap();
        let ids: Vec<u32> = (0..21)
            .map(|i| ((i * 7 + 3) % dec.cfg.vocab) as u32)
            .collect();
        let (model, params) = lower(&dec, 20).unwrap();
        let mut ws = model.workspace(1, 20);
        ws.tokens.copy_from_slice(&ids[..20]);
        ws.targets.copy_from_slice(&ids[1..]);
        let loss = model.forward(&params, &mut ws) / 20.0;
        model.backward(&params, &mut ws, 1.0 / 20.0);
        // torch's gradients, read as weights.
        let tmp = std::env::temp_dir().join(format!("normlab-grads-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::copy(dir.join("config.json"), tmp.join("config.json")).unwrap();
        std::fs::copy(dir.join("grads.safetensors"), tmp.join("model.safetensors")).unwrap();
        let (_, mut want) = lower(&Decoder::load_hf(&tmp).unwrap(), 20).unwrap();
        let _ = std::fs::remove_dir_all(&tmp);
        // Zero-centred QK-Norm gains are read as 1 + w: the gradient is w's.
        if dec.cfg.gain.zero_centred() {
            for b in &model.blocks {
                if let Op::Attention(a) = &b.mix.op {
                    for n in a.qk_norm.iter().flat_map(|(q, k)| [q, k]) {
                        let r = n.param(ParamRole::Gain).unwrap();
                        r.get_mut(&mut want).iter_mut().for_each(|v| *v -= 1.0);
                    }
                }
            }
        }
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("grads.json")).unwrap()).unwrap();
        let torch_loss = v["loss"].as_f64().unwrap();
        assert!(
            (loss - torch_loss).abs() <= 1e-5 * torch_loss,
            "{name}: loss {loss} against {torch_loss}"
        );
        let mut worst = (0f64, String::new());
        for t in &model.layout.tensors {
            let (a, b) = (&ws.grads[t.range.clone()], &want[t.range.clone()]);
            let top = b.iter().fold(0f32, |m, x| m.max(x.abs()));
            let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            let rel = f64::from(diff) / f64::from(top.max(1e-12));
            if rel > worst.0 {
                worst = (rel, t.name.clone());
            }
        }
        eprintln!(
            "{name}: loss {loss:.6}, worst gradient {} {:.1e}",
            worst.1, worst.0
        );
        assert!(
            worst.0 <= 1e-4,
            "{name}: {} differs by {:.1e} of its largest",
            worst.1,
            worst.0
        );
    }
}

/// The output gate and the sink logit inserted into every tiny family
/// start function-preserving: the gate's logits are the lowered model's,
/// bit for bit (W_g = 0 halves every value, the doubled projection undoes
/// it exactly); the sink logit's within 1e-5 of the largest (its share at
/// the start, about 1e-7 of a row, times the values it takes from). Both learn
/// from there: the gate's weights and the sink logits get a gradient.
#[test]
fn inserted_gates_and_sinks_start_as_the_model_and_learn() {
    use normlab::model::pretrained::{lower_with, Insert};
    use normlab::nn::{Op, OutputGate};
    for (name, dec) in &tiny_models() {
        let ids: Vec<u32> = (0..21)
            .map(|i| ((i * 7 + 3) % dec.cfg.vocab) as u32)
            .collect();
        let run = |insert: Insert| {
            let (model, params) = lower_with(dec, 20, insert).unwrap();
            let mut ws = model.workspace(1, 20);
            ws.tokens.copy_from_slice(&ids[..20]);
            ws.targets.copy_from_slice(&ids[1..]);
            let logits = model.forward_logits(&params, &mut ws).to_vec();
            model.forward(&params, &mut ws);
            model.backward(&params, &mut ws, 1.0 / 20.0);
            let learns = model.blocks.iter().all(|b| match &b.mix.op {
                Op::Attention(a) => {
                    let g = a
                        .gate
                        .as_ref()
                        .map(|(_, w)| w.w.get(&ws.grads).iter().any(|v| *v != 0.0));
                    let s = a
                        .sinks
                        .as_ref()
                        .map(|s| s.get(&ws.grads).iter().any(|v| *v != 0.0));
                    g.unwrap_or(true) && s.unwrap_or(true)
                }
                _ => false,
            });
            (logits, learns)
        };
        let (plain, _) = run(Insert::default());
        let top = plain.iter().fold(0f32, |m, v| m.max(v.abs()));
        for gate in OutputGate::ALL {
            let (got, learns) = run(Insert {
                gate: Some(gate),
                sink_logit: false,
            });
            assert!(
                got == plain,
                "{name}: the {} gate moved the logits",
                gate.name()
            );
            assert!(learns, "{name}: the {} gate has no gradient", gate.name());
        }
        let (got, learns) = run(Insert {
            gate: None,
            sink_logit: true,
        });
        let worst = got
            .iter()
            .zip(&plain)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= 1e-5 * top,
            "{name}: the sink logit moved the logits by {worst}"
        );
        assert!(learns, "{name}: the sink logits have no gradient");
    }
}
