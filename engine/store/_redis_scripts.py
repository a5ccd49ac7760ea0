"""The Lua scripts of the Redis store: each makes one operation atomic on the server.

Scripts are sent by digest (EVALSHA); the store loads one when the server answers
NOSCRIPT (a new server, a restart, SCRIPT FLUSH).
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["COMMIT", "HEAD", "LEASE", "READ", "SCRIPT_SHA"]

# KEYS: lease, token. ARGV: op (acquire | takeover | renew | release), token, ttl ms,
# owner, and for takeover the lease value seen (a holder the client found dead).
# Returns {token (0: refused or released), lease value of another holder, its pttl,
# server time sec, usec}. A lease key that expired is still ours while the counter
# shows our token (nobody took over); releasing burns the token so renew cannot revive it.
# A takeover replaces a live lease only while it is exactly the value seen.
LEASE: Final = """
local lease = redis.call('GET', KEYS[1])
local now = redis.call('TIME')
if ARGV[1] == 'acquire' or ARGV[1] == 'takeover' then
  if lease and (ARGV[1] == 'acquire' or lease ~= ARGV[5]) then
    return {0, lease, redis.call('PTTL', KEYS[1]), now[1], now[2]}
  end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    -- seed a new counter from the server clock (ms) so a run whose keys expired by
    -- retention never hands out a token it already issued
    redis.call('SET', KEYS[2], now[1] .. string.sub(string.format('%06d', now[2]), 1, 3))
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], token .. ':' .. ARGV[4], 'PX', ARGV[3])
  return {token, '', 0, now[1], now[2]}
end
-- a live lease always carries the counter's token, so the counter alone tells
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return {0, lease or '', 0, now[1], now[2]} end
if ARGV[1] == 'renew' then
  redis.call('SET', KEYS[1], ARGV[2] .. ':' .. ARGV[4], 'PX', ARGV[3])
  return {tonumber(ARGV[2]), '', 0, now[1], now[2]}
end
redis.call('DEL', KEYS[1])
redis.call('INCR', KEYS[2])
return {0, '', 0, now[1], now[2]}
"""

# KEYS: meta, rec, snap, snaps, lease, token, and index (only on one server: on a Redis
# Cluster the index is in another slot, and the store updates it with its own command).
# ARGV: token, seq, record, has_snapshot, snapshot, graph, status, created_at,
#       updated_at, retention ('' none, '0' persist, else expiry in ms), run id,
#       lease ttl ms, owner.
# Returns {1} written, {2} already written (a retry), {-1, lease} lost, {-2, head}, or
# {-3, head, last stored seq} when the records do not end at the head (changed outside).
# The counter fences: while it shows our token nobody took the run, so a lease key that
# expired meanwhile is set again (the lease is taken again) and the commit goes ahead.
COMMIT: Final = """
if redis.call('GET', KEYS[6]) ~= ARGV[1] then
  return {-1, redis.call('GET', KEYS[5]) or ''}
end
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('SET', KEYS[5], ARGV[1] .. ':' .. ARGV[13], 'PX', ARGV[12])
end
local seq = tonumber(ARGV[2])
local head = tonumber(redis.call('HGET', KEYS[1], 'seq') or '-1')
if seq <= head and redis.call('LINDEX', KEYS[2], seq) == ARGV[3] then return {2} end
if seq ~= head + 1 then return {-2, head} end
local stored = redis.call('LLEN', KEYS[2])
if stored ~= seq then return {-3, head, stored - 1} end
redis.call('RPUSH', KEYS[2], ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[5])
  redis.call('ZADD', KEYS[4], seq, ARGV[2])
end
redis.call('HSET', KEYS[1], 'graph', ARGV[6], 'status', ARGV[7], 'seq', ARGV[2],
  'created_at', ARGV[8], 'updated_at', ARGV[9])
if ARGV[10] ~= '' then
  for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]}) do
    if ARGV[10] == '0' then redis.call('PERSIST', key) else redis.call('PEXPIRE', key, ARGV[10]) end
  end
end
if KEYS[7] then redis.call('ZADD', KEYS[7], ARGV[9], ARGV[11]) end
return {1}
"""

# KEYS: meta, rec, snap, snaps. ARGV: seq or ''. Returns {-1} no run, {-2, head} no
# such seq, {-3} no snapshot, {-4, stored head} a head that is not a number, {-5, head,
# records stored} records that do not end at the head, or {1, graph, status, head,
# created, updated, seq, snapshot_seq, snapshot, records...}.
READ: Final = """
local m = redis.call('HMGET', KEYS[1], 'graph', 'status', 'seq', 'created_at', 'updated_at')
if not m[3] then return {-1} end
local head = tonumber(m[3])
if not head then return {-4, m[3]} end
local stored = redis.call('LLEN', KEYS[2])
if stored ~= head + 1 then return {-5, head, stored} end
local seq = tonumber(ARGV[1]) or head
if seq < 0 or seq > head then return {-2, head} end
local s = redis.call('ZREVRANGEBYSCORE', KEYS[4], seq, '-inf', 'LIMIT', 0, 1)[1]
if not s then return {-3} end
local out = {1, m[1], m[2], head, m[4], m[5], seq, tonumber(s), redis.call('HGET', KEYS[3], s)}
if tonumber(s) < seq then
  local records = redis.call('LRANGE', KEYS[2], tonumber(s) + 1, seq)
  for i = 1, #records do out[#out + 1] = records[i] end
end
return out
"""

# KEYS: meta, rec. Returns {-1} no run, or {1, stored head, records stored}: where a
# history read starts, both at one instant (a commit between two plain commands would
# look like records past the head).
HEAD: Final = """
local head = redis.call('HGET', KEYS[1], 'seq')
if not head then return {-1} end
return {1, head, redis.call('LLEN', KEYS[2])}
"""

SCRIPT_SHA: Final = {
    script: hashlib.sha1(script.encode()).hexdigest() for script in (LEASE, COMMIT, READ, HEAD)
}
"""Each script's SHA-1 digest, the name EVALSHA knows it by."""
