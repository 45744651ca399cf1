//! SVG charts of a run, drawn with `plotters` (its SVG backend only: text is left to the
//! browser, so no font library is needed to draw them).
//!
//! Every contender keeps one colour across the charts, by its place in the run's list of
//! contenders.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::lockers::Contender;
use crate::report::{format_value, median, percentile, Scenario};

const SIZE: (u32, u32) = (960, 540);

/// Tableau 10, then black, six of Tableau 20's light colours, four dark ones and one more
/// light one: one colour for each contender and the EVALSHA ceiling, distinct, and readable
/// on white. The dark ones go to the last contenders of `Contender::ALL` (the peers listed
/// last), the light one after them to the EVALSHA ceiling: everyone else keeps the colour it
/// has in charts drawn before those peers were measured.
const COLOURS: [RGBColor; 22] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(174, 199, 232),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
    RGBColor(247, 182, 210),
    RGBColor(128, 0, 0),
    RGBColor(0, 0, 128),
    RGBColor(128, 128, 0),
    RGBColor(0, 128, 128),
    RGBColor(219, 219, 141),
];

// More colours than `Contender::ALL` lists contenders, one more for the EVALSHA ceiling: a
// contender added to `ALL` without a colour stops the build. (One left out of `ALL` is not
// caught here; it would draw in the first colour.)
const _: () = assert!(COLOURS.len() > Contender::ALL.len());

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Colours by contender name, stable across the charts of one run: every lock contender
/// (and the EVALSHA ceiling) has its own.
struct Palette {
    names: Vec<&'static str>,
}

impl Palette {
    fn new() -> Self {
        let mut names: Vec<&'static str> = Contender::ALL.iter().map(|c| c.name()).collect();
        names.push("EVALSHA ceiling");
        Palette { names }
    }

    fn colour(&self, name: &str) -> RGBColor {
        let i = self.names.iter().position(|n| *n == name).unwrap_or(0);
        COLOURS[i % COLOURS.len()]
    }
}

/// Writes every chart the scenarios present allow into `dir`; returns the files written.
pub fn write_all(dir: &Path, scenarios: &[crate::report::Scenario]) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let find = |id: &str| scenarios.iter().find(|s| s.id == id);
    let palette = Palette::new();
    let mut written = Vec::new();
    let mut write = |file: &str, result: Result<bool, String>| -> Result<(), String> {
        if result.map_err(|e| format!("{file}: {e}"))? {
            written.push(dir.join(file).display().to_string());
        }
        Ok(())
    };
    if let Some(s) = find("uncontended") {
        write(
            "uncontended-latency.svg",
            cdf(
                &dir.join("uncontended-latency.svg"),
                "Uncontended lock + unlock: latency distribution (all rounds)",
                "cycle latency, µs (log scale)",
                "fraction of cycles",
                s,
                &palette,
            ),
        )?;
    }
    if let Some(s) = find("contended") {
        write(
            "contended-throughput.svg",
            bars(
                &dir.join("contended-throughput.svg"),
                "Contended: 4 clients × 4 tasks on one lock, 1 ms hold",
                "acquisitions/s (median over rounds)",
                s,
                "acquisitions/s",
                &palette,
            ),
        )?;
        write(
            "contended-fairness.svg",
            fairness(&dir.join("contended-fairness.svg"), s, &palette),
        )?;
    }
    if let Some(s) = find("handoff") {
        write(
            "handoff-latency.svg",
            cdf(
                &dir.join("handoff-latency.svg"),
                "Hand-off with one waiter: release start → waiter holds (all rounds)",
                "hand-off, µs (log scale)",
                "fraction of hand-offs",
                s,
                &palette,
            ),
        )?;
    }
    if let Some(s) = find("many-locks") {
        write(
            "many-locks-throughput.svg",
            bars(
                &dir.join("many-locks-throughput.svg"),
                "Many locks: 64 tasks, each on its own lock",
                "lock + unlock cycles/s (median over rounds)",
                s,
                "acquisitions/s",
                &palette,
            ),
        )?;
    }
    let ops: Vec<&Scenario> = ["uncontended", "primitive-ops"]
        .iter()
        .filter_map(|id| find(id))
        .collect();
    if !ops.is_empty() {
        write(
            "commands-per-operation.svg",
            commands(&dir.join("commands-per-operation.svg"), &ops),
        )?;
    }
    Ok(written)
}

