//! Before/after: the headline figures of this run next to the same figures of an older run's
//! JSON (`--compare OLD.json`), for example one built against the library before a change.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::report::{format_value, Scenario};

/// Which way is better for a figure.
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

/// A headline figure: where it is (scenario id, contender, figure) and how to read it.
struct Headline {
    label: String,
    scenario: String,
    contender: String,
    figure: String,
    better: Better,
}

/// The headline figures, one per line: label | scenario id | contender | figure | which way
/// is better. `{op}` lines are repeated for every operation of scenario 1b.
const HEADLINES: &str = "\
uncontended lock + unlock p50, × floor | uncontended | redisync | p50 vs floor | lower
uncontended lock + unlock p50, × floor (FairLock) | uncontended | redisync FairLock | p50 vs floor | lower
uncontended lock + unlock p50, µs | uncontended | redisync | p50 µs | lower
requests per uncontended cycle | uncontended | redisync | requests/cycle | lower
commands in Redis per uncontended cycle | uncontended | redisync | commands/cycle | lower
commands in Redis per uncontended cycle (FairLock) | uncontended | redisync FairLock | commands/cycle | lower
Redis keys added per 1k uncontended cycles | uncontended | redisync | Redis keys + per 1k cycles | lower
many locks: cycles/s, × floor | many-locks | redisync | vs floor | higher
many locks: cycles/s | many-locks | redisync | acquisitions/s | higher
many locks: Redis keys added by the run | many-locks | redisync | Redis keys + | lower
many locks: Redis used_memory added, MiB | many-locks | redisync | Redis used_memory + MiB | lower
contended: scripts per acquisition | contended | redisync | scripts/acquisition | lower
contended: scripts per acquisition (FairLock) | contended | redisync FairLock | scripts/acquisition | lower
contended: commands in Redis per acquisition | contended | redisync | commands/acquisition | lower
contended: PUBLISH per release | contended | redisync | PUBLISH/release | lower
contended: requests per acquisition | contended | redisync | requests/acquisition | lower
contended: acquisitions/s | contended | redisync | acquisitions/s | higher
contended: acquisitions/s (FairLock) | contended | redisync FairLock | acquisitions/s | higher
contended: per-task min/max | contended | redisync | min/max | higher
contended: per-task min/max (FairLock) | contended | redisync FairLock | min/max | higher
contended: handoff p50, µs | contended | redisync | handoff p50 µs | lower
hand-off with one waiter p50, × pub/sub floor | handoff | redisync | p50 vs pub/sub floor | lower
hand-off with one waiter p50, × pub/sub floor (FairLock) | handoff | redisync FairLock | p50 vs pub/sub floor | lower
read-heavy cache: reads/s, × floor's many-locks cycles/s | read-cache | redisync | vs floor many-locks cycles/s | higher
read-heavy cache: reads/s | read-cache | redisync | reads/s | higher
client heap per waiting task, bytes | waiter-memory | redisync | heap bytes per waiter | lower
rwlock read-heavy (64 readers + 1 writer): reads/s | rwlock-read-heavy | redisync | reads/s | higher
rwlock read-heavy: writer wait p50, ms | rwlock-read-heavy | redisync | writer wait p50 ms | lower
semaphore, 32 tasks / 4 permits: acquisitions/s | semaphore | redisync | acquisitions/s | higher
latch: all 100 waiters returned after, ms | latch | redisync | all returned after, ms | lower
watchdog: requests per 100 locks per period | watchdog | redisync | requests per 100 locks per period | lower
{op}: commands in Redis | primitive-ops | {op} | commands/cycle | lower
{op}: requests | primitive-ops | {op} | requests/cycle | lower
{op}: Redis keys added per 1k cycles | primitive-ops | {op} | Redis keys + per 1k cycles | lower
{op}: p50 µs | primitive-ops | {op} | p50 µs | lower";

fn headlines() -> Vec<Headline> {
    let mut list = Vec::new();
    for line in HEADLINES.lines() {
        let fields: Vec<&str> = line.split(" | ").map(str::trim).collect();
        let [label, scenario, contender, figure, better] = fields[..] else {
            continue; // the unit test below keeps every line well-formed
        };
        let better = if better == "higher" {
            Better::Higher
        } else {
            Better::Lower
        };
        let ops: Vec<String> = if line.contains("{op}") {
            crate::primitives::Op::ALL
                .iter()
                .map(|op| op.name())
                .collect()
        } else {
            vec![String::new()]
        };
        for op in ops {
            list.push(Headline {
                label: label.replace("{op}", &op),
                scenario: scenario.to_owned(),
                contender: contender.replace("{op}", &op),
                figure: figure.to_owned(),
                better,
            });
        }
    }
    list
}

