//! Exit codes. A command run under a hold passes its own code through, so redisync's own
//! codes sit where commands rarely go, as `timeout(1)` and the shell do.

use redisync::Error;

/// Something else went wrong.
pub const FAILURE: i32 = 1;
/// Bad arguments: an unusable name, count or duration (clap's own errors use it too).
pub const USAGE: i32 = 2;
/// A key of the primitive holds foreign data (`sysexits` EX_DATAERR).
pub const WRONG_TYPE: i32 = 65;
/// The primitive does not exist (`inspect` of a name with nothing under it, a semaphore to
/// use or change without a number of permits, a rate limiter without a rate, a latch that is
/// not armed; `sysexits` EX_NOINPUT).
pub const NO_SUCH: i32 = 66;
/// The name is in use as another kind of primitive (`lock x` where `x` is a semaphore;
/// `sysexits` EX_CANTCREAT).
pub const KIND_CONFLICT: i32 = 73;
/// A latch to arm is armed already: try again once it opens (`sysexits` EX_TEMPFAIL).
pub const ALREADY_ARMED: i32 = 75;
/// Redis could not be reached, did not answer in time, or is older than redisync supports
/// (`sysexits` EX_UNAVAILABLE).
pub const UNAVAILABLE: i32 = 69;
/// The hold (lock, permit or leadership) was lost while the command ran, and the command was
/// stopped.
pub const HOLD_LOST: i32 = 120;
/// The wait (`--wait`) ran out.
pub const TIMED_OUT: i32 = 124;
/// An existing primitive disagrees with what the command line says it is (`semaphore
/// --permits` against another number of permits; `sysexits` EX_CONFIG).
pub const CONFLICT: i32 = 78;
/// The command could not be run.
pub const CANNOT_EXECUTE: i32 = 126;
/// The command was not found.
pub const NOT_FOUND: i32 = 127;

/// The exit code for a redisync error.
pub fn of(err: &Error) -> i32 {
    match err {
        Error::InvalidArgument(_) => USAGE,
        Error::WrongType => WRONG_TYPE,
        Error::Redis(_) | Error::Timeout | Error::Shutdown | Error::UnsupportedServer { .. } => {
            UNAVAILABLE
        }
        _ => FAILURE,
    }
}

/// The exit codes, for `--help`.
pub const HELP: &str = "\
Exit codes:
  N      the command's own exit code (128+N when a signal N killed it)
  2      bad arguments (for `rate`: also more --units than the rate's burst + 1)
  65     a key of the primitive holds foreign data
  66     no such primitive: `inspect` found nothing under the name; `semaphore` without
         --permits, or `semaphore-set --add`, on a semaphore that does not exist; `rate`
         without --rate on a limiter with no rate; `latch wait` on a latch not armed (never
         set, or opened more than five minutes ago)
  69     Redis unreachable, too slow (the command timeout), or older than 7.0
  73     the name is in use as another kind of primitive (one name, one kind)
  75     `latch set` found the latch armed already
  78     `semaphore --permits N` found the semaphore with another number of permits,
         `semaphore-set --classic NAME N` found it existing (change it with --add), or
         `rate --rate` a limiter with another rate
  120    the lock, permit or leadership was lost while the command ran; the command was stopped
  124    the wait ran out (--wait) (for `rate`: no units within --wait)
  126    the command could not be run
  127    the command was not found

redisync's own codes always come with a `redisync: ...` line on stderr; the command's own
codes pass through without one. So a command's own 124 (say, from `timeout`) is told from a
--wait that ran out by that line (or by --verbose, which reports when the hold was got).";
