//! What a sweep is made of: runs with content-derived ids ([`RunSpec`],
//! [`run_id`]), a grid of settings expanded into them ([`expand_grid`],
//! [`read_grid`]), and a finished run ([`RunResult`]).

use normlab::error::Result;
use normlab::train::{StepRecord, Summary, TrainConfig};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::Path;

/// One run of a sweep.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Content-derived id (also the folder name).
    pub id: String,
    /// Its configuration.
    pub cfg: TrainConfig,
}

/// A finished run.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// Id.
    pub id: String,
    /// Configuration.
    pub cfg: TrainConfig,
    /// Summary.
    pub summary: Summary,
    /// Logged metrics.
    pub metrics: Vec<StepRecord>,
    /// Final parameters (only when requested and the run happened in this process).
    #[serde(skip)]
    pub params: Option<Vec<f32>>,
    /// Whether it was found finished on disk (not run now).
    pub reused: bool,
}

fn fnv64(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `<model>-L<layers>-<norm>-<placement>-lr<lr>-s<seed>-<hash>`: readable,
/// and unique because the hash covers the whole configuration. Only the
/// settings that differ from the model family's defaults enter the hash, so
/// an option added later (whose default keeps the old behaviour) does not
/// change the ids of existing runs; `run_one` still checks a finished
/// folder's config against the run's before reusing it.
pub fn run_id(cfg: &TrainConfig) -> String {
    let full = serde_json::to_value(cfg).expect("config serialises");
    let base =
        serde_json::to_value(TrainConfig::defaults(cfg.model.kind)).expect("config serialises");
    let changed: Map<String, Value> = full
        .as_object()
        .expect("config is an object")
        .iter()
        .filter(|(k, v)| base.get(k.as_str()) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let json = format!("{}:{}", cfg.model.kind, Value::Object(changed));
    format!(
        "{}-L{}-{}-{}-lr{}-s{}-{:012x}",
        cfg.model.kind,
        cfg.model.layers,
        cfg.model.norm,
        cfg.model.placement,
        cfg.lr,
        cfg.seed,
        fnv64(json.as_bytes()) & 0xffff_ffff_ffff
    )
}

/// Most runs one grid may expand into.
pub const MAX_GRID_RUNS: usize = 100_000;

/// Expand a grid: keys whose value is a list are axes (cartesian product,
/// keys in sorted order), the rest are fixed. Every point is validated.
pub fn expand_grid(grid: &Map<String, Value>) -> Result<Vec<RunSpec>> {
    // The size first (the product of the axes' lengths, checked), so that a
    // small file of long axes is refused before anything is expanded.
    let mut runs: u128 = 1;
    for (k, v) in grid {
        if let Value::Array(vals) = v {
            if vals.is_empty() {
                return Err(format!("grid axis '{k}' is empty").into());
            }
            runs = runs.saturating_mul(vals.len() as u128);
        }
    }
    if runs > MAX_GRID_RUNS as u128 {
        return Err(format!("grid has {runs} runs; at most {MAX_GRID_RUNS}").into());
    }
    let mut points: Vec<Map<String, Value>> = vec![Map::new()];
    for (k, v) in grid {
        match v {
            Value::Array(vals) => {
                if vals.is_empty() {
                    return Err(format!("grid axis '{k}' is empty").into());
                }
                let mut next = Vec::with_capacity(points.len() * vals.len());
                for p in &points {
                    for val in vals {
                        let mut q = p.clone();
                        q.insert(k.clone(), val.clone());
                        next.push(q);
                    }
                }
                points = next;
            }
            other => points.iter_mut().for_each(|p| {
                p.insert(k.clone(), other.clone());
            }),
        }
    }
    let mut specs = Vec::with_capacity(points.len());
    let mut seen = std::collections::HashSet::new();
    for p in points {
        let cfg = TrainConfig::from_overrides(&p)
            .map_err(|e| format!("grid point {}: {e}", Value::Object(p.clone())))?;
        let id = run_id(&cfg);
        if seen.insert(id.clone()) {
            specs.push(RunSpec { id, cfg });
        }
    }
    Ok(specs)
}

/// Read a grid file (TOML; NaN and infinities refused with the key's name).
pub fn read_grid(path: &Path) -> Result<Map<String, Value>> {
    let text = normlab::io::read_to_string(path)?;
    normlab::settings::toml_overrides(&text, &format!("grid {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small file of long axes (3 x 400 values: 64,000,000 runs) is
    /// refused from the axes' lengths, before any point is built (expanded
    /// first, it took gigabytes before the size check).
    #[test]
    fn a_huge_grid_is_refused_before_it_is_expanded() {
        let mut g = Map::new();
        for k in ["lr", "seed", "layers"] {
            g.insert(k.into(), Value::from((1..=400).collect::<Vec<u64>>()));
        }
        let e = expand_grid(&g).err().unwrap().to_string();
        assert!(e.contains("64000000 runs"), "{e}");
        g.insert("steps".into(), Value::from(Vec::<u64>::new()));
        let e = expand_grid(&g).err().unwrap().to_string();
        assert!(e.contains("empty"), "{e}");
    }
}
