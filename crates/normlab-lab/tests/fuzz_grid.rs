//! Sweep grid files, fuzzed with the structured fuzzer the library's tests
//! use (crates/normlab/tests/common/fuzz.rs): a mutated grid.toml is read
//! and expanded; no input may panic or make the expansion hold more than
//! the stated bound at once (grids are sized before they expand).

#[path = "../../normlab/tests/common/fuzz.rs"]
#[allow(dead_code)]
mod fuzz;
use fuzz::{fuzz, Counting};
use normlab_lab::sweep::{expand_grid, read_grid};

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn grid_files_survive_mutation() {
    let dir = std::env::temp_dir().join(format!("normlab-fuzz-grid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("grid.toml");
    let seeds: Vec<Vec<u8>> = [
        "model = \"toy\"\nsteps = 60\nbatch = 4\nshards = 1\neval_every = 20\neval_sequences = 8\nlayers = [1, 2]\nnorm = [\"layernorm\", \"rmsnorm\"]\nlr = [1e-3, 1e-2]\n",
        "model = \"gpt\"\nlayers = [2, 4, 8]\nplacement = [\"pre\", \"post\", \"sandwich\", \"deepnorm\"]\nlr = [1e-4, 3e-4, 1e-3]\nseed = [0, 1, 2]\nwarmup = 100\nbranch_scale = \"invsqrt\"\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("grid", &seeds, 256 << 20, |b| {
        std::fs::write(&file, b).unwrap();
        if let Ok(g) = read_grid(&file) {
            let _ = expand_grid(&g);
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
