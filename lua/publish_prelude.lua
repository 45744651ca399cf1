-- publish_prelude: the one way a script publishes a wake-up; prepended (first) to every script
-- that publishes, directly or through another prelude. Not an operation of its own.
--
-- A wake-up is advice, never the only way a waiter learns anything: every waiter also re-checks
-- on a timer (the holder's remaining lease, or its client's poll interval). So a PUBLISH that
-- Redis refuses must not fail the script half way through its writes (scripts are not rolled
-- back): a client that waits by polling (WaitStrategy::Poll) may run as an ACL user without
-- channel access ('resetchannels'), whose PUBLISH is refused even from a script.

-- Publishes `message` on `channel`; returns how many subscribers of this node got it, or -1
-- when Redis refused it (then nobody anywhere got it: a refused command is neither run nor
-- passed on to replicas).
local function publish(channel, message)
    local receivers = redis.pcall('PUBLISH', channel, message)
    if type(receivers) == 'number' then
        return receivers
    end
    return -1
end

-- Tells the clients that own `holders` (owner or attempt ids, each '<client id>:...', where a
-- labelled client's id is '<label>@<uuid>' and the label may hold ':' but no '@') that a
-- hold of theirs was taken from them, once per client, on '<channel_prefix><client id>': the
-- client then checks its holds at once rather than at its next renewal. `channel_prefix` ''
-- (a cluster, where a script may publish only in its own slot) sends nothing.
local function publish_lost(channel_prefix, holders)
    if channel_prefix == '' then
        return
    end
    local told = {}
    for _, holder in ipairs(holders) do
        local client = string.match(holder, '^[^@]*@[^:]*') or string.match(holder, '^[^:]*')
        if not told[client] then
            told[client] = true
            publish(channel_prefix .. client, 'lost')
        end
    end
end
