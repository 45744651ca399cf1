//! The stream behind [`LeaderElection::observe`](crate::LeaderElection::observe).

use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use redisync_core::toolkit::{ChannelState, Error, Result, Subscription, Toolkit, RECHECK};
use tokio::sync::watch;

use crate::election::{ElectionCore, Leader, OBSERVE_IDLE};

/// How long after a leader's lease would end an observer reads again: Redis expires the key
/// at that moment, not before.
const EXPIRY_MARGIN: Duration = Duration::from_millis(5);

/// One observer's state between items.
struct Observer {
    core: Arc<ElectionCore>,
    /// The change channel, subscribed on the first read and kept until the stream is dropped.
    subscription: Option<(Subscription, watch::Receiver<ChannelState>)>,
    /// The last item yielded (`None` before the first).
    last: Option<Option<Leader>>,
    /// How long to wait for a change before reading again; `None`: read at once.
    pause: Option<Duration>,
    done: bool,
}

pub(crate) fn observe(
    core: Arc<ElectionCore>,
) -> impl Stream<Item = Result<Option<Leader>>> + Send + 'static {
    let observer = Observer {
        core,
        subscription: None,
        last: None,
        pause: None,
        done: false,
    };
    futures_util::stream::unfold(observer, |mut observer| async move {
        let item = observer.next().await?;
        Some((item, observer))
    })
}

impl Observer {
    async fn next(&mut self) -> Option<Result<Option<Leader>>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(pause) = self.pause.take() {
                if let Err(err) = self.wait_for_change(pause).await {
                    return self.end(err);
                }
            }
            if let Err(err) = self.core.client.check_running() {
                return self.end(err);
            }
            let changes = match self.core.keys() {
                Ok(keys) => keys.changes.clone(),
                Err(err) => return self.end(err),
            };
            let client = self.core.client.clone();
            let (_, watcher) = self.subscription.get_or_insert_with(|| {
                let subscription = client.subscribe(&changes);
                let watcher = subscription.watcher();
                (subscription, watcher)
            });
            // Read only once subscribed: a change announced between the read and the
            // subscription would be missed. After a reconnect the hub confirms again, and the
            // read below covers what was announced while it was away.
            let confirmed = tokio::time::timeout(
                client.command_timeout(),
                watcher.wait_for(|state| state.subscribed),
            )
            .await
            .map(|state| state.map(|_| ()));
            match confirmed {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return self.end(Error::Shutdown),
                Err(_) => {
                    self.pause = Some(RECHECK);
                    return Some(Err(Error::Timeout));
                }
            }
            // Every announcement after this point moves the generation past it.
            if let Some((_, watcher)) = &mut self.subscription {
                watcher.borrow_and_update();
            }
            let read = self.core.read_leader().await;
            let current = match read {
                Ok(current) => current,
                Err(err) => {
                    self.pause = Some(RECHECK);
                    return Some(Err(err));
                }
            };
            // An expiry announces nothing: read again when the lease would end.
            self.pause = Some(
                current
                    .as_ref()
                    .map_or(OBSERVE_IDLE, |(_, _, left)| {
                        left.saturating_add(EXPIRY_MARGIN)
                    })
                    .min(OBSERVE_IDLE),
            );
            let leader = current.map(|(value, term, _)| Leader { value, term });
            if self.last.as_ref() != Some(&leader) {
                self.last = Some(leader.clone());
                return Some(Ok(leader));
            }
        }
    }

    /// Waits until a change is announced, the subscriber reconnected, or `pause` passed.
    async fn wait_for_change(&mut self, pause: Duration) -> Result<()> {
        let Some((_, watcher)) = &mut self.subscription else {
            return Ok(());
        };
        tokio::select! {
            changed = watcher.changed() => changed.map_err(|_| Error::Shutdown),
            () = tokio::time::sleep(pause) => Ok(()),
        }
    }

    fn end(&mut self, err: Error) -> Option<Result<Option<Leader>>> {
        self.done = true;
        self.subscription = None;
        Some(Err(err))
    }
}
