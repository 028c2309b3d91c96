//! GGUF files a user may download that lie about themselves: a Llama
//! file's metadata is checked against itself and against the tensors it
//! holds before anything is sized from it, so a flipped bit of a count or a
//! NaN eps is a one-line error (bad input), never an abort, a panic or
//! garbage text. Model-free: the files are built here.

use normlab::model::decoder::Decoder;

mod common;
use common::tiny_gguf::tiny_llama;

fn load_error(bytes: Vec<u8>) -> String {
    let dir = std::env::temp_dir().join(format!("normlab-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("{n}.gguf"));
    std::fs::write(&path, &bytes).unwrap();
    let r = Decoder::load(&path);
    let _ = std::fs::remove_file(&path);
    let e = r.err().expect("a hostile file must be refused");
    assert!(e.is_bad_input(), "{e}");
    e.to_string()
}

#[test]
fn block_counts_that_the_file_does_not_hold_are_refused_before_allocating() {
    // A flipped high bit: 4294967295 blocks would be terabytes of layers.
    let e = load_error(tiny_llama(u32::MAX, 1e-5, 1e4, 1.0));
    assert!(e.contains("block_count"), "{e}");
    let e = load_error(tiny_llama(0, 1e-5, 1e4, 1.0));
    assert!(e.contains("block_count 0"), "{e}");
    // Two blocks declared, one in the file.
    let e = load_error(tiny_llama(2, 1e-5, 1e4, 1.0));
    assert!(e.contains("blk.1.attn_norm.weight"), "{e}");
}

#[test]
fn nan_or_non_positive_eps_and_rope_base_are_refused() {
    for eps in [f32::NAN, 0.0, -1e-5, f32::INFINITY] {
        let e = load_error(tiny_llama(1, eps, 1e4, 1.0));
        assert!(e.contains("eps"), "{eps}: {e}");
    }
    for base in [f32::NAN, 0.0] {
        let e = load_error(tiny_llama(1, 1e-5, base, 1.0));
        assert!(e.contains("RoPE base"), "{base}: {e}");
    }
}

#[test]
fn a_nan_in_a_norm_gain_is_refused() {
    let e = load_error(tiny_llama(1, 1e-5, 1e4, f32::NAN));
    assert!(
        e.contains("blk.0.attn_norm.weight holds a non-finite value"),
        "{e}"
    );
}