/// Cumulative distributions of each contender's samples, on a log scale. False if there
/// are no samples.
fn cdf(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    scenario: &Scenario,
    palette: &Palette,
) -> Result<bool, String> {
    let series: Vec<(&str, Vec<f64>)> = scenario
        .contenders
        .iter()
        .filter(|(_, f)| !f.samples.is_empty())
        .map(|(name, f)| {
            let mut sorted: Vec<f64> = f.samples.iter().map(|v| v.max(1.0)).collect();
            sorted.sort_by(f64::total_cmp);
            (name.as_str(), sorted)
        })
        .collect();
    if series.is_empty() {
        return Ok(false);
    }
    // From the fastest contender's 0.1th percentile to the slowest one's 99.9th: the far tail
    // of a few samples would squeeze everything else into a corner.
    let lo = series
        .iter()
        .map(|(_, s)| percentile(s, 0.1))
        .fold(f64::INFINITY, f64::min);
    let hi = series
        .iter()
        .map(|(_, s)| percentile(s, 99.9))
        .fold(0.0, f64::max);
    let (lo, hi) = (lo * 0.9, (hi * 1.1).max(lo * 2.0));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| format_value(v.round()))
        .draw()
        .map_err(err)?;
    for (name, sorted) in &series {
        let colour = palette.colour(name);
        let n = sorted.len();
        // At most ~500 points a line: enough for the eye, small files.
        let step = (n / 500).max(1);
        let points = sorted
            .iter()
            .enumerate()
            .filter(|(i, _)| i % step == 0 || *i == n - 1)
            .map(|(i, v)| (v.clamp(lo, hi), (i + 1) as f64 / n as f64));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(err)?
            .label(format!("{name} (p50 {} µs)", format_value(median(sorted))))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(true)
}

/// One horizontal bar per contender: the median of `figure`. False if none has it.
fn bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    scenario: &Scenario,
    figure: &str,
    palette: &Palette,
) -> Result<bool, String> {
    let values: Vec<(String, f64)> = scenario
        .contenders
        .iter()
        .filter_map(|(name, f)| f.get(figure).map(|v| (name.clone(), v)))
        .collect();
    horizontal_bars(path, title, x_desc, &values, |name| palette.colour(name))
}

fn horizontal_bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    values: &[(String, f64)],
    colour: impl Fn(&str) -> RGBColor,
) -> Result<bool, String> {
    if values.is_empty() {
        return Ok(false);
    }
    let n = values.len();
    // Bars are drawn bottom up: row `i` of the list goes to segment `n - 1 - i`, so the list
    // reads top down as in the tables.
    let row = |segment: usize| values.get(n - 1 - segment.min(n - 1));
    let max = values.iter().map(|(_, v)| *v).fold(0.0, f64::max).max(1e-9);
    let height = (120 + 44 * n as u32).max(300);
    let root = SVGBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(300)
        // An integer range is inclusive here: 0..n - 1 makes n segments.
        .build_cartesian_2d(0.0..max * 1.18, (0..n - 1).into_segmented())
        .map_err(err)?;
    let label = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => row(*i).map(|(n, _)| n.clone()).unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&label)
        .x_desc(x_desc)
        .x_label_formatter(&|v| format_value(*v))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(
            Histogram::horizontal(&chart)
                .margin(6)
                .style_func(|y, _| match y {
                    SegmentValue::Exact(i) | SegmentValue::CenterOf(i) => {
                        row(*i).map_or(BLACK.filled(), |(name, _)| colour(name).filled())
                    }
                    SegmentValue::Last => BLACK.filled(),
                })
                .data((0..n).filter_map(|i| row(i).map(|(_, v)| (i, *v)))),
        )
        .map_err(err)?;
    chart
        .draw_series((0..n).filter_map(|i| {
            row(i).map(|(_, v)| {
                Text::new(
                    format!(" {}", format_value(*v)),
                    (*v, SegmentValue::CenterOf(i)),
                    ("sans-serif", 14).into_font(),
                )
            })
        }))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(true)
}