/// The median of a figure in an older run's JSON.
fn old_value(old: &Value, h: &Headline) -> Option<f64> {
    old.get("scenarios")?
        .as_array()?
        .iter()
        .find(|s| s.get("id").and_then(Value::as_str) == Some(h.scenario.as_str()))?
        .get("results")?
        .as_array()?
        .iter()
        .find(|r| r.get("contender").and_then(Value::as_str) == Some(h.contender.as_str()))?
        .get("figures")?
        .get(&h.figure)?
        .get("median")?
        .as_f64()
}

fn new_value(scenarios: &[Scenario], h: &Headline) -> Option<f64> {
    scenarios
        .iter()
        .find(|s| s.id == h.scenario)?
        .get(&h.contender)?
        .get(&h.figure)
}

/// The change from `before` to `after`: `-53% (better)`.
fn change(before: f64, after: f64, better: Better) -> String {
    if before == 0.0 {
        return if after == 0.0 {
            "same".to_owned()
        } else {
            "new".to_owned()
        };
    }
    let pct = (after - before) / before.abs() * 100.0;
    if pct.abs() < 0.5 {
        return "same".to_owned();
    }
    let good = match better {
        Better::Lower => pct < 0.0,
        Better::Higher => pct > 0.0,
    };
    let sign = if pct > 0.0 { "+" } else { "−" };
    format!(
        "{sign}{:.0}% ({})",
        pct.abs(),
        if good { "better" } else { "worse" }
    )
}

/// The before/after table as markdown, and the same rows as JSON.
pub fn compare(old: &Value, old_path: &str, scenarios: &[Scenario]) -> (String, Value) {
    let mut md = format!(
        "### Before / after\n\nBefore: `{old_path}`; after: this run. Each figure is the median \
         over its run's rounds; ratios (×) were taken within each run.\n\n\
         | figure | before | after | change |\n|---|---:|---:|---|\n"
    );
    let mut rows = Vec::new();
    for h in headlines() {
        let before = old_value(old, &h);
        let after = new_value(scenarios, &h);
        if before.is_none() && after.is_none() {
            continue;
        }
        let cell = |v: Option<f64>| v.map_or("–".to_owned(), format_value);
        let delta = match (before, after) {
            (Some(b), Some(a)) => change(b, a, h.better),
            _ => "–".to_owned(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            h.label,
            cell(before),
            cell(after),
            delta
        );
        rows.push(json!({
            "figure": h.label, "scenario": h.scenario, "contender": h.contender,
            "name": h.figure, "before": before, "after": after, "change": delta,
            "better": match h.better { Better::Lower => "lower", Better::Higher => "higher" },
        }));
    }
    (md, json!({"before": old_path, "rows": rows}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_headline_line_is_well_formed() {
        for line in HEADLINES.lines() {
            let fields: Vec<&str> = line.split(" | ").collect();
            assert_eq!(fields.len(), 5, "{line}");
            assert!(matches!(fields[4], "lower" | "higher"), "{line}");
        }
        let ops = crate::primitives::Op::ALL.len();
        assert_eq!(headlines().len(), 31 + 4 * ops);
    }

    #[test]
    fn change_says_which_way_is_better() {
        assert_eq!(change(15.0, 7.0, Better::Lower), "−53% (better)");
        assert_eq!(change(100.0, 120.0, Better::Higher), "+20% (better)");
        assert_eq!(change(100.0, 120.0, Better::Lower), "+20% (worse)");
        assert_eq!(change(100.0, 100.2, Better::Lower), "same");
        assert_eq!(change(0.0, 3.0, Better::Lower), "new");
    }

    #[test]
    fn finds_the_old_figure_by_scenario_contender_and_name() {
        let old = json!({"scenarios": [{"id": "contended", "results": [
            {"contender": "redisync", "figures": {"scripts/acquisition": {"median": 6.0, "rounds": [6.0]}}}
        ]}]});
        let h = headlines()
            .into_iter()
            .find(|h| h.figure == "scripts/acquisition" && h.contender == "redisync")
            .expect("headline");
        assert_eq!(old_value(&old, &h), Some(6.0));
        let mut s = Scenario::new("contended", "2", "");
        s.figures("redisync").add("scripts/acquisition", 2.5);
        let (md, rows) = compare(&old, "old.json", &[s]);
        assert!(
            md.contains("| contended: scripts per acquisition | 6 | 2.50 | −58% (better) |"),
            "{md}"
        );
        assert_eq!(rows["rows"][0]["before"], json!(6.0));
    }
}
