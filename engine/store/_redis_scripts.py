"""The Lua scripts of the Redis store: each makes one operation atomic on the server.

Scripts are sent by digest (EVALSHA); the store loads one when the server answers
NOSCRIPT (a new server, a restart, SCRIPT FLUSH).
"""

from __future__ import annotations

import hashlib
from typing import Final

from phasegraph.store.base import Commit, Lease

__all__ = ["COMMIT", "HEAD", "LEASE", "READ", "SCRIPT_SHA", "commit_argv", "ms"]

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
# ARGV: token, seq, record, graph, status, created_at, updated_at, retention ('' none,
#       '0' persist, else expiry in ms), run id, lease ttl ms, owner, and the snapshot
#       when the commit has one (a twelfth argument: no flag, no empty argument).
# Returns {1} written, {2} already written (a retry), {-1, lease} lost, {-2, head}, or
# {-3, head, last stored seq} when the records do not end at the head (changed outside).
# The counter fences: while it shows our token nobody took the run, so a lease key that
# expired meanwhile is set again (the lease is taken again) and the commit goes ahead.
# The counter and the lease are read by one call, and the records' length is checked by
# the push itself (undone if it does not land at seq): each call costs the script more
# than the command's own work.
# The index entry moves only when the commit's minute differs from the last one's (or
# time went back): its score is updated_at cut to the minute, never above updated_at
# and less than a minute below it, which is all listing needs (see list_runs).
COMMIT: Final = """
local fence = redis.call('MGET', KEYS[6], KEYS[5])
if fence[1] ~= ARGV[1] then return {-1, fence[2] or ''} end
if not fence[2] then
  redis.call('SET', KEYS[5], ARGV[1] .. ':' .. ARGV[11], 'PX', ARGV[10])
end
local seq = tonumber(ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'seq', 'updated_at')
local head = tonumber(m[1] or '-1')
if seq <= head and redis.call('LINDEX', KEYS[2], seq) == ARGV[3] then return {2} end
if seq ~= head + 1 then return {-2, head} end
local stored = redis.call('RPUSH', KEYS[2], ARGV[3])
if stored ~= seq + 1 then
  redis.call('RPOP', KEYS[2])
  return {-3, head, stored - 2}
end
if ARGV[12] then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[12])
  redis.call('ZADD', KEYS[4], seq, ARGV[2])
end
redis.call('HSET', KEYS[1], 'graph', ARGV[4], 'status', ARGV[5], 'seq', ARGV[2],
  'created_at', ARGV[6], 'updated_at', ARGV[7])
if ARGV[8] ~= '' then
  for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]}) do
    if ARGV[8] == '0' then redis.call('PERSIST', key) else redis.call('PEXPIRE', key, ARGV[8]) end
  end
end
if KEYS[7] then
  local now, last = tonumber(ARGV[7]), tonumber(m[2] or '')
  local minute = math.floor(now / 60)
  if not last or now < last or minute ~= math.floor(last / 60) then
    redis.call('ZADD', KEYS[7], tostring(minute * 60), ARGV[9])
  end
end
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


def commit_argv(
    lease: Lease, commit: Commit, retention: str
) -> tuple[bytes | str | int | float, ...]:
    """The ARGV of :data:`COMMIT` for ``commit`` under ``lease``, in the script's order.

    Args:
        lease: The lease the commit is made under.
        commit: The commit.
        retention: ``''`` leaves the run's expiry alone, ``'0'`` removes it, else the
            expiry in milliseconds.
    """
    meta = commit.meta
    argv = (
        *(lease.token, commit.seq, commit.record),
        *(meta.graph, meta.status, meta.created_at, meta.updated_at, retention),
        *(lease.run_id, ms(lease.ttl), lease.owner),
    )
    return argv if commit.snapshot is None else (*argv, commit.snapshot)


def ms(seconds: float) -> int:
    """Seconds as the whole milliseconds the scripts take (at least 1)."""
    return max(1, round(seconds * 1000))
