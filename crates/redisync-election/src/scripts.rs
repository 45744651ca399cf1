//! The election's scripts and the decoding of their replies, side by side.

use std::time::Duration;

use redisync_core::toolkit::{Error, Result};

redisync_core::toolkit::lua_script! {
    /// Becomes the leader, or registers the client as waiting
    /// (`lua/election_campaign.lua`).
    pub(crate) struct Campaign = new "election_campaign" for "election"
        after ["publish_prelude", "wake_prelude", "election_prelude"] {
        keys { leader, term, attempt_record, waiters }
        args {
            attempt: &'a str,
            value: &'a str,
            lease_ms: u64,
            channel: &'a str,
            registration_ms: u64,
            on_grant: &'a str,
            changes: &'a str,
        }
    }
}

redisync_core::toolkit::lua_script! {
    /// Gives up one attempt's leadership and wakes the next campaigner
    /// (`lua/election_resign.lua`).
    pub(crate) struct Resign = new "election_resign" for "election"
        after ["publish_prelude", "wake_prelude", "election_prelude"] {
        keys { leader, attempt_record, waiters }
        args { attempt: &'a str, remember_ms: u64, changes: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Changes the leader's value, keeping its term (`lua/election_proclaim.lua`).
    pub(crate) struct Proclaim = new "election_proclaim" for "election"
        after ["publish_prelude", "election_prelude"] {
        keys { leader }
        args { attempt: &'a str, term: u64, value: &'a str, changes: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Takes a client out of the election's waiters (`lua/election_withdraw.lua`).
    pub(crate) struct Withdraw = new "election_withdraw" for "election"
        after ["publish_prelude", "wake_prelude", "election_prelude"] {
        keys { leader, waiters }
        args { channel: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// Who leads; reads only (`lua/election_leader.lua`).
    pub(crate) struct Leader = read_only "election_leader" for "election"
        after ["election_prelude"] {
        keys { leader }
        args {}
    }
}

redisync_core::toolkit::lua_script! {
    /// Removes the leader whoever it is (`lua/election_delete.lua`).
    pub(crate) struct Delete = new "election_delete" for "election"
        after ["publish_prelude", "wake_prelude", "election_prelude"] {
        keys { leader, waiters }
        args { changes: &'a str, lost_notices: &'a str }
    }
}

redisync_core::toolkit::lua_script! {
    /// The watchdog's batch renewal of leaderships (`lua/election_renew.lua`); one hold's
    /// part is a [`RenewedHold`].
    pub(crate) static RENEW = new "election_renew" for "election";
}

/// One leadership's part of a [`RENEW`] batch (the watchdog's convention: its keys, then its
/// arguments).
pub(crate) struct RenewedHold<'a> {
    pub(crate) leader: &'a str,
    pub(crate) attempt: &'a str,
    pub(crate) term: u64,
}

impl RenewedHold<'_> {
    /// The hold's keys: the leader hash.
    pub(crate) fn keys(&self) -> Vec<String> {
        vec![self.leader.to_owned()]
    }

    /// The hold's arguments: attempt id and term.
    pub(crate) fn args(&self) -> Vec<String> {
        vec![self.attempt.to_owned(), self.term.to_string()]
    }
}

/// Reply of `election_campaign`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CampaignReply {
    Won {
        term: u64,
    },
    Busy {
        pttl: Option<Duration>,
    },
    /// The attempt had been given back before Redis ran it.
    GivenBack,
}

impl CampaignReply {
    pub(crate) fn decode(reply: &[i64]) -> Result<Self> {
        match reply {
            [1, term] if *term > 0 => Ok(CampaignReply::Won { term: *term as u64 }),
            [0, pttl] => Ok(CampaignReply::Busy {
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            }),
            [-1] => Ok(CampaignReply::GivenBack),
            _ => Err(Error::WrongType),
        }
    }
}

/// Reply of `election_leader`: the value, term and remaining lease of the leader, if any.
pub(crate) fn decode_leader(reply: &[String]) -> Result<Option<(String, u64, Duration)>> {
    match reply {
        [] => Ok(None),
        [value, term, pttl] => {
            let term = term.parse::<u64>().map_err(|_| Error::WrongType)?;
            // Every leader hash redisync writes expires; -1 (no expiry) means foreign data.
            let pttl = pttl.parse::<u64>().map_err(|_| Error::WrongType)?;
            Ok(Some((value.clone(), term, Duration::from_millis(pttl))))
        }
        _ => Err(Error::WrongType),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode() {
        assert_eq!(
            CampaignReply::decode(&[1, 7]).ok(),
            Some(CampaignReply::Won { term: 7 })
        );
        assert_eq!(
            CampaignReply::decode(&[0, -1]).ok(),
            Some(CampaignReply::Busy { pttl: None })
        );
        assert_eq!(
            CampaignReply::decode(&[-1]).ok(),
            Some(CampaignReply::GivenBack)
        );
        assert!(CampaignReply::decode(&[1, 0]).is_err());
        assert!(decode_leader(&["v".into(), "3".into(), "-1".into()]).is_err());
        assert_eq!(
            decode_leader(&["v".into(), "3".into(), "250".into()]).ok(),
            Some(Some(("v".to_owned(), 3, Duration::from_millis(250))))
        );
    }
}
