//! A small structured fuzzer for the parsers of files and text a user may
//! be handed (stable Rust, no extra toolchain): inputs are the seed
//! corpus mutated by a deterministic generator (bit flips, byte and
//! integer overwrites at random offsets, inserted, deleted and duplicated
//! ranges, truncation), each run under `catch_unwind`; a counting global
//! allocator (installed by the including test file) bounds the memory one
//! input may make the parser hold. A panic or an allocation above the bound
//! fails the test and writes the input to `target/fuzz-failures/`. Time per
//! target: `NORMLAB_FUZZ_SECONDS` (default 3; CI sets more).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The system allocator, counting the bytes in use and their peak.
pub struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        IN_USE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

/// A deterministic generator (xorshift64*).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Integers that parsers mistake for lengths and counts.
const INTERESTING: [u64; 9] = [
    0,
    1,
    0x7f,
    0xff,
    0xffff,
    0xffff_ffff,
    1 << 40,
    u64::MAX / 2,
    u64::MAX,
];

/// One mutation of `seed`: one to four operations.
fn mutate(g: &mut Gen, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + g.below(4) {
        let n = v.len();
        match g.below(7) {
            0 if n > 0 => {
                let i = g.below(n);
                v[i] ^= 1 << g.below(8);
            }
            1 if n > 0 => {
                let i = g.below(n);
                v[i] = g.next() as u8;
            }
            2 if n >= 8 => {
                let i = g.below(n - 7);
                let x = INTERESTING[g.below(INTERESTING.len())];
                let w = [1, 2, 4, 8][g.below(4)];
                v[i..i + w].copy_from_slice(&x.to_le_bytes()[..w]);
            }
            3 => {
                let i = g.below(n + 1);
                let extra: Vec<u8> = (0..1 + g.below(16)).map(|_| g.next() as u8).collect();
                v.splice(i..i, extra);
            }
            4 if n > 0 => {
                let i = g.below(n);
                let j = (i + 1 + g.below(32)).min(n);
                v.drain(i..j);
            }
            5 if n > 0 => {
                let i = g.below(n);
                let j = (i + 1 + g.below(64)).min(n);
                let chunk = v[i..j].to_vec();
                let at = g.below(n + 1);
                v.splice(at..at, chunk);
            }
            _ if n > 0 => v.truncate(g.below(n)),
            _ => {}
        }
    }
    v
}

/// The fuzzing's time budget: per target, `NORMLAB_FUZZ_SECONDS` (default
/// 3); nothing is asserted about time.
pub fn budget() -> Duration {
    Duration::from_secs_f64(
        std::env::var("NORMLAB_FUZZ_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3.0),
    )
}

/// Deterministic mutations of `seeds`, one at a time (for targets driven
/// from outside the process, such as a server).
pub fn mutations(seeds: &[Vec<u8>]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let mut g = Gen(0x2545_f491_4f6c_dd1d);
    std::iter::from_fn(move || {
        let i = g.below(seeds.len());
        Some(mutate(&mut g, &seeds[i]))
    })
}

/// Run `f` on mutations of `seeds` for the time budget; fail on a panic
/// or on an input that makes `f` hold more than `max_bytes` at once.
/// Returns the number of executions.
pub fn fuzz(name: &str, seeds: &[Vec<u8>], max_bytes: usize, f: impl Fn(&[u8])) -> u64 {
    let secs = budget().as_secs_f64();
    // time budget: each target fuzzes for its budget; nothing is asserted about time
    let deadline = Instant::now() + budget();
    let mut g = Gen(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    let mut execs = 0u64;
    // The seeds themselves first, then mutations.
    let mut inputs = seeds.iter().cloned();
    let fail = |input: &[u8], execs: u64, why: String| -> ! {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-failures");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{name}-{execs}.bin"));
        let _ = std::fs::write(&path, input);
        panic!("fuzz {name}: {why}; input written to {}", path.display());
    };
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    while Instant::now() < deadline || execs < seeds.len() as u64 {
        let input = match inputs.next() {
            Some(s) => s,
            None => {
                let i = g.below(seeds.len());
                mutate(&mut g, &seeds[i])
            }
        };
        let base = IN_USE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&input)));
        let held = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        execs += 1;
        if let Err(e) = r {
            std::panic::set_hook(quiet);
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            fail(&input, execs, format!("panicked: {msg}"));
        }
        if held > max_bytes {
            std::panic::set_hook(quiet);
            fail(
                &input,
                execs,
                format!("held {held} bytes at once (bound {max_bytes})"),
            );
        }
    }
    std::panic::set_hook(quiet);
    eprintln!(
        "fuzz {name}: {execs} executions in {secs} s, no panic, at most {max_bytes} bytes held"
    );
    execs
}
