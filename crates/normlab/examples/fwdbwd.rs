use normlab::model::{Model, ModelConfig};
use std::time::Instant;
fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    for (name, cfg, batch) in [
        ("toy L20", ModelConfig::toy(20), 32usize),
        (
            "gpt L8",
            ModelConfig {
                layers: 8,
                ..ModelConfig::gpt()
            },
            16,
        ),
    ] {
        if !which.is_empty() && !name.starts_with(&which) {
            continue;
        }
        let model = Model::new(&cfg).unwrap();
        let params = model.init_params(1);
        for shards in [1usize, 2] {
            let mut wss: Vec<_> = (0..shards)
                .map(|_| model.workspace(batch / shards, cfg.seq))
                .collect();
            for ws in wss.iter_mut() {
                for (i, t) in ws.tokens.iter_mut().enumerate() {
                    *t = (i % cfg.vocab) as u32;
                }
                for (i, t) in ws.targets.iter_mut().enumerate() {
                    *t = ((i * 3) % cfg.vocab) as u32;
                }
            }
            let mut times = vec![];
            for _ in 0..12 {
                let t0 = Instant::now();
                for ws in wss.iter_mut() {
                    model.forward(&params, ws);
                    model.backward(&params, ws, 1e-3);
                }
                times.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            times.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "{name} shards {shards}: fwd+bwd {:.2} ms (1 thread), params {}",
                times[6],
                model.num_params()
            );
        }
    }
}
