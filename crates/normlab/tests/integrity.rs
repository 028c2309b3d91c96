//! Run folders prove their own integrity: the resume snapshot, the weights
//! and the summary carry checksums, so one flipped bit in any of them is
//! refused with the file's name (never trained on, loaded or reported as a
//! result); config.json and metrics.jsonl are checked against what the
//! snapshot recorded and read line by line. Folders written before
//! checksums still load, with a warning.

mod common;

use normlab::train::{self, RunOptions, RunOutcome, TrainConfig};
use serde_json::json;
use std::path::{Path, PathBuf};

fn cfg() -> TrainConfig {
    let v = json!({"model": "toy", "layers": 1, "steps": 12, "batch": 4, "eval_sequences": 4, "eval_every": 4, "log_every": 2});
    TrainConfig::from_overrides(v.as_object().unwrap()).unwrap()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-integrity-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A run folder stopped with a snapshot after 6 of its 12 steps, and a
/// finished one.
fn folders(tag: &str) -> (PathBuf, PathBuf) {
    let (half, done) = (
        tmpdir(&format!("{tag}-half")),
        tmpdir(&format!("{tag}-done")),
    );
    for (d, stop) in [(&half, Some(6)), (&done, None)] {
        let out = train::run(
            &cfg(),
            &RunOptions {
                out: Some(d.clone()),
                threads: 1,
                stop_after: stop,
                ..Default::default()
            },
            &mut |_, _| {},
        )
        .unwrap();
        assert!(
            matches!(
                (&out, stop),
                (RunOutcome::Interrupted { .. }, Some(_)) | (RunOutcome::Finished(_), None)
            ),
            "{out:?}"
        );
    }
    (half, done)
}

fn resume(d: &Path) -> normlab::Result<RunOutcome> {
    train::run(
        &cfg(),
        &RunOptions {
            out: Some(d.to_path_buf()),
            resume: true,
            threads: 1,
            ..Default::default()
        },
        &mut |_, _| {},
    )
}

/// Flip one bit of `file` at byte `at` (counted from the end when
/// negative).
fn flip(file: &Path, at: isize, bit: u8) {
    let mut b = std::fs::read(file).unwrap();
    let i = if at < 0 {
        b.len() - at.unsigned_abs()
    } else {
        at as usize
    };
    b[i] ^= 1 << bit;
    std::fs::write(file, b).unwrap();
}

/// The first byte of a safetensors file's data section.
fn data_start(file: &Path) -> usize {
    let b = std::fs::read(file).unwrap();
    8 + u64::from_le_bytes(b[..8].try_into().unwrap()) as usize
}

#[test]
fn a_flipped_bit_in_a_snapshot_is_refused_on_resume() {
    // In a weight's low mantissa bit (a change no other check would see),
    // in an Adam moment (the file's last bytes), and in the record's
    // digits (its step).
    for (tag, place) in [("weight", 0isize), ("moment", -3), ("record", 1)] {
        let (half, done) = folders(&format!("snap-{tag}"));
        let snap = half.join("resume.safetensors");
        match place {
            1 => {
                // A digit of the record: the step 6 becomes 7 (one bit).
                let b = std::fs::read(&snap).unwrap();
                let key = br#"\"step\":"#;
                let at = b[..data_start(&snap)]
                    .windows(key.len())
                    .position(|w| w == key)
                    .unwrap()
                    + key.len();
                assert_eq!(b[at], b'6');
                flip(&snap, at as isize, 0);
            }
            p if p < 0 => flip(&snap, p, 0),
            _ => flip(&snap, data_start(&snap) as isize, 0),
        }
        let before = std::fs::read(&snap).unwrap();
        let err = resume(&half).unwrap_err();
        assert!(err.is_bad_input(), "{tag}: {err}");
        let msg = err.to_string();
        assert!(
            msg.contains("resume.safetensors")
                && (msg.contains("checksum") || msg.contains("corrupt")),
            "{tag}: {msg}"
        );
        // Nothing was trained on it, and the file is left as it was.
        assert_eq!(std::fs::read(&snap).unwrap(), before, "{tag}");
        assert!(!half.join("summary.json").exists(), "{tag}");
        let _ = std::fs::remove_dir_all(&half);
        let _ = std::fs::remove_dir_all(&done);
    }
}

#[test]
fn a_flipped_bit_in_the_weights_or_the_summary_is_found() {
    let (half, done) = folders("weights");
    assert_eq!(train::run::damage(&done), None);
    assert_eq!(train::run::damage(&half), None);
    // The weights: refused when loaded (inspect, convert), named by damage.
    let ck = done.join("checkpoint.safetensors");
    flip(&ck, data_start(&ck) as isize + 5, 3);
    let err = train::run::load_model(&done).unwrap_err().to_string();
    assert!(
        err.contains("checkpoint.safetensors fails its checksum"),
        "{err}"
    );
    let why = train::run::damage(&done).unwrap();
    assert!(why.contains("checkpoint.safetensors"), "{why}");
    // The summary: a changed digit of a loss.
    let (_, done2) = folders("summary");
    let path = done2.join("summary.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find("\"final_loss\": ").unwrap() + "\"final_loss\": ".len() + 2;
    let mut b = text.into_bytes();
    b[at] = if b[at] == b'5' { b'6' } else { b'5' };
    std::fs::write(&path, &b).unwrap();
    assert!(train::run::read_summary(&done2).is_none());
    let why = train::run::check_summary(&done2).unwrap_err();
    assert!(why.contains("summary.json fails its checksum"), "{why}");
    assert!(train::run::damage(&done2).unwrap().contains("summary.json"));
    // Garbage in metrics.jsonl.
    let (half3, done3) = folders("metrics");
    std::fs::write(
        done3.join("metrics.jsonl"),
        b"\x00\x01garbage\n{\"not\": 1}\n",
    )
    .unwrap();
    let why = train::run::damage(&done3).unwrap();
    assert!(why.contains("metrics.jsonl"), "{why}");
    for d in [half, done, done2, half3, done3] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_changed_config_is_refused_on_resume() {
    let (half, done) = folders("config");
    let path = half.join("config.json");
    let text = std::fs::read_to_string(&path).unwrap();
    // A flipped bit in the learning rate's digits: 0.001 -> 0.003.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let lr = v["lr"].as_f64().unwrap();
    let changed = text.replacen(
        &format!("\"lr\": {lr}"),
        &format!("\"lr\": {}", lr * 3.0),
        1,
    );
    assert_ne!(changed, text, "{text}");
    std::fs::write(&path, changed).unwrap();
    let err = resume(&half).unwrap_err().to_string();
    assert!(err.contains("different configuration"), "{err}");
    let _ = std::fs::remove_dir_all(&half);
    let _ = std::fs::remove_dir_all(&done);
}

#[test]
fn folders_written_before_checksums_still_resume() {
    let (half, done) = folders("old");
    // The snapshot as normlab wrote it before checksums: the same record
    // without its checksum.
    common::run_folder::without_checksum(&half.join("resume.safetensors"), "normlab_resume");
    assert_eq!(train::run::damage(&half), None, "no checksum is not damage");
    let out = resume(&half).unwrap();
    assert!(matches!(out, RunOutcome::Finished(_)), "{out:?}");
    // It ends where the uninterrupted run ends, bit for bit.
    for f in ["checkpoint.safetensors", "summary.json", "metrics.jsonl"] {
        if f == "summary.json" {
            // (Wall time and speed differ between runs.)
            let s = |d: &Path| train::run::read_summary(d).unwrap().final_loss.to_bits();
            assert_eq!(s(&half), s(&done));
            continue;
        }
        assert!(
            std::fs::read(half.join(f)).unwrap() == std::fs::read(done.join(f)).unwrap(),
            "{f} differs"
        );
    }
    let _ = std::fs::remove_dir_all(&half);
    let _ = std::fs::remove_dir_all(&done);
}