/// Fairness: each task's acquisitions as a share of the mean, tasks sorted from least to
/// most lucky (median over rounds, rank by rank). A fair lock is a flat line at 1.
fn fairness(path: &Path, scenario: &Scenario, palette: &Palette) -> Result<bool, String> {
    let series: Vec<(&str, Vec<f64>)> = scenario
        .contenders
        .iter()
        .filter(|(_, f)| !f.series.is_empty())
        .map(|(name, f)| {
            let tasks = f.series.iter().map(Vec::len).min().unwrap_or(0);
            let shares: Vec<f64> = (0..tasks)
                .map(|rank| {
                    let per_round: Vec<f64> = f
                        .series
                        .iter()
                        .map(|counts| {
                            let mean = counts.iter().sum::<f64>() / counts.len().max(1) as f64;
                            if mean > 0.0 {
                                counts[rank] / mean
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    median(&per_round)
                })
                .collect();
            (name.as_str(), shares)
        })
        .filter(|(_, s)| !s.is_empty())
        .collect();
    if series.is_empty() {
        return Ok(false);
    }
    let tasks = series.iter().map(|(_, s)| s.len()).max().unwrap_or(1);
    let top = series
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Contended fairness: each task's acquisitions ÷ the mean, least to most lucky",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.5..tasks as f64 + 0.5, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("task, sorted by acquisitions")
        .y_desc("acquisitions ÷ mean of the tasks")
        .x_labels(tasks)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    for (name, shares) in &series {
        let colour = palette.colour(name);
        let points: Vec<(f64, f64)> = shares
            .iter()
            .enumerate()
            .map(|(i, s)| ((i + 1) as f64, *s))
            .collect();
        let ratio = shares.first().copied().unwrap_or(0.0)
            / shares.last().copied().unwrap_or(1.0).max(1e-9);
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
            .map_err(err)?
            .label(format!("{name} (min/max {:.2})", ratio))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        chart
            .draw_series(PointSeries::of_element(
                points,
                3,
                colour.filled(),
                &|c, s, st| Circle::new(c, s, st),
            ))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(true)
}

/// How the peers' contender names start: the commands chart gives them one colour.
const PEERS: [&str; 5] = [
    "rslock",
    "redis-lock",
    "distributed-lock-redis",
    "redis-semaphore",
    "python-redis-lock",
];

/// Commands Redis runs per uncontended cycle (scripts' own commands included), one bar per
/// lock contender and primitive operation.
fn commands(path: &Path, scenarios: &[&Scenario]) -> Result<bool, String> {
    let values: Vec<(String, f64)> = scenarios
        .iter()
        .flat_map(|s| s.contenders.iter())
        .filter_map(|(name, f)| f.get("commands/cycle").map(|v| (name.clone(), v)))
        .collect();
    horizontal_bars(
        path,
        "Commands Redis runs per uncontended cycle (inside scripts included)",
        "commands per cycle (INFO commandstats)",
        &values,
        |name| {
            if name.starts_with("floor") {
                COLOURS[7]
            } else if name.starts_with("redisync") {
                COLOURS[0]
            } else if PEERS.iter().any(|peer| name.starts_with(peer)) {
                COLOURS[1]
            } else {
                COLOURS[2]
            }
        },
    )
}
