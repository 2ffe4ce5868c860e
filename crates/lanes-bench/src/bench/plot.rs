//! `--plot DIR`: throughput and latency against message size, log axes, one line per path,
//! titled with the machine and date, as PNG and SVG. Pure Rust: plotters draws, the text is
//! set in DejaVu Sans (bundled by the `dejavu` crate, so no system fonts are needed), and
//! the `png` crate encodes.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::report::{Report, Row};

const W: u32 = 1100;
const H: u32 = 650;

/// The two plots.
#[derive(Clone, Copy)]
enum Chart {
    Throughput,
    Latency,
}

impl Chart {
    fn file_stem(self) -> &'static str {
        match self {
            Chart::Throughput => "bench-throughput",
            Chart::Latency => "bench-latency",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Chart::Throughput => "lanes bench: throughput vs message size (GB/s, one way)",
            Chart::Latency => "lanes bench: one-way latency vs message size (average)",
        }
    }

    fn value(self, r: &Row) -> f64 {
        match self {
            Chart::Throughput => r.value("gbps"),
            Chart::Latency => r.lat_ns.avg,
        }
    }
}

fn fonts() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bad = |_| "the bundled font is unreadable".to_string();
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).map_err(bad)?;
        plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold()).map_err(bad)
    })
    .clone()
}

/// A colour per path, stable across runs and plots.
fn colour(path: &str) -> RGBColor {
    match path {
        "floor" => RGBColor(90, 90, 90),
        "pio" => RGBColor(31, 119, 180),
        "data-interrupt" => RGBColor(148, 103, 189),
        "dma" => RGBColor(44, 160, 44),
        "sockets" => RGBColor(255, 127, 14),
        "tcp" => RGBColor(214, 39, 40),
        "unix" => RGBColor(140, 86, 75),
        _ => RGBColor(23, 190, 207),
    }
}

/// `4`, `64`, `1K`, `256K`, `1M`.
fn size_label(v: f64) -> String {
    let v = v.round() as u64;
    if v >= 1 << 20 && v % (1 << 20) == 0 {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 && v % (1 << 10) == 0 {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

fn gbps_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').to_string()
    }
}

fn ns_label(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.0} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0} us", v / 1e3)
    } else {
        format!("{v:.0} ns")
    }
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, r: &Report, chart: Chart) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing: {e}");
    root.fill(&WHITE).map_err(err)?;
    let sizes = r.sizes();
    let (Some(&smin), Some(&smax)) = (sizes.first(), sizes.last()) else {
        return Err("no results to plot".into());
    };
    let vals: Vec<f64> = r.rows.iter().map(|x| chart.value(x)).filter(|v| v.is_finite() && *v > 0.0).collect();
    if vals.is_empty() {
        return Err("no positive values to plot".into());
    }
    let vmin = vals.iter().copied().fold(f64::MAX, f64::min);
    let vmax = vals.iter().copied().fold(0.0, f64::max);
    let (xlo, xhi) = (smin as f64 / 1.4, smax as f64 * 1.4);
    // Whole decades, so the axis is labelled at both ends.
    let (ylo, yhi) =
        (10f64.powf((vmin * 0.95).log10().floor()) * 0.999, 10f64.powf((vmax * 1.05).log10().ceil()) * 1.001);

    let title_style = TextStyle::from(("sans-serif", 24).into_font().style(FontStyle::Bold)).color(&BLACK);
    let sub_style = TextStyle::from(("sans-serif", 16).into_font()).color(&RGBColor(70, 70, 70));
    root.draw_text(chart.title(), &title_style, (30, 16)).map_err(err)?;
    root.draw_text(&r.machine.title(), &sub_style, (30, 48)).map_err(err)?;
    let body = root.margin(75, 20, 20, 30);

    let mut c = ChartBuilder::on(&body)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((xlo..xhi).log_scale().base(2.0), (ylo..yhi).log_scale())
        .map_err(err)?;
    let label_font = ("sans-serif", 15).into_font();
    let ylabel = match chart {
        Chart::Throughput => "GB/s (1e9 bytes/s)",
        Chart::Latency => "one-way latency",
    };
    c.configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(ylabel)
        .axis_desc_style(("sans-serif", 16))
        .label_style(label_font.clone())
        .x_labels(20)
        .y_labels(12)
        .x_label_formatter(&|v| size_label(*v))
        .y_label_formatter(&|v| match chart {
            Chart::Throughput => gbps_label(*v),
            Chart::Latency => ns_label(*v),
        })
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(200, 200, 200))
        .draw()
        .map_err(err)?;
    for path in r.keys() {
        let pts: Vec<(f64, f64)> = r
            .rows
            .iter()
            .filter(|x| x.key == path)
            .map(|x| (x.size() as f64, chart.value(x)))
            .filter(|(_, v)| v.is_finite() && *v > 0.0)
            .collect();
        if pts.is_empty() {
            continue;
        }
        let col = colour(&path);
        let stroke = col.stroke_width(if path == "floor" { 2 } else { 3 });
        c.draw_series(LineSeries::new(pts.clone(), stroke))
            .map_err(err)?
            .label(path.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], col.stroke_width(3)));
        c.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled()))).map_err(err)?;
    }
    c.configure_series_labels()
        .position(match chart {
            Chart::Throughput => SeriesLabelPosition::UpperLeft,
            Chart::Latency => SeriesLabelPosition::UpperLeft,
        })
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn write_png(path: &Path, rgb: &[u8]) -> Result<(), String> {
    let f = std::fs::File::create(path).map_err(|e| format!("writing {}: {e}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), W, H);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Best);
    enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    let mut w = enc.write_header().map_err(|e| format!("writing {}: {e}", path.display()))?;
    w.write_image_data(rgb).map_err(|e| format!("writing {}: {e}", path.display()))?;
    w.finish().map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Writes `bench-throughput.{png,svg}` and `bench-latency.{png,svg}` into `dir`.
pub(crate) fn write(r: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    fonts()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for chart in [Chart::Throughput, Chart::Latency] {
        let svg_path = dir.join(format!("{}.svg", chart.file_stem()));
        let mut svg = String::new();
        draw(SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area(), r, chart)?;
        std::fs::write(&svg_path, svg).map_err(|e| format!("writing {}: {e}", svg_path.display()))?;
        written.push(svg_path);

        let png_path = dir.join(format!("{}.png", chart.file_stem()));
        let mut rgb = vec![0u8; (W * H * 3) as usize];
        draw(BitMapBackend::with_buffer(&mut rgb, (W, H)).into_drawing_area(), r, chart)?;
        write_png(&png_path, &rgb)?;
        written.push(png_path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Lat;

    #[test]
    fn plots_are_written() {
        let mut r = Report::default();
        for (i, path) in ["floor", "pio", "tcp"].iter().enumerate() {
            for s in [4usize, 64, 1024, 1 << 20] {
                r.rows.push(
                    Row::new(*path)
                        .with_size(s)
                        .with_lat(Lat { avg: 50.0 * (i + 1) as f64 + s as f64 / 10.0, ..Default::default() })
                        .with_value("gbps", s as f64 / 100.0 / (i + 1) as f64),
                );
            }
        }
        let dir = std::env::temp_dir().join(format!("lanes-plot-test-{}", std::process::id()));
        let files = write(&r, &dir).unwrap();
        assert_eq!(files.len(), 4);
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            if f.extension().unwrap() == "png" {
                assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
            } else {
                assert!(String::from_utf8_lossy(&bytes).contains("<svg"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(size_label(1024.0), "1K");
        assert_eq!(size_label(1048576.0), "1M");
        assert_eq!(size_label(12.0), "12");
    }
}
