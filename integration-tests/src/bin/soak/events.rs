//! What a worker records, one line per event, in a log file of its own: the resources under
//! test, the event lines and the clock they are stamped with.
//!
//! Every time stamp is the wall clock in microseconds since the Unix epoch, read in the process
//! that records the event. All processes run on one machine, so their stamps are on one clock:
//! an event that caused another is stamped no later than it. The checker compares stamps of
//! different workers only in that way.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A resource the workers take turns holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// A `ReentrantLock`: one holder, fenced.
    Lock,
    /// A `FairLock`: one holder, fenced.
    FairLock,
    /// The write side of a `ReadWriteLock`: one holder, fenced.
    RwWrite,
    /// A classic `Semaphore`: `permits` holders, no lease, no token.
    Semaphore,
    /// An `ExpirableSemaphore`: `permits` holders, leased, no token.
    Expirable,
}

impl Resource {
    /// Every resource, in report order.
    pub const ALL: [Resource; 5] = [
        Resource::Lock,
        Resource::FairLock,
        Resource::RwWrite,
        Resource::Semaphore,
        Resource::Expirable,
    ];

    /// The primitive's name in Redis, and the word in logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Lock => "lock",
            Resource::FairLock => "fair-lock",
            Resource::RwWrite => "rw-write",
            Resource::Semaphore => "semaphore",
            Resource::Expirable => "expirable",
        }
    }

    /// The resource named `name`.
    pub fn parse(name: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Whether holds carry a fencing token that the register checks.
    pub fn fenced(self) -> bool {
        matches!(
            self,
            Resource::Lock | Resource::FairLock | Resource::RwWrite
        )
    }

    /// How many may hold at once.
    pub fn capacity(self, permits: u64) -> u64 {
        if self.fenced() {
            1
        } else {
            permits
        }
    }

    /// Whether a hold can end without its holder's say (a lease): a pause or a loss then
    /// explains an overlap. A classic permit has no lease, so nothing explains one.
    pub fn leased(self) -> bool {
        self != Resource::Semaphore
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One line of a worker's log. `seq` numbers the attempts of one worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An attempt to acquire starts.
    Try { res: Resource, seq: u64 },
    /// The attempt got the hold. `lost`: `is_lost()` read after the stamp.
    Enter {
        res: Resource,
        seq: u64,
        token: Option<u64>,
        lost: bool,
    },
    /// A fenced write to the register, sent at `sent` (the line's stamp is its reply).
    /// `lost`: `is_lost()` read after the reply.
    Write {
        res: Resource,
        seq: u64,
        token: u64,
        sent: u64,
        accepted: bool,
        lost: bool,
    },
    /// The holder is done with the resource; `lost` read after the stamp. Its release follows.
    Exit { res: Resource, seq: u64, lost: bool },
    /// The release returned (`ok`, or the error's kind).
    Released {
        res: Resource,
        seq: u64,
        outcome: String,
    },
    /// The attempt ended without a hold: `timeout` (the wait ran out) or the error's kind.
    Missed {
        res: Resource,
        seq: u64,
        outcome: String,
    },
    /// A latch count-down of `round` starts.
    CountDownBegin { round: u64 },
    /// The count-down returned `outcome` (`ok`, or the error's kind).
    CountDownEnd { round: u64, outcome: String },
    /// A wait on the latch of `round` returned: the latch is open.
    LatchOpen { round: u64 },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = |b: bool| u8::from(b);
        match self {
            Event::Try { res, seq } => write!(f, "try {res} {seq}"),
            Event::Enter {
                res,
                seq,
                token,
                lost,
            } => {
                let token = token.map_or("-".to_owned(), |t| t.to_string());
                write!(f, "enter {res} {seq} {token} {}", flag(*lost))
            }
            Event::Write {
                res,
                seq,
                token,
                sent,
                accepted,
                lost,
            } => write!(
                f,
                "write {res} {seq} {token} {sent} {} {}",
                flag(*accepted),
                flag(*lost)
            ),
            Event::Exit { res, seq, lost } => write!(f, "exit {res} {seq} {}", flag(*lost)),
            Event::Released { res, seq, outcome } => write!(f, "released {res} {seq} {outcome}"),
            Event::Missed { res, seq, outcome } => write!(f, "missed {res} {seq} {outcome}"),
            Event::CountDownBegin { round } => write!(f, "cd-begin {round}"),
            Event::CountDownEnd { round, outcome } => write!(f, "cd-end {round} {outcome}"),
            Event::LatchOpen { round } => write!(f, "latch-open {round}"),
        }
    }
}

