//! Turning measurements into figures: percentiles, medians over rounds, markdown and JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Map, Value};

/// The `p`-th percentile (0..=100) of `samples`, nearest rank; 0 for no samples.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}

/// The figures of one contender in one scenario, each with its value in every round.
#[derive(Debug, Default)]
pub struct Figures {
    /// figure name -> value per round
    values: BTreeMap<String, Vec<f64>>,
    /// figure name -> text per round (a per-command breakdown, for example)
    texts: BTreeMap<String, Vec<String>>,
    /// text figure name -> the figure whose median round picks the text
    text_of: BTreeMap<String, String>,
    /// Column order: figures in the order they were first added.
    order: Vec<String>,
    /// Raw samples pooled over the rounds (latencies), for the charts only.
    pub samples: Vec<f64>,
    /// One vector per round (per-task acquisition counts), for the charts only.
    pub series: Vec<Vec<f64>>,
}

impl Figures {
    pub fn add(&mut self, name: &str, value: f64) {
        if !self.values.contains_key(name) {
            self.order.push(name.to_owned());
        }
        self.values.entry(name.to_owned()).or_default().push(value);
    }

    /// Adds a figure whose column, the first time, goes right after the column `after`
    /// (a ratio next to what it is a ratio of).
    pub fn add_after(&mut self, after: &str, name: &str, value: f64) {
        if !self.values.contains_key(name) {
            match self.order.iter().position(|o| o == after) {
                Some(i) => self.order.insert(i + 1, name.to_owned()),
                None => self.order.push(name.to_owned()),
            }
        }
        self.values.entry(name.to_owned()).or_default().push(value);
    }

    /// A text figure, shown as it is. Over rounds, the text reported is the one of the round
    /// whose `figure` is the median (so that a breakdown of commands matches the count of
    /// commands next to it), or the most frequent one if that figure is missing.
    pub fn text(&mut self, name: &str, value: String, figure: &str) {
        if !self.texts.contains_key(name) {
            self.order.push(name.to_owned());
        }
        self.texts.entry(name.to_owned()).or_default().push(value);
        self.text_of.insert(name.to_owned(), figure.to_owned());
    }

    /// The median over rounds of a figure.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).map(|v| median(v))
    }

    /// A figure's value in every round.
    pub fn rounds(&self, name: &str) -> Option<&[f64]> {
        self.values.get(name).map(Vec::as_slice)
    }

    /// The text reported for a text figure (see [`text`](Self::text)).
    pub fn get_text(&self, name: &str) -> Option<&str> {
        let texts = self.texts.get(name)?;
        let median_round = self
            .text_of
            .get(name)
            .and_then(|figure| self.values.get(figure))
            .filter(|values| values.len() == texts.len())
            .and_then(|values| {
                let m = median(values);
                values.iter().position(|v| *v == m)
            });
        if let Some(i) = median_round {
            return texts.get(i).map(String::as_str);
        }
        let mut best: Option<(&str, usize)> = None;
        for t in texts {
            let n = texts.iter().filter(|o| *o == t).count();
            if best.is_none_or(|(_, m)| n > m) {
                best = Some((t.as_str(), n));
            }
        }
        best.map(|(t, _)| t)
    }

    fn cell(&self, column: &str) -> String {
        if let Some(v) = self.get(column) {
            format_value(v)
        } else if let Some(t) = self.get_text(column) {
            t.replace('|', "\\|")
        } else {
            "–".to_owned()
        }
    }

    fn json(&self) -> Value {
        let mut figures = Map::new();
        for name in &self.order {
            if let Some(rounds) = self.values.get(name) {
                figures.insert(
                    name.clone(),
                    json!({"median": json_number(median(rounds)),
                           "rounds": rounds.iter().map(|v| json_number(*v)).collect::<Vec<_>>()}),
                );
            } else if let Some(texts) = self.texts.get(name) {
                figures.insert(
                    name.clone(),
                    json!({"text": self.get_text(name), "rounds": texts}),
                );
            }
        }
        Value::Object(figures)
    }
}

/// One scenario's results: contenders in the order they were first measured.
#[derive(Debug, Default)]
pub struct Scenario {
    /// A stable identifier, used by `--compare` to find the same figure in an older run.
    pub id: String,
    pub title: String,
    pub note: String,
    pub contenders: Vec<(String, Figures)>,
}

impl Scenario {
    pub fn new(id: &str, title: &str, note: &str) -> Self {
        Scenario {
            id: id.to_owned(),
            title: title.to_owned(),
            note: note.to_owned(),
            contenders: Vec::new(),
        }
    }

