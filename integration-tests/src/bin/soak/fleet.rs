//! The worker processes: started as `soak worker ...` (the soak binary itself), paused,
//! resumed, killed and started again, and the record of what was done to them and when, which
//! the checker reads to tell an overlap a pause explains from one nothing explains.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::events::now_us;

/// The file in the log directory that lists the workers' suspensions.
const PAUSES_LOG: &str = "pauses.log";

/// A worker was suspended (`SIGSTOP`) from `from` to `to` (µs stamps; `to` is the `SIGCONT`, or
/// the `SIGKILL` of a worker killed while suspended).
#[derive(Debug, Clone, Copy)]
pub struct Pause {
    /// The worker.
    pub worker: u32,
    /// Stamped before the signal was sent.
    pub from: u64,
    /// Stamped after the resuming (or killing) signal was delivered.
    pub to: u64,
}

/// A worker process that exited without being told to, or was killed by the nemesis.
#[derive(Debug, Clone)]
pub struct Ended {
    /// The worker.
    pub worker: u32,
    /// Which of its processes.
    pub incarnation: u32,
    /// How it ended.
    pub status: String,
    /// The end of what it wrote to its standard error.
    pub stderr_tail: String,
}

/// What was done to the workers.
#[derive(Debug, Default)]
pub struct FaultRecord {
    /// Every suspension.
    pub pauses: Vec<Pause>,
    /// Workers that died on their own (a panic, an error exit): each one is a finding.
    pub crashes: Vec<Ended>,
}

impl FaultRecord {
    /// Notes a suspension, in memory and in `pauses.log` in `dir` (so that the logs can be
    /// checked again later with `soak check`).
    fn add_pause(&mut self, dir: &Path, pause: Pause) {
        self.pauses.push(pause);
        let line = format!("{} {} {}\n", pause.worker, pause.from, pause.to);
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(PAUSES_LOG))
            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("soak: cannot note a pause in {PAUSES_LOG}: {e}");
        }
    }

    /// Reads the suspensions noted in `dir`.
    pub fn read(dir: &Path) -> std::io::Result<FaultRecord> {
        let text = match std::fs::read_to_string(dir.join(PAUSES_LOG)) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let pauses = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ').map(str::parse::<u64>);
                let (Some(Ok(worker)), Some(Ok(from)), Some(Ok(to))) =
                    (fields.next(), fields.next(), fields.next())
                else {
                    return None;
                };
                Some(Pause {
                    worker: worker as u32,
                    from,
                    to,
                })
            })
            .collect();
        Ok(FaultRecord {
            pauses,
            crashes: Vec::new(),
        })
    }

    /// Whether `worker` was suspended at some time within `from..=to`.
    pub fn paused_within(&self, worker: u32, from: u64, to: u64) -> bool {
        self.pauses
            .iter()
            .any(|p| p.worker == worker && p.from <= to && p.to >= from)
    }
}

/// How workers are started.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The soak binary.
    pub bin: PathBuf,
    /// Where the event logs go.
    pub dir: PathBuf,
    /// The register's URL.
    pub register: String,
    /// Lease of every hold.
    pub lease: Duration,
    /// The clients' command timeout.
    pub command_timeout: Duration,
    /// Seed the workers' seeds derive from.
    pub seed: u64,
}

/// One worker's place in the fleet.
struct Slot {
    id: u32,
    incarnation: u32,
    url: String,
    cheat: bool,
    child: Child,
    paused_since: Option<u64>,
}

/// The worker processes.
pub struct Fleet {
    config: FleetConfig,
    slots: Vec<Slot>,
    /// What was done to them.
    pub record: FaultRecord,
}

impl Fleet {
    /// Starts one worker per URL (each URL its own chaos proxy), and a cheating one on the last
    /// URL if `cheat`.
    pub fn start(config: FleetConfig, urls: &[String], cheat: bool) -> std::io::Result<Fleet> {
        let mut fleet = Fleet {
            config,
            slots: Vec::new(),
            record: FaultRecord::default(),
        };
        let mut workers: Vec<(String, bool)> = urls.iter().map(|u| (u.clone(), false)).collect();
        if cheat {
            workers.push((urls.last().cloned().unwrap_or_default(), true));
        }
        for (id, (url, cheat)) in workers.into_iter().enumerate() {
            let id = id as u32;
            let child = fleet.spawn(id, 0, &url, cheat)?;
            fleet.slots.push(Slot {
                id,
                incarnation: 0,
                url,
                cheat,
                child,
                paused_since: None,
            });
        }
        Ok(fleet)
    }

    /// The event log of a worker process.
    pub fn log_path(dir: &Path, id: u32, incarnation: u32) -> PathBuf {
        dir.join(format!("w{id}-{incarnation}.log"))
    }

