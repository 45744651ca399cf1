-- lock_hand_over_prelude: a release that hands the plain lock to the next waiting client in
-- the wake-up itself, so that the woken task holds it without asking Redis; prepended (after
-- clock_prelude, lock_prelude and wake_prelude) to the plain lock's scripts that register,
-- wake or withdraw waiting clients. Not an operation of its own.
--
--   offers  hash: wake-up channel of a registered client ->
--           '<owner> <attempt> <lease ms> <stands ms> <server ms>': the waiting task at the
--           head of that client's local queue offered to take the lock in its wake-up (its
--           owner id, the id of the attempt that offered, the hand-over lease it asks for,
--           and how long the offer stands), and when,
--           in server milliseconds. Written by the
--           acquire that finds the lock taken; gone when the client is woken, granted or
--           withdraws. It expires with the registry.
--
-- The release that frees the lock grants it to the offer of the client that has waited
-- longest, under the offering attempt's id and with the short lease the offer asks for (the
-- hand-over lease: the client's re-check period, or its watchdog lease or the task's fixed
-- lease if shorter), and publishes 'g <attempt> <token>' to that client instead of 'w'. The
-- client's task takes the hold from the message if the attempt is its own and its lease is
-- the watchdog's, which lengthens the lease before half of it is over; a task waiting with a
-- fixed lease takes the hold over with its next acquire, under its own lease; if the task is
-- gone, the client's next acquire or its withdrawal names the attempt, and takes the hold
-- over or gives it back.
--
-- Why a dead, stopped or cancelled designee cannot stall the lock longer than a swallowed
-- wake-up stalls it without hand-overs: a client that cannot act (crashed, stopped, cut off)
-- keeps the lock at most the hand-over lease, which is the re-check period of a waiting
-- client, the time a swallowed wake-up costs the others without hand-overs; a cancelled
-- task's client gives the hold back with its withdrawal or takes it over with its next
-- acquire. An offer that no longer stands is not taken (its task asks again, offering anew,
-- at least once per re-check period however long the hold lasts, so it may have stopped
-- since): such a client is woken with 'w', so a crashed client is handed the lock only if it
-- crashed within that time of its last acquire, and once. A grant is never taken back because
-- PUBLISH counted no listener: a subscriber on a replica hears it all the same (see wake_prelude), and would
-- hold the lock beside the next client. Only a message Redis refused (a releasing client
-- without channel rights, which waits by polling) has its grant taken back, and the next
-- client is tried.

-- Records that the client listening on `channel` offers to take the lock in its wake-up for
-- the waiting task `offer` ('<owner> <attempt> <lease ms> <stands ms>'), or withdraws its
-- offer (`offer` false).
-- `ttl_ms` as the registry's (see wake_prelude).
local function offer_hand_over(offers, channel, offer, ttl_ms)
    if offer then
        redis.call('HSET', offers, channel, offer .. ' ' .. now_ms())
        redis.call('PEXPIRE', offers, ttl_ms)
    else
        redis.call('HDEL', offers, channel)
    end
end

-- Takes over, for attempt `attempt` of `owner` with a lease of `lease_ms`, a hold handed over
-- in a wake-up to one of the earlier attempts `offered` (attempt ids, separated by spaces)
-- whose client never took it. Only a hand-over's hold ('h') is taken, never one an attempt was
-- granted by its own request, and only if it is the lock's one hold; one that its owner has
-- re-entered meanwhile (a multi-lock's acquire, which names no offers) is given back instead,
-- the other holds standing. Returns the hold's token, or nil if none was taken.
local function take_over(hash, offered, owner, lease_ms, attempt)
    for earlier in string.gmatch(offered, '%S+') do
        local field = 'a:' .. earlier
        if redis.call('HGET', hash, field) == 'h' then
            redis.call('HDEL', hash, field)
            if redis.call('HINCRBY', hash, 'count', '-1') == 0 then
                redis.call('HSET', hash, 'owner', owner, 'count', '1', 'a:' .. attempt, '1')
                redis.call('PEXPIRE', hash, lease_ms)
                return tonumber(redis.call('HGET', hash, 'token'))
            end
        end
    end
end

-- Gives back a hold handed over in a wake-up to one of the attempts `offered` (attempt ids,
-- separated by spaces) whose client never took it: only a hand-over's hold ('h'), never one an
-- attempt got by its own request (an offering attempt may have been granted meanwhile, and
-- its guard holds that). Returns true if the lock became free.
local function give_back_handed_over(hash, offered)
    for earlier in string.gmatch(offered, '%S+') do
        if redis.call('HGET', hash, 'a:' .. earlier) == 'h' and release_hold(hash, earlier) == 1 then
            return true
        end
    end
    return false
end

-- For a release that freed the lock: wakes the client that has waited longest and is still
-- listening (see wake_prelude), and hands it the lock in the wake-up if its offer still
-- stands (the hold then lasts the hand-over lease it asked for, and no other client is woken,
-- unless Redis refused the message: see wake_prelude). Returns 1 if a
-- client was woken or handed the lock, 0 if nobody waits.
local function hand_over_or_wake(waiters, offers, hash, fence, tries)
    return wake_next_waiter(waiters, tries, function(channel)
        local offer = redis.call('HGET', offers, channel)
        if not offer then
            return 'w'
        end
        redis.call('HDEL', offers, channel)
        local owner, attempt, lease_ms, stands_ms, at =
            string.match(offer, '^(%S+) (%S+) (%d+) (%d+) (%d+)$')
        if not at or now_ms() - tonumber(at) > tonumber(stands_ms) then
            return 'w'
        end
        local token = grant(hash, fence, owner, lease_ms, attempt, true, 'h')
        return 'g ' .. attempt .. ' ' .. string.format('%d', token), function()
            redis.call('DEL', hash)
        end
    end)
end
