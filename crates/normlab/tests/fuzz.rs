//! The readers of files a user may be handed, fuzzed (see common/fuzz.rs):
//! GGUF (the reader, every tensor's dequantisation, and the Llama checks,
//! with the weights dequantised and kept in their blocks),
//! tokenizer metadata (tiny GGUF files whose bulk is a byte-level BPE or a
//! SentencePiece vocabulary, loaded, then encoding and decoding a text),
//! a Hugging Face decoder folder (Gemma 3's config.json and safetensors,
//! loaded and run on three tokens), a run folder's checkpoint
//! (safetensors: its tensors read past the checksum too) and config.json,
//! and a TOML
//! training config. No input may panic or make a reader hold more than the
//! stated bound at once; bad input is an `Err`. One test, so that the
//! allocation counts are this work's alone.

mod common;
use common::fuzz::{fuzz, Counting};
use common::tiny_gguf::tiny_llama;
use normlab::gguf::Gguf;
use normlab::model::decoder::Decoder;
use normlab::model::decoder::WeightStorage;
use normlab::train::{folder, RunOptions, TrainConfig};

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: usize = 1 << 20;

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn readers_survive_mutated_files() {
    // GGUF: tiny Llama files, and the head of the real model when present.
    let mut seeds = vec![tiny_llama(1, 1e-5, 1e4, 1.0), tiny_llama(3, 1e-6, 5e5, 0.5)];
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if let Ok(bytes) = std::fs::read(&real) {
        seeds.push(bytes[..bytes.len().min(1 << 20)].to_vec());
    }
    let dir = tmp("gguf");
    let file = dir.join("m.gguf");
    fuzz("gguf", &seeds, 256 * MIB, |b| {
        if let Ok(g) = Gguf::parse(b.to_vec()) {
            for t in &g.tensors {
                let _ = g.tensor(&t.name);
            }
        }
        std::fs::write(&file, b).unwrap();
        let _ = Decoder::load(&file);
        let _ = Decoder::load_as(&file, WeightStorage::Quantised);
    });

    // Tokenizer metadata: tiny files with a byte-level BPE (Llama) and a
    // SentencePiece (Gemma 3) vocabulary, mutated; whatever loads must
    // encode and decode a text without panicking.
    let tok_seeds = vec![
        common::gguf_writer::tiny_llama_bpe().bytes(),
        common::gguf_writer::tiny_gemma3().bytes(),
    ];
    let tok_file = dir.join("tok.gguf");
    fuzz("tokenizer metadata", &tok_seeds, 256 * MIB, |b| {
        std::fs::write(&tok_file, b).unwrap();
        if let Ok(m) = Decoder::load(&tok_file) {
            if let Ok(ids) = m.encode("the cat ab <|endoftext|> zz\u{e9}") {
                let _ = m.decode(&ids);
            }
            let _ = m.decode(&[0, 1, 2, 3, u32::MAX]);
        }
    });

    // A run folder: a real checkpoint and config.json, mutated.
    let run = tmp("run");
    let cfg = TrainConfig::defaults(normlab::model::ModelKind::Toy)
        .with(|c| {
            c.model.layers = 1;
            c.steps = 2;
            c.batch = 2;
            c.shards = 1;
            c.eval_sequences = 2;
        })
        .unwrap();
    normlab::train::run(
        &cfg,
        &RunOptions {
            out: Some(run.clone()),
            threads: 1,
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let ckpt = std::fs::read(run.join("checkpoint.safetensors")).unwrap();
    let config = std::fs::read(run.join("config.json")).unwrap();
    let target = tmp("target");
    std::fs::write(target.join("config.json"), &config).unwrap();
    // Most mutations now fail the checkpoint's checksum at once: its
    // tensors are also read directly, so the safetensors reader itself
    // stays fuzzed.
    let layout = normlab::model::Model::new(&cfg.model).unwrap().layout;
    fuzz("checkpoint", &[ckpt], 64 * MIB, |b| {
        let _ = normlab::io::read_metadata(b, "fuzz");
        let mut params = vec![0.0f32; layout.buffer_len()];
        let _ = normlab::io::load_tensors(b, &layout, "", &mut params, "fuzz");
        std::fs::write(target.join("checkpoint.safetensors"), b).unwrap();
        let _ = folder::load_model(&target);
    });
    let cdir = tmp("config");
    fuzz("config.json", &[config], 64 * MIB, |b| {
        std::fs::write(cdir.join("config.json"), b).unwrap();
        let _ = folder::read_run_config(&cdir);
    });

    // A Hugging Face decoder folder (the tiny Gemma 3 fixture): its
    // config.json and its safetensors, each mutated with the other intact.
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gemma3_tiny");
    let hf_cfg = std::fs::read(fx.join("config.json")).unwrap();
    let hf_st = std::fs::read(fx.join("model.safetensors")).unwrap();
    let hf = tmp("hf");
    let load_and_run = |dir: &std::path::Path| {
        if let Ok(m) = normlab::model::decoder::Decoder::load_hf(dir) {
            let _ = m.logits(&[3, 4, 5]);
        }
    };
    std::fs::write(hf.join("model.safetensors"), &hf_st).unwrap();
    fuzz(
        "hf config.json",
        std::slice::from_ref(&hf_cfg),
        64 * MIB,
        |b| {
            std::fs::write(hf.join("config.json"), b).unwrap();
            load_and_run(&hf);
        },
    );
    std::fs::write(hf.join("config.json"), &hf_cfg).unwrap();
    fuzz("hf safetensors", &[hf_st], 64 * MIB, |b| {
        std::fs::write(hf.join("model.safetensors"), b).unwrap();
        load_and_run(&hf);
    });

    // A TOML training config.
    let toml_seeds: Vec<Vec<u8>> = [
        "model = \"gpt\"\nlayers = 4\nd_model = 64\nheads = 2\nlr = 3e-3\nnorm = \"rmsnorm\"\nplacement = \"pre\"\n",
        "model = \"toy\"\nlayers = 12\nsteps = 3000\nwarmup = 100\nbranch_scale = \"invsqrt\"\nfinal_norm = true\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("toml", &toml_seeds, 64 * MIB, |b| {
        if let Ok(text) = std::str::from_utf8(b) {
            if let Ok(ov) = normlab::settings::toml_overrides(text, "fuzz") {
                let _ = TrainConfig::from_overrides(&ov);
            }
        }
    });
    for d in [dir, run, target, cdir, hf] {
        let _ = std::fs::remove_dir_all(d);
    }
}