impl Event {
    /// Parses what [`Display`](fmt::Display) wrote.
    pub fn parse(text: &str) -> Option<Event> {
        let fields: Vec<&str> = text.split(' ').collect();
        let num = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        let res = || fields.get(1).and_then(|f| Resource::parse(f));
        let flag = |i: usize| fields.get(i).map(|f| *f == "1");
        let word = |i: usize| fields.get(i).map(|f| (*f).to_owned());
        Some(match *fields.first()? {
            "try" => Event::Try {
                res: res()?,
                seq: num(2)?,
            },
            "enter" => Event::Enter {
                res: res()?,
                seq: num(2)?,
                token: num(3),
                lost: flag(4)?,
            },
            "write" => Event::Write {
                res: res()?,
                seq: num(2)?,
                token: num(3)?,
                sent: num(4)?,
                accepted: flag(5)?,
                lost: flag(6)?,
            },
            "exit" => Event::Exit {
                res: res()?,
                seq: num(2)?,
                lost: flag(3)?,
            },
            "released" => Event::Released {
                res: res()?,
                seq: num(2)?,
                outcome: word(3)?,
            },
            "missed" => Event::Missed {
                res: res()?,
                seq: num(2)?,
                outcome: word(3)?,
            },
            "cd-begin" => Event::CountDownBegin { round: num(1)? },
            "cd-end" => Event::CountDownEnd {
                round: num(1)?,
                outcome: word(2)?,
            },
            "latch-open" => Event::LatchOpen { round: num(1)? },
            _ => return None,
        })
    }
}

/// A worker's log: each event is one `write` of one line, straight to the file, so that what
/// was recorded before a `SIGKILL` is on disk.
pub struct EventLog {
    file: File,
}

impl EventLog {
    /// Creates (or appends to) the log at `path`.
    pub fn open(path: &Path) -> std::io::Result<EventLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventLog { file })
    }

    /// Records `event` stamped `at`.
    pub fn record_at(&mut self, at: u64, event: &Event) {
        // A log that cannot be written makes the whole run meaningless: say so loudly.
        if let Err(e) = self.file.write_all(format!("{at} {event}\n").as_bytes()) {
            eprintln!("soak worker: cannot write its event log: {e}");
            std::process::exit(2);
        }
    }

    /// Records `event` stamped now.
    pub fn record(&mut self, event: &Event) {
        self.record_at(now_us(), event);
    }
}

/// Reads a log written by [`EventLog`]: its stamped events, in order. A torn last line (the
/// process was killed while writing it) is skipped.
pub fn read_log(path: &Path) -> std::io::Result<Vec<(u64, Event)>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (at, rest) = line.split_once(' ')?;
            Some((at.parse().ok()?, Event::parse(rest)?))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_reads_back_as_written() {
        let events = [
            Event::Try {
                res: Resource::Lock,
                seq: 1,
            },
            Event::Enter {
                res: Resource::Expirable,
                seq: 2,
                token: None,
                lost: true,
            },
            Event::Enter {
                res: Resource::FairLock,
                seq: 3,
                token: Some(42),
                lost: false,
            },
            Event::Write {
                res: Resource::RwWrite,
                seq: 4,
                token: 7,
                sent: 123,
                accepted: true,
                lost: false,
            },
            Event::Exit {
                res: Resource::Semaphore,
                seq: 5,
                lost: false,
            },
            Event::Released {
                res: Resource::Lock,
                seq: 6,
                outcome: "not-owner".into(),
            },
            Event::Missed {
                res: Resource::Lock,
                seq: 7,
                outcome: "timeout".into(),
            },
            Event::CountDownBegin { round: 3 },
            Event::CountDownEnd {
                round: 3,
                outcome: "ok".into(),
            },
            Event::LatchOpen { round: 3 },
        ];
        for event in events {
            assert_eq!(Event::parse(&event.to_string()), Some(event));
        }
    }
}
