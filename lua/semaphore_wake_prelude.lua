-- semaphore_wake_prelude: how both semaphores wake their waiting clients; prepended, after
-- wake_prelude.lua, to the semaphore scripts that free permits or register waiters. Not an
-- operation of its own.
--
-- A client with tasks waiting on a semaphore is registered once in the semaphore's `waiters`
-- sorted set (wake_prelude.lua), under its own channel. Permits freed wake as many clients as
-- permits were freed (never more than are free now), those that have waited longest; the
-- others sleep on, so a release costs the same with 2 waiting clients or 200.

-- How many entries of vanished clients (nobody listens on their channel any more) one
-- wake-up may skip before it gives up.
local WAKE_TRIES = 4

-- Wakes up to `freed` waiting clients, and no more than `available`, the permits free now.
local function wake_waiters(waiters, freed, available)
    for _ = 1, math.min(tonumber(freed), tonumber(available)) do
        if wake_next_waiter(waiters, WAKE_TRIES) == 0 then
            return
        end
    end
end

-- What an acquire attempt does with its client's place among the waiters, `granted` saying
-- whether it took what it asked for. `channel` is the client's wake-up channel, '' for a
-- first try (it waits for nothing yet, so it leaves the registry alone). A waiting client
-- that found nothing registers (keeping its place if it has one); one that got in leaves,
-- or goes to the back when `requeue` is '1' (more of its tasks wait), so that clients take
-- turns.
local function after_attempt(waiters, channel, requeue, ttl_ms, granted)
    if channel == '' then
        return
    end
    if not granted then
        add_to_registry(waiters, channel, ttl_ms)
    elseif requeue == '1' then
        requeue_in_registry(waiters, channel, ttl_ms)
    else
        remove_from_registry(waiters, channel)
    end
end

