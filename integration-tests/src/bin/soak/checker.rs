//! The checker: reads every worker's event log after the run and reports what should never
//! happen.
//!
//! A hold's recorded span runs from its `enter` stamp (taken after the acquire returned) to its
//! last stamp (`exit`, or its last write if the process was killed). `is_lost()` is read after
//! each stamp, and a hold once lost stays lost, so a hold whose last reading was "not lost" was
//! valid for its whole span. Such spans of one resource must never overlap beyond its capacity.
//!
//! A hold is **explained** (may overlap) when its client knew it was lost, or its worker was
//! suspended at some point between its attempt and its last stamp: its lease may have run out
//! under it. A classic permit has no lease, so nothing explains an excess of them.
//!
//! Violations:
//!
//! * **overlap**: more unexplained holds of a resource at one instant than it allows;
//! * **token issued twice**: two holds of one lock with the same fencing token;
//! * **token went back**: a hold attempted after another hold ended got a token not above it;
//! * **valid holder fenced off**: the register refused the write of a hold that was not lost
//!   and not suspended (a newer token wrote while it was valid);
//! * **stale write accepted**: the register accepted a write whose token was below one it had
//!   accepted before the write was sent;
//! * **latch opened early**: a wait on a latch round returned before all its count-downs began.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::events::{read_log, Event, Resource};
use crate::fleet::FaultRecord;
use crate::worker::LATCH_COUNT;

/// A fenced write as recorded.
#[derive(Debug, Clone, Copy)]
struct WriteRecord {
    sent: u64,
    at: u64,
    token: u64,
    accepted: bool,
    lost: bool,
}

/// One attempt of one worker process that got its hold.
#[derive(Debug, Clone)]
struct Hold {
    worker: u32,
    incarnation: u32,
    seq: u64,
    res: Resource,
    tried: u64,
    entered: u64,
    end: u64,
    token: Option<u64>,
    lost_at_end: bool,
    writes: Vec<WriteRecord>,
    /// The first stamp of the run, for readable reports.
    origin: u64,
}

impl Hold {
    /// How the hold is named in reports; stamps in seconds since `origin`.
    fn label(&self, cheat: Option<u32>) -> String {
        let who = if Some(self.worker) == cheat {
            " (the cheat)"
        } else {
            ""
        };
        let token = self.token.map_or(String::new(), |t| format!(" token {t}"));
        let secs = |at: u64| at.saturating_sub(self.origin) as f64 / 1e6;
        format!(
            "w{}.{} #{}{}{} [{:.6}..{:.6} s]",
            self.worker,
            self.incarnation,
            self.seq,
            token,
            who,
            secs(self.entered),
            secs(self.end)
        )
    }
}

/// What the count-downs of one latch round did, as recorded.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundTally {
    /// Count-downs started.
    pub begun: u64,
    /// Count-downs that returned `Ok`.
    pub confirmed: u64,
}

/// The checker's findings and the run's figures.
#[derive(Debug, Default)]
pub struct Findings {
    /// Holds taken per resource (by honest workers).
    pub acquisitions: BTreeMap<Resource, u64>,
    /// Attempts per resource whose wait ran out.
    pub timeouts: u64,
    /// Attempts per resource that failed with an error.
    pub errors: u64,
    /// Releases that failed (`NotOwner` after a loss, or an outage).
    pub failed_releases: u64,
    /// Holds whose client learnt they were lost.
    pub lost_holds: u64,
    /// Holds explained by a loss or a suspension.
    pub explained_holds: u64,
    /// Instants at which more holds than allowed overlapped, all of them explained.
    pub explained_overlaps: u64,
    /// Fenced writes recorded as accepted and as refused.
    pub writes_accepted: u64,
    /// See `writes_accepted`.
    pub writes_refused: u64,
    /// Count-downs per latch round.
    pub rounds: BTreeMap<u64, RoundTally>,
    /// Waits that saw a latch round open.
    pub latch_opens: u64,
    /// Every violation, described.
    pub violations: Vec<String>,
}

