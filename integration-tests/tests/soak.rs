//! The soak test, short: a run under faults must end with no violation and nothing stuck, and a
//! self-test run (with a worker that cheats) must be caught. The soak program itself is the
//! `soak` binary of this crate (`cargo run --release -p redisync-test-harness --bin soak`).

use std::process::{Command, Output};

/// The soak binary.
const SOAK: &str = env!("CARGO_BIN_EXE_soak");

fn soak(args: &[&str]) -> (Output, String) {
    let output = Command::new(SOAK)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {SOAK}: {e}"));
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{text}");
    (output, text)
}

/// The value of `field=` on the `SOAK RESULT` line.
fn figure(text: &str, field: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("SOAK RESULT"))
        .unwrap_or_else(|| panic!("no SOAK RESULT line in:\n{text}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{field}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field}= in {line:?}"))
}

#[test]
fn a_short_soak_under_faults_finds_no_violation_and_nothing_stuck() {
    let (output, text) = soak(&["--duration", "15s", "--workers", "3"]);
    assert_eq!(figure(&text, "violations"), 0, "{text}");
    assert_eq!(figure(&text, "stuck"), 0, "{text}");
    assert!(
        figure(&text, "faults") >= 3,
        "too few faults injected:\n{text}"
    );
    assert!(
        figure(&text, "acquisitions") >= 100,
        "too little done:\n{text}"
    );
    assert!(output.status.success(), "{text}");
}

#[test]
fn the_self_test_catches_the_cheating_worker() {
    let (output, text) = soak(&["--duration", "6s", "--workers", "2", "--self-test"]);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(figure(&text, "violations") > 0, "{text}");
    assert!(text.contains("SELF-TEST PASSED"), "{text}");
    // What was caught is the cheat, not an honest worker.
    let shown: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("VIOLATION"))
        .collect();
    assert!(!shown.is_empty(), "{text}");
    for line in shown {
        assert!(
            line.contains("(the cheat)"),
            "an honest worker was blamed: {line}"
        );
    }
}
