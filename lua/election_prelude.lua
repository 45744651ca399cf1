-- election_prelude: who leads an election, and the records of given-back campaigns; prepended
-- to the election scripts that need it, so this logic lives once. Not an operation of its own.
--
-- Layout of the leader hash: owner = <campaign attempt id that won>, value = <the value the
-- leader advertises>, term = <its term>. The hash exists exactly while someone leads: it
-- expires with the leader's lease, and a resignation deletes it. The term counter is a key of
-- its own that never expires, so terms keep increasing across leaders that crashed.

-- Reads who leads `hash`: nil when nobody does, else its owner, value and term. HLEN fails
-- with WRONGTYPE on a key of another type, and a hash without an owner or a term is foreign
-- data.
local function election_leader(hash)
    if redis.call('HLEN', hash) == 0 then
        return nil
    end
    local h = redis.call('HMGET', hash, 'owner', 'value', 'term')
    local owner, value, term = h[1], h[2], h[3]
    if not owner or not term then
        error({err = 'WRONGTYPE the leader key holds foreign data'})
    end
    return owner, value, term
end
