//! `normlab generate MODEL --prompt TEXT`: the greedy continuation of a
//! prompt by a decoder, a GGUF file (Llama or Gemma 3) or a Hugging Face
//! folder of the families the registry lists (the prompt in one pass, then one
//! token per pass over the key/value cache), printed as it is generated,
//! then the speed of both phases.

use crate::ui::bad;
use clap::Args;
use normlab::gguf::qdot::ActBits;
use normlab::model::decoder::Decoder;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// `normlab generate`'s one-line help, naming the families it reads (the
/// family registry).
pub fn about() -> String {
    format!(
        "Continue a prompt with a decoder, greedily over a key/value cache: a GGUF file ({}) or a Hugging Face folder ({})",
        normlab::model::decoder::family::gguf_titles(),
        normlab::model::decoder::family::titles()
    )
}

#[derive(Args, Debug)]
pub struct GenerateCmd {
    /// The .gguf file (e.g. models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf from scripts/fetch_smollm2.sh, or models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf from scripts/fetch_gemma3.sh), or a Hugging Face folder (config.json, model.safetensors, tokenizer.json).
    model: PathBuf,
    /// The text to continue (used as given: no chat template).
    #[arg(long)]
    prompt: String,
    /// Most tokens to generate (fewer if the model ends the text).
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// Keep generating after the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// How the weights are held and applied: `f32` dequantises every
    /// weight at load (the numbers `inspect`, the book and the transformers
    /// fixtures use); `blocks` keeps the file's quantised blocks and
    /// dequantises each row as it is used (exactly the f32 numbers, in a
    /// fifth of the memory, but slower); `q8` keeps the blocks and computes
    /// each generated token's products on them with 8-bit activations
    /// (llama.cpp's way: the fastest and smallest, with logits within about
    /// 3% of the f32 ones' range, so a near-tie can go the other way);
    /// `q16` does the same with 16-bit activations in two 8-bit limbs
    /// (logits within about 2e-4 of the range, somewhat slower than `q8`).
    #[arg(long, value_enum, default_value_t = Weights::F32)]
    weights: Weights,
}

/// How a GGUF decoder holds and applies its weights (`generate`, `bench
/// llama`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// Dequantised to f32 at load.
    F32,
    /// The file's blocks, f32 activations (the f32 numbers).
    Blocks,
    /// The file's blocks, 8-bit activations in one-row steps.
    Q8,
    /// The file's blocks, 16-bit activations (two 8-bit limbs) in one-row
    /// steps.
    Q16,
}

impl Weights {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Weights::F32 => "f32",
            Weights::Blocks => "blocks",
            Weights::Q8 => "q8",
            Weights::Q16 => "q16",
        }
    }

    /// Load `path` this way.
    pub fn load(self, path: &std::path::Path) -> normlab::Result<Decoder> {
        use normlab::model::decoder::WeightStorage;
        let storage = match self {
            Weights::F32 => WeightStorage::F32,
            Weights::Blocks | Weights::Q8 | Weights::Q16 => WeightStorage::Quantised,
        };
        let mut m = if path.is_dir() {
            Decoder::load_hf(path)?
        } else {
            Decoder::load_as(path, storage)?
        };
        m.quantised_activations = match self {
            Weights::Q8 => Some(ActBits::Eight),
            Weights::Q16 => Some(ActBits::Sixteen),
            Weights::F32 | Weights::Blocks => None,
        };
        Ok(m)
    }
}

pub fn run(mut c: GenerateCmd) -> anyhow::Result<()> {
    c.model = crate::ui::model_path(&c.model);
    crate::ui::require_model(&c.model)?;
    let folder = c.model.is_dir();
    if !folder
        && !c
            .model
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return bad(format!(
            "{}: generate needs a .gguf file or a decoder's Hugging Face folder",
            c.model.display()
        ));
    }
    if folder && c.weights != Weights::F32 {
        return bad(format!(
            "--weights {} is for .gguf files (a folder's weights are read as f32)",
            c.weights.name()
        ));
    }
    if c.prompt.is_empty() {
        return bad("--prompt must not be empty");
    }
    if c.tokens == 0 {
        return bad("--tokens must be at least 1");
    }
    let threads = c.threads.unwrap_or_else(crate::cmd_train::default_threads);
    normlab::limits::check_threads("--threads", threads)?;
    let m = c.weights.load(&c.model)?;
    let ids = m.encode(&c.prompt)?;
    if ids.is_empty() {
        return bad("--prompt gives no tokens");
    }
    if ids.len().saturating_add(c.tokens) > m.cfg.context {
        return bad(format!(
            "the prompt ({} tokens) and --tokens {} exceed the model's context of {}",
            ids.len(),
            c.tokens,
            m.cfg.context
        ));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let mut out = std::io::stdout();
    write!(out, "{}", c.prompt)?;
    out.flush()?;
    let (mut got, mut printed, mut stamps) = (Vec::new(), 0usize, Vec::new());
    let start = Instant::now();
    let (mut failed, mut ended) = (None, false);
    pool.install(|| {
        m.generate(&ids, c.tokens, !c.ignore_eos, |tok| {
            stamps.push(Instant::now());
            if Some(tok) == m.eos && !c.ignore_eos {
                ended = true;
                return;
            }
            got.push(tok);
            // Print the text decoded so far, less what is already printed,
            // once it does not end inside a multi-byte character.
            match m.decode(&got) {
                Ok(text) if !text.ends_with('\u{FFFD}') && text.len() > printed => {
                    let new = text.get(printed..).unwrap_or("");
                    if write!(out, "{new}").and_then(|_| out.flush()).is_err() {
                        failed = Some("stdout closed");
                    }
                    printed = text.len();
                }
                Ok(_) => {}
                Err(_) => failed = Some("the tokenizer could not decode a token"),
            }
        })
    })?;
    if let Some(e) = failed {
        anyhow::bail!("{e}");
    }
    let text = m.decode(&got)?;
    writeln!(out, "{}", text.get(printed..).unwrap_or(""))?;
    let prompt_s = (stamps[0] - start).as_secs_f64();
    let mut line = format!(
        "[{} prompt tokens in {:.3} s ({:.0} tokens/s); {} generated",
        ids.len(),
        prompt_s,
        ids.len() as f64 / prompt_s,
        stamps.len()
    );
    if stamps.len() > 1 {
        let gen_s = (stamps[stamps.len() - 1] - stamps[0]).as_secs_f64();
        line += &format!(
            ", {:.1} tokens/s after the first",
            (stamps.len() - 1) as f64 / gen_s
        );
    }
    if ended {
        line += ", the last the end-of-sequence token (not printed)";
    }
    eprintln!(
        "{line}; {threads} thread(s), --weights {}]",
        c.weights.name()
    );
    Ok(())
}
