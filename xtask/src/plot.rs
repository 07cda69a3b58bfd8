//! Recall-vs-throughput Pareto plots (plotters, PNG, log QPS axis).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One system's points (recall, QPS).
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// The Pareto frontier: points no other point beats in both recall and QPS,
/// sorted by recall.
pub fn frontier(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut p: Vec<(f64, f64)> = points.to_vec();
    p.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (r, q) in p {
        if out.last().is_none_or(|&(_, best)| q > best) {
            out.push((r, q));
        }
    }
    out.reverse();
    out
}

/// Fonts tried for labels (plotters draws text with ab_glyph from a TTF).
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

fn register_font() -> bool {
    for p in FONT_PATHS {
        if let Ok(bytes) = std::fs::read(p) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// Draw the frontiers of all series into `path`; without a TTF font (the
/// lent GPU machines have none) the lines and points only, with no text.
pub fn pareto_png(path: &Path, title: &str, series: &[Series]) -> Result<()> {
    let labels = register_font();
    if !labels {
        tracing::warn!(
            "no TTF font found (install fonts-dejavu-core): the plot has no labels; \
             redraw it with `cargo xtask plot` where there is one"
        );
    }
    draw_pareto(path, title, series, labels)
}

/// [`pareto_png`], with or without text (every piece of text needs a font).
fn draw_pareto(path: &Path, title: &str, series: &[Series], labels: bool) -> Result<()> {
    // The interesting range is high recall: points below RECALL_FLOOR are left out.
    const RECALL_FLOOR: f64 = 0.8;
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| p.0 >= RECALL_FLOOR)
        .collect();
    if all.is_empty() {
        return Err(anyhow!("nothing to plot"));
    }
    let rmin = all
        .iter()
        .map(|p| p.0)
        .fold(1.0, f64::min)
        .clamp(0.0, 0.999);
    let xmin = (rmin - 0.005).max(RECALL_FLOOR);
    let qmin = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min) * 0.7;
    let qmax = all.iter().map(|p| p.1).fold(0.0, f64::max) * 1.4;
    let root = BitMapBackend::new(path, (1100, 750)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70);
    if labels {
        builder.caption(title, ("sans-serif", 24));
    }
    let mut chart = builder.build_cartesian_2d(xmin..1.0f64, (qmin..qmax).log_scale())?;
    // The mesh draws its tick labels even when asked for none: without a
    // font, the lines and points alone.
    if labels {
        chart
            .configure_mesh()
            .x_desc("recall@10")
            .y_desc("queries per second (log)")
            .label_style(("sans-serif", 16))
            .draw()?;
    }
    let colours = [
        RED,
        BLUE,
        GREEN,
        MAGENTA,
        CYAN,
        BLACK,
        RGBColor(255, 140, 0),
    ];
    for (i, s) in series.iter().enumerate() {
        let c = colours[i % colours.len()];
        let f: Vec<(f64, f64)> = frontier(&s.points)
            .into_iter()
            .filter(|p| p.0 >= xmin)
            .collect();
        chart
            .draw_series(LineSeries::new(f.iter().copied(), c.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(
            s.points
                .iter()
                .filter(|p| p.0 >= xmin)
                .map(|&p| Circle::new(p, 3, c.filled())),
        )?;
    }
    if labels {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// One compressed code's cost and ranking (`xtask codes`).
pub struct CodePoint {
    pub name: String,
    pub bytes_per_vector: f64,
    /// Candidates an exact rerank needs after this code's ranking to reach
    /// the recall of the plot (none: not reached within the depth scored).
    pub candidates: Option<f64>,
}

/// Bytes per vector against the candidates needed, both on log axes, one
/// labelled point per code that reaches the recall (`xtask codes`).
pub fn codes_png(path: &Path, title: &str, points: &[CodePoint]) -> Result<()> {
    if !register_font() {
        tracing::warn!("no TTF font found (install fonts-dejavu-core): the plot has no labels");
    }
    let reached: Vec<(&str, f64, f64)> = points
        .iter()
        .filter_map(|p| {
            p.candidates
                .map(|c| (p.name.as_str(), p.bytes_per_vector, c))
        })
        .collect();
    if reached.is_empty() {
        return Err(anyhow!("no code reaches the recall: nothing to plot"));
    }
    let span = |f: fn(&(&str, f64, f64)) -> f64| {
        let lo = reached.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = reached.iter().map(f).fold(0.0, f64::max);
        (lo * 0.7)..(hi * 1.6)
    };
    let root = BitMapBackend::new(path, (1100, 750)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(span(|p| p.1).log_scale(), span(|p| p.2).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("bytes per vector (log)")
        .y_desc("candidates reranked for the recall (log)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 16))
        .draw()?;
    for &(name, bytes, cands) in &reached {
        let c = if name.starts_with("pca-int8") {
            RED
        } else {
            BLUE
        };
        chart.draw_series(std::iter::once(Circle::new((bytes, cands), 5, c.filled())))?;
        chart.draw_series(std::iter::once(Text::new(
            name.to_string(),
            (bytes * 1.03, cands * 1.03),
            ("sans-serif", 15).into_font().color(&c),
        )))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontier_keeps_only_undominated_points() {
        let f = frontier(&[
            (0.9, 100.0),
            (0.95, 50.0),
            (0.93, 40.0),
            (0.99, 10.0),
            (0.9, 80.0),
        ]);
        assert_eq!(f, vec![(0.9, 100.0), (0.95, 50.0), (0.99, 10.0)]);
    }

    #[test]
    fn writes_a_png() {
        let dir = std::env::temp_dir().join(format!("octex-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("p.png");
        pareto_png(
            &p,
            "test",
            &[Series {
                name: "a".into(),
                points: vec![(0.5, 5000.0), (0.9, 1000.0), (0.99, 100.0)],
            }],
        )
        .unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        // Without a font: the lines still, not a blank page.
        let series = [Series {
            name: "a".into(),
            points: vec![(0.85, 5000.0), (0.9, 1000.0), (0.99, 100.0)],
        }];
        draw_pareto(&p, "test", &series, false).unwrap();
        let bare = non_white_pixels(&p);
        assert!(bare > 1000, "{bare} non-white pixels");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Pixels of a PNG that are not white.
    fn non_white_pixels(p: &Path) -> usize {
        let img = image::open(p).unwrap().to_rgb8();
        img.pixels().filter(|px| px.0 != [255, 255, 255]).count()
    }

    #[test]
    fn codes_plot_needs_a_code_that_reaches_the_recall() {
        let dir = std::env::temp_dir().join(format!("octex-codes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.png");
        let point = |name: &str, bytes: f64, candidates: Option<f64>| CodePoint {
            name: name.into(),
            bytes_per_vector: bytes,
            candidates,
        };
        assert!(codes_png(&p, "test", &[point("a", 48.0, None)]).is_err());
        codes_png(
            &p,
            "test",
            &[
                point("pca-int8 48", 48.0, Some(11.0)),
                point("b", 24.0, Some(36.0)),
            ],
        )
        .unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).ok();
    }
}