    fn spawn(&self, id: u32, incarnation: u32, url: &str, cheat: bool) -> std::io::Result<Child> {
        let c = &self.config;
        let stderr = std::fs::File::create(c.dir.join(format!("w{id}-{incarnation}.err")))?;
        let seed = c.seed ^ (u64::from(id) << 32) ^ u64::from(incarnation).wrapping_mul(7919);
        let mut command = Command::new(&c.bin);
        command
            .arg("worker")
            .args(["--id", &id.to_string()])
            .args(["--incarnation", &incarnation.to_string()])
            .args(["--url", url])
            .args(["--register", &c.register])
            .arg("--log")
            .arg(Fleet::log_path(&c.dir, id, incarnation))
            .args(["--lease-ms", &c.lease.as_millis().to_string()])
            .args([
                "--command-timeout-ms",
                &c.command_timeout.as_millis().to_string(),
            ])
            .args(["--seed", &seed.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr);
        if cheat {
            command.arg("--cheat");
        }
        command.spawn()
    }

    /// The honest workers' ids (the nemesis leaves the cheat alone: a pause would excuse it).
    pub fn honest(&self) -> Vec<u32> {
        self.slots
            .iter()
            .filter(|s| !s.cheat)
            .map(|s| s.id)
            .collect()
    }

    fn slot(&mut self, id: u32) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.id == id)
    }

    /// Suspends worker `id` (`SIGSTOP`).
    pub fn pause(&mut self, id: u32) {
        if let Some(slot) = self.slot(id) {
            if slot.paused_since.is_none() {
                let from = now_us();
                if signal(slot.child.id(), "STOP") {
                    slot.paused_since = Some(from);
                }
            }
        }
    }

    /// Resumes worker `id` (`SIGCONT`) if it is suspended.
    pub fn resume(&mut self, id: u32) {
        let Some(slot) = self.slot(id) else { return };
        let Some(from) = slot.paused_since.take() else {
            return;
        };
        signal(slot.child.id(), "CONT");
        let to = now_us();
        let pause = Pause {
            worker: id,
            from,
            to,
        };
        self.record.add_pause(&self.config.dir, pause);
    }

    /// Resumes every suspended worker.
    pub fn resume_all(&mut self) {
        for id in self.slots.iter().map(|s| s.id).collect::<Vec<_>>() {
            self.resume(id);
        }
    }

    /// The event log of worker `id`'s current process.
    pub fn current_log(&self, id: u32) -> Option<PathBuf> {
        let slot = self.slots.iter().find(|s| s.id == id)?;
        Some(Fleet::log_path(&self.config.dir, id, slot.incarnation))
    }

    /// Kills worker `id` (`SIGKILL`) and starts it again, as a new incarnation.
    pub fn kill_and_restart(&mut self, id: u32) -> std::io::Result<()> {
        let Some(slot) = self.slot(id) else {
            return Ok(());
        };
        let _ = slot.child.kill();
        let _ = slot.child.wait();
        let killed_at = now_us();
        if let Some(from) = slot.paused_since.take() {
            let pause = Pause {
                worker: id,
                from,
                to: killed_at,
            };
            self.record.add_pause(&self.config.dir, pause);
        }
        self.restart(id)
    }

    fn restart(&mut self, id: u32) -> std::io::Result<()> {
        let Some(index) = self.slots.iter().position(|s| s.id == id) else {
            return Ok(());
        };
        let incarnation = self.slots[index].incarnation + 1;
        let (url, cheat) = (self.slots[index].url.clone(), self.slots[index].cheat);
        let child = self.spawn(id, incarnation, &url, cheat)?;
        let slot = &mut self.slots[index];
        slot.child = child;
        slot.incarnation = incarnation;
        slot.paused_since = None;
        Ok(())
    }

    /// Notes and restarts every worker that exited without being told to.
    pub fn restart_crashed(&mut self) -> std::io::Result<()> {
        let mut crashed = Vec::new();
        for slot in &mut self.slots {
            if let Ok(Some(status)) = slot.child.try_wait() {
                crashed.push((slot.id, slot.incarnation, status));
            }
        }
        for (id, incarnation, status) in crashed {
            self.note_end(id, incarnation, status);
            self.restart(id)?;
        }
        Ok(())
    }

    fn note_end(&mut self, worker: u32, incarnation: u32, status: ExitStatus) {
        let stderr =
            std::fs::read_to_string(self.config.dir.join(format!("w{worker}-{incarnation}.err")))
                .unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        self.record.crashes.push(Ended {
            worker,
            incarnation,
            status: status.to_string(),
            stderr_tail: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
        });
    }

    /// Tells every worker to stop (closes its standard input) and waits up to `timeout` for
    /// them to exit. Returns the ones that did not (they are killed), and notes the ones that
    /// exited with a failure.
    pub async fn stop(&mut self, timeout: Duration) -> Vec<u32> {
        self.resume_all();
        for slot in &mut self.slots {
            slot.child.stdin = None;
        }
        let deadline = Instant::now() + timeout;
        let mut pending: Vec<usize> = (0..self.slots.len()).collect();
        while !pending.is_empty() && Instant::now() < deadline {
            let mut still = Vec::new();
            for index in pending {
                match self.slots[index].child.try_wait() {
                    Ok(Some(status)) if !status.success() => {
                        let (id, incarnation) =
                            (self.slots[index].id, self.slots[index].incarnation);
                        self.note_end(id, incarnation, status);
                    }
                    Ok(Some(_)) => {}
                    _ => still.push(index),
                }
            }
            pending = still;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        pending
            .into_iter()
            .map(|index| {
                let slot = &mut self.slots[index];
                let _ = slot.child.kill();
                let _ = slot.child.wait();
                slot.id
            })
            .collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if slot.paused_since.is_some() {
                signal(slot.child.id(), "CONT");
            }
            let _ = slot.child.kill();
            let _ = slot.child.wait();
        }
    }
}

/// Sends `SIG<name>` to `pid` with `kill`; whether it was delivered.
fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
