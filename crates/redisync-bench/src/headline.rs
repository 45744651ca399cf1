//! The headline table: for the floors, redisync and every peer, the figures a reader compares
//! first, each beside its ratio to the floor of the same round, taken from the full tables of
//! the same run.

use std::fmt::Write;

use crate::lockers::Contender;
use crate::report::{format_value, Scenario};

/// A column: a figure of one scenario, and the ratio shown beside it in brackets.
struct Column {
    title: &'static str,
    scenario: &'static str,
    figure: &'static str,
    ratio: Option<&'static str>,
}

const COLUMNS: [Column; 5] = [
    Column {
        title: "uncontended lock + unlock: p50 µs (× floor)",
        scenario: "uncontended",
        figure: "p50 µs",
        ratio: Some("p50 vs floor"),
    },
    Column {
        title: "many locks, 64 tasks: cycles/s (× floor)",
        scenario: "many-locks",
        figure: "acquisitions/s",
        ratio: Some("vs floor"),
    },
    Column {
        title: "contended, 16 tasks, 1 ms hold: acquisitions/s (× polling floor)",
        scenario: "contended",
        figure: "acquisitions/s",
        ratio: Some("vs polling floor"),
    },
    Column {
        title: "contended: per-task min/max (1 = fair)",
        scenario: "contended",
        figure: "min/max",
        ratio: None,
    },
    Column {
        title: "hand-off to one waiter: p50 µs (× pub/sub floor)",
        scenario: "handoff",
        figure: "handoff p50 µs",
        ratio: Some("p50 vs pub/sub floor"),
    },
];

/// The rows: the floors, redisync, then the peers.
const ROWS: [Contender; 13] = [
    Contender::Floor,
    Contender::PollingFloor,
    Contender::PubSubFloor,
    Contender::Redisync,
    Contender::RedisyncFair,
    Contender::RslockDefault,
    Contender::RslockBest,
    Contender::RedisLockDefault,
    Contender::RedisLockBest,
    Contender::DistributedLockRedis,
    Contender::RedisSemaphoreDefault,
    Contender::RedisSemaphoreBest,
    Contender::PythonRedisLock,
];

/// A floor has no part in the scenarios it is not the measure of: "·" there, where a lock
/// that was not measured shows "–".
fn is_floor(contender: Contender) -> bool {
    matches!(
        contender,
        Contender::Floor | Contender::PollingFloor | Contender::PubSubFloor
    )
}

fn cell(scenario: &Scenario, contender: Contender, column: &Column) -> String {
    let Some(figures) = scenario.get(contender.name()) else {
        return if is_floor(contender) { "·" } else { "–" }.to_owned();
    };
    let Some(value) = figures.get(column.figure) else {
        return "–".to_owned();
    };
    match column.ratio.and_then(|ratio| figures.get(ratio)) {
        Some(ratio) => format!("{} ({})", format_value(value), format_value(ratio)),
        None => format_value(value),
    }
}

/// The headline table as markdown, with the columns whose scenario ran; `None` if none did.
pub fn markdown(scenarios: &[Scenario]) -> Option<String> {
    let columns: Vec<(&Column, &Scenario)> = COLUMNS
        .iter()
        .filter_map(|c| {
            scenarios
                .iter()
                .find(|s| s.id == c.scenario)
                .map(|s| (c, s))
        })
        .collect();
    if columns.is_empty() {
        return None;
    }
    let mut out = "### Headline figures\n\nMedians over the rounds; each ratio is taken within \
                   a round. A `·` means the floor has no part in that scenario; a `–` means the \
                   contender was not measured there.\n\n"
        .to_owned();
    let titles: Vec<&str> = columns.iter().map(|(c, _)| c.title).collect();
    let _ = writeln!(out, "| contender | {} |", titles.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(columns.len()));
    for contender in ROWS {
        let cells: Vec<String> = columns
            .iter()
            .map(|(column, scenario)| cell(scenario, contender, column))
            .collect();
        let _ = writeln!(out, "| {} | {} |", contender.name(), cells.join(" | "));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_shows_each_figure_beside_its_ratio() {
        let mut uncontended = Scenario::new("uncontended", "1", "");
        for (contender, p50, ratio) in [
            (Contender::Floor, 130.0, 1.0),
            (Contender::Redisync, 160.0, 1.23),
        ] {
            let f = uncontended.figures(contender.name());
            f.add("p50 µs", p50);
            f.add("p50 vs floor", ratio);
        }
        // A peer that was skipped keeps an empty row.
        uncontended.figures(Contender::PythonRedisLock.name());
        let mut contended = Scenario::new("contended", "2", "");
        let f = contended.figures(Contender::Redisync.name());
        f.add("acquisitions/s", 700.0);
        f.add("min/max", 0.985);
        let table = markdown(&[uncontended, contended]).expect("table");
        assert!(
            table.contains("| floor (raw redis-rs) | 130 (1) | · | · |"),
            "{table}"
        );
        assert!(
            table.contains("| redisync | 160 (1.23) | 700 | 0.985 |"),
            "{table}"
        );
        assert!(
            table.contains("| python-redis-lock 4.0 (10 s lease) | – | – | – |"),
            "{table}"
        );
        // Scenarios that did not run have no column.
        assert!(!table.contains("many locks"), "{table}");
        assert!(markdown(&[]).is_none());
    }
}