/// Checks the logs in `dir` against `record`; `cheat` is the cheating worker's id, if any.
pub fn check(
    dir: &Path,
    record: &FaultRecord,
    permits: u64,
    cheat: Option<u32>,
) -> std::io::Result<Findings> {
    let mut findings = Findings::default();
    let mut holds = Vec::new();
    let mut opens = Vec::new();
    let mut begins: HashMap<u64, Vec<u64>> = HashMap::new();
    for (worker, incarnation, path) in log_files(dir)? {
        let events = read_log(&path)?;
        collect(
            worker,
            incarnation,
            &events,
            &mut holds,
            &mut findings,
            &mut opens,
            &mut begins,
            cheat,
        );
    }
    let origin = holds.iter().map(|h| h.tried).min().unwrap_or(0);
    holds.iter_mut().for_each(|h| h.origin = origin);
    for (round, stamps) in &begins {
        findings.rounds.entry(*round).or_default().begun = stamps.len() as u64;
    }
    let explained = |h: &Hold| {
        h.res.leased() && (h.lost_at_end || record.paused_within(h.worker, h.tried, h.end))
    };
    findings.lost_holds = holds.iter().filter(|h| h.lost_at_end).count() as u64;
    findings.explained_holds = holds.iter().filter(|h| explained(h)).count() as u64;

    for res in Resource::ALL {
        let of_res: Vec<&Hold> = holds.iter().filter(|h| h.res == res).collect();
        let capacity = res.capacity(permits);
        let unexplained: Vec<&Hold> = of_res.iter().copied().filter(|h| !explained(h)).collect();
        let all_episodes = overlaps(&of_res, capacity);
        let episodes = overlaps(&unexplained, capacity);
        findings.explained_overlaps += all_episodes.len().saturating_sub(episodes.len()) as u64;
        for group in episodes {
            let who: Vec<String> = group.iter().map(|h| h.label(cheat)).collect();
            findings.violations.push(format!(
                "overlap on {res}: {} holds at once (capacity {capacity}), none lost or \
                 suspended: {}",
                group.len(),
                who.join(", ")
            ));
        }
        if res.fenced() {
            check_tokens(&of_res, cheat, &mut findings.violations);
            check_writes(&of_res, record, cheat, &mut findings.violations);
        }
    }
    for (at, round) in opens {
        let begun = begins.get(&round).map_or(0, |stamps| {
            stamps.iter().filter(|s| **s < at).count() as u64
        });
        if begun < LATCH_COUNT {
            findings.violations.push(format!(
                "latch round {round} seen open {:.6} s into the run after only {begun} of its \
                 {LATCH_COUNT} count-downs began",
                at.saturating_sub(origin) as f64 / 1e6
            ));
        }
    }
    Ok(findings)
}

/// The event logs in `dir`: `(worker, incarnation, path)`.
fn log_files(dir: &Path) -> std::io::Result<Vec<(u32, u32, std::path::PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_prefix('w').and_then(|n| n.strip_suffix(".log")) else {
            continue;
        };
        let Some((worker, incarnation)) = stem.split_once('-') else {
            continue;
        };
        if let (Ok(worker), Ok(incarnation)) = (worker.parse(), incarnation.parse()) {
            files.push((worker, incarnation, path));
        }
    }
    files.sort();
    Ok(files)
}

