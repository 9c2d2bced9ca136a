//! The batch chart (SVG): per second, the offered rate and p50/p99, medians per configuration.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

/// One configuration's per-second medians: (second, requests, p50 ms, p99 ms).
pub struct Series {
    pub name: String,
    pub points: Vec<(u32, f64, f64, f64)>,
}

/// Grey, blue, red, green, purple, orange.
const COLOURS: [(u8, u8, u8); 6] =
    [(90, 90, 90), (31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14)];

pub fn draw(path: &Path, title: &str, series: &[Series]) -> Result<()> {
    chart(path, title, series).map_err(|e| anyhow!("drawing {}: {e}", path.display()))
}

fn chart(path: &Path, title: &str, series: &[Series]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1000, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let (top, bottom) = root.split_vertically(260);
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x_max = all().map(|p| p.0).max().unwrap_or(1) + 1;
    let rate_max = all().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let lat_min = all().map(|p| p.2).fold(f64::INFINITY, f64::min).max(0.01) * 0.8;
    let lat_max = all().map(|p| p.3).fold(0.0, f64::max).max(lat_min * 2.0) * 1.2;
    // Both panels: the same margins and label areas.
    let panel = |area| {
        let mut b = ChartBuilder::on(area);
        b.margin(10).x_label_area_size(30).y_label_area_size(60);
        b
    };
    let x_desc = "seconds since the start of the run";
    let mut rate = panel(&top).build_cartesian_2d(0u32..x_max, 0f64..rate_max)?;
    rate.configure_mesh().y_desc("offered req/s").x_desc(x_desc).draw()?;
    let lat_range = (lat_min..lat_max).log_scale();
    let mut lat = panel(&bottom).build_cartesian_2d(0u32..x_max, lat_range)?;
    let y_desc = "latency ms: p99 solid, p50 dashed (log)";
    lat.configure_mesh().y_desc(y_desc).x_desc(x_desc).draw()?;
    for (i, s) in series.iter().enumerate() {
        let (r, g, b) = COLOURS[i % COLOURS.len()];
        let c = RGBColor(r, g, b);
        let at = |k: fn(&(u32, f64, f64, f64)) -> f64| s.points.iter().map(move |p| (p.0, k(p)));
        rate.draw_series(LineSeries::new(at(|p| p.1), c.stroke_width(2)))?
            .label(&s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        lat.draw_series(LineSeries::new(at(|p| p.3), c.stroke_width(2)))?;
        lat.draw_series(DashedLineSeries::new(at(|p| p.2), 6, 4, c.stroke_width(1)))?;
    }
    let mut labels = rate.configure_series_labels();
    labels.position(SeriesLabelPosition::UpperLeft).background_style(WHITE.mix(0.8));
    labels.border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_with_every_configuration() {
        let dir = std::env::temp_dir().join(format!("measure-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("batch.svg");
        let s = |name: &str, k: f64| Series {
            name: name.into(),
            points: (0..120).map(|t| (t, t as f64 * 7.5, 0.3 * k, 0.9 * k)).collect(),
        };
        draw(&path, "test", &[s("floor", 1.0), s("stack", 1.5)]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("floor") && svg.contains("stack"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
