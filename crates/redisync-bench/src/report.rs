//! Turning measurements into figures: percentiles, medians over rounds, markdown and JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

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

/// One figure of one contender in one scenario, with its value in every round.
#[derive(Debug, Default)]
pub struct Figures {
    /// figure name -> value per round
    values: BTreeMap<String, Vec<f64>>,
    order: Vec<String>,
}

impl Figures {
    pub fn add(&mut self, name: &str, value: f64) {
        if !self.values.contains_key(name) {
            self.order.push(name.to_owned());
        }
        self.values.entry(name.to_owned()).or_default().push(value);
    }

    /// The median over rounds of a figure.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).map(|v| median(v))
    }
}

/// One scenario's results: contenders in the order they were first measured.
#[derive(Debug, Default)]
pub struct Scenario {
    pub title: String,
    pub note: String,
    pub contenders: Vec<(String, Figures)>,
}

impl Scenario {
    pub fn new(title: &str, note: &str) -> Self {
        Scenario {
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
        let _ = writeln!(out, "|---|{}", "---:|".repeat(columns.len()));
        for (contender, figures) in &self.contenders {
            let cells: Vec<String> = columns
                .iter()
                .map(|c| figures.get(c).map_or("–".to_owned(), format_value))
                .collect();
            let _ = writeln!(out, "| {contender} | {} |", cells.join(" | "));
        }
        out
    }

    pub fn json(&self) -> String {
        let contenders: Vec<String> = self
            .contenders
            .iter()
            .map(|(name, figures)| {
                let values: Vec<String> = figures
                    .order
                    .iter()
                    .map(|f| {
                        let rounds = &figures.values[f];
                        format!(
                            "{}: {{\"median\": {}, \"rounds\": [{}]}}",
                            json_string(f),
                            json_number(median(rounds)),
                            rounds
                                .iter()
                                .map(|v| json_number(*v))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                    .collect();
                format!(
                    "{{\"contender\": {}, \"figures\": {{{}}}}}",
                    json_string(name),
                    values.join(", ")
                )
            })
            .collect();
        format!(
            "{{\"scenario\": {}, \"note\": {}, \"results\": [{}]}}",
            json_string(&self.title),
            json_string(&self.note),
            contenders.join(", ")
        )
    }
}

fn format_value(v: f64) -> String {
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

pub fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_number(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".to_owned()
    }
}
