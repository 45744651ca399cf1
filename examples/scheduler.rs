//! One scheduler among several service instances. Three instances campaign in the election
//! "scheduler"; the leader runs a cron-style job every 100 ms, writing to a job log that
//! accepts a write only with a term at least as high as the highest it has seen. The leader is
//! then "killed" (its client shut down without resigning, as a crashed process leaves its
//! lease behind): another instance takes over once the lease runs out, with a greater term.
//! The old leader's late write, carrying its stale term, is refused. An observer prints every
//! change of leader as it happens.
//!
//! `cargo run -p redisync --example scheduler` with `REDIS_URL` set, or
//! `scripts/demo.sh scheduler`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redisync::prelude::*;

/// The lease of each instance: a crashed leader is replaced within it.
const LEASE: Duration = Duration::from_millis(600);
const TICK: Duration = Duration::from_millis(100);

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The job's output: refuses a write whose term is older than the newest it has seen.
#[derive(Debug, Default)]
struct JobLog {
    highest_term: u64,
    runs: Vec<(u64, String)>,
    refused: Vec<(u64, String)>,
}

impl JobLog {
    fn write(&mut self, term: u64, who: &str) -> bool {
        if term < self.highest_term {
            self.refused.push((term, who.to_owned()));
            return false;
        }
        self.highest_term = term;
        self.runs.push((term, who.to_owned()));
        true
    }
}

/// One service instance: campaigns, runs the job while it leads, and campaigns again when it
/// loses (until its client is shut down).
async fn instance(client: Client, who: String, log: Arc<Mutex<JobLog>>, start: Instant) {
    let election = client.leader_election("scheduler");
    while let Ok(leadership) = election.campaign(who.as_str()).await {
        let term = leadership.term();
        let lost = leadership.lost();
        tokio::pin!(lost);
        loop {
            tokio::select! {
                () = &mut lost => break,
                () = tokio::time::sleep(TICK) => {
                    // The job: a fenced write.
                    log.lock().unwrap().write(term, &who);
                }
            }
        }
        if client.is_shut_down() {
            // This instance was "killed". A crashed process never resigns: forgetting the
            // leadership (with the client's watchdog stopped) leaves its lease in Redis to run
            // out, where dropping it would resign at once.
            std::mem::forget(leadership);
            return;
        }
        println!(
            "+{:>5} ms {who}: lost the leadership of term {term}",
            start.elapsed().as_millis()
        );
    }
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let connect = || {
        Client::builder(url.as_str())
            .key_prefix("redisync-demo")
            .watchdog_timeout(LEASE)
            .build()
    };
    let start = Instant::now();
    let log = Arc::new(Mutex::new(JobLog::default()));

    let observer_client = connect().await?;
    let mut changes = Box::pin(observer_client.leader_election("scheduler").observe());
    let observer = tokio::spawn(async move {
        while let Some(Ok(leader)) = changes.next().await {
            match leader {
                Some(leader) => println!(
                    "+{:>5} ms observer: {} leads, term {}",
                    start.elapsed().as_millis(),
                    leader.value,
                    leader.term
                ),
                None => println!(
                    "+{:>5} ms observer: nobody leads",
                    start.elapsed().as_millis()
                ),
            }
        }
    });

    let mut clients = Vec::new();
    for who in ["instance-a", "instance-b", "instance-c"] {
        let client = connect().await?;
        clients.push((who, client.clone()));
        tokio::spawn(instance(client, who.to_owned(), log.clone(), start));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;

    // Kill the leader: find it, and stop its client without resigning, so that its lease is
    // left to run out, as a crashed process would leave it.
    let leader = observer_client
        .leader_election("scheduler")
        .leader()
        .await?
        .ok_or("somebody leads")?;
    let (who, victim) = clients
        .iter()
        .find(|(who, _)| *who == leader.value)
        .cloned()
        .ok_or("the leader is one of the instances")?;
    println!(
        "+{:>5} ms killing {who} (term {}): its lease of {LEASE:?} runs out by itself",
        start.elapsed().as_millis(),
        leader.term
    );
    let killed_at = Instant::now();
    victim.shutdown().await;
    // Wait for a successor.
    let successor = loop {
        let now = observer_client
            .leader_election("scheduler")
            .leader()
            .await?;
        if let Some(now) = now.filter(|now| now.term > leader.term) {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "+{:>5} ms {} took over with term {} after {:?}",
        start.elapsed().as_millis(),
        successor.value,
        successor.term,
        killed_at.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The killed leader's job, still running somewhere when it was cut off, writes late.
    let accepted = log.lock().unwrap().write(leader.term, who);
    println!(
        "+{:>5} ms {who}'s late write with term {}: {}",
        start.elapsed().as_millis(),
        leader.term,
        if accepted {
            "ACCEPTED (bug)"
        } else {
            "refused"
        }
    );

    for (_, client) in &clients {
        client.shutdown().await;
    }
    observer_client.shutdown().await;
    let _ = observer.await;
    let log = log.lock().unwrap();
    let terms: Vec<u64> = log.runs.iter().map(|(term, _)| *term).collect();
    println!(
        "job runs: {} (terms {:?} .. {:?}), refused stale writes: {:?}",
        log.runs.len(),
        terms.first(),
        terms.last(),
        log.refused
    );
    if accepted || !terms.windows(2).all(|w| w[0] <= w[1]) {
        return Err("a stale leader's write was accepted".into());
    }
    Ok(())
}