/// Turns one process's events into holds and figures.
#[allow(clippy::too_many_arguments)]
fn collect(
    worker: u32,
    incarnation: u32,
    events: &[(u64, Event)],
    holds: &mut Vec<Hold>,
    findings: &mut Findings,
    opens: &mut Vec<(u64, u64)>,
    begins: &mut HashMap<u64, Vec<u64>>,
    cheat: Option<u32>,
) {
    let honest = Some(worker) != cheat;
    let mut tried: HashMap<u64, u64> = HashMap::new();
    let mut open: HashMap<u64, Hold> = HashMap::new();
    for (at, event) in events {
        let at = *at;
        match event {
            Event::Try { seq, .. } => {
                tried.insert(*seq, at);
            }
            Event::Enter {
                res,
                seq,
                token,
                lost,
            } => {
                if honest {
                    *findings.acquisitions.entry(*res).or_default() += 1;
                }
                open.insert(
                    *seq,
                    Hold {
                        worker,
                        incarnation,
                        seq: *seq,
                        res: *res,
                        tried: tried.get(seq).copied().unwrap_or(at),
                        entered: at,
                        end: at,
                        token: *token,
                        lost_at_end: *lost,
                        writes: Vec::new(),
                        origin: 0,
                    },
                );
            }
            Event::Write {
                seq,
                token,
                sent,
                accepted,
                lost,
                ..
            } => {
                if *accepted {
                    findings.writes_accepted += 1;
                } else {
                    findings.writes_refused += 1;
                }
                if let Some(hold) = open.get_mut(seq) {
                    hold.end = at;
                    hold.lost_at_end = *lost;
                    hold.writes.push(WriteRecord {
                        sent: *sent,
                        at,
                        token: *token,
                        accepted: *accepted,
                        lost: *lost,
                    });
                }
            }
            Event::Exit { seq, lost, .. } => {
                if let Some(mut hold) = open.remove(seq) {
                    hold.end = at;
                    hold.lost_at_end = *lost;
                    holds.push(hold);
                }
            }
            Event::Released { outcome, .. } => {
                if outcome != "ok" {
                    findings.failed_releases += 1;
                }
            }
            Event::Missed { outcome, .. } => {
                if outcome == "timeout" {
                    findings.timeouts += 1;
                } else {
                    findings.errors += 1;
                }
            }
            Event::CountDownBegin { round } => begins.entry(*round).or_default().push(at),
            Event::CountDownEnd { round, outcome } => {
                if outcome == "ok" {
                    findings.rounds.entry(*round).or_default().confirmed += 1;
                }
            }
            Event::LatchOpen { round } => {
                findings.latch_opens += 1;
                opens.push((at, *round));
            }
        }
    }
    // Holds of a killed process end at their last stamp.
    holds.extend(open.into_values());
}

/// The groups of holds that were more than `capacity` at once: one group per instant the count
/// went above it, with every hold active then.
fn overlaps<'h>(holds: &[&'h Hold], capacity: u64) -> Vec<Vec<&'h Hold>> {
    // Ends sort before starts at the same stamp: spans are half-open.
    let mut points: Vec<(u64, u8, usize)> = Vec::with_capacity(holds.len() * 2);
    for (i, h) in holds.iter().enumerate() {
        points.push((h.entered, 1, i));
        // A hold killed right after its `enter` has one stamp: a span of 1 µs, which ends
        // after it starts.
        points.push((h.end.max(h.entered + 1), 0, i));
    }
    points.sort_unstable();
    let mut active: Vec<usize> = Vec::new();
    let mut groups = Vec::new();
    for (_, kind, i) in points {
        if kind == 0 {
            active.retain(|a| *a != i);
        } else {
            active.push(i);
            if active.len() as u64 > capacity {
                groups.push(active.iter().map(|a| holds[*a]).collect());
            }
        }
    }
    groups
}

/// Tokens issued twice, and tokens that went back.
fn check_tokens(holds: &[&Hold], cheat: Option<u32>, violations: &mut Vec<String>) {
    let mut by_token: BTreeMap<u64, Vec<&Hold>> = BTreeMap::new();
    for h in holds {
        if let Some(token) = h.token {
            by_token.entry(token).or_default().push(h);
        }
    }
    for (token, same) in by_token {
        if same.len() > 1 {
            let who: Vec<String> = same.iter().map(|h| h.label(cheat)).collect();
            violations.push(format!(
                "token {token} of {} issued to {} holds: {}",
                same[0].res,
                same.len(),
                who.join(", ")
            ));
        }
    }
    // A hold attempted after another ended must get a higher token.
    let mut by_end: Vec<&Hold> = holds
        .iter()
        .copied()
        .filter(|h| h.token.is_some())
        .collect();
    by_end.sort_by_key(|h| h.end);
    let mut by_try = by_end.clone();
    by_try.sort_by_key(|h| h.tried);
    let mut ended = 0;
    let mut highest: Option<&Hold> = None;
    for later in by_try {
        while ended < by_end.len() && by_end[ended].end < later.tried {
            let h = by_end[ended];
            if highest.is_none_or(|best| h.token > best.token) {
                highest = Some(h);
            }
            ended += 1;
        }
        if let Some(earlier) = highest {
            if later.token <= earlier.token {
                violations.push(format!(
                    "token of {} went back: {} was attempted after {} ended",
                    later.res,
                    later.label(cheat),
                    earlier.label(cheat)
                ));
            }
        }
    }
}

