//! SmolLM2 and other Llama-architecture models from GGUF files (tested
//! with SmolLM2-135M-Instruct, Q4_1) as a configuration of the one
//! [`Decoder`]: pre-RMSNorm with the file's eps and plain gains, SwiGLU,
//! grouped-query attention, full attention with the file's RoPE base, a tied
//! (or separate) head, and the byte-level BPE tokenizer built from the
//! file's vocabulary and merges (HF `tokenizers`).
//!
//! The loader itself (this and the other GGUF architectures) is the
//! decoder's `gguf.rs`; this module keeps the Llama-era names.

pub use super::decoder::{
    argmax, held_out_text, inspect, stream_growth, Decoder, DecoderConfig, FinalNormEffect,
    GainRow, Inspection, KvCache, LensRow, LlamaLayerRow, LlamaTrace, MassiveActivation,
    ModelClaims, LENS_TOKENS, MAX_BLOCKS,
};

/// A Llama-architecture model: a [`Decoder`] read from GGUF
/// ([`Decoder::load`]).
pub type Llama = Decoder;

/// Its hyper-parameters.
pub type LlamaConfig = DecoderConfig;
