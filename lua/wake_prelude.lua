-- wake_prelude: addressed wake-ups, shared by every primitive whose waiters wait in their own
-- client's queue; prepended to the scripts that register waiters or wake them. Not an
-- operation of its own.
--
-- A client with tasks waiting on a primitive is registered once, however many of its tasks
-- wait (only the head of its local queue talks to Redis). The registry is a sorted set:
--   waiters  sorted set: wake-up channel of one client for this primitive -> when it
--            registered (server microseconds, kept strictly increasing), so the first member
--            is the client that has waited longest
-- A release wakes one client, the one that has waited longest, never the herd: the others
-- stay asleep, so a hand-off costs the same requests with 2 clients or 200, and clients take
-- turns, so none starves.
--
-- A client that crashed leaves its entry behind, but its connections, and with them its
-- subscription, are gone: PUBLISH then reaches nobody, and the release wakes the next client
-- instead (a client subscribed on a replica hears a wake-up that PUBLISH counted as reaching
-- nobody: two clients are then woken, which costs a request, never a guarantee). Not after a
-- wake-up that gave the client what it waits for (the plain lock's hand-over), which stands
-- whatever PUBLISH counts: see wake_next_waiter. A client that is alive but stopped (SIGSTOP)
-- is woken and cannot act; the others then wait until the time their own attempt reported
-- (the holder's remaining lease, at most the client's longest sleep), as for any lost
-- message.

-- Registers the client listening on `channel` as waiting: adds its entry (the channel) at the
-- back of the registry, or keeps its place if it has one. The registry lasts at least `ttl_ms`
-- more: a live waiter registers again at least that often, so the entries of vanished clients
-- leave nothing behind for long.
local function add_to_registry(waiters, channel, ttl_ms)
    if not redis.call('ZSCORE', waiters, channel) then
        local t = redis.call('TIME')
        local order = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local tail = redis.call('ZRANGE', waiters, '-1', '-1', 'WITHSCORES')
        if tail[2] and tonumber(tail[2]) >= order then
            order = tonumber(tail[2]) + 1
        end
        redis.call('ZADD', waiters, string.format('%d', order), channel)
    end
    if redis.call('PTTL', waiters) < tonumber(ttl_ms) then
        redis.call('PEXPIRE', waiters, ttl_ms)
    end
end

-- Takes the entry of the client listening on `channel` out of the registry (it got what it
-- waited for, or gave up).
local function remove_from_registry(waiters, channel)
    redis.call('ZREM', waiters, channel)
end

-- Moves the entry of the client listening on `channel` to the back of the registry, adding it
-- if it had none: one of its tasks got what it waited for while more of them wait, and clients
-- take turns.
local function requeue_in_registry(waiters, channel, ttl_ms)
    remove_from_registry(waiters, channel)
    add_to_registry(waiters, channel, ttl_ms)
end

-- Wakes the client that has waited longest and is still listening, taking it out of the
-- registry (it registers again if it finds the primitive taken). Entries nobody listens on
-- any more are dropped on the way, at most `tries` of them per call. `hand_over`, if given,
-- is asked for each client before its wake-up: it may give the client what it waits for, and
-- returns the message saying so and a function that takes it back (else the message is
-- 'w'). A client given it is the last one woken, whatever PUBLISH counts, unless Redis
-- refused the message: PUBLISH counts only this node's subscribers, while a replica delivers
-- the replicated message to its own (and a cluster shard sends it to every node of the
-- shard), so a count of 0 does not prove the grant unheard, and taking it back could leave
-- two holders; a refused message ran nowhere, and its grant is taken back. Returns 1 if a
-- client was woken or given what it waits for, 0 if nobody waits.
local function wake_next_waiter(waiters, tries, hand_over)
    for _ = 1, tries do
        local next_waiter = redis.call('ZRANGE', waiters, '0', '0')[1]
        if not next_waiter then
            return 0
        end
        redis.call('ZREM', waiters, next_waiter)
        local message, take_back = 'w', nil
        if hand_over then
            message, take_back = hand_over(next_waiter)
        end
        local receivers = publish(next_waiter, message)
        if receivers > 0 or (take_back and receivers == 0) then
            return 1
        end
        if take_back then
            take_back()
        end
    end
    return 0
end