/// Refused writes of valid holders, and accepted stale writes.
fn check_writes(
    holds: &[&Hold],
    record: &FaultRecord,
    cheat: Option<u32>,
    violations: &mut Vec<String>,
) {
    let mut writes: Vec<(&Hold, WriteRecord)> = Vec::new();
    for h in holds {
        for w in &h.writes {
            writes.push((h, *w));
            if !w.accepted && !w.lost && !record.paused_within(h.worker, h.tried, w.at) {
                violations.push(format!(
                    "the register refused token {} of a valid holder of {}: {}",
                    w.token,
                    h.res,
                    h.label(cheat)
                ));
            }
        }
    }
    let mut by_reply: Vec<(&Hold, WriteRecord)> =
        writes.iter().copied().filter(|(_, w)| w.accepted).collect();
    by_reply.sort_by_key(|(_, w)| w.at);
    let mut by_send = by_reply.clone();
    by_send.sort_by_key(|(_, w)| w.sent);
    let mut answered = 0;
    let mut highest: Option<(&Hold, WriteRecord)> = None;
    for (h, w) in by_send {
        while answered < by_reply.len() && by_reply[answered].1.at < w.sent {
            let candidate = by_reply[answered];
            if highest.is_none_or(|(_, best)| candidate.1.token > best.token) {
                highest = Some(candidate);
            }
            answered += 1;
        }
        if let Some((newer, nw)) = highest {
            if w.token < nw.token {
                violations.push(format!(
                    "the register accepted stale token {} of {} from {} after token {} from {}",
                    w.token,
                    h.res,
                    h.label(cheat),
                    nw.token,
                    newer.label(cheat)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventLog;
    use crate::fleet::Pause;

    /// Writes one worker process's log: `(stamp, event)` pairs.
    fn log(dir: &Path, worker: u32, incarnation: u32, events: &[(u64, Event)]) {
        let path = dir.join(format!("w{worker}-{incarnation}.log"));
        let mut log = EventLog::open(&path).unwrap();
        for (at, event) in events {
            log.record_at(*at, event);
        }
    }

    /// A complete hold of `res` from `from` to `to`, not lost.
    fn hold(res: Resource, seq: u64, token: Option<u64>, from: u64, to: u64) -> Vec<(u64, Event)> {
        vec![
            (from - 1, Event::Try { res, seq }),
            (
                from,
                Event::Enter {
                    res,
                    seq,
                    token,
                    lost: false,
                },
            ),
            (
                to,
                Event::Exit {
                    res,
                    seq,
                    lost: false,
                },
            ),
            (
                to + 1,
                Event::Released {
                    res,
                    seq,
                    outcome: "ok".into(),
                },
            ),
        ]
    }

    fn violations(dir: &Path, record: &FaultRecord, permits: u64) -> Vec<String> {
        check(dir, record, permits, None).unwrap().violations
    }

    fn suspended(worker: u32, from: u64, to: u64) -> FaultRecord {
        FaultRecord {
            pauses: vec![Pause { worker, from, to }],
            crashes: Vec::new(),
        }
    }

    #[test]
    fn two_valid_lock_holds_at_once_are_a_violation_unless_one_was_lost_or_suspended() {
        let dir = tempfile::tempdir().unwrap();
        log(
            dir.path(),
            0,
            0,
            &hold(Resource::Lock, 1, Some(1), 100, 200),
        );
        log(
            dir.path(),
            1,
            0,
            &hold(Resource::Lock, 1, Some(2), 150, 250),
        );
        let found = violations(dir.path(), &FaultRecord::default(), 2);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("overlap on lock"), "{found:?}");
        let none = Vec::<String>::new();
        assert_eq!(violations(dir.path(), &suspended(0, 120, 130), 2), none);

        let lost = tempfile::tempdir().unwrap();
        let mut first = hold(Resource::Lock, 1, Some(1), 100, 200);
        first[2].1 = Event::Exit {
            res: Resource::Lock,
            seq: 1,
            lost: true,
        };
        log(lost.path(), 0, 0, &first);
        log(
            lost.path(),
            1,
            0,
            &hold(Resource::Lock, 1, Some(2), 150, 250),
        );
        assert_eq!(violations(lost.path(), &FaultRecord::default(), 2), none);
    }

    #[test]
    fn a_suspension_does_not_excuse_an_extra_classic_permit() {
        let dir = tempfile::tempdir().unwrap();
        log(
            dir.path(),
            0,
            0,
            &hold(Resource::Semaphore, 1, None, 100, 200),
        );
        log(
            dir.path(),
            1,
            0,
            &hold(Resource::Semaphore, 1, None, 150, 250),
        );
        let record = suspended(0, 120, 130);
        assert_eq!(violations(dir.path(), &record, 2), Vec::<String>::new());
        assert_eq!(violations(dir.path(), &record, 1).len(), 1);
    }

    #[test]
    fn a_hold_killed_right_after_it_entered_ends_there() {
        // Killed after its `enter`: one stamp. Later, two holds fill a capacity of 2.
        let dir = tempfile::tempdir().unwrap();
        let killed = hold(Resource::Expirable, 1, None, 100, 200);
        log(dir.path(), 0, 0, &killed[..2]);
        log(
            dir.path(),
            1,
            0,
            &hold(Resource::Expirable, 1, None, 300, 400),
        );
        log(
            dir.path(),
            2,
            0,
            &hold(Resource::Expirable, 1, None, 350, 450),
        );
        assert_eq!(
            violations(dir.path(), &FaultRecord::default(), 2),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_token_handed_out_twice_or_going_back_is_a_violation() {
        let dir = tempfile::tempdir().unwrap();
        log(
            dir.path(),
            0,
            0,
            &hold(Resource::FairLock, 1, Some(5), 100, 200),
        );
        log(
            dir.path(),
            1,
            0,
            &hold(Resource::FairLock, 1, Some(5), 300, 400),
        );
        log(
            dir.path(),
            1,
            1,
            &hold(Resource::FairLock, 1, Some(4), 500, 600),
        );
        let found = violations(dir.path(), &FaultRecord::default(), 2);
        assert!(
            found
                .iter()
                .any(|v| v.starts_with("token 5 of fair-lock issued to 2")),
            "{found:?}"
        );
        // Both later holds were attempted after a hold with token 5 ended.
        let went_back = found.iter().filter(|v| v.contains("went back")).count();
        assert_eq!(went_back, 2, "{found:?}");
    }

    #[test]
    fn a_refused_write_of_a_valid_holder_is_a_violation() {
        let dir = tempfile::tempdir().unwrap();
        let mut events = hold(Resource::RwWrite, 1, Some(3), 100, 200);
        events.insert(
            2,
            (
                150,
                Event::Write {
                    res: Resource::RwWrite,
                    seq: 1,
                    token: 3,
                    sent: 140,
                    accepted: false,
                    lost: false,
                },
            ),
        );
        log(dir.path(), 0, 0, &events);
        let found = violations(dir.path(), &FaultRecord::default(), 2);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("refused token 3"), "{found:?}");
        assert_eq!(
            violations(dir.path(), &suspended(0, 110, 120), 2),
            Vec::<String>::new()
        );
    }
}
