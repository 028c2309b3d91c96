//! Figures readable by default: a diverged run never sets a chart's range
//! (it is drawn clipped and its legend says so), heat maps carry axis
//! titles and a colour bar, and whole-number ticks print as whole numbers.
//! Checked on the plot's own data (its axes) and on the SVG it draws.

use normlab_lab::present::plot::{line_axes, svg_string, tick, Axes};
use normlab_lab::present::{Figure, Heatmap, LineChart, Panel, Series};

/// The texts an SVG draws (the contents of its <text> elements).
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>').map(|(_, rest)| rest))
        .filter_map(|rest| {
            rest.split_once("</text>")
                .map(|(t, _)| t.trim().to_string())
        })
        .collect()
}

/// Two runs that train and one that blows up to 14,000 and then NaN, over
/// 10,000 steps (the demo's collapse figure once had its y axis at 14,000).
fn losses(log_y: bool) -> LineChart {
    let calm = |a: f64| -> Vec<(f64, f64)> {
        (0..=20)
            .map(|i| (i as f64 * 500.0, a + 2.0 * (-(i as f64) / 5.0).exp()))
            .collect()
    };
    let mut wild: Vec<(f64, f64)> = (0..=12)
        .map(|i| (i as f64 * 500.0, 3.0 * 3f64.powi(i)))
        .collect();
    wild.push((6500.0, f64::NAN));
    let c = LineChart::new(
        "collapse",
        "step",
        "held-out loss",
        vec![
            Series::new("pre", calm(1.5)),
            Series::new("post", calm(1.8)),
            Series::new("none (diverged at step 6500)", wild).diverged(true),
        ],
    );
    if log_y {
        c.log_y()
    } else {
        c
    }
}

#[test]
fn a_diverged_run_is_clipped_and_marked_not_setting_the_axis() {
    for log_y in [false, true] {
        let c = losses(log_y);
        let Axes { x, y, clipped } = line_axes(&c);
        // The calm runs span 1.5..3.8; the axis fits them, not 14,000.
        assert!(y.1 < 5.0 && y.0 > 0.5, "log {log_y}: y range {y:?}");
        assert!(x.0 <= 0.0 && x.1 >= 10_000.0, "x range {x:?}");
        assert_eq!(clipped, vec![2], "log {log_y}");
        let svg = svg_string(&Figure::new("f", vec![c.panel()], 1)).unwrap();
        let t = texts(&svg);
        assert!(
            t.iter()
                .any(|s| s.contains("diverged") && s.contains("(clipped)")),
            "legend: {t:?}"
        );
    }
    // Every run diverged: then they set the range themselves.
    let all = LineChart::new(
        "all diverged",
        "step",
        "loss",
        vec![Series::new("a", vec![(0.0, 1.0), (1.0, 500.0)]).diverged(true)],
    );
    let a = line_axes(&all);
    assert!(a.y.1 >= 500.0 && a.clipped.is_empty(), "{a:?}");
    // Unmarked series keep the old behaviour: everything in range.
    let plain = LineChart::new(
        "plain",
        "step",
        "loss",
        vec![Series::new("a", vec![(0.0, 1.0), (1.0, 500.0)])],
    );
    assert!(line_axes(&plain).y.1 >= 500.0);
}

#[test]
fn whole_number_ticks_print_as_whole_numbers() {
    assert_eq!(tick(50.0), "50");
    assert_eq!(tick(10000.0), "10000");
    assert_eq!(tick(-3.0), "-3");
    assert_eq!(tick(0.25), "0.25");
    assert_eq!(tick(2.5e-4), "2.5e-4");
    assert_eq!(tick(1e-5), "1e-5");
    assert_eq!(tick(1.5), "1.5");
    let svg = svg_string(&Figure::new("f", vec![losses(false).panel()], 1)).unwrap();
    let t = texts(&svg);
    assert!(t.iter().any(|s| s == "10000"), "ticks: {t:?}");
    assert!(
        !t.iter()
            .any(|s| s.ends_with(".0") && s.parse::<f64>().is_ok()),
        "a whole-number tick printed with .0: {t:?}"
    );
}

#[test]
fn a_heat_map_has_axis_titles_and_a_colour_bar() {
    // A learning-rate grid with a diverged cell (no value, marked D).
    let h = Heatmap {
        title: "12 layers".into(),
        x_labels: vec!["0.0001".into(), "0.001".into(), "0.01".into()],
        y_labels: vec!["post".into(), "pre".into()],
        values: vec![
            vec![Some(2.4), Some(1.9), None],
            vec![Some(2.2), Some(1.7), Some(1.6)],
        ],
        marks: vec![
            vec![String::new(), String::new(), "D".into()],
            vec![String::new(); 3],
        ],
        value_label: "final held-out loss".into(),
        x_title: "learning rate".into(),
        y_title: "placement".into(),
    };
    let svg = svg_string(&Figure::new("h", vec![Panel::Heat(h)], 1)).unwrap();
    let t = texts(&svg);
    for want in ["learning rate", "placement", "D", "0.001", "post"] {
        assert!(t.iter().any(|s| s == want), "missing {want:?} in {t:?}");
    }
    // The colour bar: its title and its ends (the smallest and largest
    // value), the diverged cell not stretching it.
    let all = t.join(" ");
    assert!(all.contains("final held-out loss"), "{t:?}");
    assert!(t.iter().any(|s| s == "1.6"), "bar's low end: {t:?}");
    assert!(t.iter().any(|s| s == "2.4"), "bar's high end: {t:?}");
}