    pub fn figures(&mut self, contender: &str) -> &mut Figures {
        if let Some(i) = self.contenders.iter().position(|(c, _)| c == contender) {
            return &mut self.contenders[i].1;
        }
        self.contenders
            .push((contender.to_owned(), Figures::default()));
        let last = self.contenders.len() - 1;
        &mut self.contenders[last].1
    }

    pub fn get(&self, contender: &str) -> Option<&Figures> {
        self.contenders
            .iter()
            .find(|(c, _)| c == contender)
            .map(|(_, f)| f)
    }

    /// Adds `name` to every contender: its `figure` divided by `base`'s `base_figure`, round
    /// by round (both were measured in the same round, one right after the other, so their
    /// ratio moves less than the figures themselves), then the median over rounds.
    pub fn ratio_to(
        &mut self,
        figure: &str,
        base: Option<&Figures>,
        base_figure: &str,
        name: &str,
    ) {
        let Some(base) = base
            .and_then(|b| b.rounds(base_figure))
            .map(<[f64]>::to_vec)
        else {
            return;
        };
        for (_, figures) in &mut self.contenders {
            let Some(own) = figures.rounds(figure).map(<[f64]>::to_vec) else {
                continue;
            };
            for (a, b) in own.iter().zip(&base) {
                if *b != 0.0 {
                    figures.add_after(figure, name, a / b);
                }
            }
        }
    }

    /// [`ratio_to`](Self::ratio_to) against a contender of this scenario.
    pub fn ratio_to_own(&mut self, figure: &str, base_contender: &str, name: &str) {
        let base = self
            .get(base_contender)
            .and_then(|b| b.rounds(figure))
            .map(<[f64]>::to_vec);
        let Some(base) = base else { return };
        let mut holder = Figures::default();
        for v in base {
            holder.add(figure, v);
        }
        self.ratio_to(figure, Some(&holder), figure, name);
    }

    /// A markdown table: one row per contender, one column per figure (medians over rounds).
    pub fn markdown(&self) -> String {
        let mut columns: Vec<String> = Vec::new();
        for (_, figures) in &self.contenders {
            for name in &figures.order {
                if !columns.contains(name) {
                    columns.push(name.clone());
                }
            }
        }
        let mut out = format!("### {}\n\n", self.title);
        if !self.note.is_empty() {
            let _ = writeln!(out, "{}\n", self.note);
        }
        let _ = writeln!(out, "| contender | {} |", columns.join(" | "));
        let align: String = columns
            .iter()
            .map(|c| {
                let text = self.contenders.iter().any(|(_, f)| f.texts.contains_key(c));
                if text {
                    "---|"
                } else {
                    "---:|"
                }
            })
            .collect();
        let _ = writeln!(out, "|---|{align}");
        for (contender, figures) in &self.contenders {
            let cells: Vec<String> = columns.iter().map(|c| figures.cell(c)).collect();
            let _ = writeln!(out, "| {contender} | {} |", cells.join(" | "));
        }
        out
    }

    pub fn json(&self) -> Value {
        let results: Vec<Value> = self
            .contenders
            .iter()
            .map(|(name, figures)| json!({"contender": name, "figures": figures.json()}))
            .collect();
        json!({"id": self.id, "scenario": self.title, "note": self.note, "results": results})
    }
}

pub fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn json_number(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), 50.0);
        assert_eq!(percentile(&samples, 99.0), 99.0);
        assert_eq!(percentile(&samples, 100.0), 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn ratios_are_taken_round_by_round() {
        let mut s = Scenario::new("x", "x", "");
        for (floor, lib) in [(100.0, 150.0), (200.0, 220.0), (100.0, 130.0)] {
            s.figures("floor").add("p50", floor);
            s.figures("lib").add("p50", lib);
        }
        s.ratio_to_own("p50", "floor", "vs floor");
        let lib = s.get("lib").expect("lib");
        assert_eq!(lib.rounds("vs floor"), Some(&[1.5, 1.1, 1.3][..]));
        assert_eq!(lib.get("vs floor"), Some(1.3));
        assert_eq!(s.get("floor").and_then(|f| f.get("vs floor")), Some(1.0));
        // The ratio's column sits right after its figure.
        assert_eq!(lib.order, ["p50", "vs floor"]);
    }

    #[test]
    fn a_text_figure_reports_the_text_of_its_figures_median_round() {
        let mut f = Figures::default();
        for (n, text) in [(3.0, "GET 3"), (1.0, "GET 1"), (2.0, "GET 2")] {
            f.add("commands", n);
            f.text("by name", text.to_owned(), "commands");
        }
        assert_eq!(f.get_text("by name"), Some("GET 2"));
        let mut g = Figures::default();
        for text in ["GET 1", "GET 2", "GET 2"] {
            g.text("by name", text.to_owned(), "missing");
        }
        assert_eq!(g.get_text("by name"), Some("GET 2"));
    }
}
