fn main() {
    let mut cfg = normlab::bench::NormBenchConfig::standard();
    let args: Vec<String> = std::env::args().skip(1).collect();
    cfg.shapes = args
        .iter()
        .map(|s| {
            let (a, b) = s.split_once('x').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    cfg.threads = vec![1, 2];
    cfg.kinds = vec![
        normlab::kernels::norm::NormKind::LayerNorm,
        normlab::kernels::norm::NormKind::RmsNorm,
    ];
    normlab::bench::run_norm_bench(&cfg, |r| {
        println!(
            "{:9} {:8} {:5}x{:<5} t{} {:9.1}us {:6.1} GB/s roof {:6.1} ({:.0}%)",
            r.kind,
            r.pass.label(),
            r.rows,
            r.d,
            r.threads,
            r.median_us,
            r.gbps,
            r.roofline_gbps,
            100.0 * r.roofline_fraction
        );
    });
}
